"""longhaul_vllm's worker extension, run against a STAND-IN for vLLM's worker
and model (tests/vllm_standin.py: vLLM's fused parameter layout, its
load_weights name mapping and its extension injection, written out in
torch; it is not vLLM, which does not install here), on checkpoints
longhaul itself writes: `longhaul init-model` (the Go binary; $LONGHAUL_BIN,
else built with `go build`) and the PyTorch trainer's export. After a
reload the stand-in must hold exactly the checkpoint's tensors and give the
HF-layout model's logits (longhaul_trainer.model)."""

import json
import os
import shutil
import subprocess
import unittest

import torch

from longhaul_trainer import model as lm
from longhaul_trainer import safetensors_io as st
from longhaul_vllm import checkpoint
from longhaul_vllm.checkpoint import CheckpointError
from longhaul_vllm.worker import LonghaulWorkerExtension
from tests.helpers import batch, tmpdir
from tests.vllm_standin import StandInWorker, VLLMStyleCausalLM, inject

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BIN = []


def longhaul_bin():
    """$LONGHAUL_BIN (CI builds it), else `go build` once per process."""
    if not _BIN:
        b = os.environ.get("LONGHAUL_BIN")
        if b:
            if not os.access(b, os.X_OK):
                raise AssertionError(f"LONGHAUL_BIN={b} is not an executable")
        else:
            if shutil.which("go") is None:
                raise unittest.SkipTest("needs the longhaul binary: set LONGHAUL_BIN or put go on PATH")
            b = os.path.join(tmpdir("lh-bin-"), "longhaul")
            env = dict(os.environ, GOEXPERIMENT=os.environ.get("GOEXPERIMENT", "simd"), GOFLAGS="-buildvcs=false")
            subprocess.run(["go", "build", "-o", b, "./cmd/longhaul"], cwd=ROOT, env=env, check=True, timeout=600)
        _BIN.append(b)
    return _BIN[0]


def init_model(family="qwen3", seed=1, *extra):
    d = tmpdir("lh-vllm-")
    out = subprocess.run([longhaul_bin(), "init-model", "--family", family, "--layers", "2", "--hidden", "32", "--heads", "4",
                          "--kv-heads", "2", "--vocab", "64", "--intermediate", "48", "--seed", str(seed), "--out", d, *extra],
                         capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise AssertionError(f"init-model: {out.stdout}{out.stderr}")
    return d


def served(start_dir, quantization=None):
    """A stand-in vLLM worker with the extension injected as vLLM injects it,
    serving a model built from start_dir's config (weights not loaded: every
    parameter 0.5, so a tensor the reload misses shows)."""
    cls = inject(StandInWorker, LonghaulWorkerExtension)
    m = VLLMStyleCausalLM(lm.Config.load(start_dir))
    return cls(m, start_dir, quantization), m


def snapshot(m):
    return {n: p.detach().clone() for n, p in m.named_parameters()}


TOKENS = torch.tensor([[1, 5, 9, 63, 0, 17, 33, 2], [7, 7, 7, 8, 40, 41, 12, 3]])


class ReloadTest(unittest.TestCase):
    def assert_holds(self, m, d, ref=None):
        """m holds exactly the HF tensors of d (ref: the HF-layout model, else
        loaded from d) in vLLM's fused layout, and gives ref's logits."""
        ref = ref or lm.load_builtin(d)
        hf = dict(ref.named_parameters())
        got = dict(m.named_parameters())
        c = m.config
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            want = torch.cat([hf[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
            self.assertTrue(torch.equal(got[p + "self_attn.qkv_proj.weight"], want), p + "qkv_proj")
            if c.qkv_bias:
                want = torch.cat([hf[p + f"self_attn.{x}_proj.bias"] for x in "qkv"])
                self.assertTrue(torch.equal(got[p + "self_attn.qkv_proj.bias"], want), p + "qkv_proj.bias")
            want = torch.cat([hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]])
            self.assertTrue(torch.equal(got[p + "mlp.gate_up_proj.weight"], want), p + "gate_up_proj")
        for n, t in hf.items():
            if n in got:
                self.assertTrue(torch.equal(got[n], t.detach()), n)
        with torch.no_grad():
            a, b = m(TOKENS), ref(TOKENS)
        self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-5), f"logits differ by {float((a - b).abs().max())}")

    def test_qwen3_from_init_model(self):
        a, b = init_model("qwen3", 1), init_model("qwen3", 2)
        w, m = served(a)
        res = w.longhaul_reload_weights(b)
        self.assert_holds(m, b)
        self.assertEqual(res["weights_path"], b)
        self.assertIsNone(res["version"])  # no trainer.json beside init-model's output
        self.assertEqual(res["tensors"], len(st.read_header(os.path.join(b, "model.safetensors"))[1]))
        self.assertEqual(res["digest"], checkpoint.digest_of(b))
        self.assertEqual(json.loads(json.dumps(res)), res)  # vLLM's /collective_rpc answers it as JSON
        self.assertEqual(w.longhaul_weight_info(), res)
        # and back: another version in place of the first
        res2 = w.longhaul_reload_weights(a)
        self.assert_holds(m, a)
        self.assertNotEqual(res2["digest"], res["digest"])

    def test_llama_untied_bf16(self):
        """BF16 on disk into a float32 model: the loaders convert; llama has
        its own lm_head."""
        a, b = init_model("llama", 3, "--dtype", "BF16"), init_model("llama", 4, "--dtype", "BF16")
        w, m = served(a)
        self.assertIn("lm_head.weight", dict(m.named_parameters()))
        w.longhaul_reload_weights(b)
        self.assert_holds(m, b)

    def test_qwen2_qkv_bias(self):
        a, b = init_model("qwen2", 5), init_model("qwen2", 6)
        w, m = served(a)
        self.assertTrue(m.config.qkv_bias)
        w.longhaul_reload_weights(b)
        self.assert_holds(m, b)

    def test_sharded_equals_single(self):
        """HF's sharded layout (model.safetensors.index.json + shards) loads
        the same tensors with the same digest as the single file."""
        a, b = init_model("qwen3", 7), init_model("qwen3", 8)
        sh = shard(b, 3)
        w, m = served(a)
        res = w.longhaul_reload_weights(sh)
        self.assert_holds(m, b)
        self.assertEqual(res["digest"], checkpoint.digest_of(b))
        # the single file named directly
        w2, m2 = served(a)
        w2.longhaul_reload_weights(os.path.join(b, "model.safetensors"))
        self.assert_holds(m2, b)

    def test_trainer_export_with_version(self):
        """The PyTorch trainer trains two steps and exports; the runner writes
        trainer.json beside the export; the reload holds the trained weights
        and reports that version."""
        from tests.helpers import make_trainer
        a = init_model("qwen3", 9)
        t = make_trainer(a)
        for k in range(2):
            t.train_step(batch(40 + k))
        out = tmpdir()
        t.export_weights(os.path.join(out, "model.safetensors"))
        with open(os.path.join(out, "trainer.json"), "w") as f:
            json.dump({"version": t.version}, f)
        w, m = served(a)
        res = w.longhaul_reload_weights(out)
        self.assertEqual(res["version"], 2)
        self.assert_holds(m, out, ref=t.model)


def shard(src, n):
    """src's model.safetensors rewritten as n shards and an index, as HF writes them."""
    _, ts = st.load_file(os.path.join(src, "model.safetensors"))
    d = tmpdir("lh-shards-")
    names = sorted(ts)
    wm, total = {}, 0
    for i in range(n):
        part = {k: ts[k] for k in names[i::n]}
        f = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        with open(os.path.join(d, f), "wb") as fh:
            fh.write(st.encode(part, {"format": "pt"}))
        for k, t in part.items():
            wm[k] = f
            total += t.numel() * t.element_size()
    with open(os.path.join(d, checkpoint.INDEX), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, fh)
    shutil.copy(os.path.join(src, "config.json"), d)
    return d


def rewrite(src, mutate):
    """A copy of src whose tensors went through mutate(dict) first."""
    _, ts = st.load_file(os.path.join(src, "model.safetensors"))
    mutate(ts)
    d = tmpdir("lh-bad-")
    with open(os.path.join(d, "model.safetensors"), "wb") as fh:
        fh.write(st.encode(ts, {"format": "pt"}))
    shutil.copy(os.path.join(src, "config.json"), d)
    return d


class ErrorTest(unittest.TestCase):
    """Each bad checkpoint is refused with the file and tensor named, before
    a tensor reaches the model: the served weights stay as they were."""

    @classmethod
    def setUpClass(cls):
        cls.a, cls.b = init_model("qwen3", 11), init_model("qwen3", 12)

    def refused(self, path, pattern, worker=None):
        w, m = worker or served(self.a)
        if worker is None:
            w.longhaul_reload_weights(self.a)
        before = snapshot(m)
        with self.assertRaisesRegex(CheckpointError, pattern):
            w.longhaul_reload_weights(path)
        for n, p in m.named_parameters():
            self.assertTrue(torch.equal(p, before[n]), f"{n} changed by a refused reload")
        if worker is None:
            self.assertEqual(w.longhaul_weight_info()["weights_path"], self.a)

    def test_paths(self):
        empty = tmpdir()
        with open(os.path.join(empty, "config.json"), "w") as f:
            f.write("{}")
        self.refused(os.path.join(empty, "nope"), "does not exist")
        self.refused("", "non-empty string")
        self.refused(None, "non-empty string")
        self.refused(os.path.join(empty, "config.json"), "not a .safetensors")
        self.refused(empty, f"{empty}: no model.safetensors and no model.safetensors.index.json \\(holds: config.json\\)")

    def test_index(self):
        sh = shard(self.b, 3)
        idx = os.path.join(sh, checkpoint.INDEX)
        with open(idx) as f:
            good = json.load(f)

        def with_index(obj=None, text=None):
            d = tmpdir("lh-idx-")
            for f in os.listdir(sh):
                shutil.copy(os.path.join(sh, f), d)
            with open(os.path.join(d, checkpoint.INDEX), "w") as f:
                f.write(text if text is not None else json.dumps(obj))
            return d
        self.refused(with_index(text='{"weight_map": {\n"a": }'), "index.json: line 2")
        self.refused(with_index({"metadata": {}}), "key 'weight_map' must be a non-empty object")
        wm = dict(good["weight_map"])
        wm["model.norm.weight"] = "../model-00001-of-00003.safetensors"
        self.refused(with_index({"weight_map": wm}), r"weight_map\['model.norm.weight'\] must name a file")
        # a shard left out of the directory
        d = with_index(good)
        os.remove(os.path.join(d, "model-00002-of-00003.safetensors"))
        self.refused(d, "shard model-00002-of-00003.safetensors is missing")
        # the index maps a tensor to a shard that does not hold it
        wm = dict(good["weight_map"], **{"model.layers.0.ghost.weight": "model-00002-of-00003.safetensors"})
        self.refused(with_index({"weight_map": wm}), "tensor 'model.layers.0.ghost.weight' is mapped to model-00002-of-00003.safetensors, which does not hold it")
        # a shard holds a tensor the index does not map to it
        name = next(k for k, v in good["weight_map"].items() if v.startswith("model-00001"))
        wm = {k: v for k, v in good["weight_map"].items() if k != name}
        self.refused(with_index({"weight_map": wm}), f"model-00001-of-00003.safetensors: tensor '{name}' is not mapped to model-00001")

    def test_tensors(self):
        q = "model.layers.1.self_attn.q_proj.weight"
        self.refused(rewrite(self.b, lambda ts: ts.pop("model.layers.0.self_attn.k_norm.weight")),
                     r"1 tensor\(s\) of the served model are missing, first \['model.layers.0.self_attn.k_norm.weight'\]")
        self.refused(rewrite(self.b, lambda ts: ts.__setitem__("model.layers.0.mlp.extra.weight", torch.zeros(2))),
                     r"model.safetensors: tensor 'model.layers.0.mlp.extra.weight' is not one the served model takes")
        self.refused(rewrite(self.b, lambda ts: ts.__setitem__(q, ts[q][:, :-1].contiguous())),
                     rf"model.safetensors: tensor '{q}' has shape \[32, 31\], the served model's is \[32, 32\]")
        self.refused(rewrite(self.b, lambda ts: ts.__setitem__(q, ts[q].to(torch.int32))),
                     rf"model.safetensors: tensor '{q}' has dtype I32")
        # a checkpoint cut short
        d = rewrite(self.b, lambda ts: None)
        f = os.path.join(d, "model.safetensors")
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) - 4)
        self.refused(d, f"{f}: not a valid safetensors file")

    def test_version_file(self):
        d = rewrite(self.b, lambda ts: None)
        with open(os.path.join(d, "trainer.json"), "w") as f:
            json.dump({"version": "7"}, f)
        self.refused(d, "trainer.json: key 'version' must be an integer")

    def test_quantized_refused(self):
        self.refused(self.b, "quantized \\(fp8\\)", worker=served(self.a, quantization="fp8"))

    def test_hub_name_checked_by_the_model(self):
        """A server started from a hub name has no local layout to check
        against: the model's own load_weights refuses what it lacks, and the
        error names the tensor and says the weights are in doubt."""
        w, m = served(self.a)
        w.model_config.model = "Qwen/Qwen3-0.6B"
        extra = rewrite(self.b, lambda ts: ts.__setitem__("model.layers.0.mlp.extra.weight", torch.zeros(2)))
        with self.assertRaisesRegex(CheckpointError, r"tensor 'model.layers.0.mlp.extra.weight': the model's load_weights refused it .*in doubt"):
            w.longhaul_reload_weights(extra)
        missing = rewrite(self.b, lambda ts: ts.pop("model.norm.weight"))
        with self.assertRaisesRegex(CheckpointError, r"parameter\(s\) of the served model were not written, first \['model.norm.weight'\]"):
            w.longhaul_reload_weights(missing)


class StreamTest(unittest.TestCase):
    def test_header_and_stream_match_decode(self):
        """safetensors_io.read_header + iter_tensors (one tensor at a time)
        read what decode reads, for every dtype, and refuse what it refuses."""
        ts = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([1.5, -0.0], dtype=torch.bfloat16),
              "c": torch.tensor([7], dtype=torch.int32), "d": torch.tensor([1, 2], dtype=torch.uint8), "e": torch.zeros(0, 4),
              "f": torch.tensor([0.25], dtype=torch.float16)}
        f = os.path.join(tmpdir(), "x.safetensors")
        with open(f, "wb") as fh:
            fh.write(st.encode(ts, {"k": "v"}))
        meta, entries, start = st.read_header(f)
        self.assertEqual(meta, {"k": "v"})
        got = {n: t for n, t, _ in st.iter_tensors(f, entries, start)}
        _, want = st.load_file(f)
        self.assertEqual(sorted(got), sorted(want))
        for n in want:
            self.assertEqual((got[n].dtype, got[n].shape), (want[n].dtype, want[n].shape), n)
            self.assertTrue(torch.equal(got[n].float(), want[n].float()), n)
        self.assertEqual(sorted(n for n, _, _ in st.iter_tensors(f, entries, start, names={"b", "e"})), ["b", "e"])
        good = open(f, "rb").read()
        for bad, want in [(good[:4], "shorter"), (good[:-1], "offsets"), (good + b"x", "trailing")]:
            with open(f, "wb") as fh:
                fh.write(bad)
            with self.assertRaisesRegex(st.FormatError, want):
                st.read_header(f)


class InjectionTest(unittest.TestCase):
    def test_no_clash_with_vllms_worker(self):
        """vLLM appends the extension to its Worker's bases after asserting
        no attribute clashes; its Worker has reload_weights, so an extension
        method of that name would stop the server at start-up."""
        cls = inject(StandInWorker, LonghaulWorkerExtension)
        self.assertTrue(hasattr(cls, "longhaul_reload_weights") and hasattr(cls, "longhaul_weight_info"))

        class Clashing(LonghaulWorkerExtension):
            def reload_weights(self, weights_path):
                pass
        with self.assertRaisesRegex(AssertionError, "already has an attribute reload_weights"):
            inject(StandInWorker, Clashing)


if __name__ == "__main__":
    unittest.main()
