package hf

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// gpt2Pattern is the split of a ByteLevel pre-tokenizer with use_regex.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// splitter is one pre-tokenization step: it splits each piece further.
type splitter interface {
	split(dst []string, piece string) []string
}

// regexSplit is a Split pre-tokenizer. The patterns use look-ahead
// (\s+(?!\S)), which Go's regexp lacks, so it runs on regexp2 (.NET syntax,
// which covers \p{..}, (?i:..) and look-around as the files write them).
type regexSplit struct {
	re       *regexp2.Regexp
	behavior string // Isolated | Removed
}

func (s *regexSplit) split(dst []string, piece string) []string {
	if piece == "" {
		return dst
	}
	runes := []rune(piece)
	// regexp2 reports rune offsets; walk the string alongside to cut bytes.
	bytePos, runePos := 0, 0
	advance := func(toRune int) int {
		for runePos < toRune {
			_, sz := utf8.DecodeRuneInString(piece[bytePos:])
			bytePos += sz
			runePos++
		}
		return bytePos
	}
	last := 0
	m, err := s.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		start := advance(m.Index)
		end := advance(m.Index + m.Length)
		if start > last {
			dst = append(dst, piece[last:start])
		}
		if s.behavior == "Isolated" && end > start {
			dst = append(dst, piece[start:end])
		}
		last = end
		m, err = s.re.FindNextMatch(m)
	}
	if last < len(piece) {
		dst = append(dst, piece[last:])
	}
	return dst
}

// prefixSpace is a ByteLevel pre-tokenizer's add_prefix_space.
type prefixSpace struct{}

func (prefixSpace) split(dst []string, piece string) []string {
	if piece != "" && piece[0] != ' ' {
		piece = " " + piece
	}
	return append(dst, piece)
}

// compilePattern compiles a Split pattern, which is either {"Regex": ...}
// or {"String": ...} (a literal), and returns the regex source too.
func compilePattern(raw json.RawMessage, path string) (*regexp2.Regexp, string, error) {
	var p struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	var src string
	switch {
	case p.Regex != nil:
		src = *p.Regex
	case p.String != nil:
		src = regexp2.Escape(*p.String)
	default:
		return nil, "", fmt.Errorf("%s: neither Regex nor String", path)
	}
	re, err := regexp2.Compile(src, regexp2.None)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return re, src, nil
}

// parsePreTokenizer turns tokenizer.json's pre_tokenizer into split steps.
// byteLevel reports whether a ByteLevel step was found (the model then works
// on bytes).
func parsePreTokenizer(raw json.RawMessage, path string) (steps []splitter, byteLevel bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	var node struct {
		Type           string            `json:"type"`
		Pretokenizers  []json.RawMessage `json:"pretokenizers"`
		Pattern        json.RawMessage   `json:"pattern"`
		Behavior       string            `json:"behavior"`
		Invert         bool              `json:"invert"`
		AddPrefixSpace bool              `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &node); err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	switch node.Type {
	case "Sequence":
		for i, p := range node.Pretokenizers {
			s, bl, err := parsePreTokenizer(p, fmt.Sprintf("%s.pretokenizers[%d]", path, i))
			if err != nil {
				return nil, false, err
			}
			steps = append(steps, s...)
			byteLevel = byteLevel || bl
		}
		return steps, byteLevel, nil
	case "Split":
		if node.Invert {
			return nil, false, fmt.Errorf("%s.invert: true is not supported", path)
		}
		if node.Behavior != "Isolated" && node.Behavior != "Removed" {
			return nil, false, fmt.Errorf("%s.behavior: %q is not supported (Isolated, Removed)", path, node.Behavior)
		}
		re, src, err := compilePattern(node.Pattern, path+".pattern")
		if err != nil {
			return nil, false, err
		}
		if m, ok := handPatterns[src]; ok {
			return []splitter{&handSplit{at: m, behavior: node.Behavior}}, false, nil
		}
		return []splitter{&regexSplit{re: re, behavior: node.Behavior}}, false, nil
	case "ByteLevel":
		if node.AddPrefixSpace {
			steps = append(steps, prefixSpace{})
		}
		if node.UseRegex == nil || *node.UseRegex {
			steps = append(steps, &handSplit{at: handPatterns[gpt2Pattern], behavior: "Isolated"})
		}
		return steps, true, nil
	}
	return nil, false, fmt.Errorf("%s.type: pre-tokenizer %q is not supported", path, node.Type)
}

// normalizer rewrites text before splitting.
type normalizer func(string) string

func parseNormalizer(raw json.RawMessage, path string) ([]normalizer, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var node struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &node); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch node.Type {
	case "Sequence":
		var out []normalizer
		for i, n := range node.Normalizers {
			s, err := parseNormalizer(n, fmt.Sprintf("%s.normalizers[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case "NFC":
		return []normalizer{unicodeNormalizer(norm.NFC)}, nil
	case "NFD":
		return []normalizer{unicodeNormalizer(norm.NFD)}, nil
	case "NFKC":
		return []normalizer{unicodeNormalizer(norm.NFKC)}, nil
	case "NFKD":
		return []normalizer{unicodeNormalizer(norm.NFKD)}, nil
	case "Lowercase":
		return []normalizer{strings.ToLower}, nil
	case "Prepend":
		var n struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return []normalizer{func(s string) string { return n.Prepend + s }}, nil
	case "Replace":
		from, to, err := parseReplace(raw, path)
		if err != nil {
			return nil, err
		}
		return []normalizer{func(s string) string { return strings.ReplaceAll(s, from, to) }}, nil
	}
	return nil, fmt.Errorf("%s.type: normalizer %q is not supported", path, node.Type)
}

// parseReplace reads a Replace normalizer or decoder; only a String
// pattern is supported.
func parseReplace(raw json.RawMessage, path string) (from, to string, err error) {
	var n struct {
		Pattern struct {
			String *string `json:"String"`
		} `json:"pattern"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", "", fmt.Errorf("%s: %w", path, err)
	}
	if n.Pattern.String == nil || *n.Pattern.String == "" {
		return "", "", fmt.Errorf("%s.pattern: only a non-empty String pattern is supported", path)
	}
	return *n.Pattern.String, n.Content, nil
}
