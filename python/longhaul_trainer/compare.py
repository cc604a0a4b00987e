"""Compare the weights of two Hugging Face model directories tensor by tensor
(longhaul's Go trainer writes the same layout as this package's trainer).
Used by the agreement tests (test/pytorch).

python3 -m longhaul_trainer.compare --a DIR --b DIR   # prints {"max_rel": ..., "worst_tensor": ..., "max_abs": ..., "tensors": n}
"""

import argparse
import json
import sys

from . import model as lm


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m longhaul_trainer.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="the first HF directory")
    p.add_argument("--b", required=True, help="the second HF directory")
    a = p.parse_args(argv)
    wa, wb = lm.read_weights(a.a), lm.read_weights(a.b)
    if set(wa) != set(wb):
        print(json.dumps({"error": f"tensor names differ: {sorted(set(wa) ^ set(wb))[:6]}"}))
        return 1
    worst, where, maxabs = 0.0, "", 0.0
    for name, t in wa.items():
        u = wb[name]
        diff = float((t.double() - u.double()).abs().max())
        scale = float(t.double().abs().max())
        rel = diff / max(scale, 1e-30)
        maxabs = max(maxabs, diff)
        if rel > worst:
            worst, where = rel, name
    print(json.dumps({"max_rel": worst, "worst_tensor": where, "max_abs": maxabs, "tensors": len(wa)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
