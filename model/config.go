// Package model is longhaul's embedded policy: a small decoder-only
// transformer written out layer by layer (forward and backward, as in
// llm.c), a KV-cache sampler that returns exact logprobs, AdamW, the
// RL and SFT losses, and safetensors I/O.
//
// Every matrix product goes through model/kern, whose contract makes each
// output element one sequential chain over the reduction index. Everything
// else here is scalar code with a fixed order, so results are bit-identical
// across runs, GOMAXPROCS values and batch compositions; in particular the
// sampler's logprobs equal the trainer's for the same tokens.
package model

import (
	"errors"
	"fmt"
)

// Config is the architecture. Its JSON form is the model's HF-style
// config.json (extra HF keys are added on save and ignored on load).
type Config struct {
	Vocab     int     `json:"vocab_size"`
	Dim       int     `json:"hidden_size"`
	Heads     int     `json:"num_attention_heads"`
	Layers    int     `json:"num_hidden_layers"`
	Hidden    int     `json:"intermediate_size"` // SwiGLU inner width
	Context   int     `json:"max_position_embeddings"`
	Positions string  `json:"position_embedding_type"` // "rope" or "learned"
	RopeTheta float64 `json:"rope_theta"`
	NormEps   float32 `json:"rms_norm_eps"`
}

// Position encodings.
const (
	PosRope    = "rope"
	PosLearned = "learned"
)

// DefaultConfig is sized for the shipped example task: short multi-turn
// episodes (≤128 tokens) over the byte tokenizer's 264 ids. It trains at
// tens of thousands of tokens/s on 2 cores.
func DefaultConfig() Config {
	return Config{
		Vocab:     264,
		Dim:       128,
		Heads:     4,
		Layers:    2,
		Hidden:    352, // ≈ 8/3·Dim, rounded to a multiple of 32 for the kernels
		Context:   128,
		Positions: PosRope,
		RopeTheta: 10000,
		NormEps:   1e-5,
	}
}

// HeadDim is Dim/Heads.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// Validate reports whether the config describes a buildable model.
func (c Config) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be > 0, got %d", name, v))
		}
	}
	pos("vocab_size", c.Vocab)
	pos("hidden_size", c.Dim)
	pos("num_attention_heads", c.Heads)
	pos("num_hidden_layers", c.Layers)
	pos("intermediate_size", c.Hidden)
	pos("max_position_embeddings", c.Context)
	if c.Heads > 0 && c.Dim%c.Heads != 0 {
		errs = append(errs, fmt.Errorf("hidden_size %d not divisible by num_attention_heads %d", c.Dim, c.Heads))
	}
	switch c.Positions {
	case PosRope:
		if c.Heads > 0 && c.Dim%c.Heads == 0 && c.HeadDim()%2 != 0 {
			errs = append(errs, fmt.Errorf("rope needs an even head dim, got %d", c.HeadDim()))
		}
		if !(c.RopeTheta > 1) {
			errs = append(errs, fmt.Errorf("rope_theta must be > 1, got %v", c.RopeTheta))
		}
	case PosLearned:
	default:
		errs = append(errs, fmt.Errorf("position_embedding_type must be %q or %q, got %q", PosRope, PosLearned, c.Positions))
	}
	if !(c.NormEps > 0) {
		errs = append(errs, fmt.Errorf("rms_norm_eps must be > 0, got %v", c.NormEps))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("model: invalid config: %w", err)
	}
	return nil
}

// tensorSpec is one parameter tensor in the flat slab.
type tensorSpec struct {
	name  string
	shape []int
	off   int
	size  int
	decay bool // weight decay applies (matrices and embeddings, not norm gains)
}

// layout is the size table: the order of tensors in the parameter slab, and
// so in every slab laid out like it (grads, AdamW moments, the digest).
// Linear weights are stored [in, out], so a layer is y = x·W.
func layout(c Config) []tensorSpec {
	d, f := c.Dim, c.Hidden
	var specs []tensorSpec
	add := func(name string, decay bool, shape ...int) {
		n := 1
		for _, s := range shape {
			n *= s
		}
		off := 0
		if len(specs) > 0 {
			last := specs[len(specs)-1]
			off = last.off + last.size
		}
		specs = append(specs, tensorSpec{name: name, shape: shape, off: off, size: n, decay: decay})
	}
	add("wte", true, c.Vocab, d)
	if c.Positions == PosLearned {
		add("wpe", true, c.Context, d)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("layers.%d.", l)
		add(p+"ln1.weight", false, d)
		add(p+"attn.qkv.weight", true, d, 3*d)
		add(p+"attn.proj.weight", true, d, d)
		add(p+"ln2.weight", false, d)
		add(p+"mlp.fc.weight", true, d, 2*f) // [gate | up]
		add(p+"mlp.proj.weight", true, f, d)
	}
	add("lnf.weight", false, d)
	return specs
}

func numParams(specs []tensorSpec) int {
	last := specs[len(specs)-1]
	return last.off + last.size
}

// layerParams are one block's tensors (sub-slices of a slab).
type layerParams struct {
	ln1  []float32 // (d)
	qkv  []float32 // (d, 3d): columns [q | k | v], head h at h*hs within each
	proj []float32 // (d, d)
	ln2  []float32 // (d)
	fc   []float32 // (d, 2F): columns [gate | up]
	fc2  []float32 // (F, d)
}

// params are named views into a slab laid out by layout.
type params struct {
	wte    []float32 // (V, d), also the output head (tied)
	wpe    []float32 // (ctx, d), learned positions only
	layers []layerParams
	lnf    []float32 // (d)
}

func bind(slab []float32, c Config, specs []tensorSpec) params {
	get := func(i int) []float32 {
		s := specs[i]
		return slab[s.off : s.off+s.size : s.off+s.size]
	}
	var p params
	i := 0
	p.wte = get(i)
	i++
	if c.Positions == PosLearned {
		p.wpe = get(i)
		i++
	}
	p.layers = make([]layerParams, c.Layers)
	for l := range p.layers {
		p.layers[l] = layerParams{ln1: get(i), qkv: get(i + 1), proj: get(i + 2), ln2: get(i + 3), fc: get(i + 4), fc2: get(i + 5)}
		i += 6
	}
	p.lnf = get(i)
	return p
}
