// Package model is longhaul's one transformer engine: the Llama / Qwen2 /
// Qwen3 decoder family in the Hugging Face layout (RMSNorm, RoPE with
// rope_scaling linear, llama3 and yarn, grouped-query attention, SwiGLU,
// Qwen3's per-head q/k RMSNorm, Qwen2's q/k/v biases, tied or untied
// embeddings). The built-in model is a configuration of it
// (DefaultConfig). Forward and backward are written out layer by layer
// (as in llm.c) over one flat parameter slab whose tensors keep the HF
// names and the [out, in] layout; a KV-cache sampler with prefix sharing,
// a prefix cache across calls and two lanes returns exact logprobs; the
// trainer runs the RL and SFT losses with AdamW. Weights stay in their
// file's dtype for generation (a BF16 checkpoint is mapped and read as
// BF16), F32 where training needs master weights.
//
// Every matrix product goes through model/kern, whose contract makes each
// output element one sequential chain over the reduction index; every
// other reduction here has a fixed order. Results therefore do not depend
// on GOMAXPROCS or on how a batch is composed, and the sampler's logprobs
// are the trainer's, bit for bit.
package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// Families (config.json model_type).
const (
	FamilyLlama = "llama"
	FamilyQwen2 = "qwen2"
	FamilyQwen3 = "qwen3"
)

// RopeScaling is config.json's rope_scaling.
type RopeScaling struct {
	Type           string  `json:"rope_type"`
	Factor         float64 `json:"factor"`
	LowFreqFactor  float64 `json:"low_freq_factor,omitempty"`  // llama3
	HighFreqFactor float64 `json:"high_freq_factor,omitempty"` // llama3
	OrigMaxPos     int     `json:"original_max_position_embeddings,omitempty"`
	BetaFast       float64 `json:"beta_fast,omitempty"`        // yarn
	BetaSlow       float64 `json:"beta_slow,omitempty"`        // yarn
	AttnFactor     float64 `json:"attention_factor,omitempty"` // yarn
	Mscale         float64 `json:"mscale,omitempty"`           // yarn
	MscaleAllDim   float64 `json:"mscale_all_dim,omitempty"`   // yarn
	Truncate       *bool   `json:"truncate,omitempty"`         // yarn
}

// DefaultConfig is the built-in model: a Llama configuration over the byte
// tokenizer's 264 ids, sized for the shipped short multi-turn task (0.44 M
// parameters, context 128; tens of thousands of tokens/s on 2 cores).
func DefaultConfig() Config {
	return Config{Family: FamilyLlama, Vocab: 264, Dim: 128, Hidden: 352, Layers: 2, Heads: 4, KVHeads: 4,
		HeadDim: 32, NormEps: 1e-5, RopeTheta: 10000, MaxPos: 128, Tied: true, InitStd: 0.02}
}

// Context is max_position_embeddings: the longest sequence the config
// allows (a model may accept less: Model.Context).
func (c Config) Context() int { return c.MaxPos }

// Config is the architecture, read from and written to config.json.
type Config struct {
	Family      string                     // model_type
	Vocab       int                        // vocab_size
	Dim         int                        // hidden_size
	Hidden      int                        // intermediate_size
	Layers      int                        // num_hidden_layers
	Heads       int                        // num_attention_heads
	KVHeads     int                        // num_key_value_heads
	HeadDim     int                        // head_dim (default Dim/Heads)
	NormEps     float64                    // rms_norm_eps
	RopeTheta   float64                    // rope_theta
	RopeScaling *RopeScaling               // rope_scaling; nil = none
	MaxPos      int                        // max_position_embeddings
	Tied        bool                       // tie_word_embeddings
	AttnBias    bool                       // attention_bias (llama, qwen3: q, k, v and o); qwen2 always has q, k, v biases
	BOS, EOS    *int                       // bos_token_id, eos_token_id (the first where config.json lists several)
	InitStd     float64                    // initializer_range
	SavedDType  string                     // torch_dtype written on save ("float32" or "bfloat16")
	idsRaw      map[string]json.RawMessage // bos/eos_token_id as config.json wrote them (a list stays a list)
	hasQKNorm   bool
	hasQKVBias  bool
	hasOBias    bool
}

// keyRule says what a config.json key may hold when it is not one the
// model reads: any value (metadata), or a required value.
type keyRule func(v json.RawMessage) error

func anyValue(json.RawMessage) error { return nil }

func mustEqual(want string) keyRule {
	return func(v json.RawMessage) error {
		if string(bytes.TrimSpace(v)) != want {
			return fmt.Errorf("is %s; only %s is supported", v, want)
		}
		return nil
	}
}

func zeroOrNull(v json.RawMessage) error {
	s := string(bytes.TrimSpace(v))
	if s == "null" || s == "0" || s == "0.0" {
		return nil
	}
	var f float64
	if json.Unmarshal(v, &f) == nil && f == 0 {
		return nil
	}
	return fmt.Errorf("is %s; only 0 is supported", s)
}

// passive keys: metadata, or settings with no effect on the math here.
var passive = map[string]keyRule{
	"architectures": anyValue, "transformers_version": anyValue, "torch_dtype": anyValue, "dtype": anyValue,
	"use_cache": anyValue, "_name_or_path": anyValue, "pad_token_id": anyValue, "initializer_range": anyValue,
	"pretraining_tp":    anyValue, // a tensor-parallel slicing of the same product
	"max_window_layers": anyValue, "sliding_window": anyValue, "layer_types": anyValue,
	"hidden_act": mustEqual(`"silu"`), "attention_dropout": zeroOrNull, "mlp_bias": mustEqual("false"),
	"use_sliding_window": mustEqual("false"), "use_mrope": mustEqual("false"),
	"bos_token_id": anyValue, "eos_token_id": anyValue,
}

// ParseConfig reads config.json. An unknown model_type, an unknown key, or
// a supported key with an unsupported value is an error naming the key.
func ParseConfig(data []byte) (Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("config.json: %w", err)
	}
	var c Config
	get := func(key string, dst any, required bool) error {
		v, ok := raw[key]
		if !ok || string(v) == "null" {
			if required {
				return fmt.Errorf("config.json: key %q is required", key)
			}
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("config.json: key %q: %w", key, err)
		}
		return nil
	}
	if err := get("model_type", &c.Family, true); err != nil {
		return c, err
	}
	switch c.Family {
	case FamilyLlama, FamilyQwen2, FamilyQwen3:
	default:
		return c, fmt.Errorf("config.json: key \"model_type\": unsupported model type %q (want llama, qwen2 or qwen3)", c.Family)
	}
	c.RopeTheta, c.NormEps, c.InitStd = 10000, 1e-6, 0.02
	c.Tied = c.Family != FamilyLlama
	read := map[string]struct {
		dst      any
		required bool
	}{
		"vocab_size": {&c.Vocab, true}, "hidden_size": {&c.Dim, true}, "intermediate_size": {&c.Hidden, true},
		"num_hidden_layers": {&c.Layers, true}, "num_attention_heads": {&c.Heads, true},
		"num_key_value_heads": {&c.KVHeads, false}, "head_dim": {&c.HeadDim, false},
		"rms_norm_eps": {&c.NormEps, false}, "rope_theta": {&c.RopeTheta, false},
		"max_position_embeddings": {&c.MaxPos, true}, "tie_word_embeddings": {&c.Tied, false},
		"attention_bias": {&c.AttnBias, false}, "rope_scaling": {&c.RopeScaling, false},
		"initializer_range": {&c.InitStd, false},
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "model_type" {
			continue
		}
		if r, ok := read[k]; ok {
			if err := get(k, r.dst, false); err != nil {
				return c, err
			}
			continue
		}
		rule, ok := passive[k]
		if !ok {
			return c, fmt.Errorf("config.json: unsupported key %q for model_type %q", k, c.Family)
		}
		if err := rule(raw[k]); err != nil {
			return c, fmt.Errorf("config.json: key %q %w", k, err)
		}
	}
	for k, r := range read {
		if r.required {
			if _, ok := raw[k]; !ok {
				return c, fmt.Errorf("config.json: key %q is required", k)
			}
		}
	}
	c.BOS, c.EOS = tokenID(raw["bos_token_id"]), tokenID(raw["eos_token_id"])
	c.idsRaw = map[string]json.RawMessage{}
	for _, k := range []string{"bos_token_id", "eos_token_id"} {
		if v, ok := raw[k]; ok && string(v) != "null" {
			c.idsRaw[k] = v
		}
	}
	if c.RopeScaling != nil {
		var rs map[string]json.RawMessage
		_ = json.Unmarshal(raw["rope_scaling"], &rs)
		if t, ok := rs["type"]; ok && c.RopeScaling.Type == "" {
			_ = json.Unmarshal(t, &c.RopeScaling.Type) // older configs say "type"
		}
		for k := range rs {
			switch k {
			case "type", "rope_type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
				"beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate":
			default:
				return c, fmt.Errorf("config.json: unsupported key \"rope_scaling.%s\"", k)
			}
		}
	}
	return c, c.Validate()
}

func tokenID(v json.RawMessage) *int {
	var id int
	if v == nil || json.Unmarshal(v, &id) != nil {
		var ids []int // a list: keep the first (generation_config.json keeps them all)
		if v == nil || json.Unmarshal(v, &ids) != nil || len(ids) == 0 {
			return nil
		}
		id = ids[0]
	}
	return &id
}

// fill sets the derived fields and defaults.
func (c *Config) fill() {
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if c.InitStd == 0 {
		c.InitStd = 0.02
	}
	c.hasQKNorm = c.Family == FamilyQwen3
	c.hasQKVBias = c.Family == FamilyQwen2 || c.AttnBias
	c.hasOBias = c.Family != FamilyQwen2 && c.AttnBias
}

// Validate fills defaults and reports whether the config is buildable.
func (c *Config) Validate() error {
	c.fill()
	var errs []error
	bad := func(key string, cond bool, format string, a ...any) {
		if cond {
			errs = append(errs, fmt.Errorf("config: key %q: "+format, append([]any{key}, a...)...))
		}
	}
	switch c.Family {
	case FamilyLlama, FamilyQwen2, FamilyQwen3:
	default:
		bad("model_type", true, "unsupported model type %q", c.Family)
	}
	bad("vocab_size", c.Vocab < 1, "must be ≥ 1, got %d", c.Vocab)
	bad("hidden_size", c.Dim < 1, "must be ≥ 1, got %d", c.Dim)
	bad("intermediate_size", c.Hidden < 1, "must be ≥ 1, got %d", c.Hidden)
	bad("num_hidden_layers", c.Layers < 1, "must be ≥ 1, got %d", c.Layers)
	bad("num_attention_heads", c.Heads < 1, "must be ≥ 1, got %d", c.Heads)
	bad("num_key_value_heads", c.KVHeads < 1 || (c.Heads > 0 && c.Heads%c.KVHeads != 0), "%d does not divide num_attention_heads %d", c.KVHeads, c.Heads)
	bad("head_dim", c.HeadDim < 2 || c.HeadDim%2 != 0, "must be even and ≥ 2, got %d", c.HeadDim)
	bad("rms_norm_eps", !(c.NormEps > 0), "must be > 0, got %v", c.NormEps)
	bad("rope_theta", !(c.RopeTheta > 1), "must be > 1, got %v", c.RopeTheta)
	bad("max_position_embeddings", c.MaxPos < 1, "must be ≥ 1, got %d", c.MaxPos)
	if c.Family == FamilyQwen2 && c.AttnBias {
		bad("attention_bias", true, "qwen2 has q/k/v biases by design; attention_bias is not a qwen2 key")
	}
	if rs := c.RopeScaling; rs != nil {
		switch rs.Type {
		case "default", "linear", "llama3", "yarn":
		default:
			bad("rope_scaling.rope_type", true, "unsupported rope scaling %q (supported: linear, llama3, yarn)", rs.Type)
		}
		if rs.Type != "default" {
			bad("rope_scaling.factor", !(rs.Factor > 0), "must be > 0, got %v", rs.Factor)
		}
		if rs.Type == "llama3" {
			bad("rope_scaling.low_freq_factor", !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > rs.LowFreqFactor),
				"need 0 < low_freq_factor < high_freq_factor, got %v, %v", rs.LowFreqFactor, rs.HighFreqFactor)
			bad("rope_scaling.original_max_position_embeddings", rs.OrigMaxPos < 1, "must be ≥ 1 for llama3, got %d", rs.OrigMaxPos)
		}
	}
	return errors.Join(errs...)
}

// MarshalJSON writes config.json in the HF form transformers and vLLM read.
func (c Config) MarshalJSON() ([]byte, error) {
	c.fill()
	arch := map[string]string{FamilyLlama: "LlamaForCausalLM", FamilyQwen2: "Qwen2ForCausalLM", FamilyQwen3: "Qwen3ForCausalLM"}[c.Family]
	dt := c.SavedDType
	if dt == "" {
		dt = "float32"
	}
	m := map[string]any{
		"architectures": []string{arch}, "model_type": c.Family, "vocab_size": c.Vocab, "hidden_size": c.Dim,
		"intermediate_size": c.Hidden, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim, "rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta,
		"max_position_embeddings": c.MaxPos, "tie_word_embeddings": c.Tied, "hidden_act": "silu",
		"initializer_range": c.InitStd, "torch_dtype": dt, "use_cache": true, "attention_dropout": 0.0,
	}
	if c.Family != FamilyQwen2 {
		m["attention_bias"] = c.AttnBias
	} else {
		m["use_sliding_window"] = false
	}
	if c.RopeScaling != nil {
		m["rope_scaling"] = c.RopeScaling
	}
	if c.BOS != nil {
		m["bos_token_id"] = *c.BOS
	}
	if c.EOS != nil {
		m["eos_token_id"] = *c.EOS
	}
	for k, v := range c.idsRaw { // a list of eos ids stays a list
		m[k] = v
	}
	return json.MarshalIndent(m, "", "  ")
}

// UnmarshalJSON reads config.json (ParseConfig).
func (c *Config) UnmarshalJSON(b []byte) error {
	p, err := ParseConfig(b)
	if err != nil {
		return err
	}
	*c = p
	return nil
}

// Equal reports whether two configs describe the same model (as their
// config.json forms).
func (c Config) Equal(o Config) bool {
	a, err1 := json.Marshal(c)
	b, err2 := json.Marshal(o)
	return err1 == nil && err2 == nil && bytes.Equal(a, b)
}

// NumParams is the number of parameters the config describes.
func (c Config) NumParams() int { return numParams(layout(c)) }

// F32Bytes is the size of the weights in float32.
func (c Config) F32Bytes() int64 { return 4 * int64(c.NumParams()) }
