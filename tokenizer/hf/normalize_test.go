package hf

import (
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestNormalizeLongMarkRuns: runs of more than 30 combining marks are
// normalized as one run, with no U+034F inserted (golang.org/x/text's
// stream-safe format inserts one). The expected strings are Python's
// unicodedata.normalize (Python 3.11) for each input; for these inputs
// JavaScript's String.prototype.normalize agrees (TestReferenceCorpus).
func TestNormalizeLongMarkRuns(t *testing.T) {
	acute, below := "\u0301", "\u0316" // classes 230 and 220
	cases := []struct {
		in       string
		nfc, nfd string // NFKC = NFC and NFKD = NFD for these
		what     string
	}{
		// the input: nothing composes with x, nothing changes
		{"x" + strings.Repeat(acute, 31), "x" + strings.Repeat(acute, 31), "x" + strings.Repeat(acute, 31), "issue 30"},
		{"e" + strings.Repeat(acute, 31), "é" + strings.Repeat(acute, 30), "e" + strings.Repeat(acute, 31), "composes the first"},
		// ordering across the whole run: all 20 ccc-220 marks first, then
		// a + the first acute compose (not blocked by lower classes)
		{"a" + strings.Repeat(below+acute, 20), "á" + strings.Repeat(below, 20) + strings.Repeat(acute, 19),
			"a" + strings.Repeat(below, 20) + strings.Repeat(acute, 20), "ordering"},
		{strings.Repeat(acute, 32) + "e", strings.Repeat(acute, 32) + "e", strings.Repeat(acute, 32) + "e", "no base"},
		{"\u1100\u1161\u11a8" + strings.Repeat(acute, 31), "\uac01" + strings.Repeat(acute, 31), "\u1100\u1161\u11a8" + strings.Repeat(acute, 31), "Hangul"},
		// 16 runes, 32 marks once decomposed
		{strings.Repeat("\u0344", 16), strings.Repeat("\u0308\u0301", 16), strings.Repeat("\u0308\u0301", 16), "decomposing marks"},
	}
	for _, c := range cases {
		for _, f := range []struct {
			form norm.Form
			want string
		}{{norm.NFC, c.nfc}, {norm.NFKC, c.nfc}, {norm.NFD, c.nfd}, {norm.NFKD, c.nfd}} {
			if got := unicodeNormalizer(f.form)(c.in); got != f.want {
				t.Errorf("%s (%s), form %v:\n got %+q\nwant %+q", c.what, c.in, f.form, got, f.want)
			}
		}
	}
}

// TestNormalizeSegmentMatchesNorm: the hand-written normalization of a
// segment equals golang.org/x/text's wherever that one is right (runs of
// at most 30 marks), on random bases and marks of many classes, also
// marks that decompose, compose with each other or are blocked.
func TestNormalizeSegmentMatchesNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 15))
	bases := []rune("aeiouAEOUnNcCsSzZwWyYαΑεΗιυωΩкКあかアカ가각\u1100\u0915\u05d0\u0627xX")
	var marks []rune
	for c := rune(0x300); c < 0x370; c++ {
		marks = append(marks, c)
	}
	marks = append(marks, 0x0344, 0x0591, 0x05b0, 0x05c1, 0x0610, 0x064b, 0x0651, 0x093c, 0x094d, 0x0f71, 0x0f72, 0x0f73, 0x0f75,
		0x1dc0, 0x20d0, 0x20e1, 0x302a, 0x3099, 0x309a, 0x1161, 0x11a8, 0xfe20, 0x1d165)
	n := 0
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		if r.IntN(10) > 0 {
			b.WriteRune(bases[r.IntN(len(bases))])
		}
		for k := r.IntN(8); k > 0; k-- {
			b.WriteRune(marks[r.IntN(len(marks))])
		}
		s := b.String()
		for _, f := range []norm.Form{norm.NFC, norm.NFD, norm.NFKC, norm.NFKD} {
			n++
			if got, want := normalizeSegment(f, s), f.String(s); got != want {
				t.Fatalf("form %v of %+q:\n got %+q\nwant %+q", f, s, got, want)
			}
		}
	}
	t.Logf("%d segments equal norm's", n)
}

// BenchmarkNormalize: the check for an inserted U+034F against norm alone,
// on ~64 KB of generated text without long mark runs (what every Qwen3
// encoding pays), in one run.
func BenchmarkNormalize(b *testing.B) {
	var sb strings.Builder
	for _, s := range tokref.Strings(3, 4000, nil) {
		sb.WriteString(s)
		if sb.Len() > 64<<10 {
			break
		}
	}
	text := sb.String()
	ours := unicodeNormalizer(norm.NFC)
	b.Run("path=norm", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			_ = norm.NFC.String(text)
		}
	})
	b.Run("path=longhaul", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			_ = ours(text)
		}
	})
}
