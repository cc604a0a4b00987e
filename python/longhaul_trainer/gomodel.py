"""Conversion between longhaul's embedded Go model (model/*.go) and the
built-in Llama, where the two architectures coincide: RMSNorm, rotate-half
RoPE, multi-head attention (no GQA), SwiGLU, tied embeddings, no biases.
Go stores linear weights [in, out] (y = x·W) with q|k|v and gate|up fused
by columns; HF stores [out, in] per projection. Used by the agreement test
(test/pytorch TestGoAgreement).

python3 -m longhaul_trainer.gomodel to-hf --go FILE --out DIR
python3 -m longhaul_trainer.gomodel compare --go FILE --hf DIR   # prints {"max_rel": ..., ...}
python3 -m longhaul_trainer.gomodel compare-hf --a DIR --hf DIR   # two HF directories, tensor by name
"""

import argparse
import json
import os
import sys

import torch

from . import model as lm
from . import safetensors_io as st


def go_config(go_file):
    with open(os.path.join(os.path.dirname(os.path.abspath(go_file)), "config.json")) as f:
        c = json.load(f)
    if c.get("position_embedding_type", "rope") != "rope":
        raise SystemExit("only the rope variant of the Go model maps onto Llama")
    return c


def hf_config(gc):
    d, h = gc["hidden_size"], gc["num_attention_heads"]
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": gc["vocab_size"], "hidden_size": d,
            "intermediate_size": gc["intermediate_size"], "num_hidden_layers": gc["num_hidden_layers"],
            "num_attention_heads": h, "num_key_value_heads": h, "head_dim": d // h, "rms_norm_eps": gc["rms_norm_eps"],
            "rope_theta": gc["rope_theta"], "max_position_embeddings": gc["max_position_embeddings"],
            "tie_word_embeddings": True, "hidden_act": "silu", "torch_dtype": "float32", "attention_bias": False}


def to_hf_tensors(go, gc):
    d, f = gc["hidden_size"], gc["intermediate_size"]
    out = {"model.embed_tokens.weight": go["wte"], "model.norm.weight": go["lnf.weight"]}
    for l in range(gc["num_hidden_layers"]):
        g, p = f"layers.{l}.", f"model.layers.{l}."
        qkv, fc = go[g + "attn.qkv.weight"], go[g + "mlp.fc.weight"]
        out[p + "input_layernorm.weight"] = go[g + "ln1.weight"]
        out[p + "post_attention_layernorm.weight"] = go[g + "ln2.weight"]
        out[p + "self_attn.q_proj.weight"] = qkv[:, :d].t().contiguous()
        out[p + "self_attn.k_proj.weight"] = qkv[:, d:2 * d].t().contiguous()
        out[p + "self_attn.v_proj.weight"] = qkv[:, 2 * d:].t().contiguous()
        out[p + "self_attn.o_proj.weight"] = go[g + "attn.proj.weight"].t().contiguous()
        out[p + "mlp.gate_proj.weight"] = fc[:, :f].t().contiguous()
        out[p + "mlp.up_proj.weight"] = fc[:, f:].t().contiguous()
        out[p + "mlp.down_proj.weight"] = go[g + "mlp.proj.weight"].t().contiguous()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m longhaul_trainer.gomodel", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cmd", choices=["to-hf", "compare", "compare-hf"])
    p.add_argument("--go", help="the Go model's safetensors file (config.json beside it)")
    p.add_argument("--a", help="compare-hf: the first HF directory")
    p.add_argument("--out", help="to-hf: HF directory to write")
    p.add_argument("--hf", help="compare: HF directory (model.safetensors) to compare with --go")
    a = p.parse_args(argv)
    if a.cmd == "compare-hf":
        mapped = lm.read_weights(a.a)
    else:
        gc = go_config(a.go)
        _, go = st.load_file(a.go)
        mapped = to_hf_tensors(go, gc)
    if a.cmd == "to-hf":
        m = lm.CausalLM(lm.Config(hf_config(gc)))
        lm.load_state(m, mapped, a.go)
        os.makedirs(a.out, exist_ok=True)
        lm.save_hf(m, a.out)
        return 0
    hf = lm.read_weights(a.hf)
    if set(hf) != set(mapped):
        print(json.dumps({"error": f"tensor names differ: {sorted(set(hf) ^ set(mapped))[:6]}"}))
        return 1
    worst, where, maxabs = 0.0, "", 0.0
    for name, t in mapped.items():
        u = hf[name]
        diff = float((t.double() - u.double()).abs().max())
        scale = float(t.double().abs().max())
        rel = diff / max(scale, 1e-30)
        maxabs = max(maxabs, diff)
        if rel > worst:
            worst, where = rel, name
    print(json.dumps({"max_rel": worst, "worst_tensor": where, "max_abs": maxabs, "tensors": len(mapped)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
