"""The optimizer step, checkpoints and weight export.

The step is model/train.go's, op for op where it matters for agreement:
per-token PPO clipped surrogate (gradient 0 where the clipped term wins),
optional k3 KL against ref_logprobs, token_mean or seq_mean normalisation
over the whole batch (so microbatches sum to the full-batch gradient),
global-norm clipping (scale clip/(norm+1e-6) when norm > clip), and AdamW
with decoupled decay on matrices and embeddings only, moments in float64,
the LR schedule of OptimConfig.LRAt. The advantage estimator (GRPO,
Dr.GRPO, RLOO) runs in the controller; the batch carries its advantages."""

import hashlib
import json
import math
import os
import random
import shutil

import numpy as np
import torch

from . import safetensors_io as st
from .batch import Invalid

FORMAT = "longhaul-pytorch-trainer"
FORMAT_VERSION = 1
WEIGHTS, CONFIG, OPTIM, RNG, META = "model.safetensors", "config.json", "optimizer.safetensors", "rng.safetensors", "trainer.json"


class OptimConfig:
    def __init__(self, lr=1e-3, min_lr=1e-4, warmup_steps=10, total_steps=1000, schedule="constant", weight_decay=0.01,
                 beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0, moment_dtype="float64"):
        self.__dict__.update(lr=lr, min_lr=min_lr, warmup_steps=warmup_steps, total_steps=total_steps, schedule=schedule,
                             weight_decay=weight_decay, beta1=beta1, beta2=beta2, eps=eps, grad_clip=grad_clip, moment_dtype=moment_dtype)
        problems = []
        if not lr > 0:
            problems.append(f"lr must be > 0, got {lr}")
        if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
            problems.append(f"betas must be in [0,1), got {beta1}, {beta2}")
        if not eps > 0:
            problems.append(f"eps must be > 0, got {eps}")
        if warmup_steps < 0 or weight_decay < 0 or grad_clip < 0:
            problems.append("warmup_steps, weight_decay and grad_clip must be >= 0")
        if schedule not in ("constant", "cosine"):
            problems.append(f"schedule must be constant or cosine, got {schedule!r}")
        if schedule == "cosine" and total_steps <= warmup_steps:
            problems.append("cosine schedule needs total_steps > warmup_steps")
        if moment_dtype not in ("float64", "float32"):
            problems.append(f"moment_dtype must be float64 or float32, got {moment_dtype!r}")
        if problems:
            raise ValueError("optimizer: " + "; ".join(problems))

    def lr_at(self, s):
        w = self.warmup_steps
        if s < w:
            return self.lr * float(s + 1) / float(w)
        if self.schedule != "cosine":
            return self.lr
        prog = min(1.0, float(s - w) / float(self.total_steps - w))
        return self.min_lr + (self.lr - self.min_lr) * 0.5 * (1 + math.cos(math.pi * prog))


class LossConfig:
    def __init__(self, clip_low=0.2, clip_high=0.2, kl_coef=0.0, norm="token_mean"):
        if norm not in ("token_mean", "seq_mean"):
            raise ValueError(f"loss: norm must be token_mean or seq_mean, got {norm!r}")
        if not (0 <= clip_low < 1) or clip_high < 0:
            raise ValueError(f"loss: bad ratio clip [1-{clip_low}, 1+{clip_high}]")
        self.clip_low, self.clip_high, self.kl_coef, self.norm = clip_low, clip_high, kl_coef, norm


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Trainer:
    """One replica. With world > 1 every rank holds the same weights and
    moments; microbatch j runs on rank j % world and gradients are summed by
    all_reduce before the identical update on every rank."""

    all_ranks_io = False  # save and export run on rank 0 alone (every rank holds everything)

    def __init__(self, model, src_config, optim, loss, device="cpu", microbatch_tokens=0, rank=0, world=1, model_dir=None):
        self.model, self.src_config, self.oc, self.lc = model, dict(src_config), optim, loss
        self.device, self.mb_tokens, self.rank, self.world = torch.device(device), microbatch_tokens, rank, world
        self.model_dir = model_dir
        self.step = 0
        self.version = 0
        # The warm start (warm_step): steps taken, and its own AdamW moments
        # while it runs (None outside it). docs/protocols.md, "Trainer
        # protocol: the warm start".
        self.warm_done = 0
        self.warm_moments = None
        self.params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        mdt = torch.float64 if optim.moment_dtype == "float64" else torch.float32
        self.m = [torch.zeros_like(p, dtype=mdt) for _, p in self.params]
        self.v = [torch.zeros_like(p, dtype=mdt) for _, p in self.params]
        self.vocab = model.config.vocab_size if hasattr(model.config, "vocab_size") else src_config["vocab_size"]
        self.max_len = src_config.get("max_position_embeddings", 1 << 30)
        # FSDP (fsdp.py) averages gradients over ranks; the loss here is a
        # global sum, so it scales each microbatch's loss by the world size.
        self.loss_scale = 1

    # ---- the step ----

    def check(self, b):
        """Refuses what the Go trainer refuses (model/train.go checkSeq), with
        the row named; returns each row's trained-token count."""
        counts = []
        for i, r in enumerate(b.rows):
            n = len(r["tokens"])
            if n == 0:
                raise Invalid(f"row {i}: no tokens")
            if n > self.max_len:
                raise Invalid(f"row {i}: {n} tokens exceed max_position_embeddings {self.max_len}")
            lo, hi = int(r["tokens"].min()), int(r["tokens"].max())
            if lo < 0 or hi >= self.vocab:
                raise Invalid(f"row {i}: token {lo if lo < 0 else hi} outside the vocabulary [0, {self.vocab})")
            if r["mask"][0] != 0:
                raise Invalid(f"row {i}: mask[0] must be 0: token 0 is not predicted")
            if b.loss == "pg" and self.lc.kl_coef != 0 and "ref_logprobs" not in r:
                raise Invalid("kl_coef is set: the batch needs a ref_logprobs tensor")
            counts.append(int((r["mask"] != 0).sum()))
        if sum(counts) == 0:
            raise Invalid("no trainable tokens")
        if b.microbatches is not None:
            seen = sorted(i for m in b.microbatches for i in m)
            if seen != list(range(len(b.rows))):
                raise Invalid("microbatches must name every row exactly once")
        return counts

    def plan(self, b):
        """Microbatches: the batch's own, each split further so that its padded
        size (rows x longest row) stays within the token budget."""
        groups = b.microbatches if b.microbatches is not None else [list(range(len(b.rows)))]
        out = []
        for g in groups:
            cur, longest = [], 0
            for i in g:
                n = len(b.rows[i]["tokens"])
                if cur and self.mb_tokens > 0 and max(longest, n) * (len(cur) + 1) > self.mb_tokens:
                    out.append(cur)
                    cur, longest = [], 0
                cur.append(i)
                longest = max(longest, n)
            if cur:
                out.append(cur)
        return out

    def _micro(self, b, idx, weight, acc):
        rows = [b.rows[i] for i in idx]
        T = max(len(r["tokens"]) for r in rows)
        B = len(rows)
        toks = torch.zeros(B, T, dtype=torch.long)
        mask = torch.zeros(B, T, dtype=torch.bool)
        adv = torch.zeros(B, T, dtype=torch.float32)
        old = torch.zeros(B, T, dtype=torch.float32)
        ref = torch.zeros(B, T, dtype=torch.float32)
        w = torch.zeros(B, 1, dtype=torch.float64)
        for j, r in enumerate(rows):
            n = len(r["tokens"])
            toks[j, :n], mask[j, :n] = r["tokens"], r["mask"] != 0
            adv[j, :n], old[j, :n] = r["advantages"], r["old_logprobs"]
            if "ref_logprobs" in r:
                ref[j, :n] = r["ref_logprobs"]
            w[j, 0] = weight[idx[j]]
        dev = self.device
        toks, mask, adv, old, ref, w = (t.to(dev) for t in (toks, mask, adv, old, ref, w))
        # Only positions whose next token is trained get the head: with
        # chat prompts most are prompt positions, and the head over a
        # 150k-token vocabulary is most of the step (the Go trainer skips
        # them too). sel[j, t] says token t+1 of row j is trained.
        sel = mask[:, 1:]
        pred = torch.zeros_like(mask)
        pred[:, :-1] = sel
        if getattr(self.model, "selects", False):
            logits = self.model(toks, select=pred)  # [N, V], rows in sel's order
        else:
            logits = self.model(toks)[pred]
        logp = torch.log_softmax(logits.float(), dim=-1)
        lp = logp.gather(-1, toks[:, 1:][sel][:, None]).squeeze(-1).double()
        wt = w.expand(B, T)[:, 1:][sel]
        if b.loss == "sft":
            tl = -lp
            clipped_lo = clipped_hi = torch.zeros_like(lp, dtype=torch.bool)
            kl = torch.zeros_like(lp)
        else:
            a = adv[:, 1:][sel].double()
            r = torch.exp(lp - old[:, 1:][sel].double())
            rc = r.clamp(1 - self.lc.clip_low, 1 + self.lc.clip_high)
            u, v = -a * r, -a * rc
            clipped = v > u
            tl = torch.where(clipped, v, u)
            clipped_lo, clipped_hi = clipped & (r < 1), clipped & (r > 1)
            kl = torch.zeros_like(lp)
            if self.lc.kl_coef != 0:
                delta = ref[:, 1:][sel].double() - lp
                kl = torch.exp(delta) - delta - 1
                tl = tl + self.lc.kl_coef * kl
        loss = (tl * wt).sum()
        (loss * self.loss_scale if self.loss_scale != 1 else loss).backward()
        with torch.no_grad():
            ent = -(logp.exp() * logp).sum(-1)
            acc["loss"] += float(loss)
            acc["clip_lo"] += int(clipped_lo.sum())
            acc["clip_hi"] += int(clipped_hi.sum())
            acc["kl"] += float(kl.sum())
            acc["entropy"] += float(ent.double().sum())

    def train_step(self, b):
        grads, acc, tokens = self.gradients(b)
        norm = self._grad_norm(grads)
        if self.oc.grad_clip > 0 and norm > self.oc.grad_clip:
            sc = float(np.float32(self.oc.grad_clip / (norm + 1e-6)))
            for g in grads:
                g.mul_(sc)
        lr = self.oc.lr_at(self.step)
        self._adamw(lr)
        self.step += 1
        self.version += 1
        clip = acc["clip_lo"] + acc["clip_hi"]
        return {"step": self.step, "version": self.version, "loss": acc["loss"], "grad_norm": norm, "lr": lr,
                "clip_frac": clip / tokens, "clip_frac_low": acc["clip_lo"] / tokens, "clip_frac_high": acc["clip_hi"] / tokens,
                "kl": acc["kl"] / tokens, "entropy": acc["entropy"] / tokens, "tokens": tokens}

    def warm_step(self, b, w):
        """One supervised warm-start step (b.loss must be 'sft'): the model's
        weights move, the RL state does not (step, version and the RL moments
        stay). The warm start has an AdamW of its own, fresh at index 0, with
        a constant learning rate w.lr after w.warmup_steps of linear warmup,
        exactly as the in-process warm start makes a second trainer over the
        same weights (runner/warmstart.go). The caller checked the
        fence (index == warm_done, step == 0)."""
        if b.loss != "sft":
            raise Invalid(f"warm_step: loss {b.loss!r}, want 'sft'")
        if w.index == 0:
            mdt = self.m[0].dtype if self.m else torch.float64
            self.warm_moments = ([torch.zeros_like(p, dtype=mdt) for _, p in self.params],
                                 [torch.zeros_like(p, dtype=mdt) for _, p in self.params])
        oc = OptimConfig(lr=w.lr, min_lr=w.lr, warmup_steps=w.warmup_steps, total_steps=w.steps, schedule="constant",
                         weight_decay=self.oc.weight_decay, beta1=self.oc.beta1, beta2=self.oc.beta2, eps=self.oc.eps,
                         grad_clip=self.oc.grad_clip, moment_dtype=self.oc.moment_dtype)
        saved = (self.step, self.version, self.m, self.v, self.oc)
        self.step, self.version, self.oc = w.index, 0, oc
        self.m, self.v = self.warm_moments
        try:
            stats = self.train_step(b)
        finally:
            self.warm_moments = (self.m, self.v)
            self.step, self.version, self.m, self.v, self.oc = saved
        self.warm_done = w.index + 1
        if self.warm_done >= w.steps:
            self.warm_moments = None  # the warm start is over: its optimizer goes
        stats.update(step=self.step, version=self.version, warm_step=self.warm_done, warm_steps=w.steps)
        return stats

    def gradients(self, b):
        """Leaves the summed gradient of the batch loss in each p.grad (all
        ranks' parts added) and returns (grads, loss statistics, tokens)."""
        counts = self.check(b)
        tokens = sum(counts)
        with_tokens = sum(1 for c in counts if c)
        if self.lc.norm == "token_mean":
            weight = [1.0 / tokens if c else 0.0 for c in counts]
        else:
            weight = [1.0 / c / with_tokens if c else 0.0 for c in counts]
        for _, p in self.params:
            p.grad = None
        acc = {"loss": 0.0, "clip_lo": 0, "clip_hi": 0, "kl": 0.0, "entropy": 0.0}
        self.model.train()
        self._run_micros(b, weight, acc)
        grads = []
        for _, p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        if self.world > 1:
            self._all_reduce(grads, acc)
        return grads, acc, tokens

    def _run_micros(self, b, weight, acc):
        for j, idx in enumerate(self.plan(b)):
            if j % self.world == self.rank:
                self._micro(b, idx, weight, acc)

    def _grad_norm(self, grads):
        return math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))

    def _decays(self, name, p):
        """Decoupled decay applies to matrices and embeddings only."""
        return p.dim() >= 2

    def _all_reduce(self, grads, acc):
        import torch.distributed as dist
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        dist.all_reduce(flat)
        at = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[at:at + n].view_as(g))
            at += n
        keys = sorted(acc)
        vec = torch.tensor([float(acc[k]) for k in keys], dtype=torch.float64, device=flat.device)
        dist.all_reduce(vec)
        for k, x in zip(keys, vec.tolist()):
            acc[k] = x

    @torch.no_grad()
    def _adamw(self, lr):
        oc = self.oc
        b1, b2 = oc.beta1, oc.beta2
        n = float(self.step + 1)
        bc1, bc2 = 1 - b1 ** n, 1 - b2 ** n
        for (name, p), m, v in zip(self.params, self.m, self.v):
            g = p.grad.to(m.dtype)
            m.copy_(m * b1 + (1 - b1) * g)
            v.copy_(v * b2 + ((1 - b2) * g) * g)
            w = p.to(m.dtype)
            if oc.weight_decay and self._decays(name, p):
                w = w - (lr * oc.weight_decay) * w
            w = w - (lr * (m / bc1)) / (torch.sqrt(v / bc2) + oc.eps)
            p.copy_(w.to(p.dtype))
            p.grad = None

    # ---- checkpoints ----

    def save_checkpoint(self, d):
        """Writes weights (HF layout), moments, step, version and every RNG
        state. An existing d must be empty (the controller's checkpoint writer
        creates it and publishes it by rename); a new d is written as a
        temporary sibling, fsync'd and renamed into place. Each file is
        fsync'd; trainer.json, with every other file's SHA-256, is last."""
        if os.path.isdir(d):
            if os.listdir(d):
                raise Invalid(f"checkpoint dir {d} is not empty")
            self._write_ckpt(d)
            return
        parent = os.path.dirname(os.path.abspath(d))
        if not os.path.isdir(parent):
            raise Invalid(f"checkpoint dir {d}: parent {parent} does not exist")
        tmp = os.path.join(parent, f".tmp-{os.path.basename(d)}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        os.mkdir(tmp)
        try:
            self._write_ckpt(tmp)
            os.rename(tmp, d)
            st.fsync_dir(parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _write_ckpt(self, d):
        self._write_weights(os.path.join(d, WEIGHTS), None)
        st.write_file_durable(os.path.join(d, OPTIM), st.encode(self._moments()))
        rng = {"torch_cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            for i, s in enumerate(torch.cuda.get_rng_state_all()):
                rng[f"torch_cuda.{i}"] = s
        np_state = np.random.get_state()
        rng["numpy_mt19937"] = torch.from_numpy(np_state[1].astype(np.uint32).view(np.int32).copy())
        st.write_file_durable(os.path.join(d, RNG), st.encode(rng))
        pr = random.getstate()
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "step": self.step, "version": self.version,
                "numpy_rng": {"pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
                "python_rng": [pr[0], list(pr[1]), pr[2]],
                "optim": dict(self.oc.__dict__), "loss": dict(self.lc.__dict__),
                "files": {f: _sha256(os.path.join(d, f)) for f in (WEIGHTS, CONFIG, OPTIM, RNG)}}
        st.write_file_durable(os.path.join(d, META), (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())

    def load_checkpoint(self, d):
        """Restores exactly what save_checkpoint wrote; every file's hash must match."""
        mp = os.path.join(d, META)
        try:
            with open(mp) as f:
                meta = json.load(f)
        except FileNotFoundError:
            raise Invalid(f"{mp}: missing (not a checkpoint, or an unfinished one)") from None
        except json.JSONDecodeError as e:
            raise Invalid(f"{mp}: line {e.lineno}: {e.msg}") from None
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise Invalid(f"{mp}: format {meta.get('format')!r} v{meta.get('format_version')!r}, want {FORMAT!r} v{FORMAT_VERSION}")
        for f, want in sorted(meta.get("files", {}).items()):
            p = os.path.join(d, f)
            if not os.path.exists(p):
                raise Invalid(f"{p}: missing")
            if _sha256(p) != want:
                raise Invalid(f"{p}: SHA-256 mismatch (corrupt checkpoint)")
        if set(meta.get("files", {})) != {WEIGHTS, CONFIG, OPTIM, RNG}:
            raise Invalid(f"{mp}: key 'files' must list {sorted([WEIGHTS, CONFIG, OPTIM, RNG])}")
        try:
            _, w = st.load_file(os.path.join(d, WEIGHTS))
            _, opt = st.load_file(os.path.join(d, OPTIM))
            _, rng = st.load_file(os.path.join(d, RNG))
        except st.FormatError as e:
            raise Invalid(str(e)) from None
        names = [n for n, _ in self.params]
        for n in names:
            for k in (n, "exp_avg." + n, "exp_avg_sq." + n):
                src = w if k == n else opt
                if k not in src:
                    raise Invalid(f"{d}: checkpoint lacks tensor {k!r} (another architecture?)")
        self._restore(d, w, opt)
        torch.set_rng_state(rng["torch_cpu"])
        cuda = sorted((k for k in rng if k.startswith("torch_cuda.")), key=lambda k: int(k.split(".")[1]))
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([rng[k] for k in cuda])
        ns = meta["numpy_rng"]
        np.random.set_state(("MT19937", rng["numpy_mt19937"].numpy().view(np.uint32), ns["pos"], ns["has_gauss"], ns["cached_gaussian"]))
        pr = meta["python_rng"]
        random.setstate((pr[0], tuple(pr[1]), pr[2]))
        self.step, self.version = int(meta["step"]), int(meta["version"])
        # A checkpoint is taken after the warm start (checkpoint 0): loading
        # one ends any warm start in progress.
        self.warm_done, self.warm_moments = 0, None

    @torch.no_grad()
    def _restore(self, d, w, opt):
        """Copies checkpoint tensors into the parameters and moments, after
        checking every shape and dtype (so nothing is half-restored)."""
        for (n, p), m, v in zip(self.params, self.m, self.v):
            for dst, src in ((p, w[n]), (m, opt["exp_avg." + n]), (v, opt["exp_avg_sq." + n])):
                if tuple(src.shape) != tuple(dst.shape) or src.dtype != dst.dtype:
                    raise Invalid(f"{d}: tensor for {n!r} is {src.dtype}{list(src.shape)}, want {dst.dtype}{list(dst.shape)}")
        for (n, p), m, v in zip(self.params, self.m, self.v):
            p.copy_(w[n])
            m.copy_(opt["exp_avg." + n])
            v.copy_(opt["exp_avg_sq." + n])

    def _weights(self):
        """name -> whole tensor, for checkpoints and exports."""
        return {n: p.detach() for n, p in self.model.named_parameters()}

    def _moments(self):
        opt = {}
        for (name, _), m, v in zip(self.params, self.m, self.v):
            opt["exp_avg." + name], opt["exp_avg_sq." + name] = m, v
        return opt

    # ---- export ----

    def _write_weights(self, path, dtype):
        ts = {n: (t.to(dtype) if dtype else t) for n, t in self._weights().items()}
        st.write_file_durable(path, st.encode(ts, {"format": "pt"}))
        cfg = dict(self.src_config)
        if dtype is not None:
            cfg["torch_dtype"] = str(dtype).replace("torch.", "")
        st.write_file_durable(os.path.join(os.path.dirname(os.path.abspath(path)), CONFIG),
                              (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode())

    def export_weights(self, path, dtype=None):
        """Writes path (safetensors, HF tensor names) and config.json beside it,
        each durably; tokenizer files of the source directory are copied when
        the destination lacks them, so the directory is a loadable HF model."""
        d = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(d):
            raise Invalid(f"export path {path}: directory {d} does not exist")
        self._write_weights(path, dtype)
        if self.model_dir:
            for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json", "vocab.json", "merges.txt"):
                src, dst = os.path.join(self.model_dir, f), os.path.join(d, f)
                if os.path.exists(src) and not os.path.exists(dst):
                    with open(src, "rb") as fh:
                        st.write_file_durable(dst, fh.read())
