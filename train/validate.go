package train

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidBatch marks a batch refused for its values (a trainer server
// answers 422): training on it would give NaN weights or read out of range.
var ErrInvalidBatch = errors.New("invalid batch")

// ValidateBatch checks what any trainer needs of a batch, naming the
// field, row and position of the first bad value: rows of equal-length
// fields, masks 0 or 1, finite advantages. (Old logprobs travel bit-exact
// and are checked by ValidateForModel, where the loss uses them.)
func ValidateBatch(b Batch) error { return validate(b, 0, 0, false) }

// ValidateForModel adds the model's limits: token ids in [0, vocab), rows
// no longer than the context, and for the policy-gradient loss finite old
// logprobs.
func ValidateForModel(b Batch, vocab, context int) error {
	return validate(b, vocab, context, b.Loss == LossPG || b.Loss == "")
}

func validate(b Batch, vocab, context int, oldFinite bool) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidBatch}, a...)...)
	}
	for i, r := range b.Rows {
		n := len(r.Tokens)
		if len(r.Mask) != n || len(r.Advantages) != n || len(r.OldLogprobs) != n {
			return bad("row %d: tokens %d, mask %d, advantages %d, old_logprobs %d differ in length", i, n, len(r.Mask), len(r.Advantages), len(r.OldLogprobs))
		}
		if context > 0 && n > context {
			return bad("row %d: tokens: %d tokens, longer than the context of %d", i, n, context)
		}
		for j := range n {
			if vocab > 0 && (r.Tokens[j] < 0 || int(r.Tokens[j]) >= vocab) {
				return bad("row %d position %d: tokens: id %d outside [0, %d)", i, j, r.Tokens[j], vocab)
			}
			if r.Mask[j] > 1 {
				return bad("row %d position %d: mask: %d, want 0 or 1", i, j, r.Mask[j])
			}
			if a := float64(r.Advantages[j]); math.IsNaN(a) || math.IsInf(a, 0) {
				return bad("row %d position %d: advantages: %v, want a finite number", i, j, a)
			}
			if o := float64(r.OldLogprobs[j]); oldFinite && (math.IsNaN(o) || math.IsInf(o, 0)) {
				return bad("row %d position %d: old_logprobs: %v, want a finite number", i, j, o)
			}
		}
	}
	return nil
}
