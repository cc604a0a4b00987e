// Package hf reads a Hugging Face tokenizer (tokenizer.json,
// tokenizer_config.json, generation_config.json) and encodes and decodes in
// pure Go: added/special tokens first, then the normalizer, the
// pre-tokenizer's regex split and byte-level BPE.
//
// Parity with the official implementation is tested against
// @huggingface/transformers on real Qwen3, Llama 3.1 and DeepSeek-V3 files
// (test/tokenizers, see parity_test.go).
package hf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// Tokenizer is a loaded Hugging Face tokenizer. It is immutable and safe for
// concurrent use.
type Tokenizer struct {
	model bpe
	dec   []decoder // char-level models only: tokenizer.json's decoder
	norm  []normalizer
	pre   []splitter
	added []addedToken
	trie  *trieNode
	// maxAdded is the longest added token's length in bytes.
	maxAdded int
	decode   []string // id -> raw bytes (added tokens: their content)
	stop     []int32

	// Config is tokenizer_config.json's part that templates and stop logic
	// need.
	Config Config
}

var _ tokenizer.Tokenizer = (*Tokenizer)(nil)

type addedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// Load reads a model directory (tokenizer.json, and tokenizer_config.json
// and generation_config.json when present) or a tokenizer.json path.
func Load(path string) (*Tokenizer, error) {
	dir, file := path, filepath.Join(path, "tokenizer.json")
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		dir, file = filepath.Dir(path), path
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	t, err := Parse(data, file)
	if err != nil {
		return nil, err
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	t.Config = cfg
	t.stop = t.stopTokens()
	return t, nil
}

// Parse builds a tokenizer from tokenizer.json bytes; name is used in errors.
func Parse(data []byte, name string) (*Tokenizer, error) {
	var f struct {
		AddedTokens   []addedToken    `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		Decoder       json.RawMessage `json:"decoder"`
		Model         json.RawMessage `json:"model"`
		PostProcessor json.RawMessage `json:"post_processor"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("hf: %s: %w", name, err)
	}
	t := &Tokenizer{added: f.AddedTokens}
	var err error
	if t.norm, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
		return nil, fmt.Errorf("hf: %s: %w", name, err)
	}
	var byteLevel bool
	if t.pre, byteLevel, err = parsePreTokenizer(f.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, fmt.Errorf("hf: %s: %w", name, err)
	}
	if byteLevel {
		err = t.parseModel(f.Model)
	} else {
		// No ByteLevel step: BPE on characters (charlevel.go).
		err = t.parseCharModel(f.Model, f.Decoder)
	}
	if err != nil {
		return nil, fmt.Errorf("hf: %s: %w", name, err)
	}
	t.trie = &trieNode{tok: -1}
	for i, a := range t.added {
		if a.Content == "" {
			return nil, fmt.Errorf("hf: %s: added_tokens[%d].content: empty", name, i)
		}
		if a.ID < 0 {
			return nil, fmt.Errorf("hf: %s: added_tokens[%d].id: negative", name, i)
		}
		t.trie.insert(a.Content, i)
		t.maxAdded = max(t.maxAdded, len(a.Content))
		for int(a.ID) >= len(t.decode) {
			t.decode = append(t.decode, "")
		}
		t.decode[a.ID] = a.Content
	}
	return t, nil
}

func (t *Tokenizer) parseModel(raw json.RawMessage) error {
	var m struct {
		Type         string            `json:"type"`
		Vocab        map[string]int32  `json:"vocab"`
		Merges       []json.RawMessage `json:"merges"`
		IgnoreMerges bool              `json:"ignore_merges"`
		ByteFallback bool              `json:"byte_fallback"`
		Dropout      *float64          `json:"dropout"`
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
	enc, dec := byteLevelChars()
	raw2 := func(s string) (string, bool) {
		b := make([]byte, 0, len(s))
		for _, r := range s {
			c, ok := dec[r]
			if !ok {
				return "", false
			}
			b = append(b, c)
		}
		return string(b), true
	}
	t.model.vocab = make(map[string]int32, len(m.Vocab))
	t.model.ignoreMerges = m.IgnoreMerges
	for s, id := range m.Vocab {
		if id < 0 {
			return fmt.Errorf("model.vocab[%q]: negative id %d", s, id)
		}
		for int(id) >= len(t.decode) {
			t.decode = append(t.decode, "")
		}
		r, ok := raw2(s)
		if !ok {
			// Not a byte-level string (e.g. an added token also listed in
			// the vocab); it decodes as written and never comes out of BPE.
			t.decode[id] = s
			continue
		}
		t.decode[id] = r
		t.model.vocab[r] = id
	}
	for b := 0; b < 256; b++ {
		id, ok := m.Vocab[string(enc[b])]
		if !ok {
			return fmt.Errorf("model.vocab: byte 0x%02x (%q) missing", b, string(enc[b]))
		}
		t.model.byteID[b] = id
	}
	t.model.merges = make(map[uint64]merge, len(m.Merges))
	for i, mr := range m.Merges {
		var a, b string
		var pair []string
		if err := json.Unmarshal(mr, &pair); err == nil {
			if len(pair) != 2 {
				return fmt.Errorf("model.merges[%d]: want 2 parts, have %d", i, len(pair))
			}
			a, b = pair[0], pair[1]
		} else {
			var s string
			if err := json.Unmarshal(mr, &s); err != nil {
				return fmt.Errorf("model.merges[%d]: neither \"a b\" nor [a, b]", i)
			}
			var ok bool
			if a, b, ok = strings.Cut(s, " "); !ok {
				return fmt.Errorf("model.merges[%d]: %q has no space", i, s)
			}
		}
		ia, oka := m.Vocab[a]
		ib, okb := m.Vocab[b]
		im, okm := m.Vocab[a+b]
		if !oka || !okb || !okm {
			return fmt.Errorf("model.merges[%d]: %q + %q: token not in model.vocab", i, a, b)
		}
		k := pairKey(ia, ib)
		if _, dup := t.model.merges[k]; !dup {
			t.model.merges[k] = merge{rank: int32(i), id: im}
		}
	}
	return nil
}

// Encode returns the ids of text, matching added tokens; no BOS is added.
func (t *Tokenizer) Encode(text string) []int32 {
	return t.encode(make([]int32, 0, len(text)/3+4), text, 0, nil)
}

// EncodeFrom encodes text reusing prev's ids up to the last restart point
// that text cannot change: after an added token (without rstrip) that ends
// at least the longest added token's length (+ one character, for
// single_word) before where text and prev.Text first differ: an
// added-token match looks that far ahead.
// The result equals Encode(text) (FuzzEncodeFrom checks it).
func (t *Tokenizer) EncodeFrom(prev *tokenizer.Encoding, text string) *tokenizer.Encoding {
	e, _ := t.EncodeFromInto(prev, text, 0, 0, nil, 0)
	return e
}

// EncodeFromInto is EncodeFrom with hints from a renderer that knows what
// it reused: text is the text from byte textAt on (the bytes before are
// prev's), text and prev's text are known equal for their first same
// bytes (the comparison starts there), and spare, when not nil, is an
// encoding the caller will not use again, whose struct and arrays are
// overwritten instead of allocating new ones; its first spareSame ids
// (and the restart points among them) are known equal to prev's and are
// not copied again. It reports false, touching nothing, when the restart
// point lies before both textAt and the start of prev's text (call again
// with the whole text, textAt 0).
func (t *Tokenizer) EncodeFromInto(prev *tokenizer.Encoding, text string, textAt, same int, spare *tokenizer.Encoding, spareSame int) (*tokenizer.Encoding, bool) {
	full := textAt + len(text)
	start, k := 0, -1
	pAt := 0
	if prev != nil {
		pAt = prev.TextAt
		l := min(same, full, pAt+len(prev.Text))
		if l >= pAt && l >= textAt {
			l += commonPrefix(prev.Text[l-pAt:], text[l-textAt:])
		}
		// Cuts are ascending: find the last with Text+maxAdded <= l.
		k = sortSearch(len(prev.Cuts), func(i int) bool { return prev.Cuts[i].Text+t.maxAdded+utf8.UTFMax > l }) - 1
		if k >= 0 {
			start = prev.Cuts[k].Text
		}
	}
	// The text to encode, from start: the new text, or prev's bytes up to
	// textAt (equal to the new text's there: textAt <= same) and the new
	// text.
	var seg string
	switch {
	case start >= textAt:
		seg = text[start-textAt:]
	case prev != nil && start >= pAt && textAt <= pAt+len(prev.Text):
		seg = prev.Text[start-pAt:textAt-pAt] + text
	default:
		return nil, false
	}
	e := &tokenizer.Encoding{}
	ids, cuts := 0, 0 // leading ids and cuts of spare equal to prev's
	if spare != nil {
		if prev != nil && spare != prev {
			ids = min(spareSame, len(spare.IDs), len(prev.IDs))
			// the cuts among those ids
			cuts = min(len(spare.Cuts), sortSearch(len(prev.Cuts), func(i int) bool { return prev.Cuts[i].ID > ids }))
		}
		e, *spare = spare, tokenizer.Encoding{IDs: spare.IDs[:0], Cuts: spare.Cuts[:0]}
	}
	e.Text, e.TextAt = seg, start
	if textAt == 0 { // the caller's whole text: keep it whole
		e.Text, e.TextAt = text, 0
	}
	if k >= 0 {
		c := prev.Cuts[k]
		ids, cuts = min(ids, c.ID), min(cuts, k+1)
		// slices.Grow copies without clearing what it copies over; the
		// spare's first ids are prev's already.
		e.IDs = append(slices.Grow(e.IDs[:ids], c.ID-ids+len(seg)/3+4), prev.IDs[ids:c.ID]...)
		e.Cuts = append(slices.Grow(e.Cuts[:cuts], k+1-cuts+len(seg)/64), prev.Cuts[cuts:k+1]...)
		e.Reused = c.ID
	}
	e.IDs = t.encode(e.IDs, seg, start, &e.Cuts)
	return e, true
}

// commonPrefix is the length of the longest common prefix of a and b,
// compared a block at a time (string equality is a vectorized memcmp):
// a long shared history costs microseconds, not a byte loop.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	l := 0
	for blk := 4096; blk >= 64; blk /= 8 {
		for l+blk <= n && a[l:l+blk] == b[l:l+blk] {
			l += blk
		}
	}
	for l < n && a[l] == b[l] {
		l++
	}
	return l
}

func sortSearch(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// encode appends the ids of text (which starts at byte base of the whole
// text) to out, recording restart points in cuts when it is not nil.
func (t *Tokenizer) encode(out []int32, text string, base int, cuts *[]tokenizer.Cut) []int32 {
	var pieces []string
	var scratch []int32
	total := len(text)
	for len(text) > 0 {
		start, end, ai := t.findAdded(text)
		seg := text[:start]
		if ai >= 0 {
			a := t.added[ai]
			if a.LStrip {
				seg = strings.TrimRightFunc(seg, unicode.IsSpace)
			}
		}
		for _, n := range t.norm {
			if seg == "" {
				break // Prepend must not make a token of nothing
			}
			seg = n(seg)
		}
		pieces = append(pieces[:0], seg)
		for _, s := range t.pre {
			next := make([]string, 0, len(pieces)*2)
			for _, p := range pieces {
				next = s.split(next, p)
			}
			pieces = next
		}
		for _, p := range pieces {
			out, scratch = t.model.appendPiece(out, p, scratch)
		}
		if ai < 0 {
			break
		}
		a := t.added[ai]
		out = append(out, a.ID)
		text = text[end:]
		if a.RStrip {
			text = strings.TrimLeftFunc(text, unicode.IsSpace)
		} else if cuts != nil {
			*cuts = append(*cuts, tokenizer.Cut{Text: base + total - len(text), ID: len(out)})
		}
	}
	return out
}

// findAdded returns the leftmost-longest added token in text, or ai = -1
// and start = len(text).
func (t *Tokenizer) findAdded(text string) (start, end, ai int) {
	for i := 0; i < len(text); i++ {
		if n, idx := t.trie.longest(text[i:]); idx >= 0 {
			a := t.added[idx]
			if a.SingleWord && !wordBoundary(text, i, i+n) {
				continue
			}
			return i, i + n, idx
		}
	}
	return len(text), len(text), -1
}

func wordBoundary(s string, i, j int) bool {
	if i > 0 {
		r, _ := utf8.DecodeLastRuneInString(s[:i])
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' {
			return false
		}
	}
	if j < len(s) {
		r, _ := utf8.DecodeRuneInString(s[j:])
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' {
			return false
		}
	}
	return true
}

// Decode returns the text of ids; byte sequences that are not valid UTF-8
// become U+FFFD. Unknown ids are skipped.
func (t *Tokenizer) Decode(ids []int32) string {
	if t.model.charLevel {
		return t.decodeChars(ids)
	}
	var b strings.Builder
	for _, id := range ids {
		if id >= 0 && int(id) < len(t.decode) {
			b.WriteString(t.decode[id])
		}
	}
	s := b.String()
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// TokenBytes returns the raw bytes of one id (for streaming and diagnostics).
func (t *Tokenizer) TokenBytes(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.decode) {
		return "", false
	}
	return t.decode[id], true
}

// VocabSize is one past the largest id.
func (t *Tokenizer) VocabSize() int { return len(t.decode) }

// Special returns the added tokens.
func (t *Tokenizer) Special() []tokenizer.AddedToken {
	out := make([]tokenizer.AddedToken, len(t.added))
	for i, a := range t.added {
		out[i] = tokenizer.AddedToken{ID: a.ID, Content: a.Content, Special: a.Special}
	}
	return out
}

// TokenID returns the id of an added token or vocabulary entry by content.
func (t *Tokenizer) TokenID(content string) (int32, bool) {
	for _, a := range t.added {
		if a.Content == content {
			return a.ID, true
		}
	}
	id, ok := t.model.vocab[content]
	return id, ok
}

// StopTokens are eos_token and generation_config.json's eos_token_id.
func (t *Tokenizer) StopTokens() []int32 { return slices.Clone(t.stop) }

func (t *Tokenizer) stopTokens() []int32 {
	var out []int32
	if id, ok := t.TokenID(t.Config.EOS); ok && t.Config.EOS != "" {
		out = append(out, id)
	}
	for _, id := range t.Config.GenerationEOS {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// trieNode is a byte trie of added-token contents.
type trieNode struct {
	next map[byte]*trieNode
	tok  int // index into added, or -1
}

func (n *trieNode) insert(s string, idx int) {
	for i := 0; i < len(s); i++ {
		if n.next == nil {
			n.next = map[byte]*trieNode{}
		}
		c, ok := n.next[s[i]]
		if !ok {
			c = &trieNode{tok: -1}
			n.next[s[i]] = c
		}
		n = c
	}
	if n.tok < 0 { // the first of duplicate contents wins
		n.tok = idx
	}
}

// longest returns the length and index of the longest token prefixing s.
func (n *trieNode) longest(s string) (int, int) {
	best, bestIdx := 0, -1
	for i := 0; i < len(s) && n.next != nil; i++ {
		c, ok := n.next[s[i]]
		if !ok {
			break
		}
		n = c
		if n.tok >= 0 {
			best, bestIdx = i+1, n.tok
		}
	}
	return best, bestIdx
}
