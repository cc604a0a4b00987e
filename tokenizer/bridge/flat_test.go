package bridge

import (
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// TestTurnAllocFlat: the memory one turn allocates does not grow with the
// history. The turn (BenchmarkBridgeTurn's: a tool call and its result
// after a Qwen3 conversation whose record has diverged from the fresh
// render by the <think> blocks it dropped) is measured at about 4k and 32k
// tokens of history, each run on a copy of the same bridge as the
// benchmark does; the 32k turn may allocate at most 4 KiB more. A turn
// that copies the history (the diverged hunk, the message chunks, the
// prompt) allocates ~100 KiB more at 32k.
func TestTurnAllocFlat(t *testing.T) {
	c := loadChat(t, "qwen3")
	opt := tokenizer.RenderOptions{Tools: tools, Kwargs: map[string]any{"enable_thinking": true}}
	perTurn := func(target int) (bytes uint64, hunk int) {
		br, sampled, msg, next := ledger(t, c, opt, target)
		turn := replay(t, br, sampled, msg, next)
		tn := turn()
		if tn.Diverged == nil {
			t.Fatal("the measured turn does not diverge: the test lost its point")
		}
		const n = 20
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range n {
			turn()
		}
		runtime.ReadMemStats(&m1)
		return (m1.TotalAlloc - m0.TotalAlloc) / n, len(tn.Diverged.Inserted)
	}
	small, hunkSmall := perTurn(4000)
	large, hunkLarge := perTurn(32000)
	t.Logf("bytes allocated per turn: %d at ~4k tokens (diverged hunk %d tokens), %d at ~32k (hunk %d)", small, hunkSmall, large, hunkLarge)
	if hunkLarge < 4*hunkSmall {
		t.Fatalf("the diverged hunk does not grow with the history (%d, %d): the test lost its point", hunkSmall, hunkLarge)
	}
	if large > small+4096 {
		t.Fatalf("a turn allocates %d bytes at ~32k tokens, %d at ~4k: its cost grows with the history", large, small)
	}
}

// held keeps every turn a bridge handed out with a deep copy taken when
// it was handed out: the bridge must never write memory it handed out
// (the record grows in place, append mode's Inserted tokens are kept and
// extended across turns).
type held struct{ turns, copies []Turn }

func (h *held) add(t Turn) {
	h.turns = append(h.turns, t)
	cp := func(d *Diff) *Diff {
		if d == nil {
			return nil
		}
		return &Diff{Prefix: d.Prefix, Removed: slices.Clone(d.Removed), Inserted: slices.Clone(d.Inserted)}
	}
	h.copies = append(h.copies, Turn{Prompt: slices.Clone(t.Prompt), Diverged: cp(t.Diverged), Boundary: cp(t.Boundary)})
}

func (h *held) check(tb testing.TB) {
	tb.Helper()
	for i := range h.turns {
		if !reflect.DeepEqual(h.turns[i], h.copies[i]) {
			tb.Fatalf("turn %d, handed out %d turns ago, changed since", i, len(h.turns)-1-i)
		}
	}
}
