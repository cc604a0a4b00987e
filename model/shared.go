package model

import "math/rand/v2"

// What model/llama shares with this package rather than keeping copies:
// the reductions (one fixed 8-lane order; SIMD where the build has it,
// equal bit for bit to the portable form), the log-sum-exp of a logits row
// and the sampler. Exported here as thin forms of the code this package
// runs itself, so both networks sample and reduce identically.

// SumLanes is Σ x in the fixed 8-lane order.
func SumLanes(x []float32) float32 { return sumLanes(x) }

// DotLanes is Σ a·b (len(b) ≥ len(a)) in the fixed 8-lane order, each
// product rounded first.
func DotLanes(a, b []float32) float32 { return dotLanes(a, b) }

// LogSumExp of one logits row: max + log Σ exp(x − max); e receives
// exp(x − max) and sum is Σ e.
func LogSumExp(row, e []float32) (lse, sum float32) { return logSumExp(row, e) }

// Sampler draws tokens from logits rows as this package's generator does;
// one per request (it keeps scratch, so no per-token allocation after the
// first).
type Sampler struct{ sc sampler }

// Sample draws a token from row (greedy at temp ≤ 0; else temperature,
// top-k and top-p as in SampleRequest, from r) and returns it with its
// logprob under the raw distribution (temperature 1, unfiltered), which
// is what the trainer computes.
func (s *Sampler) Sample(row []float32, temp float32, topK int, topP float32, r *rand.Rand) (int32, float32) {
	if len(s.sc.e) < len(row) {
		s.sc.e = make([]float32, len(row))
	}
	lse, _ := logSumExp(row, s.sc.e)
	var tok int32
	if temp <= 0 {
		tok = argmax(row)
	} else {
		tok = s.sc.draw(row, s.sc.e, temp, topK, topP, r)
	}
	return tok, row[tok] - lse
}
