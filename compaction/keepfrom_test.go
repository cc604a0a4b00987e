package compaction

import (
	"math/rand/v2"
	"testing"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
)

// keepFromList is keepFrom as a list of turn starts, the plain reading of
// its contract, for TestKeepFrom to compare against.
func keepFromList(msgs []Message, head, k int) int {
	var starts []int
	for i := head; i < len(msgs); i++ {
		if i == head || msgs[i].Role == lhtok.RoleAssistant {
			starts = append(starts, i)
		}
	}
	switch {
	case len(starts) == 0:
		return len(msgs)
	case k < 1:
		if last := starts[len(starts)-1]; msgs[last].Role == lhtok.RoleAssistant {
			return last + 1
		} else {
			return last
		}
	case k >= len(starts):
		return head
	}
	return starts[len(starts)-k]
}

// TestKeepFrom checks the backward scan against the list of turn starts
// on random conversations, every head and every k from -1 to past the
// number of turns.
func TestKeepFrom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	roles := []string{lhtok.RoleSystem, lhtok.RoleUser, lhtok.RoleAssistant, lhtok.RoleTool}
	for range 500 {
		msgs := make([]Message, r.IntN(12))
		for i := range msgs {
			msgs[i].Role = roles[r.IntN(len(roles))]
		}
		for head := 0; head <= len(msgs); head++ {
			for k := -1; k <= len(msgs)+1; k++ {
				if got, want := keepFrom(msgs, head, k), keepFromList(msgs, head, k); got != want {
					t.Fatalf("keepFrom(%v, head %d, k %d) = %d, want %d", msgs, head, k, got, want)
				}
			}
		}
	}
	conv := make([]Message, 20)
	for i := range conv {
		conv[i].Role = roles[1+i%2]
	}
	if n := testing.AllocsPerRun(100, func() { keepFrom(conv, 1, 3) }); n != 0 {
		t.Fatalf("keepFrom allocates %v times", n)
	}
}
