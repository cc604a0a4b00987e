#!/usr/bin/env python3
"""The PyTorch trainer (python/longhaul_trainer) on two devices, the same
batches: do the steps agree?

    PYTHONPATH=python python3 bench/gpu/trainer_devices.py --model DIR --a cpu --b cuda [--steps 4]

Both trainers start from the HF directory DIR in float32 and take --steps
policy-gradient steps (AdamW, lr 1e-3, no warm-up, grad clip 1) on the same
seeded batches. Bounds, checked at every step and at the end:
- loss and grad norm: |a - b| <= 1e-4 * max(1, |a|);
- each parameter's total update (theta_end - theta_start):
  ||upd_a - upd_b|| / ||upd_a|| <= 1e-2. AdamW divides by the gradient's
  running RMS, so a rounding-sized gradient difference can move an update
  by up to lr where that RMS is tiny: the bound is on the update as a whole,
  not element by element.
TF32 is switched off on CUDA so both sides compute in IEEE float32. Prints
one JSON line (the figures and the bounds) and exits 1 when a bound is
broken, 2 when a device is missing. --a cpu --b cpu is the self-check: the
two runs are then identical by construction."""

import argparse
import json
import sys

import torch

from longhaul_trainer import model as lm
from longhaul_trainer.batch import Batch
from longhaul_trainer.trainer import LossConfig, OptimConfig, Trainer

LOSS_TOL = 1e-4
UPDATE_TOL = 1e-2


def rows(seed, vocab, n=8, lo=12, hi=40):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        T = int(torch.randint(lo, hi, (1,), generator=g))
        toks = torch.randint(0, vocab, (T,), generator=g)
        mask = (torch.rand(T, generator=g) < 0.7).to(torch.uint8)
        mask[0] = 0
        adv = torch.randn(T, generator=g) * mask
        old = (-torch.rand(T, generator=g) * 5) * mask
        out.append({"tokens": toks, "mask": mask, "advantages": adv, "old_logprobs": old})
    return out


def trainer(d, device):
    m = lm.load_builtin(d).to(device)
    oc = OptimConfig(lr=1e-3, warmup_steps=0, grad_clip=1.0)
    return Trainer(m, lm.Config.load(d).raw, oc, LossConfig(clip_low=0.2, clip_high=0.28), device=device, model_dir=d)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--a", default="cpu")
    p.add_argument("--b", default="cuda")
    p.add_argument("--steps", type=int, default=4)
    a = p.parse_args(argv)
    for dev in (a.a, a.b):
        if dev.startswith("cuda") and not torch.cuda.is_available():
            print(json.dumps({"error": f"device {dev}: torch.cuda.is_available() is False"}))
            return 2
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    ta, tb = trainer(a.model, a.a), trainer(a.model, a.b)
    start = {n: p.detach().double().cpu() for n, p in ta.model.named_parameters()}
    vocab = ta.vocab
    steps, ok = [], True
    for k in range(a.steps):
        sa = ta.train_step(Batch("pg", rows(100 + k, vocab), None, -1))
        sb = tb.train_step(Batch("pg", rows(100 + k, vocab), None, -1))
        s = {"step": k + 1}
        for key in ("loss", "grad_norm"):
            d = abs(sa[key] - sb[key])
            s[key], s[key + "_diff"] = sa[key], d
            ok &= d <= LOSS_TOL * max(1.0, abs(sa[key]))
        steps.append(s)
    worst, worst_name = 0.0, ""
    pb = dict(tb.model.named_parameters())
    for n, p in ta.model.named_parameters():
        ua = p.detach().double().cpu() - start[n]
        ub = pb[n].detach().double().cpu() - start[n]
        den = float(ua.norm())
        rel = float((ua - ub).norm()) / den if den > 0 else float((ua - ub).norm())
        if rel > worst:
            worst, worst_name = rel, n
    ok &= worst <= UPDATE_TOL
    print(json.dumps({"a": a.a, "b": a.b, "torch": torch.__version__, "steps": steps, "update_rel_diff_max": worst,
                      "update_rel_diff_param": worst_name, "bounds": {"loss_rel": LOSS_TOL, "update_rel": UPDATE_TOL}, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
