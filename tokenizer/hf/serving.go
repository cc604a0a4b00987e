package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// What an inference server needs beyond encoding and decoding: the
// vocabulary's spelling of a token (vLLM's /tokenize token_strs) and the
// special tokens a text prompt gets with add_special_tokens.

// TokenPiece is the vocabulary's spelling of id, as Hugging Face's
// convert_ids_to_tokens returns it: an added token's content, a
// byte-level token's bytes in the byte-level alphabet ("Ġthe"). It
// reports false for an unknown id and for character-level models.
func (t *Tokenizer) TokenPiece(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.decode) {
		return "", false
	}
	for _, a := range t.added {
		if a.ID == id {
			return a.Content, true
		}
	}
	if t.model.charLevel {
		return "", false
	}
	enc, _ := byteLevelChars()
	var b strings.Builder
	for i := 0; i < len(t.decode[id]); i++ {
		b.WriteRune(enc[t.decode[id][i]])
	}
	return b.String(), true
}

// SpecialTokens are the ids a text gets before and after it when encoded
// with add_special_tokens, as Python transformers adds them: the
// post-processor's TemplateProcessing ("single") in tokenizer.json, else
// tokenizer_config.json's add_bos_token and add_eos_token (which the
// Llama tokenizer classes turn into that template; DeepSeek-V3 sets
// add_bos_token). dir is the model directory t was loaded from.
func (t *Tokenizer) SpecialTokens(dir string) (prefix, suffix []int32, err error) {
	name := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, nil, fmt.Errorf("hf: %w", err)
	}
	var f struct {
		PostProcessor json.RawMessage `json:"post_processor"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, nil, fmt.Errorf("hf: %s: %w", name, err)
	}
	prefix, suffix, found, err := t.templateProcessing(f.PostProcessor)
	if err != nil {
		return nil, nil, fmt.Errorf("hf: %s: post_processor: %w", name, err)
	}
	if found {
		return prefix, suffix, nil
	}
	name = filepath.Join(dir, "tokenizer_config.json")
	data, err = os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("hf: %w", err)
	}
	var c struct {
		AddBOS *bool `json:"add_bos_token"`
		AddEOS *bool `json:"add_eos_token"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, nil, fmt.Errorf("hf: %s: %w", name, err)
	}
	add := func(flag *bool, tok, key string) ([]int32, error) {
		if flag == nil || !*flag {
			return nil, nil
		}
		id, ok := t.TokenID(tok)
		if tok == "" || !ok {
			return nil, fmt.Errorf("hf: %s: %s is true but the token %q is not in the vocabulary", name, key, tok)
		}
		return []int32{id}, nil
	}
	if prefix, err = add(c.AddBOS, t.Config.BOS, "add_bos_token"); err != nil {
		return nil, nil, err
	}
	if suffix, err = add(c.AddEOS, t.Config.EOS, "add_eos_token"); err != nil {
		return nil, nil, err
	}
	return prefix, suffix, nil
}

// templateProcessing reads a TemplateProcessing post-processor (alone or
// in a Sequence): the special tokens around $A of its "single" template.
func (t *Tokenizer) templateProcessing(raw json.RawMessage) (prefix, suffix []int32, found bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, false, nil
	}
	var p struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, false, err
	}
	switch p.Type {
	case "Sequence":
		for i, sub := range p.Processors {
			if prefix, suffix, found, err = t.templateProcessing(sub); err != nil {
				return nil, nil, false, fmt.Errorf("processors[%d]: %w", i, err)
			}
			if found {
				return prefix, suffix, true, nil
			}
		}
		return nil, nil, false, nil
	case "TemplateProcessing":
	default:
		return nil, nil, false, nil
	}
	seen := false
	for i, piece := range p.Single {
		switch {
		case piece.Sequence != nil:
			if piece.Sequence.ID != "A" {
				return nil, nil, false, fmt.Errorf("single[%d]: sequence %q (want A)", i, piece.Sequence.ID)
			}
			seen = true
		case piece.SpecialToken != nil:
			st, ok := p.SpecialTokens[piece.SpecialToken.ID]
			if !ok {
				return nil, nil, false, fmt.Errorf("single[%d]: special token %q not in special_tokens", i, piece.SpecialToken.ID)
			}
			if seen {
				suffix = append(suffix, st.IDs...)
			} else {
				prefix = append(prefix, st.IDs...)
			}
		default:
			return nil, nil, false, fmt.Errorf("single[%d]: neither SpecialToken nor Sequence", i)
		}
	}
	if !seen {
		return nil, nil, false, errors.New("single: no $A")
	}
	return prefix, suffix, true, nil
}
