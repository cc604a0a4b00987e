"""An exported Hugging Face checkpoint directory, opened and checked before a
single tensor reaches the served model.

The directory is what longhaul's runner passes as weights_path for
`generator.api: vllm`: RUN_DIR/weights, holding model.safetensors (or
shards named by model.safetensors.index.json, as HF writes them),
config.json and trainer.json ({"version": v}, written by the runner beside
every export). Headers are read strictly (longhaul_trainer.safetensors_io);
tensors are then streamed one at a time, so a reload holds one tensor in
host memory, not the checkpoint."""

import hashlib
import json
import os

from longhaul_trainer import safetensors_io as st

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
META = "trainer.json"
FLOATS = ("F64", "F32", "F16", "BF16")
# Tensors some HF checkpoints carry that no model loads (vLLM's Llama and
# Qwen load_weights drop them too); they take no part in the name checks.
IGNORED = ("rotary_emb.inv_freq",)


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and tensor."""


class Tensor:
    __slots__ = ("name", "file", "dtype", "shape", "start", "end")

    def __init__(self, name, file, dtype, shape, start, end):
        self.name, self.file, self.dtype, self.shape, self.start, self.end = name, file, dtype, shape, start, end


class Checkpoint:
    """path: the directory; files: {shard path: data start}; tensors:
    {name: Tensor}; version: trainer.json's version or None."""

    def __init__(self, path, files, tensors, version):
        self.path, self.files, self.tensors, self.version = path, files, tensors, version

    def nbytes(self):
        return sum(t.end - t.start for t in self.tensors.values())


def open_checkpoint(weights_path, floats_only=True):
    """Opens weights_path (a directory, or one .safetensors file in it) and
    checks every header: the shards the index names exist and hold exactly
    the tensors it maps to them, offsets tile each file, and (floats_only)
    every tensor is a floating-point one."""
    if not isinstance(weights_path, str) or not weights_path:
        raise CheckpointError(f"weights_path must be a non-empty string, got {weights_path!r}")
    path = os.path.abspath(weights_path)
    if not os.path.exists(path):
        raise CheckpointError(f"weights_path {path} does not exist")
    if os.path.isfile(path):
        if not path.endswith(".safetensors"):
            raise CheckpointError(f"weights_path {path} is a file but not a .safetensors one")
        d, shards = os.path.dirname(path), {os.path.basename(path): None}
    elif os.path.isdir(path):
        d, shards = path, _shards(path)
    else:
        raise CheckpointError(f"weights_path {path} is neither a directory nor a regular file")
    files, tensors = {}, {}
    for shard, listed in sorted(shards.items()):
        f = os.path.join(d, shard)
        if not os.path.isfile(f):
            raise CheckpointError(f"{os.path.join(d, INDEX)}: shard {shard} is missing from {d}")
        try:
            _, entries, start = st.read_header(f)
        except (OSError, st.FormatError) as e:
            raise CheckpointError(f"{f}: not a valid safetensors file: {e}") from None
        files[f] = start
        for name, (dt, shape, s, en) in entries.items():
            if listed is not None and name not in listed:
                raise CheckpointError(f"{f}: tensor {name!r} is not mapped to {shard} by {INDEX}")
            if floats_only and dt not in FLOATS:
                raise CheckpointError(f"{f}: tensor {name!r} has dtype {dt}; model weights must be one of {', '.join(FLOATS)}")
            tensors[name] = Tensor(name, f, dt, shape, s, en)
        for name in sorted(listed or ()):
            if name not in entries:
                raise CheckpointError(f"{os.path.join(d, INDEX)}: tensor {name!r} is mapped to {shard}, which does not hold it")
    return Checkpoint(d, files, tensors, _version(d))


def _shards(d):
    """{shard file name: names the index maps to it (None: no index)}."""
    idx = os.path.join(d, INDEX)
    if not os.path.exists(idx):
        if os.path.isfile(os.path.join(d, SINGLE)):
            return {SINGLE: None}
        raise CheckpointError(f"{d}: no {SINGLE} and no {INDEX} (holds: {', '.join(sorted(os.listdir(d))[:10]) or 'nothing'})")
    try:
        with open(idx, encoding="utf-8") as f:
            wm = json.load(f).get("weight_map")
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{idx}: line {e.lineno}: {e.msg}") from None
    except (OSError, UnicodeDecodeError, AttributeError) as e:
        raise CheckpointError(f"{idx}: cannot read it as a JSON object: {e}") from None
    if not isinstance(wm, dict) or not wm:
        raise CheckpointError(f"{idx}: key 'weight_map' must be a non-empty object of tensor name to shard file")
    out = {}
    for name, shard in wm.items():
        if not isinstance(shard, str) or os.path.basename(shard) != shard or shard in ("", ".", ".."):
            raise CheckpointError(f"{idx}: weight_map[{name!r}] must name a file in {d}, got {shard!r}")
        out.setdefault(shard, set()).add(name)
    return out


def _version(d):
    """trainer.json's version (the runner writes {"version": v} beside an
    export), or None without one."""
    p = os.path.join(d, META)
    if not os.path.exists(p):
        return None
    try:
        with open(p, encoding="utf-8") as f:
            v = json.load(f).get("version")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
        raise CheckpointError(f"{p}: not a JSON object: {e}") from None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise CheckpointError(f"{p}: key 'version' must be an integer >= 0, got {v!r}")
    return v


def reference(model_dir):
    """The layout the served model was started from, ({name: shape}, tied),
    when model_dir is a local checkpoint directory; None otherwise (a hub
    name: the model's own load_weights is then the only name check)."""
    if not isinstance(model_dir, str) or not os.path.isdir(model_dir):
        return None
    if not any(os.path.exists(os.path.join(model_dir, f)) for f in (INDEX, SINGLE)):
        return None
    ck = open_checkpoint(model_dir, floats_only=False)
    tied = False
    cfg = os.path.join(model_dir, "config.json")
    if os.path.exists(cfg):
        try:
            with open(cfg, encoding="utf-8") as f:
                tied = bool(json.load(f).get("tie_word_embeddings", False))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
            raise CheckpointError(f"{cfg}: not a JSON object: {e}") from None
    return {n: list(t.shape) for n, t in ck.tensors.items()}, tied


def check_against(ck, ref):
    """The checkpoint must hold exactly the served model's tensors, shape for
    shape (dtypes may differ: loaders convert floats to the served dtype).
    With tied embeddings lm_head.weight is ignored on both sides, since the
    model takes its head from the embedding."""
    shapes, tied = ref

    def keep(n):
        return not any(s in n for s in IGNORED) and not (tied and n == "lm_head.weight")
    want = {n: s for n, s in shapes.items() if keep(n)}
    got = {n: t for n, t in ck.tensors.items() if keep(n)}
    missing = sorted(set(want) - set(got))
    if missing:
        raise CheckpointError(f"{ck.path}: {len(missing)} tensor(s) of the served model are missing, first {missing[:3]}")
    extra = sorted(set(got) - set(want))
    if extra:
        t = got[extra[0]]
        raise CheckpointError(f"{t.file}: tensor {t.name!r} is not one the served model takes ({len(extra)} such, first {extra[:3]})")
    for n in sorted(want):
        if list(got[n].shape) != list(want[n]):
            raise CheckpointError(f"{got[n].file}: tensor {n!r} has shape {got[n].shape}, the served model's is {want[n]}")


class Digest:
    """A digest of a checkpoint's contents, independent of how it is sharded
    and of the order tensors are read in: SHA-256 over the sorted lines
    "name dtype shape sha256(bytes)"."""

    def __init__(self):
        self.lines = {}

    def add(self, name, dtype, shape, raw):
        self.lines[name] = f"{name}\t{dtype}\t{list(shape)}\t{hashlib.sha256(raw).hexdigest()}\n"

    def hexdigest(self):
        h = hashlib.sha256()
        for name in sorted(self.lines):
            h.update(self.lines[name].encode())
        return "sha256:" + h.hexdigest()


def stream(ck, digest=None, on_tensor=None):
    """Yields (name, tensor) for every tensor, file by file in data order.
    on_tensor(name, file) is told each name before it is yielded, so an
    error in the consumer can name the tensor it failed on."""
    for f, start in sorted(ck.files.items()):
        entries = {t.name: (t.dtype, t.shape, t.start, t.end) for t in ck.tensors.values() if t.file == f}
        try:
            for name, tensor, raw in st.iter_tensors(f, entries, start):
                if digest is not None:
                    digest.add(name, entries[name][0], entries[name][1], raw)
                if on_tensor is not None:
                    on_tensor(name, f)
                yield name, tensor
        except (OSError, st.FormatError) as e:
            raise CheckpointError(f"{f}: reading tensors: {e}") from None


def digest_of(weights_path):
    """The Digest hex of a checkpoint directory, read as a reload reads it."""
    d = Digest()
    for _ in stream(open_checkpoint(weights_path), d):
        pass
    return d.hexdigest()
