package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// InitOptions describe a randomly initialised model directory.
type InitOptions struct {
	Family                         string
	Layers, Hidden, Heads, KVHeads int
	HeadDim, Intermediate, Vocab   int     // 0: Hidden/Heads; ≈ 3·Hidden rounded up to 64; from the tokenizer
	MaxPos                         int     // 0: 4096
	RopeTheta                      float64 // 0: 1e6 (qwen) or 5e5 (llama)
	Untied                         bool    // untie lm_head from the embedding (llama defaults to untied)
	Seed                           uint64
	TokenizerDir                   string // copied beside the weights; sets vocab, bos and eos
	DType                          string // F32 (default) or BF16
}

// Init builds a model from o, initialised from o.Seed, and saves it as an
// HF directory at out (with the tokenizer files of o.TokenizerDir).
func Init(o InitOptions, out string) (*Model, error) {
	c := Config{Family: o.Family, Layers: o.Layers, Dim: o.Hidden, Heads: o.Heads, KVHeads: o.KVHeads,
		HeadDim: o.HeadDim, Hidden: o.Intermediate, Vocab: o.Vocab, MaxPos: o.MaxPos, RopeTheta: o.RopeTheta,
		NormEps: 1e-6, Tied: o.Family != FamilyLlama && !o.Untied, InitStd: 0.02}
	if c.Family == FamilyLlama {
		c.NormEps = 1e-5
	}
	if c.Hidden == 0 {
		c.Hidden = (3*o.Hidden + 63) / 64 * 64
	}
	if c.MaxPos == 0 {
		c.MaxPos = 4096
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = map[bool]float64{true: 500000, false: 1000000}[c.Family == FamilyLlama]
	}
	if o.TokenizerDir != "" {
		v, bos, eos, err := TokenizerInfo(o.TokenizerDir)
		if err != nil {
			return nil, err
		}
		if c.Vocab == 0 {
			c.Vocab = v
		} else if c.Vocab < v {
			return nil, fmt.Errorf("llama: init: vocab %d is smaller than the tokenizer's %d ids", c.Vocab, v)
		}
		c.BOS, c.EOS = bos, eos
	}
	if c.Vocab == 0 {
		return nil, errors.New("llama: init: no vocab size (give --vocab or --tokenizer)")
	}
	m, err := New(c, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("llama: init: %w", err)
	}
	if err := m.SaveDir(out, SaveOptions{DType: o.DType, TokenizerDir: o.TokenizerDir}); err != nil {
		return nil, err
	}
	return m, nil
}

// TokenizerInfo reads an HF tokenizer directory: the number of ids
// (largest id in tokenizer.json's vocab and added tokens, plus one) and the
// bos/eos ids named by tokenizer_config.json, when it names them.
func TokenizerInfo(dir string) (vocab int, bos, eos *int, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("llama: tokenizer: %w", err)
	}
	var tj struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		return 0, nil, nil, fmt.Errorf("llama: tokenizer %s: %w", filepath.Join(dir, "tokenizer.json"), err)
	}
	ids := map[string]int{}
	for t, id := range tj.Model.Vocab {
		ids[t] = id
		vocab = max(vocab, id+1)
	}
	for _, a := range tj.Added {
		ids[a.Content] = a.ID
		vocab = max(vocab, a.ID+1)
	}
	if vocab == 0 {
		return 0, nil, nil, fmt.Errorf("llama: tokenizer %s: no vocabulary", dir)
	}
	cb, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return vocab, nil, nil, nil
	}
	if err != nil {
		return 0, nil, nil, fmt.Errorf("llama: tokenizer: %w", err)
	}
	var tc map[string]json.RawMessage
	if err := json.Unmarshal(cb, &tc); err != nil {
		return 0, nil, nil, fmt.Errorf("llama: tokenizer_config.json: %w", err)
	}
	lookup := func(key string) *int {
		var s string
		if json.Unmarshal(tc[key], &s) != nil {
			var o struct {
				Content string `json:"content"`
			}
			if json.Unmarshal(tc[key], &o) != nil {
				return nil
			}
			s = o.Content
		}
		if id, ok := ids[s]; ok && s != "" {
			return &id
		}
		return nil
	}
	return vocab, lookup("bos_token"), lookup("eos_token"), nil
}
