package model

import (
	"math"
	"testing"
)

// TestBatchMatchesSequences: a packed training batch computes, for every
// trained row, the logits the inference forward computes for that
// sequence alone, bit for bit.
func TestBatchMatchesSequences(t *testing.T) {
	for name, cfg := range map[string]Config{"builtin": smallConfig(), "qwen3": qwen3Small(), "llama": llamaSmall(), "qwen2": qwen2Small()} {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfg, 41, 4)
			seqs := testSeqs(t, m, []int{17, 50, 33, 5, 64}, 7)
			ws := m.workspace(0, 200, true)
			b := &ws.b
			b.reset()
			for i := range seqs {
				b.add(&seqs[i], i)
			}
			m.forwardBatch(ws, b)
			V := cfg.Vocab
			got := append([]float32(nil), ws.logits[:len(b.sel)*V]...)
			inf := m.Clone()
			for i, r := range b.sel {
				s := seqs[b.selSeq[i]]
				lg, err := inf.Logits(s.Tokens)
				if err != nil {
					t.Fatal(err)
				}
				row := int(b.selT[i]) - 1
				for j := range V {
					if math.Float32bits(got[i*V+j]) != math.Float32bits(lg[row*V+j]) {
						t.Fatalf("packed row %d (sequence %d position %d) logit %d: %v, alone %v", r, b.selSeq[i], row, j, got[i*V+j], lg[row*V+j])
					}
				}
			}
		})
	}
}

// TestBatchGradientMatchesSequences: the gradient of a packed batch equals,
// bit for bit, the gradient computed one sequence per batch, tied or
// untied.
func TestBatchGradientMatchesSequences(t *testing.T) {
	for _, lc := range []LossConfig{{Kind: LossPG, KLCoef: 0.1}, {Kind: LossSFT}} {
		for _, cfg := range []Config{llamaSmall(), smallConfig(), qwen3Small()} {
			m := testModel(t, cfg, 43, 4)
			seqs := testSeqs(t, m, []int{17, 50, 33, 5, 64, 90, 12}, 9)
			seqs[3].Mask = make([]uint8, len(seqs[3].Mask)) // a sequence with nothing to train
			one := m.Clone()
			one.packMax = 1 // every sequence a batch of its own
			ga, gb := make([]float32, m.NumParams()), make([]float32, m.NumParams())
			sa, err := m.gradient(t.Context(), seqs, lc, ga)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := one.gradient(t.Context(), seqs, lc, gb)
			if err != nil {
				t.Fatal(err)
			}
			if sa.Loss != sb.Loss {
				t.Fatalf("%s: loss %v packed, %v one by one", lc.Kind, sa.Loss, sb.Loss)
			}
			for i := range ga {
				if math.Float32bits(ga[i]) != math.Float32bits(gb[i]) {
					t.Fatalf("%s %s: gradient element %d: %v packed, %v one by one", cfg.Family, lc.Kind, i, ga[i], gb[i])
				}
			}
		}
	}
}
