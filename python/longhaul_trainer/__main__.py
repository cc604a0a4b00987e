"""python3 -m longhaul_trainer --model DIR --port P [...]: serve the trainer protocol.

Single process:   python3 -m longhaul_trainer --model DIR --port 8001
Data-parallel:    torchrun --nproc-per-node N -m longhaul_trainer --model DIR --port 8001
(rank 0 serves HTTP; gloo on CPU, NCCL on GPUs; see docs/pytorch-trainer.md)."""

import argparse
import json
import logging
import os
import signal
import sys
import threading

import torch

from . import model as lm
from . import server
from .trainer import LossConfig, OptimConfig, Trainer


def parse(argv):
    p = argparse.ArgumentParser(prog="python3 -m longhaul_trainer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="HF model directory (config.json + safetensors) to train from")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8001, help="port to bind; 0 picks a free one (printed on stdout)")
    p.add_argument("--api-key", default=os.environ.get("LONGHAUL_API_KEY", ""), help="require this bearer token (default $LONGHAUL_API_KEY)")
    p.add_argument("--resume", default="", help="checkpoint directory to restore before serving")
    p.add_argument("--impl", choices=["auto", "builtin", "transformers"], default="auto",
                   help="model code: transformers.AutoModelForCausalLM when importable (auto), or the built-in Llama/Qwen2/Qwen3")
    p.add_argument("--device", default="", help="cpu or cuda (default: cuda when available, one GPU per rank)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="parameter dtype")
    p.add_argument("--export-dtype", choices=["same", "float32", "bfloat16", "float16"], default="same", help="dtype of exported weights")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--microbatch-tokens", type=int, default=0, help="padded tokens per microbatch (rows x longest row); 0: the batch's microbatches as sent")
    p.add_argument("--max-body-bytes", type=int, default=1 << 30, help="largest train_step payload (413 beyond)")
    p.add_argument("--fsdp", action="store_true",
                   help="shard weights, gradients and moments across GPUs (torch.distributed.fsdp; torch >= 2.1, CUDA, NCCL, "
                        ">= 2 ranks under torchrun); refused where unavailable. Not run on CPU (docs/pytorch-trainer.md)")
    g = p.add_argument_group("optimizer (model.OptimConfig)")
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--min-lr", type=float, default=1e-4)
    g.add_argument("--warmup-steps", type=int, default=10)
    g.add_argument("--total-steps", type=int, default=1000)
    g.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    g.add_argument("--weight-decay", type=float, default=0.01)
    g.add_argument("--beta1", type=float, default=0.9)
    g.add_argument("--beta2", type=float, default=0.95)
    g.add_argument("--eps", type=float, default=1e-8)
    g.add_argument("--grad-clip", type=float, default=1.0, help="max global grad norm; 0 disables")
    g.add_argument("--moment-dtype", choices=["float64", "float32"], default="float64", help="AdamW moments (float64 as the Go trainer)")
    g = p.add_argument_group("loss (model.LossConfig)")
    g.add_argument("--clip-low", type=float, default=0.2)
    g.add_argument("--clip-high", type=float, default=0.28)
    g.add_argument("--kl-coef", type=float, default=0.0, help="k3 KL weight; batches then need a ref_logprobs tensor")
    g.add_argument("--norm", choices=["token_mean", "seq_mean"], default="token_mean")
    p.add_argument("--seed", type=int, default=0, help="seeds torch, numpy and random (the trainer itself draws none)")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


class HFAdapter(torch.nn.Module):
    """transformers' model behind the built-in model's interface: tokens -> float32 logits."""

    def __init__(self, m):
        super().__init__()
        self.inner = m
        self.config = m.config

    def forward(self, tokens):
        return self.inner(input_ids=tokens, use_cache=False).logits.float()

    def named_parameters(self, *a, **k):  # HF names, without the adapter's prefix
        return self.inner.named_parameters(*a, **k)


def load_model(a, dtype, device):
    cfg = lm.Config.load(a.model) if a.impl == "builtin" else None
    if a.impl in ("auto", "transformers"):
        try:
            import transformers  # noqa: F401
            have = True
        except ImportError:
            have = False
        if a.impl == "transformers" and not have:
            raise SystemExit("--impl transformers: the transformers package is not importable")
        if have:
            from transformers import AutoModelForCausalLM
            m = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=dtype)
            with open(os.path.join(a.model, "config.json")) as f:
                return HFAdapter(m).to(device), json.load(f)
    cfg = cfg or lm.Config.load(a.model)
    m = lm.CausalLM(cfg).to(dtype)
    lm.load_state(m, lm.read_weights(a.model), a.model)
    return m.to(device), cfg.raw


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("longhaul_trainer")
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and world > 1:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    if a.fsdp:
        from . import fsdp
        why = fsdp.unavailable(device, world)
        if why:
            print(f"longhaul_trainer: {why}", file=sys.stderr)
            return 2
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if device == "cpu":
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(a.seed)
    try:
        oc = OptimConfig(lr=a.lr, min_lr=a.min_lr, warmup_steps=a.warmup_steps, total_steps=a.total_steps, schedule=a.schedule,
                         weight_decay=a.weight_decay, beta1=a.beta1, beta2=a.beta2, eps=a.eps, grad_clip=a.grad_clip, moment_dtype=a.moment_dtype)
        lc = LossConfig(clip_low=a.clip_low, clip_high=a.clip_high, kl_coef=a.kl_coef, norm=a.norm)
        m, raw = load_model(a, getattr(torch, a.dtype), device)
    except (ValueError, lm.ConfigError) as e:
        print(f"longhaul_trainer: {e}", file=sys.stderr)
        return 2
    if a.fsdp:
        t = fsdp.FSDPTrainer(m, raw, oc, lc, device=device, microbatch_tokens=a.microbatch_tokens, rank=rank, world=world, model_dir=a.model)
    else:
        t = Trainer(m, raw, oc, lc, device=device, microbatch_tokens=a.microbatch_tokens, rank=rank, world=world, model_dir=a.model)
    if a.resume:
        t.load_checkpoint(a.resume)
        log.info("resumed from %s at step %d", a.resume, t.step)
    if rank > 0:
        server.follow(t, device, None if a.export_dtype == "same" else getattr(torch, a.export_dtype))
        return 0
    export = None if a.export_dtype == "same" else getattr(torch, a.export_dtype)
    app = server.App(t, server.Peers(world, device), api_key=a.api_key, max_body=a.max_body_bytes, export_dtype=export)

    def ready(addr):
        # One JSON line on stdout: how a parent that asked for port 0 learns the port.
        print(json.dumps({"listening": f"{addr[0]}:{addr[1]}", "step": t.step, "world": world}), flush=True)

    httpd = server.serve(app, a.host, a.port, ready)
    stop = threading.Event()

    def on_signal(*_):
        if not stop.is_set():
            stop.set()
            threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("serving the trainer protocol on %s:%d (%d rank(s), %s, %d parameters)", *httpd.server_address[:2], world, device,
             sum(p.numel() for _, p in m.named_parameters()))
    httpd.serve_forever()
    with app.lock:  # let a call in progress finish, then release the other ranks
        app.peers.send(server.OP_STOP)
    return 0


if __name__ == "__main__":
    sys.exit(main())
