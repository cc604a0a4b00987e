package runlog

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestCloseDuringAppends closes the log while 16 writers append: every
// Append returns (acknowledged or ErrClosed, none hangs), every
// acknowledged append is in the reopened log, and an Append after Close
// is refused with ErrClosed.
func TestCloseDuringAppends(t *testing.T) {
	const writers = 16
	for round := range 5 {
		dir := t.TempDir()
		l := openLog(t, dir, Options{})
		g := NewGroupID(testSeed, 0, 0)
		setup := []Event{RunStarted{Seed: testSeed, Mode: "throughput"}, PromptAdmitted{Group: g, Size: writers}}
		for m := range writers {
			setup = append(setup, AttemptStarted{Rollout: RolloutID{g, uint16(m)}, Attempt: 1})
		}
		mustAppend(t, l, setup...)
		var (
			mu    sync.Mutex
			acked []Offset
			wg    sync.WaitGroup
			first = make(chan struct{}) // closed at the first acknowledgement
			once  sync.Once
		)
		for m := range writers {
			wg.Go(func() {
				id := RolloutID{g, uint16(m)}
				var ctxLen uint32
				for c := uint32(0); c < 200; c++ {
					off, err := l.Append(context.Background(), benchCall(id, c, ctxLen, 4, 2))
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						t.Errorf("append: %v", err)
						return
					}
					mu.Lock()
					acked = append(acked, off)
					mu.Unlock()
					once.Do(func() { close(first) })
					ctxLen += 6
				}
			})
		}
		// Close once appends are acknowledged (an event, not a guess of
		// how long a busy machine takes to get there), at a point that
		// moves with the round.
		select {
		case <-first:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: no append acknowledged in a minute", round)
		}
		time.Sleep(time.Duration(round) * 2 * time.Millisecond)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("an Append did not return after Close")
		}
		if _, err := l.Append(context.Background(), benchCall(RolloutID{g, 0}, 999, 0, 1, 1)); !errors.Is(err, ErrClosed) {
			t.Fatalf("Append after Close: %v, want ErrClosed", err)
		}
		if len(acked) == 0 {
			t.Fatalf("round %d: no append was acknowledged before Close", round)
		}
		got, _ := reopen(t, dir)
		for _, off := range acked {
			if _, found := slices.BinarySearch(got, off); !found {
				t.Fatalf("round %d: acknowledged append at %d is not in the reopened log", round, off)
			}
		}
	}
}
