"""The FSDP path (--fsdp): weights, gradients and AdamW moments sharded
across GPUs with torch.distributed.fsdp (FULL_SHARD, use_orig_params), for
models whose replicas do not fit one GPU.

NOT RUN ON THE DEVELOPMENT MACHINE: it has no GPU, and Debian's torch 1.13
on Python 3.11 cannot even import torch.distributed.fsdp (a dataclass in
torch's sharded-tensor metadata is refused by Python 3.11). `unavailable`
says why a machine cannot run it, and the launcher refuses --fsdp there
before doing anything. The GPU command line is in docs/pytorch-trainer.md.

The arithmetic is the replica trainer's (trainer.py), element for element:
AdamW is elementwise, so each rank updates its own shard of every parameter
with the same formula, float64 moments included; decay goes by the
parameter's original rank (a shard is flat). What differs:
- FSDP reduce-scatters the mean of the ranks' gradients; the loss is a
  global sum, so each microbatch's loss is scaled by the world size.
- Every forward and backward is a collective, so every rank runs the same
  number of microbatches: a rank with fewer runs a zero-weight dummy.
- The gradient norm adds the shards' squares over ranks.
- Checkpoints and exports gather whole tensors (every rank takes part;
  rank 0 writes), in the replica path's format, so a checkpoint moves
  between the two paths; a load copies each rank's slice.

With use_orig_params the local part of a parameter is a contiguous run of
its flattened elements, and the ranks' parts in rank order are the whole
parameter (FSDP splits the concatenated flat parameter into equal
consecutive chunks); gathering and slicing rely on that and on public
collectives only."""

import functools

import torch

from .trainer import Trainer

MIN_TORCH = (2, 1)  # use_orig_params with sharded grads on the original parameters


def unavailable(device, world):
    """Why this process cannot run FSDP, or None when it can."""
    ver = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())
    if ver < MIN_TORCH:
        return f"--fsdp needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]} (use_orig_params); this is torch {torch.__version__}"
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return f"--fsdp needs CUDA GPUs and NCCL (device is {device!r}); on CPU use the replica path (no --fsdp)"
    if not torch.distributed.is_nccl_available():
        return "--fsdp needs NCCL, which this torch build lacks"
    if world < 2:
        return "--fsdp needs at least 2 ranks: launch with torchrun --nproc_per_node N (N >= 2)"
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel  # noqa: F401
    except Exception as e:  # torch builds differ in what breaks
        return f"torch.distributed.fsdp does not import here: {type(e).__name__}: {e}"
    return None


def _clean(name, known):
    """The HF name of a wrapped module's parameter."""
    n = name.replace("_fsdp_wrapped_module.", "")
    if n not in known and n.startswith("inner."):  # HFAdapter
        n = n[len("inner."):]
    if n not in known:
        raise ValueError(f"fsdp: parameter {name!r} has no counterpart in the unwrapped model")
    return n


class FSDPTrainer(Trainer):
    """Trainer over an FSDP-wrapped model; see the module docstring."""

    all_ranks_io = True  # save and export gather shards: every rank takes part

    def __init__(self, model, src_config, optim, loss, device, microbatch_tokens=0, rank=0, world=1, model_dir=None,
                 wrap_min_params=1_000_000):
        import torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
        from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
        self.shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
        config = model.config
        wrapped = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=True,
                       device_id=torch.device(device), sync_module_states=True,
                       auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=wrap_min_params))
        wrapped.config = config
        super().__init__(wrapped, src_config, optim, loss, device=device, microbatch_tokens=microbatch_tokens,
                         rank=rank, world=world, model_dir=model_dir)
        known = set(self.shapes)
        self.params = [(_clean(n, known), p) for n, p in self.params]
        self.loss_scale = world
        # Each parameter's local length and offset in its flattened whole,
        # fixed by the sharding: learnt once, so a load needs no collective
        # (rank 0 loads first and alone refuses a bad checkpoint).
        self.lengths, self.offsets = {}, {}
        for n, p in self.params:
            mine = torch.tensor([p.numel()], dtype=torch.int64, device=self.device)
            all_ = [torch.zeros_like(mine) for _ in range(world)]
            dist.all_gather(all_, mine)
            ls = [int(x) for x in all_]
            total = 1
            for s in self.shapes[n]:
                total *= s
            if sum(ls) != total:
                raise ValueError(f"fsdp: parameter {n!r}: shards hold {sum(ls)} elements, the parameter {total}")
            self.lengths[n], self.offsets[n] = ls, sum(ls[:rank])
        self._full = None

    def _decays(self, name, p):
        return len(self.shapes[name]) >= 2

    def _run_micros(self, b, weight, acc):
        plan = self.plan(b)
        mine = [idx for j, idx in enumerate(plan) if j % self.world == self.rank]
        for idx in mine:
            self._micro(b, idx, weight, acc)
        for _ in range(-(-len(plan) // self.world) - len(mine)):
            out = self.model(torch.zeros(1, 2, dtype=torch.long, device=self.device))
            (out.float().sum() * 0.0).backward()

    def _all_reduce(self, grads, acc):
        # The gradients are already reduce-scattered by FSDP; only the
        # statistics are summed here.
        import torch.distributed as dist
        keys = sorted(acc)
        vec = torch.tensor([float(acc[k]) for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(vec)
        for k, x in zip(keys, vec.tolist()):
            acc[k] = x

    def _grad_norm(self, grads):
        import torch.distributed as dist
        sq = torch.zeros(1, dtype=torch.float64, device=self.device)
        for g in grads:
            sq += g.double().pow(2).sum()
        dist.all_reduce(sq)
        return float(sq.sqrt())

    def _gather(self, name, local):
        import torch.distributed as dist
        ls = self.lengths[name]
        buf = torch.zeros(max(ls), dtype=local.dtype, device=self.device)
        buf[:local.numel()] = local.reshape(-1)
        parts = [torch.zeros_like(buf) for _ in ls]
        dist.all_gather(parts, buf)
        return torch.cat([p[:k] for p, k in zip(parts, ls)]).reshape(self.shapes[name]).cpu()

    def _gather_all(self):
        """Whole weights and moments (a collective: every rank calls it)."""
        w, opt = {}, {}
        with torch.no_grad():
            for (n, p), m, v in zip(self.params, self.m, self.v):
                w[n] = self._gather(n, p.detach())
                opt["exp_avg." + n], opt["exp_avg_sq." + n] = self._gather(n, m), self._gather(n, v)
        return w, opt

    def _weights(self):
        return self._full[0]

    def _moments(self):
        return self._full[1]

    def save_checkpoint(self, d):
        self._full = self._gather_all()  # before any check: the other ranks are in the gather
        try:
            if self.rank == 0:
                super().save_checkpoint(d)
        finally:
            self._full = None

    def export_weights(self, path, dtype=None):
        self._full = self._gather_all()
        try:
            if self.rank == 0:
                super().export_weights(path, dtype)
        finally:
            self._full = None

    @torch.no_grad()
    def _restore(self, d, w, opt):
        from .batch import Invalid
        for n, _ in self.params:
            for k, src in ((n, w[n]), ("exp_avg." + n, opt["exp_avg." + n]), ("exp_avg_sq." + n, opt["exp_avg_sq." + n])):
                if tuple(src.shape) != self.shapes[n]:
                    raise Invalid(f"{d}: tensor {k!r} is {list(src.shape)}, want {list(self.shapes[n])}")
        for (n, p), m, v in zip(self.params, self.m, self.v):
            lo, hi = self.offsets[n], self.offsets[n] + p.numel()
            p.copy_(w[n].reshape(-1)[lo:hi].to(p.dtype).view_as(p))
            m.copy_(opt["exp_avg." + n].reshape(-1)[lo:hi].to(m.dtype).view_as(m))
            v.copy_(opt["exp_avg_sq." + n].reshape(-1)[lo:hi].to(v.dtype).view_as(v))
