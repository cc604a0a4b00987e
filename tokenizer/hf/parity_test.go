package hf

import (
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/longhaul-rl/longhaul/internal/race"

	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestEncodeParity encodes >= 5,000 generated strings per real tokenizer and
// compares ids and decoded text with @huggingface/transformers.
func TestEncodeParity(t *testing.T) {
	if race.Enabled {
		t.Skip("compares the real tokenizers over a corpus, for tens of seconds under -race: run without it (.ci/steps/13-tokenizers.sh does)")
	}
	n := 400
	if tokref.Full() {
		n = 5000
	}
	for _, model := range tokref.Models {
		t.Run(model, func(t *testing.T) {
			tok, err := Load(tokref.ModelDir(t, model))
			if err != nil {
				t.Fatal(err)
			}
			var specials []string
			for _, a := range tok.Special() {
				specials = append(specials, a.Content)
			}
			in := tokref.Strings(uint64(len(model)), n, specials)
			in = append(in, unreachable(tok, 200)...)
			var ref []struct {
				IDs  []int32 `json:"ids"`
				Text string  `json:"text"`
			}
			tokref.Run(t, in, &ref, "encode", model)
			if len(ref) != len(in) {
				t.Fatalf("reference answered %d of %d", len(ref), len(in))
			}
			bad := 0
			for i, s := range in {
				got := tok.Encode(s)
				if !slices.Equal(got, ref[i].IDs) {
					bad++
					if bad <= 5 {
						t.Errorf("encode %q:\n got %v\nwant %v", s, got, ref[i].IDs)
					}
					continue
				}
				if dec := tok.Decode(got); dec != ref[i].Text {
					bad++
					if bad <= 5 {
						t.Errorf("decode %q: got %q want %q", s, dec, ref[i].Text)
					}
				}
			}
			// decode(encode(x)) == x, after the file's normalizer (Qwen3: NFC).
			for _, s := range in {
				want := s
				for _, n := range tok.norm {
					want = n(want)
				}
				if got := tok.Decode(tok.Encode(s)); got != want {
					bad++
					if bad <= 5 {
						t.Errorf("round trip %q: got %q", want, got)
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d strings differ from the reference", bad, len(in))
			}
			t.Logf("%d strings identical to @huggingface/transformers", len(in))
		})
	}
}

// unreachable returns up to n vocabulary entries (as text) that the merges
// do not build as one token: with Llama 3's ignore_merges they still encode
// as one token, without it they do not; generated text rarely hits them.
func unreachable(tok *Tokenizer, n int) []string {
	var out []string
	for id := int32(0); int(id) < len(tok.decode) && len(out) < n; id++ {
		raw := tok.decode[id]
		if raw == "" || len(raw) > heapThreshold || !utf8.ValidString(raw) || tok.model.vocab[raw] != id {
			continue
		}
		if got, _ := tok.model.mergeShort(nil, tok.model.symbols(nil, raw)); len(got) != 1 {
			out = append(out, raw)
		}
	}
	return out
}
