"""The Llama / Qwen2 / Qwen3 decoder family, written out in torch so the
trainer runs where `transformers` is not installed (this repository's CI has
Debian's python3-torch and nothing else). Parameter names are the HF ones,
so an HF directory loads and exports without renaming.

Per layer: RMSNorm -> attention (GQA; q/k/v bias for Qwen2 or
attention_bias; per-head q/k RMSNorm for Qwen3; RoPE in HF's rotate-half
layout) -> residual -> RMSNorm -> SwiGLU -> residual. Then RMSNorm and the
LM head (tied to the embedding when tie_word_embeddings)."""

import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from . import safetensors_io as st

ARCHS = {"llama", "qwen2", "qwen3"}


class ConfigError(ValueError):
    """A config.json the built-in model cannot build; the message names the key."""


class Config:
    def __init__(self, raw, path="config.json"):
        self.raw = dict(raw)
        self.path = path

        def need(key, typ=int):
            if key not in raw:
                raise ConfigError(f"{path}: key {key!r} is required")
            v = raw[key]
            if typ is int and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise ConfigError(f"{path}: key {key!r} must be a positive integer, got {v!r}")
            if typ is float and (not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0):
                raise ConfigError(f"{path}: key {key!r} must be a positive number, got {v!r}")
            return v

        self.model_type = raw.get("model_type", "llama")
        if self.model_type not in ARCHS:
            raise ConfigError(f"{path}: key 'model_type' is {self.model_type!r}; the built-in model knows {sorted(ARCHS)}")
        self.vocab_size = need("vocab_size")
        self.hidden_size = need("hidden_size")
        self.intermediate_size = need("intermediate_size")
        self.num_hidden_layers = need("num_hidden_layers")
        self.num_attention_heads = need("num_attention_heads")
        self.num_key_value_heads = raw.get("num_key_value_heads") or self.num_attention_heads
        self.head_dim = raw.get("head_dim") or self.hidden_size // self.num_attention_heads
        self.rms_norm_eps = float(raw.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(raw.get("rope_theta", 10000.0))
        self.max_position_embeddings = raw.get("max_position_embeddings", 4096)
        self.tie_word_embeddings = bool(raw.get("tie_word_embeddings", False))
        self.qkv_bias = self.model_type == "qwen2" or bool(raw.get("attention_bias", False))
        self.o_bias = self.model_type != "qwen2" and bool(raw.get("attention_bias", False))
        self.mlp_bias = bool(raw.get("mlp_bias", False))
        self.qk_norm = self.model_type == "qwen3"
        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"{path}: key 'hidden_act' is {act!r}; the built-in model implements 'silu'")
        rs = raw.get("rope_scaling")
        if rs and rs.get("rope_type", rs.get("type")) not in (None, "default"):
            raise ConfigError(f"{path}: key 'rope_scaling' type {rs.get('rope_type', rs.get('type'))!r} is not implemented by the built-in model")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"{path}: num_attention_heads {self.num_attention_heads} is not a multiple of num_key_value_heads {self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ConfigError(f"{path}: head_dim {self.head_dim} must be even for RoPE")

    @classmethod
    def load(cls, d):
        p = os.path.join(d, "config.json")
        try:
            with open(p) as f:
                raw = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{p}: no config.json in the model directory") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}: line {e.lineno}: {e.msg}") from None
        return cls(raw, p)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, K, hd, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size
        self.H, self.K, self.hd = H, K, hd
        self.q_proj = nn.Linear(d, H * hd, bias=c.qkv_bias)
        self.k_proj = nn.Linear(d, K * hd, bias=c.qkv_bias)
        self.v_proj = nn.Linear(d, K * hd, bias=c.qkv_bias)
        self.o_proj = nn.Linear(H * hd, d, bias=c.o_bias)
        if c.qk_norm:
            self.q_norm = RMSNorm(hd, c.rms_norm_eps)
            self.k_norm = RMSNorm(hd, c.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hd)
        k = self.k_proj(x).view(B, T, self.K, self.hd)
        v = self.v_proj(x).view(B, T, self.K, self.hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # B, heads, T, hd
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.K != self.H:
            k = k.repeat_interleave(self.H // self.K, dim=1)
            v = v.repeat_interleave(self.H // self.K, dim=1)
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is not None and x.is_cuda:
            o = sdpa(q, k, v, is_causal=True)
        else:
            # Right padding only: causality keeps padding out of real positions.
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            s = s.masked_fill(causal, float("-inf"))
            o = torch.softmax(s.float(), dim=-1).to(v.dtype) @ v
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.H * self.hd))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, f = c.hidden_size, c.intermediate_size
        self.gate_proj = nn.Linear(d, f, bias=c.mlp_bias)
        self.up_proj = nn.Linear(d, f, bias=c.mlp_bias)
        self.down_proj = nn.Linear(f, d, bias=c.mlp_bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class CausalLM(nn.Module):
    """forward(tokens [B, T] int64) -> logits [B, T, V] (float32)."""

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = Body(c)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        hd = c.head_dim
        self.register_buffer("inv_freq", 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)), persistent=False)

    selects = True  # forward takes select= (the trainer's masked head)

    def forward(self, tokens, select=None):
        """select (bool [B, T]), when given, computes the head only at those
        positions: logits [N, V] in row-major order of select."""
        T = tokens.shape[1]
        pos = torch.arange(T, device=tokens.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq.float())
        emb = torch.cat((freqs, freqs), dim=-1)
        x = self.model.embed_tokens(tokens)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        if select is not None:
            x = x[select]
        return F.linear(x, w).float()


def init_weights(m, seed, std=0.02):
    """Deterministic init from seed: normal(0, std) for matrices, 1 for norm
    gains, 0 for biases (as HF's _init_weights does)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(m.named_parameters()):
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def read_weights(d):
    """The tensors of an HF directory: model.safetensors, or the shards named
    by model.safetensors.index.json."""
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return st.load_file(single)[1]
    idx = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(idx):
        raise ConfigError(f"{d}: neither model.safetensors nor model.safetensors.index.json")
    with open(idx) as f:
        wm = json.load(f).get("weight_map")
    if not isinstance(wm, dict):
        raise ConfigError(f"{idx}: key 'weight_map' must be an object")
    out = {}
    for shard in sorted(set(wm.values())):
        out.update(st.load_file(os.path.join(d, shard))[1])
    return out


def load_state(m, tensors, where):
    """Copies tensors into m by HF name; a missing, extra or misshapen tensor is an error."""
    want = dict(m.named_parameters())
    extra = sorted(set(tensors) - set(want) - ({"lm_head.weight"} if m.config.tie_word_embeddings else set()))
    missing = sorted(set(want) - set(tensors))
    if extra or missing:
        raise ConfigError(f"{where}: tensors do not match the config: missing {missing[:5]}, unexpected {extra[:5]}")
    with torch.no_grad():
        for name, p in want.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise ConfigError(f"{where}: tensor {name!r} has shape {list(t.shape)}, the config says {list(p.shape)}")
            p.copy_(t.to(p.dtype))


def load_builtin(d, dtype=torch.float32):
    c = Config.load(d)
    m = CausalLM(c).to(dtype)
    load_state(m, read_weights(d), d)
    return m


def save_hf(m, d, dtype=None):
    """Writes config.json + model.safetensors into existing directory d durably."""
    ts = {k: (v.to(dtype) if dtype else v) for k, v in m.named_parameters()}
    st.write_file_durable(os.path.join(d, "model.safetensors"), st.encode(ts, {"format": "pt"}))
    st.write_file_durable(os.path.join(d, "config.json"), (json.dumps(m.config.raw, indent=2, sort_keys=True) + "\n").encode())


def tiny_config(arch="qwen3", vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, inter=128, tie=True):
    c = {"model_type": arch, "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]],
         "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
         "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": hidden // heads,
         "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 2048,
         "tie_word_embeddings": tie, "hidden_act": "silu", "torch_dtype": "float32"}
    if arch == "qwen2":
        c.pop("head_dim")
    return c
