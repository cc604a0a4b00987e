package runlog

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTornMultiEventAppendAllOrNothing cuts the log at every byte offset
// inside one multi-event append (an admission with its attempts and calls,
// in one Append): reopened, the log holds either all of that append or
// none of it, never a prefix of its events. (Ignoring the commit flag of
// the append's last frame fails this test.)
func TestTornMultiEventAppendAllOrNothing(t *testing.T) {
	src := t.TempDir()
	l := openLog(t, src, Options{})
	g := NewGroupID(testSeed, 0, 0)
	mustAppend(t, l, RunStarted{Seed: testSeed, Mode: "deterministic"})
	before, start := viewDigest(l), l.End()
	batch := []Event{PromptAdmitted{Group: g, Size: 3}}
	for m := range uint16(3) {
		id := RolloutID{g, m}
		batch = append(batch, AttemptStarted{Rollout: id, Attempt: 1},
			CallFinished{Rollout: id, Attempt: 1, Call: 0, PromptSuffix: []int32{1, 2, 3}, Sampled: []int32{4, 5},
				Logprobs: []float32{-1, -2}, Finish: FinishStop, Selected: true})
	}
	mustAppend(t, l, batch...)
	after := viewDigest(l)
	l.Close()
	seg := onlyChunk(t, src)
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()
	if size-int64(start) < int64(len(batch)) {
		t.Fatalf("the append is %d bytes for %d events", size-int64(start), len(batch))
	}
	for cut := int64(start); cut <= size; cut++ {
		dir := t.TempDir()
		copyDir(t, src, dir)
		if err := os.Truncate(filepath.Join(dir, logSubdir, filepath.Base(seg)), cut); err != nil {
			t.Fatal(err)
		}
		l := openLog(t, dir, Options{})
		got := viewDigest(l)
		var applied uint64
		l.View(func(s *State) { applied = s.Applied })
		l.Close()
		switch {
		case cut == size && got != after:
			t.Fatalf("the whole append is not the state after it")
		case cut < size && got != before:
			t.Fatalf("cut at byte %d of %d..%d: %d events applied, a torn append leaked part of its %d events", cut, start, size, applied, len(batch))
		}
	}
}
