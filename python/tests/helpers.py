import atexit
import os
import shutil
import tempfile

import torch

from longhaul_trainer import model as lm
from longhaul_trainer.batch import Batch
from longhaul_trainer.trainer import LossConfig, OptimConfig, Trainer


def tmpdir(prefix="lh-test-"):
    """A fresh temporary directory, removed when the test process exits."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d


def tiny_dir(arch="qwen3", seed=1, tie=True):
    d = tmpdir("lh-tiny-")
    m = lm.CausalLM(lm.Config(lm.tiny_config(arch, vocab=64, hidden=32, layers=2, heads=4, kv_heads=2, inter=48, tie=tie)))
    lm.init_weights(m, seed)
    lm.save_hf(m, d)
    return d


def make_trainer(d, **kw):
    m = lm.load_builtin(d)
    oc = OptimConfig(lr=kw.pop("lr", 1e-2), warmup_steps=kw.pop("warmup_steps", 2), grad_clip=kw.pop("grad_clip", 1.0))
    lc = LossConfig(clip_low=0.2, clip_high=0.28, kl_coef=kw.pop("kl_coef", 0.0), norm=kw.pop("norm", "token_mean"))
    return Trainer(m, lm.Config.load(d).raw, oc, lc, model_dir=d, **kw)


def rows(seed, n=4, vocab=64, lo=5, hi=12):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        T = int(torch.randint(lo, hi, (1,), generator=g))
        toks = torch.randint(0, vocab, (T,), generator=g)
        mask = (torch.rand(T, generator=g) < 0.7).to(torch.uint8)
        mask[0] = 0
        adv = torch.randn(T, generator=g) * mask
        old = (-torch.rand(T, generator=g) * 5) * mask
        out.append({"tokens": toks, "mask": mask, "advantages": adv, "old_logprobs": old})
    return out


def batch(seed, loss="pg", mbs=None, **kw):
    return Batch(loss, rows(seed, **kw), mbs, -1)


def weights(t):
    return {n: p.detach().clone() for n, p in t.model.named_parameters()}
