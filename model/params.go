package model

import "fmt"

// tensorSpec is one named tensor of the parameter slab, in HF names and
// shapes (linear weights [out, in]).
type tensorSpec struct {
	name  string
	shape []int
	off   int
	size  int
	decay bool // AdamW weight decay (matrices and embeddings, not norms or biases)
}

// mat is one weight matrix, [out, in] row-major: float32 in the slab, or
// bfloat16 bit patterns in a mapped checkpoint (generation reads them as
// they are; kern widens each value exactly where it is used).
type mat struct {
	f []float32
	h []uint16
}

// row returns row r (cols wide) of the matrix as float32 into dst.
func (w mat) row(dst []float32, r, cols int) {
	if w.f != nil {
		copy(dst[:cols], w.f[r*cols:(r+1)*cols])
		return
	}
	widenBF16(dst[:cols], w.h[r*cols:(r+1)*cols])
}

type layerParams struct {
	ln1, ln2          []float32 // (d)
	wq, wk, wv, wo    mat       // (H·hd, d), (K·hd, d), (K·hd, d), (d, H·hd)
	bq, bk, bv, bo    []float32 // biases or nil
	qnorm, knorm      []float32 // (hd) qwen3, or nil
	wgate, wup, wdown mat       // (F, d), (F, d), (d, F)
}

// params are named views of the weights, laid out by layout.
type params struct {
	embed  mat // (V, d)
	layers []layerParams
	norm   []float32 // (d)
	head   mat       // (V, d): lm_head, or embed when tied
}

func layout(c Config) []tensorSpec {
	c.fill()
	d, q, kv, f, V := c.Dim, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim, c.Hidden, c.Vocab
	var specs []tensorSpec
	off := 0
	add := func(name string, decay bool, shape ...int) {
		n := 1
		for _, s := range shape {
			n *= s
		}
		specs = append(specs, tensorSpec{name: name, shape: shape, off: off, size: n, decay: decay})
		off += n
	}
	add("model.embed_tokens.weight", true, V, d)
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", false, d)
		add(p+"self_attn.q_proj.weight", true, q, d)
		add(p+"self_attn.k_proj.weight", true, kv, d)
		add(p+"self_attn.v_proj.weight", true, kv, d)
		if c.hasQKVBias {
			add(p+"self_attn.q_proj.bias", false, q)
			add(p+"self_attn.k_proj.bias", false, kv)
			add(p+"self_attn.v_proj.bias", false, kv)
		}
		add(p+"self_attn.o_proj.weight", true, d, q)
		if c.hasOBias {
			add(p+"self_attn.o_proj.bias", false, d)
		}
		if c.hasQKNorm {
			add(p+"self_attn.q_norm.weight", false, c.HeadDim)
			add(p+"self_attn.k_norm.weight", false, c.HeadDim)
		}
		add(p+"post_attention_layernorm.weight", false, d)
		add(p+"mlp.gate_proj.weight", true, f, d)
		add(p+"mlp.up_proj.weight", true, f, d)
		add(p+"mlp.down_proj.weight", true, d, f)
	}
	add("model.norm.weight", false, d)
	if !c.Tied {
		add("lm_head.weight", true, V, d)
	}
	return specs
}

func numParams(specs []tensorSpec) int {
	if len(specs) == 0 {
		return 0
	}
	s := specs[len(specs)-1]
	return s.off + s.size
}

// bind returns views of the weights by name: tensor i is f[i] (float32)
// or, where f[i] is nil, h[i] (bfloat16; matrices only).
func bind(c Config, specs []tensorSpec, f [][]float32, h [][]uint16) params {
	c.fill()
	fs, hs := make(map[string][]float32, len(specs)), make(map[string][]uint16, len(specs))
	for i, s := range specs {
		if f[i] != nil {
			fs[s.name] = f[i]
		} else if h != nil {
			hs[s.name] = h[i]
		}
	}
	m := func(name string) mat { return mat{f: fs[name], h: hs[name]} }
	p := params{embed: m("model.embed_tokens.weight"), norm: fs["model.norm.weight"], layers: make([]layerParams, c.Layers)}
	p.head = m("lm_head.weight")
	if c.Tied {
		p.head = p.embed
	}
	for l := range p.layers {
		n := func(s string) string { return fmt.Sprintf("model.layers.%d.%s", l, s) }
		g := func(s string) []float32 { return fs[n(s)] }
		p.layers[l] = layerParams{
			ln1: g("input_layernorm.weight"), ln2: g("post_attention_layernorm.weight"),
			wq: m(n("self_attn.q_proj.weight")), wk: m(n("self_attn.k_proj.weight")), wv: m(n("self_attn.v_proj.weight")),
			wo: m(n("self_attn.o_proj.weight")), bq: g("self_attn.q_proj.bias"), bk: g("self_attn.k_proj.bias"),
			bv: g("self_attn.v_proj.bias"), bo: g("self_attn.o_proj.bias"),
			qnorm: g("self_attn.q_norm.weight"), knorm: g("self_attn.k_norm.weight"),
			wgate: m(n("mlp.gate_proj.weight")), wup: m(n("mlp.up_proj.weight")), wdown: m(n("mlp.down_proj.weight")),
		}
	}
	return p
}

// slabViews are the tensors' views of a slab laid out by specs.
func slabViews(w []float32, specs []tensorSpec) [][]float32 {
	out := make([][]float32, len(specs))
	for i, s := range specs {
		out[i] = w[s.off : s.off+s.size : s.off+s.size]
	}
	return out
}

// bindSlab binds every tensor to its view of the float32 slab w.
func bindSlab(w []float32, c Config, specs []tensorSpec) params {
	return bind(c, specs, slabViews(w, specs), nil)
}
