package hf

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/race"

	"github.com/dlclark/regexp2"

	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// handCases are the shapes where the patterns' alternatives compete:
// contractions in both cases, digit runs, whitespace runs before text, line
// breaks inside whitespace, a space before punctuation, marks, CJK/kana,
// emoji, invalid UTF-8.
var handCases = []string{
	"", " ", "  ", "a", " a", "  a", "\ta", "\na", "\r\n", " \n ", "\n \n  x", " \r\n\t y", "x  ", "x \t",
	"don't I'LL we've 'S 'Re 'rE 'LL 'lL 'd 'D 'x ' '' 's's", "ſ 'ſ 'K 'K", "''re", "'\u0301s",
	"1 12 123 1234 12345 ١٢٣٤ ⅫⅫⅫⅫ ½¾", "a1b22c333", " 123", "x.123", "\u00a0\u00a0x", "\u3000中文",
	"中文字符和日本語のテキスト、カタカナ。", "한국어 텍스트", "👩‍👩‍👧‍👦 👍🏽 🇯🇵 1️⃣", "e\u0301\u0302 \u0301a \u0301 \u0301\u0302",
	"!!x ?!abc ...\n\n ##Title\r\n", " (foo) [bar]\n", "a_b-c.d/e\\f", "$HOME", "`code`", "'quote'",
	"\xff\xfe", "a\xffb", "\xe4\xb8", " \xff", "x\v\f\u0085\u2028y", "\u200b\ufeff", "\x00\x01 \x7f",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n", "    \t\t  ", "end   ", "\n\n\n", "a\n\n\nb",
}

// randomText draws runes from the classes the patterns distinguish.
func randomText(r *rand.Rand) string {
	pools := []string{"abcXYZ", "éÜßİſKǅ", "0123456789", "١٢٣Ⅻ½", " ", "\t\n\r\v\f\u0085\u00a0\u3000\u2028",
		"'", "sStTrReEvVmMlLdD", ".,!?;:\"()[]{}<>/\\-_#$%&*+=@^`|~", "—«»“”…", "\u0300\u0301\u0345\u20dd",
		"中文字龥一日本語", "ぁあゟ゠アヿ", "한국", "👍🏽🇯❤️\u200d", "\x00\x01\x7f", "\xff\xe4\xb8"}
	var b strings.Builder
	for n := r.IntN(24); n > 0; n-- {
		p := []rune(pools[r.IntN(len(pools))])
		if r.IntN(9) == 0 { // raw bytes, possibly splitting a sequence
			b.WriteByte(byte(r.IntN(256)))
			continue
		}
		b.WriteRune(p[r.IntN(len(p))])
	}
	return b.String()
}

// checkHandSplit compares every hand matcher with regexp2 on s.
func checkHandSplit(t *testing.T, res map[string]*regexSplit, s string) {
	t.Helper()
	for src, m := range handPatterns {
		want := res[src].split(nil, s)
		got := (&handSplit{at: m, behavior: "Isolated"}).split(nil, s)
		if !slices.Equal(got, want) {
			t.Fatalf("pattern %q on %q:\n hand   %q\n regexp %q", src, s, got, want)
		}
	}
}

func regexSplits(t testing.TB) map[string]*regexSplit {
	res := map[string]*regexSplit{}
	for src := range handPatterns {
		res[src] = &regexSplit{re: regexp2.MustCompile(src, regexp2.None), behavior: "Isolated"}
	}
	return res
}

// TestHandSplitMatchesRegexp: each hand-written split equals regexp2 on
// the same pattern, on the handmade cases, the parity corpus generator's
// strings and random text over the classes the patterns tell apart.
func TestHandSplitMatchesRegexp(t *testing.T) {
	res := regexSplits(t)
	for _, s := range handCases {
		checkHandSplit(t, res, s)
	}
	n := 2000
	if testing.Short() {
		n = 300
	}
	for _, s := range tokref.Strings(7, n, []string{"<|im_end|>"}) {
		checkHandSplit(t, res, s)
	}
	r := rand.New(rand.NewPCG(13, 4))
	for range n {
		checkHandSplit(t, res, randomText(r))
	}
}

// TestRealTokenizersUseHandSplit: the patterns in the installed Qwen3,
// Llama 3.1 and DeepSeek-V3 files are the ones the hand splits were
// written for (a changed character would quietly fall back to regexp2),
// and an unknown pattern still runs on regexp2.
func TestRealTokenizersUseHandSplit(t *testing.T) {
	if race.Enabled {
		t.Skip("compares the real tokenizers over a corpus, for tens of seconds under -race: run without it (.ci/steps/13-tokenizers.sh does)")
	}
	for _, model := range tokref.Models {
		tok, err := Load(tokref.ModelDir(t, model))
		if err != nil {
			t.Fatal(err)
		}
		if len(tok.pre) == 0 {
			t.Fatalf("%s: no pre-tokenizer", model)
		}
		for i, s := range tok.pre {
			if _, ok := s.(*handSplit); !ok {
				t.Errorf("%s: pre-tokenizer step %d is %T, want the hand split", model, i, s)
			}
		}
	}
	steps, _, err := parsePreTokenizer([]byte(`{"type":"Split","pattern":{"Regex":"\\d+|\\s+"},"behavior":"Isolated","invert":false}`), "pre_tokenizer")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := steps[0].(*regexSplit); !ok {
		t.Fatalf("unknown pattern: got %T, want the regexp2 split", steps[0])
	}
}

// FuzzHandSplit: for any input each hand split equals regexp2.
func FuzzHandSplit(f *testing.F) {
	for _, s := range handCases {
		f.Add(s)
	}
	res := regexSplits(f)
	f.Fuzz(func(t *testing.T, s string) {
		checkHandSplit(t, res, s)
	})
}
