#!/usr/bin/python3
"""An independent PyTorch implementation of the Llama / Qwen2 / Qwen3 family
(no transformers), for cross-checking longhaul's engine (model/) and timing it.

    /usr/bin/python3 bench/torch_llama.py check FIXTURE.json...
    /usr/bin/python3 bench/torch_llama.py bench --model DIR [--threads N] ...

It reads a Hugging Face model directory itself: config.json, model.safetensors
or model.safetensors.index.json with its shards (8-byte little-endian header
length, JSON header, raw data; F32, BF16 and F16 widened to float32). The
network is written from the transformers definitions: RMSNorm (weight ·
x·rsqrt(mean x² + eps)), rotary embeddings with rotate_half and the
rope_scaling types default / linear / llama3 / yarn, grouped-query attention
(key/value heads repeated), Qwen3's per-head q/k RMSNorm, Qwen2's q/k/v
biases, SwiGLU MLP, tied or untied lm_head. Gradients come from autograd and
the optimizer is torch.optim.AdamW, so nothing here shares code with Go.

check: the fixture (written by model's TestTorchCrossCheck) names the
directory init-model wrote, token sequences, the Go logits for them, one
training batch (tokens, mask, advantages, old logprobs), the optimizer
settings, the Go loss of one step and the directory Go saved after it. This
script recomputes the logits (max |diff| <= 1e-4), takes the same step (the
PPO-clipped policy-gradient loss, token mean, global-norm clipping, AdamW with
decay on matrices and embeddings only) and compares the loss and every updated
tensor (||go - torch|| / ||torch|| <= 1e-5). It prints one JSON line and exits
non-zero on a mismatch.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": (np.float32, 4), "BF16": (np.uint16, 2), "F16": (np.float16, 2)}


def read_safetensors(path, out):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            f.seek(base + b)
            raw = f.read(e - b)
            npdt, _ = DTYPES[info["dtype"]]
            arr = np.frombuffer(raw, dtype=npdt)
            if info["dtype"] == "BF16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)
            out[name] = torch.from_numpy(arr.astype(np.float32).reshape(info["shape"]).copy())


def load_dir(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {}
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        for f in sorted(set(json.load(open(idx))["weight_map"].values())):
            read_safetensors(os.path.join(d, f), w)
    else:
        read_safetensors(os.path.join(d, "model.safetensors"), w)
    return cfg, w


def inv_freq(cfg):
    """transformers' rope initialisation functions, in float64."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    base = float(cfg.get("rope_theta", 10000.0))
    inv = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    rs = cfg.get("rope_scaling")
    att = 1.0
    if rs:
        kind = rs.get("rope_type", rs.get("type"))
        factor = float(rs.get("factor", 1.0))
        if kind == "linear":
            inv = inv / factor
        elif kind == "llama3":
            old = rs["original_max_position_embeddings"]
            lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
            wave = 2 * math.pi / inv
            scaled = np.where(wave > old / lo, inv / factor, inv)
            smooth = (old / wave - lo) / (hi - lo)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = ~(wave < old / hi) & ~(wave > old / lo)
            inv = np.where(medium, smoothed, scaled)
        elif kind == "yarn":
            def mscale(s, m=1.0):
                return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
            att = rs.get("attention_factor")
            if att is None:
                if rs.get("mscale") and rs.get("mscale_all_dim"):
                    att = mscale(factor, rs["mscale"]) / mscale(factor, rs["mscale_all_dim"])
                else:
                    att = mscale(factor)
            fast, slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1
            orig = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]

            def corr(rot):
                return (hd * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
            low, high = corr(fast), corr(slow)
            if rs.get("truncate", True):
                low, high = math.floor(low), math.ceil(high)
            low, high = max(low, 0), min(high, hd - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(hd // 2, dtype=np.float64) - low) / (high - low), 0, 1)
            extra = 1 - ramp
            inv = (inv / factor) * (1 - extra) + inv * extra
        elif kind not in (None, "default"):
            raise SystemExit(f"unsupported rope_scaling type {kind}")
    return inv, att, hd


class Llama(torch.nn.Module):
    def __init__(self, cfg, weights, ctx):
        super().__init__()
        self.cfg = cfg
        self.names = list(weights)
        self.p = torch.nn.ParameterList([torch.nn.Parameter(weights[n].clone()) for n in self.names])
        self.ix = {n: i for i, n in enumerate(self.names)}
        inv, att, hd = inv_freq(cfg)
        ang = np.arange(ctx, dtype=np.float64)[:, None] * inv[None, :]
        self.cos = torch.from_numpy((np.cos(ang) * att).astype(np.float32))
        self.sin = torch.from_numpy((np.sin(ang) * att).astype(np.float32))
        self.hd = hd
        self.H = cfg["num_attention_heads"]
        self.K = cfg.get("num_key_value_heads") or self.H
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.tied = cfg.get("tie_word_embeddings", cfg["model_type"] != "llama")

    def w(self, name):
        i = self.ix.get(name)
        return None if i is None else self.p[i]

    def norm(self, x, g):
        var = x.pow(2).mean(-1, keepdim=True)
        return g * (x * torch.rsqrt(var + self.eps))

    def rope(self, x, T):
        half = self.hd // 2
        c, s = self.cos[:T], self.sin[:T]
        c, s = torch.cat([c, c], -1), torch.cat([s, s], -1)
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * c + rot * s

    def forward(self, toks):  # toks (B, T) -> logits (B, T, V)
        B, T = toks.shape
        H, K, hd = self.H, self.K, self.hd
        x = self.w("model.embed_tokens.weight")[toks]
        mask = torch.full((T, T), float("-inf")).triu(1)
        for l in range(self.cfg["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = self.norm(x, self.w(p + "input_layernorm.weight"))
            q = F.linear(h, self.w(p + "self_attn.q_proj.weight"), self.w(p + "self_attn.q_proj.bias")).view(B, T, H, hd)
            k = F.linear(h, self.w(p + "self_attn.k_proj.weight"), self.w(p + "self_attn.k_proj.bias")).view(B, T, K, hd)
            v = F.linear(h, self.w(p + "self_attn.v_proj.weight"), self.w(p + "self_attn.v_proj.bias")).view(B, T, K, hd)
            if self.w(p + "self_attn.q_norm.weight") is not None:
                q = self.norm(q, self.w(p + "self_attn.q_norm.weight"))
                k = self.norm(k, self.w(p + "self_attn.k_norm.weight"))
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q, k = self.rope(q, T), self.rope(k, T)
            k = k.repeat_interleave(H // K, dim=1)
            v = v.repeat_interleave(H // K, dim=1)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, -1) @ v
            att = att.transpose(1, 2).reshape(B, T, H * hd)
            x = x + F.linear(att, self.w(p + "self_attn.o_proj.weight"), self.w(p + "self_attn.o_proj.bias"))
            h = self.norm(x, self.w(p + "post_attention_layernorm.weight"))
            gate = F.linear(h, self.w(p + "mlp.gate_proj.weight"))
            up = F.linear(h, self.w(p + "mlp.up_proj.weight"))
            x = x + F.linear(F.silu(gate) * up, self.w(p + "mlp.down_proj.weight"))
        x = self.norm(x, self.w("model.norm.weight"))
        head = self.w("model.embed_tokens.weight") if self.tied else self.w("lm_head.weight")
        return F.linear(x, head)


def pg_loss(model, batch, clip_low, clip_high):
    """PPO-clipped policy gradient, token mean over the batch (as Go)."""
    total = sum(sum(m) for m in batch["mask"])
    loss = 0.0
    for toks, mask, adv, old in zip(batch["tokens"], batch["mask"], batch["advantages"], batch["old_logprobs"]):
        t = torch.tensor([toks])
        lp = torch.log_softmax(model(t)[0, :-1], -1).gather(1, t[0, 1:, None])[:, 0]
        m = torch.tensor(mask[1:], dtype=torch.bool)
        a = torch.tensor(adv[1:], dtype=torch.float64)
        r = torch.exp(lp.double() - torch.tensor(old[1:], dtype=torch.float64))
        per = torch.maximum(-a * r, -a * r.clamp(1 - clip_low, 1 + clip_high))
        loss = loss + per[m].sum() / total
    return loss


def check(fx_path):
    fx = json.load(open(fx_path))
    cfg, w = load_dir(fx["model_dir"])
    ctx = max(len(s) for s in fx["logit_seqs"] + fx["batch"]["tokens"])
    model = Llama(cfg, w, ctx)
    res = {"fixture": fx_path, "family": cfg["model_type"]}
    with torch.no_grad():
        diff = 0.0
        for seq, go in zip(fx["logit_seqs"], fx["go_logits"]):
            lg = model(torch.tensor([seq]))[0]
            diff = max(diff, (lg - torch.tensor(go).view_as(lg)).abs().max().item())
    res["max_logit_diff"] = diff
    oc = fx["optim"]
    decay = [p for n, p in zip(model.names, model.p) if p.dim() == 2]
    nodecay = [p for n, p in zip(model.names, model.p) if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": oc["weight_decay"]}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=oc["lr"], betas=(oc["beta1"], oc["beta2"]), eps=oc["eps"])
    loss = pg_loss(model, fx["batch"], fx["clip_low"], fx["clip_high"])
    opt.zero_grad()
    loss.backward()
    if oc["grad_clip"] > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), oc["grad_clip"])
    opt.step()
    res["loss_torch"], res["loss_go"] = loss.item(), fx["go_loss"]
    res["loss_rel_diff"] = abs(loss.item() - fx["go_loss"]) / max(abs(loss.item()), 1e-12)
    _, after = load_dir(fx["after_dir"])
    worst, worst_name = 0.0, ""
    for n, p in zip(model.names, model.p):
        rel = ((after[n] - p.detach()).norm() / p.detach().norm().clamp_min(1e-12)).item()
        if rel > worst:
            worst, worst_name = rel, n
    res["max_weight_rel_diff"], res["worst_tensor"] = worst, worst_name
    res["ok"] = diff <= 1e-4 and res["loss_rel_diff"] <= 1e-5 and worst <= 1e-5
    print(json.dumps(res))
    return 0 if res["ok"] else 1


def bench(a):
    torch.set_num_threads(a.threads)
    cfg, w = load_dir(a.model)
    V = cfg["vocab_size"]
    out = {"threads": a.threads, "family": cfg["model_type"]}
    model = Llama(cfg, w, a.prompt + a.gen_tokens + 1)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for B in a.batches:
            toks = torch.randint(0, V, (B, a.prompt), generator=g)
            # a KV-cache decode loop written out (the model above recomputes
            # the whole prefix, which would understate torch's speed)
            t0 = time.perf_counter()
            n = decode(model, toks, a.gen_tokens)
            out[f"gen_b{B}_tok_s"] = n / (time.perf_counter() - t0)
    if a.train_batch:
        model = Llama(cfg, w, a.train_len)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        toks = torch.randint(0, V, (a.train_batch, a.train_len), generator=g)
        times = []
        for _ in range(a.train_steps):
            t0 = time.perf_counter()
            lg = model(toks)
            loss = F.cross_entropy(lg[:, :-1].reshape(-1, V), toks[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            times.append(time.perf_counter() - t0)
        out["train_tok_s"] = a.train_batch * a.train_len / min(times)
    print(json.dumps(out))
    return 0


def decode(model, toks, n):
    """Sampling with a KV cache: prefill, then one token per step."""
    cfg = model.cfg
    B, T0 = toks.shape
    H, K, hd = model.H, model.K, model.hd
    L = cfg["num_hidden_layers"]
    kc = [None] * L
    vc = [None] * L
    x_toks = toks
    pos = 0
    made = 0
    for step in range(n + 1):
        T = x_toks.shape[1]
        x = model.w("model.embed_tokens.weight")[x_toks]
        cos, sin = model.cos[pos:pos + T], model.sin[pos:pos + T]
        for l in range(L):
            p = f"model.layers.{l}."
            h = model.norm(x, model.w(p + "input_layernorm.weight"))
            q = F.linear(h, model.w(p + "self_attn.q_proj.weight"), model.w(p + "self_attn.q_proj.bias")).view(B, T, H, hd)
            k = F.linear(h, model.w(p + "self_attn.k_proj.weight"), model.w(p + "self_attn.k_proj.bias")).view(B, T, K, hd)
            v = F.linear(h, model.w(p + "self_attn.v_proj.weight"), model.w(p + "self_attn.v_proj.bias")).view(B, T, K, hd)
            if model.w(p + "self_attn.q_norm.weight") is not None:
                q = model.norm(q, model.w(p + "self_attn.q_norm.weight"))
                k = model.norm(k, model.w(p + "self_attn.k_norm.weight"))
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            half = hd // 2
            c2, s2 = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
            q = q * c2 + torch.cat([-q[..., half:], q[..., :half]], -1) * s2
            k = k * c2 + torch.cat([-k[..., half:], k[..., :half]], -1) * s2
            kc[l] = k if kc[l] is None else torch.cat([kc[l], k], 2)
            vc[l] = v if vc[l] is None else torch.cat([vc[l], v], 2)
            kk = kc[l].repeat_interleave(H // K, dim=1)
            vv = vc[l].repeat_interleave(H // K, dim=1)
            s = q @ kk.transpose(-1, -2) / math.sqrt(hd)
            if T > 1:
                s = s + torch.full((T, T), float("-inf")).triu(1)
            att = (torch.softmax(s, -1) @ vv).transpose(1, 2).reshape(B, T, H * hd)
            x = x + F.linear(att, model.w(p + "self_attn.o_proj.weight"), model.w(p + "self_attn.o_proj.bias"))
            h = model.norm(x, model.w(p + "post_attention_layernorm.weight"))
            x = x + F.linear(F.silu(F.linear(h, model.w(p + "mlp.gate_proj.weight"))) * F.linear(h, model.w(p + "mlp.up_proj.weight")),
                             model.w(p + "mlp.down_proj.weight"))
        x = model.norm(x[:, -1:], model.w("model.norm.weight"))
        head = model.w("model.embed_tokens.weight") if model.tied else model.w("lm_head.weight")
        logits = F.linear(x, head)[:, 0]
        pos += T
        if step == n:
            break
        x_toks = torch.multinomial(torch.softmax(logits, -1), 1)
        made += B
    return made


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("fixture", nargs="+")
    b = sub.add_parser("bench")
    b.add_argument("--model", required=True)
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--batches", type=int, nargs="*", default=[1, 16])
    b.add_argument("--prompt", type=int, default=16)
    b.add_argument("--gen-tokens", type=int, default=32)
    b.add_argument("--train-batch", type=int, default=0)
    b.add_argument("--train-len", type=int, default=128)
    b.add_argument("--train-steps", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.cmd == "check":
        torch.set_num_threads(1)
        return max(check(f) for f in a.fixture)
    return bench(a)


if __name__ == "__main__":
    sys.exit(main())
