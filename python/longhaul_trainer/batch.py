"""The train_step payload (docs/serving.md, "Batch payload"), decoded and
checked as train/remote's decodeBatch does, with errors that name the field."""

import json
import math

import torch

from . import safetensors_io as st

WANT = {"tokens": torch.int32, "mask": torch.uint8, "advantages": torch.float32, "old_logprobs": torch.float32, "lengths": torch.int32}
LOSSES = ("pg", "sft")


class BadRequest(ValueError):
    """A malformed payload: HTTP 400."""


class Invalid(ValueError):
    """A well-formed request the trainer refuses: HTTP 422."""


class Batch:
    """rows: list of dicts with int64 'tokens', uint8 'mask', float32
    'advantages', 'old_logprobs' and optional 'ref_logprobs' (1-D, one entry per token)."""

    def __init__(self, loss, rows, microbatches, expect_step):
        self.loss, self.rows, self.microbatches, self.expect_step = loss, rows, microbatches, expect_step


def decode(payload):
    try:
        meta, ts = st.decode(payload, what="train_step payload")
    except st.FormatError as e:
        raise BadRequest(str(e)) from None
    for name, dt in WANT.items():
        if name not in ts:
            raise BadRequest(f"batch lacks tensor {name!r}")
        if ts[name].dtype != dt:
            raise BadRequest(f"batch tensor {name!r} is {st.NAMES[ts[name].dtype]}, want {st.NAMES[dt]}")
    lens = ts["lengths"]
    if lens.dim() != 1:
        raise BadRequest(f"lengths has shape {list(lens.shape)}, want [R]")
    R = lens.shape[0]
    shape = list(ts["tokens"].shape)
    if len(shape) != 2 or shape[0] != R:
        raise BadRequest(f"tokens has shape {shape}, want [{R}, T]")
    T = shape[1]
    extra = ["ref_logprobs"] if "ref_logprobs" in ts else []
    for name in ["mask", "advantages", "old_logprobs"] + extra:
        if list(ts[name].shape) != shape:
            raise BadRequest(f"{name} has shape {list(ts[name].shape)}, want {shape}")
    if extra and ts["ref_logprobs"].dtype != torch.float32:
        raise BadRequest("batch tensor 'ref_logprobs' must be F32")
    unknown = sorted(set(ts) - set(WANT) - {"ref_logprobs"})
    if unknown:
        raise BadRequest(f"batch has unknown tensor {unknown[0]!r}")
    loss = meta.get("loss")
    if loss not in LOSSES:
        raise BadRequest(f"__metadata__ loss {loss!r}: want 'pg' or 'sft'")
    mbs = None
    if meta.get("microbatches", "null") != "null":
        try:
            mbs = json.loads(meta["microbatches"])
        except json.JSONDecodeError as e:
            raise BadRequest(f"__metadata__ microbatches: {e}") from None
        if not isinstance(mbs, list) or not all(isinstance(m, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in m) for m in mbs):
            raise BadRequest("__metadata__ microbatches: want an array of arrays of row indices")
        for m in mbs:
            for i in m:
                if i < 0 or i >= R:
                    raise BadRequest(f"__metadata__ microbatches: row {i} out of range [0, {R})")
    expect = -1
    if "expect_step" in meta:
        s = meta["expect_step"]
        if not s.isdigit():
            raise BadRequest(f"__metadata__ expect_step {s!r}: want a non-negative integer")
        expect = int(s)
    rows = []
    for i in range(R):
        n = int(lens[i])
        if n < 0 or n > T:
            raise BadRequest(f"lengths[{i}] = {n} outside [0, {T}]")
        row = {"tokens": ts["tokens"][i, :n].long(), "mask": ts["mask"][i, :n], "advantages": ts["advantages"][i, :n],
               "old_logprobs": ts["old_logprobs"][i, :n]}
        if extra:
            row["ref_logprobs"] = ts["ref_logprobs"][i, :n]
        rows.append(row)
    return Batch(loss, rows, mbs, expect)


def encode(loss, rows, microbatches=None, expect_step=-1):
    """The inverse of decode (tests and benchmarks; the controller's encoder is Go's)."""
    R, T = len(rows), max((len(r["tokens"]) for r in rows), default=0)
    tok = torch.zeros(R, T, dtype=torch.int32)
    mask = torch.zeros(R, T, dtype=torch.uint8)
    adv = torch.zeros(R, T, dtype=torch.float32)
    old = torch.zeros(R, T, dtype=torch.float32)
    lens = torch.zeros(R, dtype=torch.int32)
    for i, r in enumerate(rows):
        n = len(r["tokens"])
        lens[i] = n
        tok[i, :n] = torch.as_tensor(r["tokens"], dtype=torch.int32)
        mask[i, :n] = torch.as_tensor(r["mask"], dtype=torch.uint8)
        adv[i, :n] = torch.as_tensor(r["advantages"], dtype=torch.float32)
        old[i, :n] = torch.as_tensor(r["old_logprobs"], dtype=torch.float32)
    meta = {"loss": loss, "microbatches": json.dumps(microbatches)}
    if expect_step >= 0:
        meta["expect_step"] = str(expect_step)
    return st.encode({"tokens": tok, "mask": mask, "advantages": adv, "old_logprobs": old, "lengths": lens}, meta)


class Warm:
    """The warm-start fields of a warm_step payload's __metadata__."""

    def __init__(self, index, steps, lr, warmup_steps):
        self.index, self.steps, self.lr, self.warmup_steps = index, steps, lr, warmup_steps


def decode_warm(payload):
    """A warm_step payload: a train_step batch (loss 'sft') whose
    __metadata__ adds warm_index, warm_steps, lr and warmup_steps."""
    b = decode(payload)
    try:
        meta, _ = st.decode(payload, what="warm_step payload")
    except st.FormatError as e:
        raise BadRequest(str(e)) from None
    if b.loss != "sft":
        raise BadRequest(f"__metadata__ loss {b.loss!r}: warm_step takes 'sft'")

    def integer(key):
        s = meta.get(key)
        if s is None or not s.isdigit():
            raise BadRequest(f"__metadata__ {key} {s!r}: want a non-negative integer")
        return int(s)

    index, steps, warmup = integer("warm_index"), integer("warm_steps"), integer("warmup_steps")
    if index >= steps:
        raise BadRequest(f"__metadata__ warm_index {index} is not below warm_steps {steps}")
    try:
        lr = float(meta.get("lr", ""))
    except ValueError:
        raise BadRequest(f"__metadata__ lr {meta.get('lr')!r}: want a number") from None
    if not (lr > 0 and math.isfinite(lr)):
        raise BadRequest(f"__metadata__ lr {lr}: want a finite number > 0")
    return b, Warm(index, steps, lr, warmup)


def encode_warm(rows, index, steps, lr, warmup_steps, microbatches=None):
    """The inverse of decode_warm (tests)."""
    payload = encode("sft", rows, microbatches)
    meta, ts = st.decode(payload)
    meta.update(warm_index=str(index), warm_steps=str(steps), lr=repr(float(lr)), warmup_steps=str(warmup_steps))
    return st.encode(ts, meta)
