"""python3 -m longhaul_trainer.tiny --out DIR [--arch qwen3] [--seed N]: write a
tiny random HF model directory (config.json + model.safetensors) for tests."""

import argparse
import os
import sys

from . import model as lm


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m longhaul_trainer.tiny", description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--arch", choices=sorted(lm.ARCHS), default="qwen3")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--untied", action="store_true")
    a = p.parse_args(argv)
    raw = lm.tiny_config(a.arch, a.vocab, a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate, tie=not a.untied)
    m = lm.CausalLM(lm.Config(raw))
    lm.init_weights(m, a.seed)
    os.makedirs(a.out, exist_ok=True)
    lm.save_hf(m, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
