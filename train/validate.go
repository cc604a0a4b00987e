package train

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidBatch marks a batch refused for its values (a trainer server
// answers 400 or 422): training on it would give NaN weights, read out of
// range or train nothing.
var ErrInvalidBatch = errors.New("invalid batch")

// ErrInvalidInput marks any other call a trainer refuses for what it was
// asked (a checkpoint directory that holds no checkpoint, say): a trainer
// server answers 422, never 500, which is for faults of the trainer.
var ErrInvalidInput = errors.New("invalid trainer input")

// ValidateBatch checks what any trainer needs of a batch, naming the
// field, row and position of the first bad value: at least one row, rows
// of equal-length fields, masks 0 or 1 with at least one trainable token,
// finite advantages, and a microbatch plan that holds every row exactly
// once. (Old logprobs travel bit-exact and are checked by
// ValidateForModel, where the loss uses them.)
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
	if len(b.Rows) == 0 {
		return bad("rows: the batch has no rows")
	}
	trainable := 0
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
			trainable += int(r.Mask[j])
			if a := float64(r.Advantages[j]); math.IsNaN(a) || math.IsInf(a, 0) {
				return bad("row %d position %d: advantages: %v, want a finite number", i, j, a)
			}
			if o := float64(r.OldLogprobs[j]); oldFinite && (math.IsNaN(o) || math.IsInf(o, 0)) {
				return bad("row %d position %d: old_logprobs: %v, want a finite number", i, j, o)
			}
		}
	}
	if trainable == 0 {
		return bad("mask: no trainable tokens (every mask entry of the %d rows is 0)", len(b.Rows))
	}
	return validatePlan(b.Microbatches, len(b.Rows))
}

// validatePlan checks that a microbatch plan holds each of n rows exactly
// once: a row left out would not be trained, a row twice would be trained
// twice. nil is one microbatch of every row.
func validatePlan(plan [][]int, n int) error {
	if plan == nil {
		return nil
	}
	in := make([]int, n) // the microbatch each row is in, plus 1
	for k, mb := range plan {
		if len(mb) == 0 {
			return fmt.Errorf("%w: microbatches[%d] is empty", ErrInvalidBatch, k)
		}
		for _, i := range mb {
			switch {
			case i < 0 || i >= n:
				return fmt.Errorf("%w: microbatches[%d]: row %d outside [0, %d)", ErrInvalidBatch, k, i, n)
			case in[i] != 0:
				return fmt.Errorf("%w: microbatches[%d]: row %d is already in microbatches[%d]", ErrInvalidBatch, k, i, in[i]-1)
			}
			in[i] = k + 1
		}
	}
	for i, k := range in {
		if k == 0 {
			return fmt.Errorf("%w: microbatches: row %d is in no microbatch", ErrInvalidBatch, i)
		}
	}
	return nil
}
