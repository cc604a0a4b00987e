"""Biases a random untied Qwen3 directory towards emitting digits, in place,
so that the ledger task's reward varies between rollouts and GRPO's
advantages (and so the loss gradient) are not all zero: every input
embedding gets a common direction u, and the lm_head rows of the ten digit
tokens get u too, so a digit is likely after any token.

    python3 bias_digits.py MODEL_DIR [STRENGTH]
"""

import json
import os
import sys

import torch

from longhaul_trainer import safetensors_io as st


def main(d, strength=1.8):
    path = os.path.join(d, "model.safetensors")
    with open(os.path.join(d, "tokenizer.json")) as f:
        vocab = json.load(f)["model"]["vocab"]
    digits = [vocab[str(i)] for i in range(10)]
    meta, w = st.load_file(path)
    emb, head = w["model.embed_tokens.weight"], w["lm_head.weight"]
    g = torch.Generator().manual_seed(15)
    u = torch.randn(emb.shape[1], generator=g)
    u /= u.norm()
    emb += u
    head[digits] += strength * u
    st.write_file_durable(path, st.encode(w, meta))
    print(f"biased {len(digits)} digit tokens {digits} in {path}")


if __name__ == "__main__":
    main(sys.argv[1], *(float(x) for x in sys.argv[2:]))
