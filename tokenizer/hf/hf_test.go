package hf

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// tiny is a hand-made byte-level BPE tokenizer.json: 256 byte tokens, two
// merges, and added tokens with lstrip/rstrip.
func tiny(t *testing.T, mutate func(string) string) string {
	t.Helper()
	enc, _ := byteLevelChars()
	var vocab []string
	for b := 0; b < 256; b++ {
		vocab = append(vocab, quote(string(enc[b]))+":"+strconv.Itoa(b))
	}
	vocab = append(vocab, `"ab":256`, `"abc":257`)
	js := `{"added_tokens":[{"id":258,"content":"<L>","lstrip":true,"rstrip":false,"single_word":false,"normalized":false,"special":true},
{"id":259,"content":"<R>","lstrip":false,"rstrip":true,"single_word":false,"normalized":false,"special":true},
{"id":260,"content":"<R>>","lstrip":false,"rstrip":false,"single_word":false,"normalized":false,"special":true}],
"normalizer":null,
"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
"model":{"type":"BPE","vocab":{` + strings.Join(vocab, ",") + `},"merges":["a b",["ab","c"]]}}`
	if mutate != nil {
		js = mutate(js)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func TestTinyMergesAndAddedTokens(t *testing.T) {
	tok, err := Load(tiny(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in   string
		want []int32
	}{
		{"abc", []int32{257}},
		{"abab", []int32{256, 256}},
		{"x  <L>y", []int32{'x', 258, 'y'}},   // lstrip eats the spaces before <L>
		{"<R>  y", []int32{259, 'y'}},         // rstrip eats the spaces after <R>
		{"<R>>z", []int32{260, 'z'}},          // longest added token wins
		{strings.Repeat("ab", 40) + "c", nil}, // long piece: heap merge path
	}
	for _, c := range cases {
		got := tok.Encode(c.in)
		if c.want == nil {
			c.want = append(slices.Repeat([]int32{256}, 39), 257)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := tok.Decode([]int32{257, 258, 0xE4}); got != "abc<L>\uFFFD" {
		t.Errorf("Decode = %q", got)
	}
}

func TestLoadErrorsNameFileAndPath(t *testing.T) {
	cases := []struct {
		mutate func(string) string
		want   string
	}{
		{func(s string) string { return strings.Replace(s, `"a b"`, `"a zz"`, 1) }, "model.merges[0]"},
		{func(s string) string { return strings.Replace(s, `"type":"BPE"`, `"type":"WordPiece"`, 1) }, "model.type"},
		{func(s string) string {
			return strings.Replace(s, `"pre_tokenizer":{"type":"ByteLevel"`, `"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?<"},"behavior":"Isolated"}]},"x":{"type":"ByteLevel"`, 1)
		}, "pre_tokenizer.pretokenizers[0].pattern"},
		{func(s string) string {
			return strings.Replace(s, `"normalizer":null`, `"normalizer":{"type":"Strip"}`, 1)
		}, "normalizer.type"},
	}
	for _, c := range cases {
		_, err := Load(tiny(t, c.mutate))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tokenizer.json") {
			t.Errorf("want error naming tokenizer.json and %s, got %v", c.want, err)
		}
	}
	dir := tiny(t, nil)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": 5}`), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json: eos_token") {
		t.Errorf("bad eos_token: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": {"content": "<R>"}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [259, 7]}`), 0o644)
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.StopTokens(); !slices.Equal(got, []int32{259, 7}) {
		t.Errorf("StopTokens = %v", got)
	}
}

// TestCommonPrefix: the block-wise common prefix equals the byte loop's,
// for differences on and around every block boundary.
func TestCommonPrefix(t *testing.T) {
	base := strings.Repeat("abcdefgh", 1200) // 9600 bytes: crosses 4096 and 512 blocks
	for _, n := range []int{0, 1, 63, 64, 65, 511, 512, 513, 4095, 4096, 4097, 8191, 8192, 9599, 9600} {
		for _, d := range []int{0, 1, 7, 64, 500} {
			p := max(0, n-d)
			b := base[:p] + "Z" + base[p:]
			want := 0
			for want < len(base) && want < len(b) && base[want] == b[want] {
				want++
			}
			if got := commonPrefix(base, b[:min(len(b), n+1)]); got != min(want, n+1) {
				t.Fatalf("commonPrefix at %d: %d, want %d", p, got, min(want, n+1))
			}
		}
	}
}
