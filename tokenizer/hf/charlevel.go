package hf

// Character-level BPE: tokenizer.json files converted from SentencePiece
// (Llama 2, Mistral, Gemma) have no ByteLevel pre-tokenizer; BPE starts
// from characters, a character missing from the vocab falls back to the
// <0xXX> tokens of its UTF-8 bytes (model.byte_fallback), and the decoder
// chain (Replace "▁" → " ", ByteFallback, Fuse, Strip) turns tokens back
// into text. Parity with @huggingface/transformers is tested on a
// generated tokenizer.json (TestByteFallbackParity).

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

func (t *Tokenizer) parseCharModel(raw, decRaw json.RawMessage) error {
	var m struct {
		Type         string            `json:"type"`
		Vocab        map[string]int32  `json:"vocab"`
		Merges       []json.RawMessage `json:"merges"`
		IgnoreMerges bool              `json:"ignore_merges"`
		ByteFallback bool              `json:"byte_fallback"`
		FuseUnk      bool              `json:"fuse_unk"`
		UnkToken     *string           `json:"unk_token"`
		Dropout      *float64          `json:"dropout"`
		Prefix       *string           `json:"continuing_subword_prefix"`
		Suffix       *string           `json:"end_of_word_suffix"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if m.Type != "BPE" {
		return fmt.Errorf("model.type: %q is not supported (BPE)", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return fmt.Errorf("model.dropout: %v: BPE dropout is not deterministic", *m.Dropout)
	}
	if m.Prefix != nil && *m.Prefix != "" || m.Suffix != nil && *m.Suffix != "" {
		return fmt.Errorf("model: continuing_subword_prefix / end_of_word_suffix are not supported")
	}
	b := &t.model
	b.charLevel, b.byteFallback, b.fuseUnk, b.ignoreMerges = true, m.ByteFallback, m.FuseUnk, m.IgnoreMerges
	b.vocab = make(map[string]int32, len(m.Vocab))
	for s, id := range m.Vocab {
		if id < 0 {
			return fmt.Errorf("model.vocab[%q]: negative id %d", s, id)
		}
		for int(id) >= len(t.decode) {
			t.decode = append(t.decode, "")
		}
		t.decode[id] = s
		b.vocab[s] = id
	}
	for i := range b.fallbackID {
		b.fallbackID[i] = -1
		if id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.fallbackID[i] = id
		}
	}
	b.unk = -1
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return fmt.Errorf("model.unk_token: %q not in model.vocab", *m.UnkToken)
		}
		b.unk = id
	}
	b.merges = make(map[uint64]merge, len(m.Merges))
	for i, mr := range m.Merges {
		x, y, err := mergePair(mr, i)
		if err != nil {
			return err
		}
		ia, oka := m.Vocab[x]
		ib, okb := m.Vocab[y]
		im, okm := m.Vocab[x+y]
		if !oka || !okb || !okm {
			return fmt.Errorf("model.merges[%d]: %q + %q: token not in model.vocab", i, x, y)
		}
		if _, dup := b.merges[pairKey(ia, ib)]; !dup {
			b.merges[pairKey(ia, ib)] = merge{rank: int32(i), id: im}
		}
	}
	var err error
	t.dec, err = parseDecoder(decRaw, "decoder")
	return err
}

// mergePair reads one merges entry, "a b" or ["a", "b"].
func mergePair(mr json.RawMessage, i int) (string, string, error) {
	var pair []string
	if err := json.Unmarshal(mr, &pair); err == nil {
		if len(pair) != 2 {
			return "", "", fmt.Errorf("model.merges[%d]: want 2 parts, have %d", i, len(pair))
		}
		return pair[0], pair[1], nil
	}
	var s string
	if err := json.Unmarshal(mr, &s); err != nil {
		return "", "", fmt.Errorf("model.merges[%d]: neither \"a b\" nor [a, b]", i)
	}
	a, b, ok := strings.Cut(s, " ")
	if !ok {
		return "", "", fmt.Errorf("model.merges[%d]: %q has no space", i, s)
	}
	return a, b, nil
}

// decoder is one step of a decoder chain on token strings.
type decoder func([]string) []string

func parseDecoder(raw json.RawMessage, path string) ([]decoder, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var node struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
		Content  string            `json:"content"`
		Start    int               `json:"start"`
		Stop     int               `json:"stop"`
	}
	if err := json.Unmarshal(raw, &node); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch node.Type {
	case "Sequence":
		var out []decoder
		for i, d := range node.Decoders {
			s, err := parseDecoder(d, fmt.Sprintf("%s.decoders[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case "Replace":
		from, to, err := parseReplace(raw, path)
		if err != nil {
			return nil, err
		}
		return []decoder{func(toks []string) []string {
			for i, s := range toks {
				toks[i] = strings.ReplaceAll(s, from, to)
			}
			return toks
		}}, nil
	case "ByteFallback":
		return []decoder{byteFallbackDecode}, nil
	case "Fuse":
		return []decoder{func(toks []string) []string { return []string{strings.Join(toks, "")} }}, nil
	case "Strip":
		c, n := utf8.DecodeRuneInString(node.Content)
		if n == 0 || n != len(node.Content) || node.Start < 0 || node.Stop < 0 {
			return nil, fmt.Errorf("%s: content must be one character, start and stop >= 0", path)
		}
		return []decoder{func(toks []string) []string {
			for i, s := range toks {
				for k := 0; k < node.Start && strings.HasPrefix(s, node.Content); k++ {
					s = s[len(node.Content):]
				}
				for k := 0; k < node.Stop; k++ {
					r, sz := utf8.DecodeLastRuneInString(s)
					if sz == 0 || r != c {
						break
					}
					s = s[:len(s)-sz]
				}
				toks[i] = s
			}
			return toks
		}}, nil
	}
	return nil, fmt.Errorf("%s.type: decoder %q is not supported for a model without ByteLevel", path, node.Type)
}

// byteFallbackDecode turns runs of <0xXX> tokens into the text of their
// bytes; bytes that are not valid UTF-8 become U+FFFD.
func byteFallbackDecode(toks []string) []string {
	out := toks[:0:0]
	var run []byte
	flush := func() {
		if len(run) > 0 {
			out = append(out, strings.ToValidUTF8(string(run), "\uFFFD"))
			run = run[:0]
		}
	}
	for _, s := range toks {
		if b, ok := fallbackByte(s); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, s)
	}
	flush()
	return out
}

func fallbackByte(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(s[3:5]) {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | (c - '0')
		case 'A' <= c && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		case 'a' <= c && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

// decodeChars runs the decoder chain over the ids' token strings.
func (t *Tokenizer) decodeChars(ids []int32) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if id >= 0 && int(id) < len(t.decode) {
			toks = append(toks, t.decode[id])
		}
	}
	for _, d := range t.dec {
		toks = d(toks)
	}
	return strings.ToValidUTF8(strings.Join(toks, ""), "\uFFFD")
}
