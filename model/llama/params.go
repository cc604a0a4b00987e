package llama

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

type layerParams struct {
	ln1, ln2          []float32 // (d)
	wq, wk, wv, wo    []float32 // (H·hd, d), (K·hd, d), (K·hd, d), (d, H·hd)
	bq, bk, bv, bo    []float32 // biases or nil
	qnorm, knorm      []float32 // (hd) qwen3, or nil
	wgate, wup, wdown []float32 // (F, d), (F, d), (d, F)
}

// params are named views into a slab laid out by layout.
type params struct {
	embed  []float32 // (V, d)
	layers []layerParams
	norm   []float32 // (d)
	head   []float32 // (V, d): lm_head, or embed when tied
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

// bind returns views of slab w by name.
func bind(w []float32, c Config, specs []tensorSpec) params {
	c.fill()
	by := make(map[string][]float32, len(specs))
	for _, s := range specs {
		by[s.name] = w[s.off : s.off+s.size : s.off+s.size]
	}
	p := params{embed: by["model.embed_tokens.weight"], norm: by["model.norm.weight"], layers: make([]layerParams, c.Layers)}
	p.head = by["lm_head.weight"]
	if c.Tied {
		p.head = p.embed
	}
	for l := range p.layers {
		g := func(s string) []float32 { return by[fmt.Sprintf("model.layers.%d.%s", l, s)] }
		p.layers[l] = layerParams{
			ln1: g("input_layernorm.weight"), ln2: g("post_attention_layernorm.weight"),
			wq: g("self_attn.q_proj.weight"), wk: g("self_attn.k_proj.weight"), wv: g("self_attn.v_proj.weight"),
			wo: g("self_attn.o_proj.weight"), bq: g("self_attn.q_proj.bias"), bk: g("self_attn.k_proj.bias"),
			bv: g("self_attn.v_proj.bias"), bo: g("self_attn.o_proj.bias"),
			qnorm: g("self_attn.q_norm.weight"), knorm: g("self_attn.k_norm.weight"),
			wgate: g("mlp.gate_proj.weight"), wup: g("mlp.up_proj.weight"), wdown: g("mlp.down_proj.weight"),
		}
	}
	return p
}
