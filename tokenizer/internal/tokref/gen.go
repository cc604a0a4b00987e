package tokref

import (
	"math/rand/v2"
	"strings"
	"unicode"
)

// assigned reports whether Go's Unicode tables (unicode.Version) know c.
// Code points assigned later (Node's ICU is at Unicode 17) are letters to
// the reference and unassigned to Go's regexp classes, so text using them
// may split differently; the generator leaves them out and docs say so.
func assigned(c rune) bool {
	return unicode.In(c, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs, unicode.Cc, unicode.Cf, unicode.Co)
}

// Strings returns n deterministic test strings mixing scripts, emoji,
// combining marks, code, numbers, whitespace runs and the given special
// tokens written next to text.
func Strings(seed uint64, n int, specials []string) []string {
	r := rand.New(rand.NewPCG(seed, 13))
	out := make([]string, 0, n)
	for len(out) < n {
		var b strings.Builder
		parts := 1 + r.IntN(8)
		for i := 0; i < parts; i++ {
			b.WriteString(piece(r, specials))
		}
		out = append(out, b.String())
	}
	return out
}

var words = []string{"hello", "world", "The", " quick", "brown", "fox's", "don't", "I'LL", "we've", "Ünïcödé",
	"naïve", "café", "résumé", "straße", "ﬁne", "İstanbul", "ǅemal", "ΑΒΓ", "Ωμέγα", "Москва", "кошка"}

var scripts = [][2]rune{
	{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}, {0xAC00, 0xD7A3}, // CJK, kana, Hangul
	{0x0600, 0x06FF}, {0x0590, 0x05FF}, {0x0900, 0x097F}, {0x0E00, 0x0E7F}, // Arabic, Hebrew, Devanagari, Thai
	{0x0400, 0x04FF}, {0x0370, 0x03FF}, {0x1F300, 0x1FAFF}, {0x2000, 0x206F}, // Cyrillic, Greek, emoji, punctuation
	{0x0300, 0x036F}, {0x2190, 0x22FF}, {0xFF00, 0xFFEF}, {0x10000, 0x1007F}, // combining, arrows/math, fullwidth, Linear B
	{0x00A0, 0x00FF}, {0x1D400, 0x1D7FF}, // Latin-1, math alphanumerics
}

var code = []string{"func main() {\n\tfmt.Println(\"hi\")\n}\n", "if (x <= 10 && y != 0) { return x/y; }",
	"def f(a, b=2):\n    return a ** b  # power\n", "SELECT * FROM t WHERE id='42';", "<div class=\"x\">&amp;</div>",
	"{\"key\": [1, 2.5, -3e10, null, true]}", "x += 1;;\r\n", "    \t\t  ", "#!/bin/bash\nset -euo pipefail\n",
	"λx.x", "a_b-c.d/e\\f", "```python\nprint('x')\n```"}

var spaces = []string{" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2009", "\u200b", "\ufeff", "\v", "\f", "\u0085", "\u2028"}

func piece(r *rand.Rand, specials []string) string {
	switch r.IntN(10) {
	case 0:
		return words[r.IntN(len(words))]
	case 1: // a run of one script
		s := scripts[r.IntN(len(scripts))]
		var b strings.Builder
		for k := 1 + r.IntN(6); k > 0; k-- {
			if c := s[0] + rune(r.IntN(int(s[1]-s[0]+1))); assigned(c) {
				b.WriteRune(c)
			}
		}
		return b.String()
	case 2:
		return code[r.IntN(len(code))]
	case 3: // numbers
		var b strings.Builder
		for k := 1 + r.IntN(12); k > 0; k-- {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		if r.IntN(3) == 0 {
			b.WriteString("." + string(rune('0'+r.IntN(10))))
		}
		return b.String()
	case 4:
		var b strings.Builder
		for k := 1 + r.IntN(4); k > 0; k-- {
			b.WriteString(spaces[r.IntN(len(spaces))])
		}
		return b.String()
	case 5:
		if len(specials) > 0 {
			return specials[r.IntN(len(specials))]
		}
		return "<|x|>"
	case 6: // emoji sequences: ZWJ families, skin tones, flags, keycaps
		seqs := []string{"👩‍👩‍👧‍👦", "👍🏽", "🇯🇵", "1️⃣", "❤️", "🏳️‍🌈", "😀😃😄", "🧑🏿‍💻"}
		return seqs[r.IntN(len(seqs))]
	case 7: // base letters with combining marks (NFC composes some)
		base := "aeiouAEOnc"
		var b strings.Builder
		b.WriteByte(base[r.IntN(len(base))])
		for k := 1 + r.IntN(3); k > 0; k-- {
			b.WriteRune(0x300 + rune(r.IntN(0x70)))
		}
		return b.String()
	case 8: // contractions and punctuation
		ps := []string{"'s", "'t", "'re", "'VE", "'m", "'ll", "'D", "!!", "?!", "...", "—", "«»", "“quoted”", "(", ")", "\"", "'"}
		return ps[r.IntN(len(ps))]
	default: // any valid code point from the BMP or beyond, surrogates excluded
		for {
			c := rune(r.IntN(0x2FFFF))
			if c != 0 && assigned(c) {
				return string(c)
			}
		}
	}
}
