"""The vLLM worker extension longhaul's `generator.api: vllm` calls.

vLLM mixes the class named by `--worker-extension-cls` into its Worker
class (WorkerWrapperBase.init_worker appends it to the Worker's bases), so
its methods run in every worker process with the worker as self and are
reachable through collective_rpc; with VLLM_SERVER_DEV_MODE=1 the HTTP route
`POST /collective_rpc {method, args, kwargs}` calls them on every worker and
answers {"results": [one per worker]}. vLLM refuses an extension with any
attribute the Worker already has (an assertion at start-up), and its Worker
has had a reload_weights of its own since about v0.11, so the method here
is longhaul_reload_weights (`generator.reload_method:
longhaul_reload_weights`), and every helper is a module function rather
than a method.

What it uses of the worker: self.model_runner.model (the served nn.Module,
whose load_weights takes an iterable of (HF name, tensor) and maps names
onto vLLM's fused parameters: q/k/v into qkv_proj, gate/up into
gate_up_proj), self.model_config (.model, the directory the server was
started from; .quantization) and, when present, self.vllm_config for the
config context vLLM's loaders may read."""

import contextlib
import time

import torch

from . import checkpoint as ckpt

ATTR = "_longhaul_state"  # set on the worker instance at the first call


class LonghaulWorkerExtension:
    """Mixed into vLLM's Worker by --worker-extension-cls
    longhaul_vllm.worker.LonghaulWorkerExtension."""

    def longhaul_reload_weights(self, weights_path):
        """Loads the HF safetensors checkpoint at weights_path (a directory
        with model.safetensors or model.safetensors.index.json and its
        shards) into the served model in place, after checking every
        header against the layout the server was started from. Returns
        {weights_path, version, tensors, bytes, digest, seconds}: version is
        trainer.json's beside the weights (None without one), digest the
        checkpoint's content digest (checkpoint.Digest). Raises
        CheckpointError naming the file and tensor; a failure before the
        first tensor is loaded leaves the served weights as they were."""
        return _reload(self, weights_path)

    def longhaul_weight_info(self):
        """What the last successful longhaul_reload_weights loaded (its
        answer), or {"loaded": False} before one."""
        st = _state(self)
        return dict(st["last"]) if st["last"] else {"loaded": False}


def _state(worker):
    st = worker.__dict__.get(ATTR)
    if st is None:
        st = {"reference": None, "reference_read": False, "last": None}
        worker.__dict__[ATTR] = st
    return st


def _model(worker):
    """The served nn.Module: get_model() where the runner has it (vLLM's
    unwraps a CUDA-graph wrapper there), else model_runner.model."""
    mr = worker.model_runner
    m = mr.get_model() if hasattr(mr, "get_model") else getattr(mr, "model", None)
    if m is None:
        raise RuntimeError("longhaul_reload_weights: the worker has no model loaded yet")
    return m


def _config_context(worker):
    """vLLM's weight loaders may read the current vLLM config (vLLM wraps its
    own reloads in set_current_vllm_config); a stand-in worker has none."""
    cfg = getattr(worker, "vllm_config", None)
    if cfg is None:
        return contextlib.nullcontext()
    try:
        from vllm.config import set_current_vllm_config
    except ImportError:
        return contextlib.nullcontext()
    return set_current_vllm_config(cfg)


def _reload(worker, weights_path):
    t0 = time.monotonic()
    mc = worker.model_config
    quant = getattr(mc, "quantization", None)
    if quant:
        # load_weights writes checkpoint-format tensors; a quantized model's
        # parameters are in kernel format after loading and would need
        # vLLM's own layerwise reload (its reload_weights) instead.
        raise ckpt.CheckpointError(f"the served model is quantized ({quant}); longhaul_reload_weights loads unquantized weights only")
    st = _state(worker)
    if not st["reference_read"]:
        # The layout the server was started from, read once: vLLM's own
        # reload_weights(weights_path) repoints model_config.model.
        st["reference"] = ckpt.reference(getattr(mc, "model", None))
        st["reference_read"] = True
    ck = ckpt.open_checkpoint(weights_path)
    if st["reference"] is not None:
        ckpt.check_against(ck, st["reference"])
    model = _model(worker)
    digest = ckpt.Digest()
    at = {"name": None, "file": None}

    def seen(name, f):
        at["name"], at["file"] = name, f
    try:
        with torch.no_grad(), _config_context(worker):
            loaded = model.load_weights(weights=ckpt.stream(ck, digest, seen))
    except ckpt.CheckpointError:
        raise
    except Exception as e:
        where = f"{at['file']}: tensor {at['name']!r}" if at["name"] else ck.path
        raise ckpt.CheckpointError(f"{where}: the model's load_weights refused it ({type(e).__name__}: {e}); "
                                   "the served weights are now in doubt until a reload succeeds") from e
    if len(digest.lines) != len(ck.tensors):
        raise ckpt.CheckpointError(f"{ck.path}: the model's load_weights stopped after {len(digest.lines)} of {len(ck.tensors)} "
                                   "tensors; the served weights are now in doubt until a reload succeeds")
    if loaded is not None:
        # vLLM's load_weights returns the parameter names it wrote.
        missed = sorted(n for n, _ in model.named_parameters() if n not in loaded)
        if missed:
            raise ckpt.CheckpointError(f"{ck.path}: {len(missed)} parameter(s) of the served model were not written, first {missed[:3]}; "
                                       "the served weights are now in doubt until a reload succeeds")
    out = {"loaded": True, "weights_path": ck.path, "version": ck.version, "tensors": len(ck.tensors),
           "bytes": ck.nbytes(), "digest": digest.hexdigest(), "seconds": round(time.monotonic() - t0, 3)}
    st["last"] = out
    return dict(out)
