package model

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// TestSaveLoadRoundTrip: init → save → load gives identical tensors and
// config, single-file and sharded, for every family; the written names
// and shapes are the HF ones.
func TestSaveLoadRoundTrip(t *testing.T) {
	for name, cfg := range tinyConfigs() {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfg, 7, 1)
			for _, shard := range []int64{0, 3000} {
				dir := filepath.Join(t.TempDir(), "m")
				if err := m.SaveDir(dir, SaveOptions{MaxShardBytes: shard}); err != nil {
					t.Fatal(err)
				}
				back, err := LoadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				if back.Digest() != m.Digest() {
					t.Fatalf("shard %d: weights differ after the round trip", shard)
				}
				if !back.cfg.Equal(m.cfg) {
					t.Fatalf("config differs:\n%+v\n%+v", back.cfg, m.cfg)
				}
				if _, err := os.Stat(filepath.Join(dir, genFile)); err != nil {
					t.Fatal(err)
				}
				if shard > 0 {
					if _, err := os.Stat(filepath.Join(dir, indexFile)); err != nil {
						t.Fatalf("sharded save wrote no index: %v", err)
					}
				}
			}
			want := []string{"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight", "model.norm.weight"}
			for _, n := range want {
				if m.Tensor(n) == nil {
					t.Errorf("no tensor %q", n)
				}
			}
		})
	}
}

func TestHFShapes(t *testing.T) {
	m := testModel(t, tinyConfigs()["qwen3"], 1, 1)
	dir := t.TempDir()
	if err := m.SaveDir(dir, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	hdr := readHeader(t, filepath.Join(dir, weightFile))
	c := m.cfg
	for name, shape := range map[string][]int{
		"model.layers.0.self_attn.q_proj.weight": {c.Heads * c.HeadDim, c.Dim},
		"model.layers.0.self_attn.k_proj.weight": {c.KVHeads * c.HeadDim, c.Dim},
		"model.layers.0.self_attn.o_proj.weight": {c.Dim, c.Heads * c.HeadDim},
		"model.layers.0.self_attn.q_norm.weight": {c.HeadDim},
		"model.layers.0.mlp.down_proj.weight":    {c.Dim, c.Hidden},
		"model.layers.0.mlp.gate_proj.weight":    {c.Hidden, c.Dim},
	} {
		if !slices.Equal(hdr[name].Shape, shape) {
			t.Errorf("%s: shape %v, want %v ([out, in])", name, hdr[name].Shape, shape)
		}
	}
	if _, ok := hdr["lm_head.weight"]; ok {
		t.Error("tied model saved lm_head.weight")
	}
}

func readHeader(t *testing.T, path string) map[string]stTensor {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]stTensor{}
	for k, v := range raw {
		var st stTensor
		if k != "__metadata__" && json.Unmarshal(v, &st) == nil {
			out[k] = st
		}
	}
	return out
}

// TestBF16Export: a BF16 export loads back as each weight rounded to
// bfloat16 (nearest even), within 2⁻⁸ relative.
func TestBF16Export(t *testing.T) {
	m := testModel(t, tinyConfigs()["llama"], 2, 3)
	dir := t.TempDir()
	if err := m.SaveDir(dir, SaveOptions{DType: "BF16"}); err != nil {
		t.Fatal(err)
	}
	back, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.DType() != "BF16" || back.w != nil {
		t.Fatalf("a BF16 checkpoint loaded as %s (slab %v): its matrices should stay BF16, mapped", back.DType(), back.w != nil)
	}
	bv := values(back)
	for i, v := range m.w {
		got := bv[i]
		if math.Float32bits(got) != uint32(kern.ToBF16(v))<<16 {
			t.Fatalf("element %d: %v loaded as %v, want bf16 %v", i, v, got, math.Float32frombits(uint32(kern.ToBF16(v))<<16))
		}
		if math.Abs(float64(got-v)) > math.Abs(float64(v))/256 {
			t.Fatalf("element %d: %v -> %v beyond bf16 rounding", i, v, got)
		}
	}
	if hdr := readHeader(t, filepath.Join(dir, weightFile)); hdr["model.norm.weight"].DType != "BF16" {
		t.Fatalf("dtype %s", hdr["model.norm.weight"].DType)
	}
	if kern.ToBF16(1.00390625) != 0x3f80 || kern.ToBF16(1.01171875) != 0x3f82 { // ties to even
		t.Fatalf("bf16 rounding: %x %x", kern.ToBF16(1.00390625), kern.ToBF16(1.01171875))
	}
}

// TestF16Load: F16 tensors widen exactly.
func TestF16Load(t *testing.T) {
	m := testModel(t, tinyConfigs()["qwen2"], 2, 1)
	for i := range m.w {
		m.w[i] = float32(int(m.w[i]*64)%128) / 64 // exact in f16
	}
	dir := t.TempDir()
	if err := m.SaveDir(dir, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	// rewrite model.safetensors as F16
	path := filepath.Join(dir, weightFile)
	hdr := readHeader(t, path)
	var h strings.Builder
	h.WriteString("{")
	var data []byte
	for i, s := range m.specs {
		shape, _ := json.Marshal(hdr[s.name].Shape)
		if i > 0 {
			h.WriteString(",")
		}
		fmt.Fprintf(&h, `%q:{"dtype":"F16","shape":%s,"data_offsets":[%d,%d]}`, s.name, shape, len(data), len(data)+2*s.size)
		for _, v := range m.w[s.off : s.off+s.size] {
			data = binary.LittleEndian.AppendUint16(data, f32ToF16Exact(v))
		}
	}
	h.WriteString("}")
	file := binary.LittleEndian.AppendUint64(nil, uint64(h.Len()))
	file = append(append(file, h.String()...), data...)
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.Digest() != m.Digest() {
		t.Fatal("F16 load differs")
	}
	for _, c := range []struct {
		h uint16
		f float32
	}{{0x3c00, 1}, {0xc000, -2}, {0x0001, 5.960464477539063e-08}, {0x7bff, 65504}, {0x8000, float32(math.Copysign(0, -1))}} {
		if got := f16ToF32(c.h); math.Float32bits(got) != math.Float32bits(c.f) {
			t.Errorf("f16 %#x -> %v, want %v", c.h, got, c.f)
		}
	}
}

// f32ToF16Exact encodes a float32 that f16 represents exactly (normal or 0).
func f32ToF16Exact(v float32) uint16 {
	u := math.Float32bits(v)
	sign := uint16(u>>16) & 0x8000
	if u&0x7fffffff == 0 {
		return sign
	}
	exp := int(u>>23&0xff) - 127 + 15
	return sign | uint16(exp)<<10 | uint16(u>>13&0x3ff)
}

// TestLoadErrors: bad directories are refused with an error naming the
// key, tensor or file.
func TestLoadErrors(t *testing.T) {
	m := testModel(t, tinyConfigs()["qwen3"], 1, 1)
	good := t.TempDir()
	if err := m.SaveDir(good, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	cfgJSON, _ := os.ReadFile(filepath.Join(good, configFile))
	weights, _ := os.ReadFile(filepath.Join(good, weightFile))
	editCfg := func(f func(map[string]any)) []byte {
		var c map[string]any
		_ = json.Unmarshal(cfgJSON, &c)
		f(c)
		b, _ := json.Marshal(c)
		return b
	}
	hl := binary.LittleEndian.Uint64(weights)
	header := string(weights[8 : 8+hl])
	editHeader := func(old, new string) []byte {
		h := strings.Replace(header, old, new, 1)
		for len(h) < int(hl) {
			h += " "
		}
		return append(append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...), weights[8+hl:]...)
	}
	cases := []struct {
		name    string
		cfg     []byte
		weights []byte
		want    string
	}{
		{"model type", editCfg(func(c map[string]any) { c["model_type"] = "gpt2" }), nil, `"model_type"`},
		{"unknown key", editCfg(func(c map[string]any) { c["moe_experts"] = 8 }), nil, `"moe_experts"`},
		{"act", editCfg(func(c map[string]any) { c["hidden_act"] = "gelu" }), nil, `"hidden_act"`},
		{"sliding", editCfg(func(c map[string]any) { c["use_sliding_window"] = true }), nil, `"use_sliding_window"`},
		{"rope type", editCfg(func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "dynamic", "factor": 2.0} }), nil, `rope_scaling.rope_type`},
		{"rope key", editCfg(func(c map[string]any) {
			c["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": 2.0, "foo": 1}
		}), nil, `rope_scaling.foo`},
		{"kv heads", editCfg(func(c map[string]any) { c["num_key_value_heads"] = 3 }), nil, `"num_key_value_heads"`},
		{"missing key", editCfg(func(c map[string]any) { delete(c, "hidden_size") }), nil, `"hidden_size"`},
		{"shape", editCfg(func(c map[string]any) { c["intermediate_size"] = 25 }), nil, `has shape`},
		{"extra tensor", editCfg(func(c map[string]any) { c["tie_word_embeddings"] = false }), nil, `"lm_head.weight" missing`},
		{"dtype", nil, editHeader(`"model.norm.weight":{"dtype":"F32"`, `"model.norm.weight":{"dtype":"I32"`), `dtype I32`},
		{"unknown tensor", nil, editHeader(`"model.norm.weight"`, `"model.nrm.weight"`), `"model.nrm.weight"`},
		{"truncated", nil, weights[:len(weights)-4], `bad data offsets`},
		{"short", nil, weights[:5], `header length`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cb, wb := cfgJSON, weights
			if c.cfg != nil {
				cb = c.cfg
			}
			if c.weights != nil {
				wb = c.weights
			}
			os.WriteFile(filepath.Join(dir, configFile), cb, 0o644)
			os.WriteFile(filepath.Join(dir, weightFile), wb, 0o644)
			_, err := LoadDir(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %s", err, c.want)
			}
		})
	}
}

// values is every weight of m in slab order, as float32.
func values(m *Model) []float32 {
	var out []float32
	m.eachValue(func(v []float32) { out = append(out, v...) })
	return out
}
