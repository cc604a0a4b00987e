package hf

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written matchers for the Split patterns of the supported tokenizer
// files. regexp2 is a backtracking engine that works on a []rune copy of
// each piece; on a long tool result or assistant turn it was most of the
// encode time. Each matcher below reproduces its pattern's leftmost-first
// alternation and greedy backtracking exactly (regexp2's classes: \s is
// unicode.IsSpace, \p{X} is unicode.Categories[X], invalid UTF-8 bytes are
// one U+FFFD each) and is selected only when the file's pattern string is
// byte-for-byte one of these; any other pattern runs on regexp2.
// TestHandSplitMatchesRegexp and FuzzHandSplit hold them equal to regexp2.

// matchAt returns the end (in bytes) of the pattern's match that starts at
// byte i of s, or -1 when no match starts there.
type matchAt func(s string, i int) int

// Patterns as tokenizer.json writes them.
const (
	llama3Pattern   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern    = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	dsDigitsPattern = `\p{N}{1,3}`
	dsCJKPattern    = `[一-龥぀-ゟ゠-ヿ]+`
	dsWordsPattern  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// handPatterns maps a pattern string to its matcher.
var handPatterns = map[string]matchAt{
	gpt2Pattern:     matchGPT2,
	llama3Pattern:   func(s string, i int) int { return matchLlama(s, i, 3) },
	qwen2Pattern:    func(s string, i int) int { return matchLlama(s, i, 1) },
	dsDigitsPattern: func(s string, i int) int { return runOf(s, i, isN, 3) },
	dsCJKPattern:    func(s string, i int) int { return runOf(s, i, isDSCJK, -1) },
	dsWordsPattern:  matchDSWords,
}

// handSplit is a Split pre-tokenizer on a hand-written matcher.
type handSplit struct {
	at       matchAt
	behavior string // Isolated | Removed
}

func (h *handSplit) split(dst []string, piece string) []string {
	last := 0 // end of the previous match: text before a match is a piece of its own
	for i := 0; i < len(piece); {
		end := h.at(piece, i)
		if end < 0 {
			_, sz := utf8.DecodeRuneInString(piece[i:])
			i += sz
			continue
		}
		if i > last {
			dst = append(dst, piece[last:i])
		}
		if h.behavior == "Isolated" {
			dst = append(dst, piece[i:end])
		}
		last, i = end, end
	}
	if last < len(piece) {
		dst = append(dst, piece[last:])
	}
	return dst
}

// Character classes as bits; ASCII is read from a table.
const (
	cL = 1 << iota
	cN
	cM
	cP
	cS
	cSpace
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := range rune(utf8.RuneSelf) {
		t[r] = classOf(r)
	}
	return t
}()

func classOf(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= cL
	}
	if unicode.IsNumber(r) {
		c |= cN
	}
	if unicode.IsMark(r) {
		c |= cM
	}
	if unicode.IsPunct(r) {
		c |= cP
	}
	if unicode.IsSymbol(r) {
		c |= cS
	}
	if unicode.IsSpace(r) {
		c |= cSpace
	}
	return c
}

// at decodes the rune at byte i: its class bits, the rune and its width
// (0 at the end of s).
func at(s string, i int) (uint8, rune, int) {
	if i >= len(s) {
		return 0, 0, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], rune(b), 1
	}
	r, sz := utf8.DecodeRuneInString(s[i:])
	return classOf(r), r, sz
}

func isN(c uint8, _ rune) bool { return c&cN != 0 }

func isDSCJK(_ uint8, r rune) bool {
	return r >= 0x4E00 && r <= 0x9FA5 || r >= 0x3040 && r <= 0x309F || r >= 0x30A0 && r <= 0x30FF
}

// runOf matches a run of at least one and at most max (-1: any) runes
// that satisfy in.
func runOf(s string, i int, in func(uint8, rune) bool, max int) int {
	j, n := i, 0
	for n != max {
		c, r, sz := at(s, j)
		if sz == 0 || !in(c, r) {
			break
		}
		j += sz
		n++
	}
	if n == 0 {
		return -1
	}
	return j
}

// classRun extends a match from j over runes whose class has a bit of mask.
func classRun(s string, j int, mask uint8) int {
	for {
		c, _, sz := at(s, j)
		if sz == 0 || c&mask == 0 {
			return j
		}
		j += sz
	}
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// contraction matches 's 't 're 've 'm 'll 'd at i; fold lowers the
// letters first (the (?i:...) of Llama 3 and Qwen2, which regexp2 does with
// unicode.ToLower).
func contraction(s string, i int, fold bool) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	letter := func(j int) (rune, int) {
		_, r, sz := at(s, j)
		if fold {
			r = unicode.ToLower(r)
		}
		return r, sz
	}
	r1, sz1 := letter(i + 1)
	switch r1 {
	case 's', 't', 'm', 'd':
		return i + 1 + sz1
	case 'r', 'v', 'l':
		want := 'e'
		if r1 == 'l' {
			want = 'l'
		}
		if r2, sz2 := letter(i + 1 + sz1); sz2 > 0 && r2 == want {
			return i + 1 + sz1 + sz2
		}
	}
	return -1
}

// spaceTail matches \s*[\r\n]+|\s+(?!\S)|\s+ at i, whose rune is a space:
// the run up to its last line break if it has one, else the whole run when
// it ends the text, else the run less its last rune, or the one rune.
func spaceTail(s string, i int) int {
	j, lastBreak, lastStart := i, -1, i
	for {
		c, r, sz := at(s, j)
		if sz == 0 || c&cSpace == 0 {
			break
		}
		if isCRLF(r) {
			lastBreak = j + sz
		}
		lastStart = j
		j += sz
	}
	switch {
	case lastBreak >= 0:
		return lastBreak
	case j == len(s) || lastStart == i:
		return j
	}
	return lastStart
}

// matchGPT2 is gpt2Pattern: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func matchGPT2(s string, i int) int {
	if e := contraction(s, i, false); e >= 0 {
		return e
	}
	c, r, sz := at(s, i)
	j, cj := i, c
	if r == ' ' {
		if c1, _, sz1 := at(s, i+sz); sz1 > 0 {
			j, cj = i+sz, c1
		}
	}
	switch {
	case cj&cL != 0:
		return classRun(s, j, cL)
	case cj&cN != 0:
		return classRun(s, j, cN)
	case cj&(cSpace|cL|cN) == 0:
		return notRun(s, j, cSpace|cL|cN)
	}
	// A space alone (or before another space) is \s+(?!\S) or \s+; the
	// GPT-2 pattern has no line-break alternative.
	if c&cSpace == 0 {
		return -1
	}
	return spaceTailNoBreak(s, i)
}

// spaceTailNoBreak is \s+(?!\S)|\s+ at a space.
func spaceTailNoBreak(s string, i int) int {
	j, lastStart := i, i
	for {
		c, _, sz := at(s, j)
		if sz == 0 || c&cSpace == 0 {
			break
		}
		lastStart = j
		j += sz
	}
	if j == len(s) || lastStart == i {
		return j
	}
	return lastStart
}

// notRun extends from j over runes with none of mask's bits (at least one).
func notRun(s string, j int, mask uint8) int {
	for {
		c, _, sz := at(s, j)
		if sz == 0 || c&mask != 0 {
			return j
		}
		j += sz
	}
}

// crlfRun extends from j over \r and \n.
func crlfRun(s string, j int) int {
	for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
		j++
	}
	return j
}

// matchLlama is llama3Pattern (digits 3) and qwen2Pattern (digits 1).
func matchLlama(s string, i, digits int) int {
	if e := contraction(s, i, true); e >= 0 {
		return e
	}
	c, r, sz := at(s, i)
	if sz == 0 {
		return -1
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&cL != 0 {
		return classRun(s, i, cL)
	}
	if c&cN == 0 && !isCRLF(r) {
		if c1, _, sz1 := at(s, i+sz); sz1 > 0 && c1&cL != 0 {
			return classRun(s, i+sz, cL)
		}
	}
	// \p{N}{1,digits}
	if c&cN != 0 {
		return runOf(s, i, isN, digits)
	}
	// ?[^\s\p{L}\p{N}]+[\r\n]*
	j, cj := i, c
	if r == ' ' {
		if c1, _, sz1 := at(s, i+sz); sz1 > 0 {
			j, cj = i+sz, c1
		}
	}
	if cj&(cSpace|cL|cN) == 0 && (j > i || c&cSpace == 0) {
		return crlfRun(s, notRun(s, j, cSpace|cL|cN))
	}
	if c&cSpace == 0 {
		return -1
	}
	return spaceTail(s, i)
}

// asciiPunct is the first class of dsWordsPattern.
func asciiPunct(r rune) bool {
	return r < utf8.RuneSelf && r > ' ' && r != 0x7f && !('0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
}

func asciiLetter(r rune) bool { return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' }

// matchDSWords is DeepSeek-V3's third split.
func matchDSWords(s string, i int) int {
	c, r, sz := at(s, i)
	if sz == 0 {
		return -1
	}
	// [!"#...~][A-Za-z]+
	if asciiPunct(r) {
		j := i + sz
		for j < len(s) && asciiLetter(rune(s[j])) {
			j++
		}
		if j > i+sz {
			return j
		}
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if c&(cL|cM) != 0 {
		return classRun(s, i, cL|cM)
	}
	if c&(cL|cP|cS) == 0 && !isCRLF(r) {
		if c1, _, sz1 := at(s, i+sz); sz1 > 0 && c1&(cL|cM) != 0 {
			return classRun(s, i+sz, cL|cM)
		}
	}
	// ?[\p{P}\p{S}]+[\r\n]*
	j, cj := i, c
	if r == ' ' {
		if c1, _, sz1 := at(s, i+sz); sz1 > 0 {
			j, cj = i+sz, c1
		}
	}
	if cj&(cP|cS) != 0 {
		return crlfRun(s, classRun(s, j, cP|cS))
	}
	if c&cSpace == 0 {
		return -1
	}
	return spaceTail(s, i)
}
