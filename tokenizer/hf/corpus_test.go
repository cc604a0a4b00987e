package hf

import (
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/race"

	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestReferenceCorpus encodes the texts of the independent corpus
// (test/tokenizers/corpus.py: combining-mark runs past 30 marks,
// noncharacters, controls, emoji ZWJ sequences, CJK, RTL and bidi
// controls, digit and whitespace runs, special tokens) and compares the
// ids and their decoding with @huggingface/transformers.
func TestReferenceCorpus(t *testing.T) {
	if race.Enabled {
		t.Skip("compares the real tokenizers over a corpus, for tens of seconds under -race: run without it (.ci/steps/13-tokenizers.sh does)")
	}
	items, refs := tokref.Corpus(t)
	toks := map[string]*Tokenizer{}
	bad, n := 0, map[string]int{}
	for _, it := range items {
		if it.Kind != "text" {
			continue
		}
		tok := toks[it.Model]
		if tok == nil {
			var err error
			if tok, err = Load(tokref.ModelDir(t, it.Model)); err != nil {
				t.Fatal(err)
			}
			toks[it.Model] = tok
		}
		n[it.Model]++
		ref := refs[it.ID]
		got := tok.Encode(it.Text)
		if !slices.Equal(got, ref.IDs) {
			bad++
			if bad <= 5 {
				t.Errorf("%s: encode %q:\n got %v\nwant %v", it.ID, it.Text, got, ref.IDs)
			}
			continue
		}
		if dec := tok.Decode(got); dec != ref.Decoded {
			bad++
			if bad <= 5 {
				t.Errorf("%s: decode %q: got %q want %q", it.ID, it.Text, dec, ref.Decoded)
			}
		}
	}
	if len(n) == 0 {
		t.Fatal("the corpus has no texts")
	}
	// The input, first in Qwen3's texts: "x" and 31 combining
	// acute accents is 32 ids to the reference (34 with a U+034F).
	if it, ref := items[0], refs[items[0].ID]; it.Model == "qwen3" && (it.Text != "x"+strings.Repeat("\u0301", 31) || len(ref.IDs) != 32) {
		t.Errorf("the corpus lost its first case: %+q, %d ids", it.Text, len(ref.IDs))
	}
	if bad > 0 {
		t.Fatalf("%d texts differ from @huggingface/transformers", bad)
	}
	t.Logf("texts identical to @huggingface/transformers (ids and decoding): %v", n)
}
