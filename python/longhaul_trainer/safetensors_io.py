"""safetensors read/write with the standard library and torch.

Layout (https://github.com/huggingface/safetensors): an 8-byte little-endian
header length N, N bytes of JSON header (dtype, shape, data_offsets per
tensor, optional "__metadata__" of string values) padded with spaces to a
multiple of 8, then the tensor bytes back to back. Decoding is strict:
offsets must tile the data section, because a file that does not is corrupt
and training on it would be silent damage."""

import json
import os
import struct

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}
MAX_HEADER = 100 << 20


class FormatError(ValueError):
    """A safetensors payload that breaks the format; the message names the tensor."""


def _parse_header(raw, data_len, what):
    """Checks a header (the JSON bytes) against a data section of data_len
    bytes. Returns (metadata, entries) with entries {name: (dtype name,
    shape, start, end)} relative to the data section, which they tile."""
    try:
        header = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{what}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{what}: header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise FormatError(f"{what}: __metadata__ must map strings to strings")
    entries = {}
    for name, e in header.items():
        if not isinstance(e, dict):
            raise FormatError(f"{what}: tensor {name!r}: entry is not an object")
        dt = DTYPES.get(e.get("dtype"))
        if dt is None:
            raise FormatError(f"{what}: tensor {name!r}: dtype {e.get('dtype')!r} not supported")
        shape, offs = e.get("shape"), e.get("data_offsets")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise FormatError(f"{what}: tensor {name!r}: bad shape {shape!r}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)):
            raise FormatError(f"{what}: tensor {name!r}: bad data_offsets {offs!r}")
        count = 1
        for d in shape:
            count *= d
        size = count * torch.empty(0, dtype=dt).element_size()
        s, en = offs
        if s < 0 or en < s or en > data_len or en - s != size:
            raise FormatError(f"{what}: tensor {name!r}: offsets {offs} do not hold {shape} {e['dtype']} in {data_len} bytes")
        entries[name] = (e["dtype"], list(shape), s, en)
    at = 0
    for s, en in sorted((s, en) for _, _, s, en in entries.values()):
        if s != at:
            raise FormatError(f"{what}: data section has a gap or overlap at byte {at}")
        at = en
    if at != data_len:
        raise FormatError(f"{what}: {data_len - at} trailing data bytes")
    return meta, entries


def _tensor(raw, dtype_name, shape):
    dt = DTYPES[dtype_name]
    t = torch.frombuffer(raw, dtype=dt) if len(raw) else torch.empty(0, dtype=dt)
    return t.reshape(shape)


def decode(buf, what="safetensors"):
    """Returns (metadata dict, {name: tensor}); tensors are copies owning their memory."""
    mv = memoryview(buf)
    if len(mv) < 8:
        raise FormatError(f"{what}: shorter than its 8-byte header length")
    (n,) = struct.unpack_from("<Q", mv, 0)
    if n > MAX_HEADER or n > len(mv) - 8:
        raise FormatError(f"{what}: header length {n} does not fit {len(mv)} bytes")
    data = mv[8 + n:]
    meta, entries = _parse_header(mv[8:8 + n], len(data), what)
    return meta, {name: _tensor(bytearray(data[s:en]), dt, shape) for name, (dt, shape, s, en) in entries.items()}


def read_header(path):
    """Reads only the header of the safetensors file at path, as strictly as
    decode: returns (metadata, entries, data_start) with entries as
    _parse_header's; the data section must end where the file does."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise FormatError(f"{path}: shorter than its 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or n > size - 8:
            raise FormatError(f"{path}: header length {n} does not fit {size} bytes")
        raw = f.read(n)
    if len(raw) != n:
        raise FormatError(f"{path}: file shrank while its header was read")
    meta, entries = _parse_header(raw, size - 8 - n, path)
    return meta, entries, 8 + n


def iter_tensors(path, entries, data_start, names=None):
    """Yields (name, tensor, raw bytes) for the tensors of one file, read one
    at a time in file order (names: only these), so a reader holds one
    tensor, not the file. entries and data_start come from read_header."""
    want = sorted((s, name) for name, (_, _, s, _) in entries.items() if names is None or name in names)
    with open(path, "rb") as f:
        for s, name in want:
            dt, shape, _, en = entries[name]
            f.seek(data_start + s)
            raw = bytearray(en - s)
            if f.readinto(raw) != len(raw):
                raise FormatError(f"{path}: tensor {name!r}: file ends before its data")
            yield name, _tensor(raw, dt, shape), raw


def _bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: same bits as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def encode(tensors, metadata=None):
    """tensors: {name: tensor} (written in sorted name order, as the Rust library does)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in NAMES:
            raise FormatError(f"tensor {name!r}: dtype {t.dtype} has no safetensors name")
        b = _bytes(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    return b"".join([struct.pack("<Q", len(hj)), hj] + blobs)


def write_file_durable(path, data):
    """Writes data to path via a temporary file, fsync and rename, then fsyncs
    the directory, so a crash leaves the old file or the new one, never half."""
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(d)


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_file(path):
    with open(path, "rb") as f:
        return decode(f.read(), what=path)
