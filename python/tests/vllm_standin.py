"""A STAND-IN for vLLM's worker and model, for testing the longhaul_vllm
worker extension where vLLM is not installed (it needs a GPU build; this
repository's CI has Debian's CPU torch only). It is not vLLM.

What it copies from vLLM (vllm/model_executor/models/qwen2.py, llama.py,
qwen3.py; vllm/v1/worker/worker_base.py), so the extension meets what it
would meet in a vLLM worker:
- parameter layout: q/k/v fused into self_attn.qkv_proj (rows q, then k,
  then v) and gate/up into mlp.gate_up_proj (rows gate, then up); with tied
  embeddings lm_head is the embedding module itself, so named_parameters()
  lists no lm_head.weight;
- load_weights(weights): vLLM's stacked_params_mapping loop over HF names
  ("q_proj" -> ("qkv_proj", "q"), ..., "up_proj" -> ("gate_up_proj", 1)),
  rotary_emb.inv_freq skipped, lm_head.* skipped when tied (AutoWeightsLoader
  skip_prefixes), a name the model lacks is a KeyError, each parameter's
  weight_loader asserts the shard's shape and copies (converting dtype);
  returns the set of parameter names written;
- the worker: model_runner.model, model_config.model (the directory the
  server started from) and .quantization, and vLLM's injection of
  --worker-extension-cls into the Worker class (inject below).
Tensor parallelism is not modelled: the loaders take whole tensors, as
vLLM's do at TP=1."""

import math
import types

import torch
import torch.nn.functional as F
from torch import nn

from longhaul_trainer.model import rotate_half

STACKED = [("qkv_proj", "q_proj", "q"), ("qkv_proj", "k_proj", "k"), ("qkv_proj", "v_proj", "v"),
           ("gate_up_proj", "gate_proj", 0), ("gate_up_proj", "up_proj", 1)]


def default_weight_loader(param, w):
    assert param.shape == w.shape, f"Attempted to load weight ({tuple(w.shape)}) into parameter ({tuple(param.shape)})"
    param.data.copy_(w)


def _sharded_param(rows, cols, offsets):
    """A fused parameter whose weight_loader writes shard shard_id at the rows
    offsets[shard_id] = (start, size), as QKVParallelLinear and
    MergedColumnParallelLinear do."""
    p = nn.Parameter(torch.empty(rows, cols) if cols else torch.empty(rows), requires_grad=False)

    def loader(param, w, shard_id):
        start, size = offsets[shard_id]
        dst = param.data.narrow(0, start, size)
        assert dst.shape == w.shape, f"shard {shard_id}: {tuple(w.shape)} into {tuple(dst.shape)}"
        dst.copy_(w)
    p.weight_loader = loader
    return p


def _plain(*shape):
    p = nn.Parameter(torch.empty(*shape), requires_grad=False)
    p.weight_loader = default_weight_loader
    return p


class _Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, K, hd, d, f = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size, c.intermediate_size
        qkv = {"q": (0, H * hd), "k": (H * hd, K * hd), "v": ((H + K) * hd, K * hd)}
        self.self_attn = nn.Module()
        self.self_attn.qkv_proj = nn.Module()
        self.self_attn.qkv_proj.weight = _sharded_param((H + 2 * K) * hd, d, qkv)
        if c.qkv_bias:
            self.self_attn.qkv_proj.bias = _sharded_param((H + 2 * K) * hd, 0, qkv)
        self.self_attn.o_proj = nn.Module()
        self.self_attn.o_proj.weight = _plain(d, H * hd)
        if c.qk_norm:
            self.self_attn.q_norm, self.self_attn.k_norm = nn.Module(), nn.Module()
            self.self_attn.q_norm.weight, self.self_attn.k_norm.weight = _plain(hd), _plain(hd)
        self.mlp = nn.Module()
        self.mlp.gate_up_proj = nn.Module()
        self.mlp.gate_up_proj.weight = _sharded_param(2 * f, d, {0: (0, f), 1: (f, f)})
        self.mlp.down_proj = nn.Module()
        self.mlp.down_proj.weight = _plain(d, f)
        self.input_layernorm, self.post_attention_layernorm = nn.Module(), nn.Module()
        self.input_layernorm.weight, self.post_attention_layernorm.weight = _plain(d), _plain(d)


class VLLMStyleCausalLM(nn.Module):
    """Llama/Qwen2/Qwen3 (longhaul_trainer.model.Config) with vLLM's fused
    parameter layout; forward gives logits [B, T, V] in float32."""

    def __init__(self, c, stacked=STACKED):
        super().__init__()
        self.config, self.stacked = c, stacked
        self.model = nn.Module()
        self.model.embed_tokens = nn.Module()
        self.model.embed_tokens.weight = _plain(c.vocab_size, c.hidden_size)
        self.model.layers = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))
        self.model.norm = nn.Module()
        self.model.norm.weight = _plain(c.hidden_size)
        if c.tie_word_embeddings:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = nn.Module()
            self.lm_head.weight = _plain(c.vocab_size, c.hidden_size)
        hd = c.head_dim
        self.inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        with torch.no_grad():
            for p in self.parameters():
                p.fill_(0.5)  # anything but the checkpoint's values

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            if self.config.tie_word_embeddings and name.startswith("lm_head."):
                continue
            for param_name, weight_name, shard_id in self.stacked:
                if weight_name not in name:
                    continue
                name = name.replace(weight_name, param_name)
                param = params[name]
                param.weight_loader(param, w, shard_id)
                break
            else:
                param = params[name]
                param.weight_loader(param, w)
            loaded.add(name)
        return loaded

    def forward(self, tokens):
        c = self.config
        H, K, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        B, T = tokens.shape
        pos = torch.arange(T, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = F.embedding(tokens, self.model.embed_tokens.weight)
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        for layer in self.model.layers:
            a = layer.self_attn
            h = _rms(x, layer.input_layernorm.weight, c.rms_norm_eps)
            qkv = F.linear(h, a.qkv_proj.weight, getattr(a.qkv_proj, "bias", None))
            q, k, v = qkv.split([H * hd, K * hd, K * hd], dim=-1)
            q, k, v = q.view(B, T, H, hd), k.view(B, T, K, hd), v.view(B, T, K, hd)
            if c.qk_norm:
                q, k = _rms(q, a.q_norm.weight, c.rms_norm_eps), _rms(k, a.k_norm.weight, c.rms_norm_eps)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            o = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1) @ v
            x = x + F.linear(o.transpose(1, 2).reshape(B, T, H * hd), a.o_proj.weight)
            h = _rms(x, layer.post_attention_layernorm.weight, c.rms_norm_eps)
            g, u = F.linear(h, layer.mlp.gate_up_proj.weight).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, layer.mlp.down_proj.weight)
        x = _rms(x, self.model.norm.weight, c.rms_norm_eps)
        return F.linear(x, self.lm_head.weight).float()


def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


class StandInWorker:
    """What vLLM's Worker offers an extension that this one uses, plus the
    attributes of vLLM's Worker an extension must not redefine (vLLM
    asserts against any clash): reload_weights (Worker has had it since
    about v0.11), update_config, load_model, sleep, wake_up, ..."""

    def __init__(self, model, model_dir, quantization=None):
        self.model_runner = types.SimpleNamespace(model=model)
        self.model_config = types.SimpleNamespace(model=model_dir, quantization=quantization)
        self.device = torch.device("cpu")

    def reload_weights(self, *args, **kwargs):
        raise AssertionError("the stand-in's stock reload_weights must not be called by the extension")

    def update_config(self, overrides):
        pass

    def load_model(self):
        pass

    def sleep(self, level=1):
        pass

    def wake_up(self, tags=None):
        pass

    def execute_model(self, scheduler_output):
        pass

    def get_model(self):
        return self.model_runner.model


def inject(worker_class, extension_class):
    """vLLM's WorkerWrapperBase.init_worker injection, step for step: refuse
    any non-dunder attribute of the extension the worker class already
    has, then append the extension to the worker class's bases. Works on a
    fresh subclass so the stand-in class itself is left alone."""
    cls = type("Worker", (worker_class,), {})
    for attr in dir(extension_class):
        if attr.startswith("__"):
            continue
        assert not hasattr(cls, attr), (f"Worker class {cls} already has an attribute {attr}, which conflicts with "
                                         f"the worker extension class {extension_class}.")
    cls.__bases__ = cls.__bases__ + (extension_class,)
    return cls
