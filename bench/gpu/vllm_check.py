#!/usr/bin/env python3
"""Does a served model reload through /collective_rpc, and serve the new
weights afterwards?

    PYTHONPATH=python python3 bench/gpu/vllm_check.py check --url URL --model NAME --a DIR_A --b DIR_B \\
        [--method longhaul_reload_weights] [--stock] [--tol-mean 0.05 --tol-max 0.3] [--no-detokenize]
    PYTHONPATH=python python3 bench/gpu/vllm_check.py confirm --url URL --weights RUN_DIR/weights
    PYTHONPATH=python python3 bench/gpu/vllm_check.py scale DIR FACTOR

check: the server was started from DIR_A. The script reads the prompt's
logprobs from the server (POST /inference/v1/generate with
sampling_params.prompt_logprobs, teacher-forced, so no sampling path is
involved) and compares them with the HF-layout model (longhaul_trainer.model,
float32 on the CPU) of DIR_A; it reloads DIR_B through POST /collective_rpc
{method, kwargs: {weights_path: DIR_B}} (for longhaul_reload_weights every
worker's answer must carry DIR_B's content digest) and compares again, now
with DIR_B's model; the two references must differ by far more than the
tolerance, or the check proves nothing. --stock then asks vLLM's own
reload_weights(weights_path=DIR_A) and reports whether this vLLM has it
(not a failure either way). One JSON line; exit 1 on a failed check.

It runs against vLLM, and against `longhaul serve --model` (the same routes,
float32 on the CPU; method reload_weights), which is how the script itself
is checked where there is no GPU.

confirm: after a `longhaul train` run against the server, /weight_info must
report the version in RUN_DIR/weights/trainer.json and every worker's
longhaul_weight_info the digest and version of RUN_DIR/weights.

scale: multiplies DIR's embedding (and lm_head) by FACTOR in place, so a
tiny random model's next-token distributions are peaked (logits of a few
nats) and two such models are far apart."""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request

import torch

from longhaul_trainer import model as lm
from longhaul_trainer import safetensors_io as st
from longhaul_vllm import checkpoint

PROMPT_LEN = 24


def post(url, body, timeout=300):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw.strip() else None)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")[:2000]


def prompt(vocab):
    g = torch.Generator().manual_seed(5)
    return [int(x) for x in torch.randint(0, vocab, (PROMPT_LEN,), generator=g)]


def served_logprobs(a, toks):
    sp = {"max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}
    if a.no_detokenize:
        sp["detokenize"] = False
    code, out = post(a.url + "/inference/v1/generate", {"request_id": "longhaul-gpu-check", "token_ids": toks, "sampling_params": sp,
                                                       "model": a.model})
    if code != 200:
        raise RuntimeError(f"/inference/v1/generate answered {code}: {out}")
    pl = out.get("prompt_logprobs")
    if not isinstance(pl, list) or len(pl) != len(toks):
        raise RuntimeError(f"/inference/v1/generate: prompt_logprobs {str(pl)[:300]} is not one entry per prompt token")
    vals = []
    for i in range(1, len(toks)):
        e = pl[i] or {}
        v = e.get(str(toks[i]), e.get(toks[i]))
        if not isinstance(v, dict) or "logprob" not in v:
            raise RuntimeError(f"prompt_logprobs[{i}] has no entry for token {toks[i]}: {str(e)[:200]}")
        vals.append(float(v["logprob"]))
    return torch.tensor(vals, dtype=torch.float64)


def reference_logprobs(d, toks):
    m = lm.load_builtin(d)
    t = torch.tensor([toks])
    with torch.no_grad():
        lp = torch.log_softmax(m(t)[0].double(), -1)
    return torch.stack([lp[i - 1, toks[i]] for i in range(1, len(toks))])


def compare(got, want, a):
    d = (got - want).abs()
    return {"mean_abs_diff": float(d.mean()), "max_abs_diff": float(d.max()),
            "ok": float(d.mean()) <= a.tol_mean and float(d.max()) <= a.tol_max}


def check(a):
    out = {"url": a.url, "method": a.method}
    toks = prompt(lm.Config.load(a.a).vocab_size)
    ref_a, ref_b = reference_logprobs(a.a, toks), reference_logprobs(a.b, toks)
    apart = float((ref_a - ref_b).abs().mean())
    out["references_apart_mean"] = apart
    ok = apart >= 10 * a.tol_mean
    out["before"] = compare(served_logprobs(a, toks), ref_a, a)
    ok &= out["before"]["ok"]
    code, res = post(a.url + "/collective_rpc", {"method": a.method, "kwargs": {"weights_path": os.path.abspath(a.b)}})
    out["reload_status"] = code
    if code != 200:
        out["reload_error"] = res
        ok = False
    elif a.method == "longhaul_reload_weights":
        want = checkpoint.digest_of(a.b)
        results = (res or {}).get("results") or []
        out["reload_results"] = results
        ok &= bool(results) and all(isinstance(r, dict) and r.get("digest") == want for r in results)
    out["after"] = compare(served_logprobs(a, toks), ref_b, a)
    ok &= out["after"]["ok"]
    if a.stock:
        code, res = post(a.url + "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": os.path.abspath(a.a)}})
        s = {"status": code}
        if code == 200:
            s["served_vs_a"] = compare(served_logprobs(a, toks), ref_a, a)
        else:
            s["error"] = res
        out["stock_reload_weights"] = s
    out["bounds"] = {"mean": a.tol_mean, "max": a.tol_max, "references_apart_min": 10 * a.tol_mean}
    out["ok"] = bool(ok)
    print(json.dumps(out))
    return 0 if ok else 1


def confirm(a):
    """After a run: the server reports the run's last version (vLLM's
    /weight_info) and its workers hold the run's exported weights
    (longhaul_weight_info: digest and version of RUN_DIR/weights)."""
    want_digest = checkpoint.digest_of(a.weights)
    want_version = checkpoint.open_checkpoint(a.weights).version
    out = {"weights": a.weights, "want_version": want_version, "want_digest": want_digest}
    with urllib.request.urlopen(a.url + "/weight_info", timeout=60) as r:
        out["weight_info"] = json.loads(r.read())
    code, res = post(a.url + "/collective_rpc", {"method": "longhaul_weight_info"})
    out["longhaul_weight_info"] = res
    results = (res or {}).get("results") if code == 200 and isinstance(res, dict) else None
    ok = out["weight_info"].get("weight_version") == str(want_version)
    ok &= bool(results) and all(r.get("digest") == want_digest and r.get("version") == want_version for r in results)
    out["ok"] = bool(ok)
    print(json.dumps(out))
    return 0 if ok else 1


def scale(d, factor):
    f = os.path.join(d, "model.safetensors")
    meta, ts = st.load_file(f)
    for n in ("model.embed_tokens.weight", "lm_head.weight"):
        if n in ts:
            ts[n] = (ts[n].float() * factor).to(ts[n].dtype)
    st.write_file_durable(f, st.encode(ts, meta))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--url", required=True)
    c.add_argument("--model", required=True)
    c.add_argument("--a", required=True)
    c.add_argument("--b", required=True)
    c.add_argument("--method", default="longhaul_reload_weights")
    c.add_argument("--stock", action="store_true")
    c.add_argument("--tol-mean", type=float, default=0.05)
    c.add_argument("--tol-max", type=float, default=0.3)
    c.add_argument("--no-detokenize", action="store_true", help="send sampling_params.detokenize=false (vLLM with --skip-tokenizer-init)")
    f = sub.add_parser("confirm")
    f.add_argument("--url", required=True)
    f.add_argument("--weights", required=True)
    s = sub.add_parser("scale")
    s.add_argument("dir")
    s.add_argument("factor", type=float)
    a = p.parse_args(argv)
    if a.cmd == "scale":
        return scale(a.dir, a.factor)
    a.url = a.url.rstrip("/")
    return confirm(a) if a.cmd == "confirm" else check(a)


if __name__ == "__main__":
    sys.exit(main())
