import json
import math
import os
import shutil
import unittest

import torch

from longhaul_trainer import batch as wire
from longhaul_trainer import model as lm
from longhaul_trainer import safetensors_io as st
from longhaul_trainer.batch import BadRequest, Invalid
from tests.helpers import batch, make_trainer, rows, tiny_dir, tmpdir, weights

torch.use_deterministic_algorithms(True)


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_all_dtypes(self):
        ts = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([1.5, -0.0], dtype=torch.bfloat16),
              "c": torch.tensor([7], dtype=torch.int32), "d": torch.tensor([1, 2], dtype=torch.uint8), "e": torch.zeros(0, 4)}
        meta, got = st.decode(st.encode(ts, {"k": "v"}))
        self.assertEqual(meta, {"k": "v"})
        for k, v in ts.items():
            self.assertEqual(got[k].dtype, v.dtype)
            self.assertTrue(torch.equal(got[k].view(torch.uint8) if v.numel() else got[k], v.view(torch.uint8) if v.numel() else v), k)

    def test_strict(self):
        good = st.encode({"a": torch.ones(2)})
        for bad, want in [(good[:4], "shorter"), (good[:-1], "offsets"), (good + b"x", "trailing"),
                          (good.replace(b'"F32"', b'"F99"'), "dtype")]:
            with self.assertRaisesRegex(st.FormatError, want):
                st.decode(bad)


class BatchTest(unittest.TestCase):
    def test_round_trip(self):
        rs = rows(3)
        b = wire.decode(wire.encode("pg", rs, [[0, 1], [2, 3]], expect_step=5))
        self.assertEqual((b.loss, b.microbatches, b.expect_step), ("pg", [[0, 1], [2, 3]], 5))
        for r, g in zip(rs, b.rows):
            for k in r:
                self.assertTrue(torch.equal(r[k].to(g[k].dtype), g[k]), k)

    def test_errors_name_the_field(self):
        p = wire.encode("pg", rows(3))
        meta, ts = st.decode(p)
        cases = [("lengths", lambda ts, m: ts.pop("lengths")),
                 ("mask", lambda ts, m: ts.__setitem__("mask", ts["mask"].float())),
                 ("loss", lambda ts, m: m.__setitem__("loss", "ppo")),
                 ("expect_step", lambda ts, m: m.__setitem__("expect_step", "-3")),
                 ("microbatches", lambda ts, m: m.__setitem__("microbatches", "[[9]]")),
                 ("advantages", lambda ts, m: ts.__setitem__("advantages", ts["advantages"][:, :2].contiguous()))]
        for field, mutate in cases:
            t2, m2 = dict(ts), dict(meta)
            mutate(t2, m2)
            with self.assertRaisesRegex(BadRequest, field):
                wire.decode(st.encode(t2, m2))


class LossTest(unittest.TestCase):
    def test_pg_loss_matches_formula(self):
        """The step's loss equals model/train.go's formula written out token by token in float64."""
        d = tiny_dir()
        t = make_trainer(d)
        b = batch(7)
        with torch.no_grad():
            ref, tokens, clipped = 0.0, 0, 0
            for r in b.rows:
                tokens += int(r["mask"].sum())
            for r in b.rows:
                logits = t.model(r["tokens"][None])[0]
                lp = torch.log_softmax(logits, -1)
                for i in range(1, len(r["tokens"])):
                    if not r["mask"][i]:
                        continue
                    x = float(lp[i - 1, r["tokens"][i]])
                    a, old = float(r["advantages"][i]), float(r["old_logprobs"][i])
                    ratio = math.exp(x - old)
                    rc = min(max(ratio, 0.8), 1.28)
                    u, v = -a * ratio, -a * rc
                    clipped += v > u
                    ref += max(u, v) / tokens
        s = t.train_step(b)
        self.assertAlmostEqual(s["loss"], ref, delta=1e-6 * max(1, abs(ref)))
        self.assertEqual(s["tokens"], tokens)
        self.assertAlmostEqual(s["clip_frac"], clipped / tokens)
        self.assertGreater(s["entropy"], 0)
        self.assertEqual((s["step"], s["version"]), (1, 1))

    def test_microbatches_sum_to_full_batch(self):
        d = tiny_dir()
        a, b = make_trainer(d), make_trainer(d, microbatch_tokens=12)
        bt = batch(9, n=6)
        self.assertGreater(len(b.plan(bt)), 2)
        ga, sa, _ = a.gradients(bt)
        gb, sb, _ = b.gradients(bt)
        self.assertAlmostEqual(sa["loss"], sb["loss"], delta=1e-6)
        for (n, _), x, y in zip(a.params, ga, gb):
            self.assertTrue(torch.allclose(x, y, rtol=1e-4, atol=1e-7), n)
            self.assertGreater(float(x.abs().max()), 0, n)

    def test_grad_clip_and_refusals(self):
        d = tiny_dir()
        t = make_trainer(d, grad_clip=1e-3)
        before = weights(t)
        s = t.train_step(batch(1))
        self.assertGreater(s["grad_norm"], 1e-3)
        bad = batch(1)
        bad.rows[0]["mask"][0] = 1
        with self.assertRaisesRegex(Invalid, "mask\\[0\\]"):
            t.train_step(bad)
        bad = batch(1)
        bad.rows[1]["tokens"][2] = 64
        with self.assertRaisesRegex(Invalid, "row 1: token 64"):
            t.train_step(bad)
        bad = batch(1)
        for r in bad.rows:
            r["mask"].zero_()
        with self.assertRaisesRegex(Invalid, "no trainable tokens"):
            t.train_step(bad)
        self.assertEqual(t.step, 1)
        self.assertFalse(all(torch.equal(before[n], p) for n, p in t.model.named_parameters()))


class ResumeTest(unittest.TestCase):
    def test_exact_resume(self):
        """Training straight through equals save, load into a fresh process-like trainer, continue: bit for bit."""
        d = tiny_dir()
        root = tmpdir()
        a = make_trainer(d)
        for k in range(2):
            a.train_step(batch(10 + k))
        ck = os.path.join(root, "ck")
        a.save_checkpoint(ck)
        torch.manual_seed(999)  # RNG state moves on; the checkpoint restores it
        for k in range(2, 4):
            a.train_step(batch(10 + k))
        b = make_trainer(d)
        b.load_checkpoint(ck)
        self.assertEqual(b.step, 2)
        for k in range(2, 4):
            b.train_step(batch(10 + k))
        for n, p in a.model.named_parameters():
            self.assertTrue(torch.equal(p, dict(b.model.named_parameters())[n]), n)
        for ma, mb in zip(a.m + a.v, b.m + b.v):
            self.assertTrue(torch.equal(ma, mb))
        self.assertTrue(torch.equal(torch.get_rng_state(), torch.get_rng_state()))

    def test_rng_restored(self):
        d = tiny_dir()
        root = tmpdir()
        a = make_trainer(d)
        torch.manual_seed(5)
        a.save_checkpoint(os.path.join(root, "ck"))
        want = torch.rand(3)
        torch.manual_seed(6)
        a.load_checkpoint(os.path.join(root, "ck"))
        self.assertTrue(torch.equal(torch.rand(3), want))

    def test_corrupt_and_non_empty(self):
        d = tiny_dir()
        root = tmpdir()
        a = make_trainer(d)
        ck = os.path.join(root, "ck")
        a.save_checkpoint(ck)
        self.assertEqual(sorted(os.listdir(root)), ["ck"])  # no temporary left behind
        with self.assertRaisesRegex(Invalid, "not empty"):
            a.save_checkpoint(ck)
        with open(os.path.join(ck, "optimizer.safetensors"), "r+b") as f:
            f.seek(-1, 2)
            f.write(b"\x01")
        with self.assertRaisesRegex(Invalid, "SHA-256"):
            a.load_checkpoint(ck)
        os.remove(os.path.join(ck, "trainer.json"))
        with self.assertRaisesRegex(Invalid, "missing"):
            a.load_checkpoint(ck)

    def test_export_is_loadable_hf(self):
        for arch, tie in (("qwen3", True), ("llama", False), ("qwen2", True)):
            d = tiny_dir(arch, tie=tie)
            t = make_trainer(d)
            t.train_step(batch(2))
            out = tmpdir()
            t.export_weights(os.path.join(out, "model.safetensors"))
            with open(os.path.join(out, "config.json")) as f:
                self.assertEqual(json.load(f)["model_type"], arch)
            m = lm.load_builtin(out)
            names = set(dict(m.named_parameters()))
            self.assertEqual("lm_head.weight" in names, not tie)
            if arch == "qwen3":
                self.assertIn("model.layers.0.self_attn.q_norm.weight", names)
            if arch == "qwen2":
                self.assertIn("model.layers.0.self_attn.q_proj.bias", names)
            for n, p in t.model.named_parameters():
                self.assertTrue(torch.equal(p, dict(m.named_parameters())[n]), n)
            shutil.rmtree(out)


if __name__ == "__main__":
    unittest.main()


class FSDPGuardTest(unittest.TestCase):
    """The FSDP path needs CUDA, NCCL and torch >= 2.1 (fsdp.py); where any
    is missing, as on the CPU machine these tests run on, --fsdp is refused
    up front with the reason, never half-started."""

    def test_refused_with_reason(self):
        from longhaul_trainer import fsdp
        why = fsdp.unavailable("cpu", 2)
        self.assertIsNotNone(why)
        self.assertRegex(why, r"--fsdp needs|does not import")
        if not torch.cuda.is_available():
            self.assertIsNotNone(fsdp.unavailable("cuda", 2))

    def test_launcher_exits_2(self):
        import contextlib
        import io
        from longhaul_trainer.__main__ import main
        d = tiny_dir()
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["--model", d, "--fsdp", "--device", "cpu", "--port", "0", "--log-level", "ERROR"])
        self.assertEqual(rc, 2)
        self.assertIn("--fsdp", err.getvalue())
        shutil.rmtree(d)

    def test_names(self):
        from longhaul_trainer.fsdp import _clean
        known = {"model.embed_tokens.weight", "lm_head.weight"}
        self.assertEqual(_clean("_fsdp_wrapped_module.model.embed_tokens.weight", known), "model.embed_tokens.weight")
        self.assertEqual(_clean("_fsdp_wrapped_module.inner.lm_head.weight", known), "lm_head.weight")
        with self.assertRaises(ValueError):
            _clean("_fsdp_wrapped_module.other.weight", known)


class WarmStepTest(unittest.TestCase):
    def test_warm_step_is_a_second_optimizer_over_the_same_weights(self):
        """warm_step moves the weights as a fresh trainer with the warm
        start's optimizer (constant lr, its warmup) would, bit for bit, and
        leaves the RL state (step, version, moments) as it was."""
        from longhaul_trainer.batch import Warm
        d = tiny_dir()
        a = make_trainer(d)
        rl_m = [m.clone() for m in a.m]
        ref = make_trainer(d, lr=5e-3, warmup_steps=2)
        for i in range(3):
            st_a = a.warm_step(batch(30 + i, loss="sft"), Warm(i, 3, 5e-3, 2))
            st_r = ref.train_step(batch(30 + i, loss="sft"))
            self.assertEqual((st_a["loss"], st_a["grad_norm"], st_a["lr"]), (st_r["loss"], st_r["grad_norm"], st_r["lr"]))
            self.assertEqual((st_a["step"], st_a["version"], st_a["warm_step"]), (0, 0, i + 1))
        for n, p in a.model.named_parameters():
            self.assertTrue(torch.equal(p, dict(ref.model.named_parameters())[n]), n)
        self.assertEqual((a.step, a.version, a.warm_done, a.warm_moments), (0, 0, 3, None))
        for x, y in zip(a.m, rl_m):
            self.assertTrue(torch.equal(x, y))

    def test_warm_payload_errors_name_the_field(self):
        p = wire.encode_warm(rows(3), 0, 4, 1e-3, 2)
        b, w = wire.decode_warm(p)
        self.assertEqual((b.loss, w.index, w.steps, w.lr, w.warmup_steps), ("sft", 0, 4, 1e-3, 2))
        meta, ts = st.decode(p)
        for field, val in [("warm_index", "-1"), ("warm_index", "4"), ("warm_steps", "x"), ("lr", "0"), ("lr", "nan"),
                           ("warmup_steps", ""), ("loss", "pg")]:
            m2 = dict(meta, **{field: val})
            with self.assertRaisesRegex(BadRequest, field):
                wire.decode_warm(st.encode(ts, m2))
