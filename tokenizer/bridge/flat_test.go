package bridge

import (
	"context"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
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
	if raceEnabled {
		t.Skip("allocation check: run without -race (.ci/steps/13-tokenizers.sh)")
	}
	c := loadChat(t, "qwen3")
	opt := tokenizer.RenderOptions{Tools: tools, Kwargs: map[string]any{"enable_thinking": true}}
	perTurn := func(target int) (bytes uint64, hunk int) {
		br, sampled, msg, next := ledger(t, c, opt, target, false)
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

// TestSeqTurnAllocFlat: the same for Llama 3.1 and DeepSeek-V3, rendered
// in Go by chat/seq.go (BenchmarkBridgeTurn's turns; their records never
// diverge): the turn at ~32k tokens allocates at most 4 KiB more than at
// ~4k. Rendering into fresh chunk arrays instead of the recycled
// encoding's, or writing the whole text instead of the part after the
// reused messages, allocates ~20 KiB or ~260 KiB more at 32k.
func TestSeqTurnAllocFlat(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation check: run without -race (.ci/steps/13-tokenizers.sh)")
	}
	for _, model := range []string{"llama3_1", "deepseek_v3"} {
		t.Run(model, func(t *testing.T) {
			c := loadChat(t, model)
			opt := tokenizer.RenderOptions{Tools: tools}
			perTurn := func(target int) uint64 {
				br, sampled, msg, next := ledger(t, c, opt, target, model == "deepseek_v3")
				turn := replay(t, br, sampled, msg, next)
				turn()
				const n = 20
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				for range n {
					turn()
				}
				runtime.ReadMemStats(&m1)
				return (m1.TotalAlloc - m0.TotalAlloc) / n
			}
			small, large := perTurn(4000), perTurn(32000)
			t.Logf("bytes allocated per turn: %d at ~4k tokens, %d at ~32k", small, large)
			if large > small+4096 {
				t.Fatalf("a turn allocates %d bytes at ~32k tokens, %d at ~4k: its cost grows with the history", large, small)
			}
		})
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

// hintChat records the reuse hints the bridge passes to a RecyclingChat.
type hintChat struct {
	chat.Chat
	got []tokenizer.Reuse
}

func (h *hintChat) RenderEncodingInto(ctx context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions, r tokenizer.Reuse) (*tokenizer.Encoding, error) {
	h.got = append(h.got, r)
	return h.Chat.RenderEncodingInto(ctx, msgs, opt, r)
}

// TestReuseHints: the bridge promises the chat its history unchanged (Keep:
// the messages before the new ones, for both renders) and tells it how many
// ids of the recycled encoding it writes into are the history's already
// (SpareSame); without them a turn compares every message and copies every
// id again (TestTurnAllocFlat does not see either: neither allocates).
// Over a 12-turn Qwen3 conversation (a real chat behind a recorder; a user
// query every fourth turn), from the third turn on both renders are given
// at least half the history's ids except right after a query, and every
// prompt equals the full path's.
func TestReuseHints(t *testing.T) {
	c := loadChat(t, "qwen3")
	opt := tokenizer.RenderOptions{Tools: tools, Kwargs: map[string]any{"enable_thinking": true}}
	msgs := []tokenizer.Message{{Role: "system", Content: "You keep a ledger."}, {Role: "user", Content: "Start."}}
	hc := &hintChat{Chat: c}
	fast, err1 := New(context.Background(), hc, Append, opt, msgs)
	full, err2 := New(context.Background(), c, Append, opt, msgs)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	full.full = true
	for turn := range 12 {
		msg, next := assistantTurn(turn, false)
		sampled := sample(t, c, opt, fast.Messages(), msg)
		n, prompt := len(fast.Messages()), len(fast.Prompt())
		hc.got = hc.got[:0]
		a, errA := fast.Next(context.Background(), sampled, msg, next)
		b, errB := full.Next(context.Background(), sampled, msg, next)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("turn %d: fast path differs from the full render", turn)
		}
		if len(hc.got) != 2 || hc.got[0].Keep != n || hc.got[1].Keep != n+1 {
			t.Fatalf("turn %d: %d renders, Keep %v; want 2 renders keeping %d and %d messages", turn, len(hc.got), hc.got, n, n+1)
		}
		if turn < 2 || turn%4 == 0 {
			// no recycled encodings of the history yet; or the turn
			// before ended with a user query, whose render re-rendered
			// the turns since the previous query (Qwen3 drops their
			// <think> blocks): little was left to share
			continue
		}
		for i, r := range hc.got {
			if r.Spare == nil || r.SpareSame < prompt/2 {
				t.Fatalf("turn %d render %d: spare %v shares %d ids with the last render, of a %d-token prompt", turn, i, r.Spare != nil, r.SpareSame, prompt)
			}
		}
	}
}
