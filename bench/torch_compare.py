#!/usr/bin/python3
"""Cross-check the Go model against PyTorch, and time a training step in each.

    GOEXPERIMENT=simd go run ./bench/dump -out /tmp/lhcmp
    /usr/bin/python3 bench/torch_compare.py /tmp/lhcmp

bench/dump writes model.safetensors + config.json (the Go model after a few SFT
steps), and fixture.json (fixed token sequences, the Go logits for them, and
the Go training-step times). This script parses the safetensors file itself
(8-byte little-endian header length, JSON header, raw data), builds the same
architecture in PyTorch (the built-in model is a Llama configuration:
RMSNorm, rope "rotate_half", causal MHA, SwiGLU, tied head; linear weights
in the Hugging Face names and [out, in] layout), checks the
logits agree (max abs diff <= 1e-4), then times forward + backward + AdamW on
the same batch shape and SFT loss as Go and prints both ratios: wall time
(best step) and CPU-seconds per step (median, every thread of the process).
Needs only Debian's python3-torch (1.13) (apt-get install python3-torch), run
with /usr/bin/python3. Install libopenblas0-pthread too: without it Debian's
torch falls back to the reference BLAS (about 4 GFLOP/s here, 17x slower), and
the script warns when its GEMM probe looks that slow.
"""
import json
import math
import os
import struct
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        # little-endian float32, the only dtype the Go writer emits
        arr = torch.frombuffer(bytearray(body[b:e]), dtype=torch.float32)
        out[name] = arr.reshape(info["shape"]).clone()
    return out, header.get("__metadata__", {})


class Model(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(v.clone()) for k, v in weights.items()})
        hs = cfg["head_dim"]
        ctx = cfg["max_position_embeddings"]
        # float64 angles rounded to float32, as model/rope.go ropeTables
        half = hs // 2
        pos = torch.arange(ctx, dtype=torch.float64)[:, None]
        freq = torch.tensor([1 / float(cfg["rope_theta"]) ** ((2 * i) / hs) for i in range(half)], dtype=torch.float64)[None, :]
        ang = pos * freq
        cos = torch.cos(ang).to(torch.float32)
        sin = torch.sin(ang).to(torch.float32)
        self.cos = torch.cat([cos, cos], -1)
        self.sin = torch.cat([sin, sin], -1)

    def w(self, name):
        return self.p[name.replace(".", "_")]

    def rmsnorm(self, x, g):
        eps = self.cfg["rms_norm_eps"]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    def rope(self, x, T):
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * self.cos[:T] + rot * self.sin[:T]

    def forward(self, tokens):
        cfg = self.cfg
        B, T = tokens.shape
        H, hs = cfg["num_attention_heads"], cfg["head_dim"]
        assert cfg["num_key_value_heads"] == H and cfg["tie_word_embeddings"], "the built-in configuration: MHA, tied"
        x = self.w("model.embed_tokens.weight")[tokens]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for l in range(cfg["num_hidden_layers"]):
            pre = f"model.layers.{l}."
            h = self.rmsnorm(x, self.w(pre + "input_layernorm.weight"))
            q, k, v = (F.linear(h, self.w(pre + f"self_attn.{n}_proj.weight")) for n in "qkv")
            q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in (q, k, v))
            q, k = self.rope(q, T), self.rope(k, T)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            o = (att @ v).transpose(1, 2).reshape(B, T, H * hs)
            x = x + F.linear(o, self.w(pre + "self_attn.o_proj.weight"))
            h = self.rmsnorm(x, self.w(pre + "post_attention_layernorm.weight"))
            gate, up = F.linear(h, self.w(pre + "mlp.gate_proj.weight")), F.linear(h, self.w(pre + "mlp.up_proj.weight"))
            x = x + F.linear(F.silu(gate) * up, self.w(pre + "mlp.down_proj.weight"))
        x = self.rmsnorm(x, self.w("model.norm.weight"))
        return x @ self.w("model.embed_tokens.weight").t()


def time_steps(model, tokens, steps, threads):
    torch.set_num_threads(threads)
    decay = [p for n, p in model.p.items() if p.dim() >= 2]
    no_decay = [p for n, p in model.p.items() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    times, cpu = [], []
    for i in range(steps + 2):
        t0, c0 = time.perf_counter(), time.process_time()
        logits = model(tokens)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= 2:  # warm-up steps excluded
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)  # every thread of the process
    return times, cpu


def median(x):
    return sorted(x)[len(x) // 2]


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/lhcmp"
    cfg = json.load(open(f"{d}/config.json"))
    fx = json.load(open(f"{d}/fixture.json"))
    weights, meta = read_safetensors(f"{d}/model.safetensors")
    model = Model(cfg, weights)
    V = cfg["vocab_size"]
    off, worst = 0, 0.0
    with torch.no_grad():
        for toks in fx["tokens"]:
            T = len(toks)
            want = torch.tensor(fx["logits"][off:off + T * V], dtype=torch.float32).view(T, V)
            off += T * V
            got = model(torch.tensor([toks]))[0]
            worst = max(worst, (got - want).abs().max().item())
    ok = worst <= 1e-4
    print(f"logits: max |torch - go| = {worst:.3e} over {len(fx['tokens'])} sequences ({'OK' if ok else 'NOT OK'}, bound 1e-4)")

    B, T = fx["batch_size"], fx["seq_len"]
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, V, (B, T), generator=g)
    go_best = min(fx["go_step_ms"])
    go_cpu = median(fx["go_step_cpu_ms"]) if fx.get("go_step_cpu_ms") else float("nan")
    print(f"go     {B}x{T} SFT step: best {go_best:7.1f} ms, CPU {go_cpu:7.1f} ms/step  ({B * T / go_best * 1000:8.0f} tok/s, kern {fx['go_kernel_path']})")
    for threads in (1, 2):
        # A child process per thread count: OpenBLAS sizes its own pool from
        # the environment at load time, and torch.set_num_threads(1) alone
        # left its second thread spinning (CPU per step ~2x the wall time).
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        core = blas_core(fx["go_kernel_path"])
        if core:
            env["OPENBLAS_CORETYPE"] = core
        out = subprocess.run([sys.executable, __file__, d, "--time", str(threads)], env=env,
                             check=True, capture_output=True, text=True).stdout
        gflops, best, tc = (float(v) for v in out.split())
        note = "" if gflops > 20 else "  WARNING: slow BLAS; install libopenblas0-pthread for a fair comparison"
        print(f"torch GEMM probe (256x128x512, {threads} thread(s), OpenBLAS kernels {core or 'as detected'}): {gflops:.1f} GFLOP/s{note}")
        print(f"torch  {B}x{T} SFT step: best {best:7.1f} ms, CPU {tc:7.1f} ms/step  ({B * T / best * 1000:8.0f} tok/s, {threads} thread(s), torch {torch.__version__})"
              f"  -> Go: {best / go_best:.2f}x faster, {go_cpu / tc:.2f}x the CPU")
    sys.exit(0 if ok else 1)


def time_only(d, threads):
    cfg = json.load(open(f"{d}/config.json"))
    fx = json.load(open(f"{d}/fixture.json"))
    weights, _ = read_safetensors(f"{d}/model.safetensors")
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg["vocab_size"], (fx["batch_size"], fx["seq_len"]), generator=g)
    torch.set_num_threads(threads)
    a, b = torch.randn(256, 128), torch.randn(128, 512)
    a @ b
    t0 = time.perf_counter()
    for _ in range(50):
        a @ b
    gflops = 50 * 2 * 256 * 128 * 512 / (time.perf_counter() - t0) / 1e9
    t, c = time_steps(Model(cfg, weights), tokens, 8, threads)
    print(gflops, min(t), median(c))


def blas_core(go_path):
    """The OPENBLAS_CORETYPE torch's OpenBLAS runs with: the kernels of the
    ISA Go ran (fixture's go_kernel_path). OpenBLAS 0.3.21 (Debian 12) does
    not know newer Intel models and falls back to SSE3 "Prescott" kernels,
    3-10x slower, which would flatter Go. An explicit OPENBLAS_CORETYPE in
    the environment wins."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    return {"avx512": "SkylakeX", "avx2": "Haswell"}.get(go_path, "")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--time":
        time_only(sys.argv[1], int(sys.argv[3]))
    else:
        main()
