package data

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"

	"github.com/longhaul-rl/longhaul/internal/rng"
)

// Cursor is the position of the next prompt to admit: the Pos-th prompt
// of epoch Epoch's order. It is a plain value so the run log can record it
// (PromptAdmitted.Epoch, PromptAdmitted.Cursor); the zero Cursor is the
// start of a run.
type Cursor struct {
	Epoch uint32
	Pos   uint64
}

func (c Cursor) String() string { return fmt.Sprintf("epoch %d pos %d", c.Epoch, c.Pos) }

// Less orders cursors by admission.
func (c Cursor) Less(d Cursor) bool {
	return c.Epoch < d.Epoch || (c.Epoch == d.Epoch && c.Pos < d.Pos)
}

// ErrCursor is matched by the error of a cursor that does not fit the
// dataset (for example, a resumed run whose dataset shrank).
var ErrCursor = errors.New("cursor out of range")

// Order is the admission order of a dataset: each epoch a permutation of
// all prompts, drawn from rng stream (seed, "shuffle", epoch), or the
// dataset order when not shuffled. Next is a pure function of (dataset,
// seed, shuffle, cursor): resuming from a logged cursor continues the
// exact sequence. Order caches one epoch's permutation; it is safe for
// concurrent use.
type Order struct {
	ds      Dataset
	seed    uint64
	shuffle bool

	mu    sync.Mutex
	epoch uint32
	perm  []int // nil until first needed, then the permutation of epoch
}

// NewOrder returns the admission order of ds under seed.
func NewOrder(ds Dataset, seed uint64, shuffle bool) (*Order, error) {
	if ds.Len() == 0 {
		return nil, errors.New("data: empty dataset")
	}
	return &Order{ds: ds, seed: seed, shuffle: shuffle}, nil
}

// Len is the number of prompts in one epoch.
func (o *Order) Len() int { return o.ds.Len() }

// Index returns the dataset index of the prompt at c.
func (o *Order) Index(c Cursor) (int, error) {
	n := o.ds.Len()
	if c.Pos >= uint64(n) {
		return 0, fmt.Errorf("data: %w: %v of a %d-prompt epoch", ErrCursor, c, n)
	}
	if !o.shuffle {
		return int(c.Pos), nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.perm == nil || o.epoch != c.Epoch {
		o.perm, o.epoch = Permutation(o.seed, c.Epoch, n), c.Epoch
	}
	return o.perm[c.Pos], nil
}

// Normalize maps the cursor past an epoch's last prompt (what the run
// log holds after admitting it: Pos == Len) to the start of the next
// epoch, whose order is that epoch's own seeded permutation. Any other
// cursor is returned as it is.
func (o *Order) Normalize(c Cursor) Cursor {
	// Only Pos == Len: a cursor further out means the dataset shrank
	// under a logged run, which Next reports as ErrCursor.
	if c.Pos == uint64(o.ds.Len()) && c.Epoch < math.MaxUint32 {
		return Cursor{Epoch: c.Epoch + 1}
	}
	return c
}

// Left returns how many prompts remain before epoch maxEpochs starts,
// counting from c (normalized); maxEpochs 0 means no limit (math.MaxInt64).
func (o *Order) Left(c Cursor, maxEpochs int) int64 {
	if maxEpochs <= 0 {
		return math.MaxInt64
	}
	c = o.Normalize(c)
	if uint64(c.Epoch) >= uint64(maxEpochs) {
		return 0
	}
	n := int64(o.ds.Len())
	return (int64(maxEpochs)-int64(c.Epoch))*n - int64(c.Pos)
}

// Next returns the prompt at c and the cursor after it; the cursor after
// the last prompt of an epoch is the start of the next epoch, so a cursor
// returned by Next always points at a prompt. A c past the end of its
// epoch is normalized first, so callers log Normalize(c) with the prompt.
func (o *Order) Next(c Cursor) (Prompt, Cursor, error) {
	c = o.Normalize(c)
	i, err := o.Index(c)
	if err != nil {
		return Prompt{}, c, err
	}
	p, err := o.ds.Prompt(i)
	if err != nil {
		return Prompt{}, c, fmt.Errorf("data: prompt at %v: %w", c, err)
	}
	next := Cursor{Epoch: c.Epoch, Pos: c.Pos + 1}
	if next.Pos == uint64(o.ds.Len()) {
		if c.Epoch == math.MaxUint32 {
			return Prompt{}, c, fmt.Errorf("data: %w: last epoch", ErrCursor)
		}
		next = Cursor{Epoch: c.Epoch + 1}
	}
	return p, next, nil
}

// Permutation returns epoch's order of n prompts under seed: a
// Fisher–Yates shuffle driven by PCG stream (seed, "shuffle", epoch). It is
// written out here rather than taken from math/rand/v2's Perm so the order
// can never change under a Go upgrade, which would break resume.
func Permutation(seed uint64, epoch uint32, n int) []int {
	src := rng.NewPCG(rng.Derive(seed, "shuffle", uint64(epoch)))
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := int(below(src, uint64(i)+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// below returns a uniform value in [0, n) by Lemire's multiply-and-reject
// method (unbiased).
func below(src *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}
