package runlog

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchCall is an append-compatible call of rollout id with nSuffix new
// prompt tokens and nSampled sampled ones (4 bytes each, plus 4 per logprob).
func benchCall(id RolloutID, call uint32, prefix uint32, nSuffix, nSampled int) CallFinished {
	suf := make([]int32, nSuffix)
	for i := range suf {
		suf[i] = int32(call)*7 + int32(i) // distinct per call: no dedup
	}
	samp, lp := make([]int32, nSampled), make([]float32, nSampled)
	for i := range samp {
		samp[i] = int32(i) ^ int32(call)
		lp[i] = -0.5
	}
	return CallFinished{Rollout: id, Attempt: 1, Call: call, PromptPrefix: prefix, PromptSuffix: suf, Sampled: samp,
		Logprobs: lp, Finish: FinishStop, Selected: true}
}

// benchAppends runs b.N ~1 KB appends from 64 writers, each on its own
// rollout (CallFinished: 128 new prompt tokens + 64 sampled tokens and
// logprobs = 1 KiB of token data per event).
func benchAppends(b *testing.B, opts Options) {
	const writers = 64
	l := openLog(b, b.TempDir(), opts)
	defer l.Close()
	g := NewGroupID(testSeed, 0, 0)
	setup := []Event{RunStarted{Seed: testSeed, Mode: "throughput"}, PromptAdmitted{Group: g, Size: writers}}
	for m := range writers {
		setup = append(setup, AttemptStarted{Rollout: RolloutID{g, uint16(m)}, Attempt: 1})
	}
	mustAppend(b, l, setup...)
	var next atomic.Int64
	b.ResetTimer()
	t0 := time.Now()
	var wg sync.WaitGroup
	for m := range writers {
		wg.Go(func() {
			id := RolloutID{g, uint16(m)}
			var ctxLen uint32
			for c := uint32(0); next.Add(1) <= int64(b.N); c++ {
				ev := benchCall(id, c, ctxLen, 128, 64)
				if _, err := l.Append(context.Background(), ev); err != nil {
					b.Error(err)
					return
				}
				ctxLen += 128 + 64
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "appends/s")
}

func BenchmarkAppendGroupCommit64(b *testing.B) { benchAppends(b, Options{}) }
func BenchmarkAppendFsyncEach64(b *testing.B)   { benchAppends(b, Options{NoGroupCommit: true}) }

// BenchmarkBytesPerCall measures the bytes a call adds to the log (chunk
// + pack) as a function of its new tokens.
func BenchmarkBytesPerCall(b *testing.B) {
	for _, n := range []struct{ suffix, sampled int }{{16, 16}, {128, 64}, {1024, 256}} {
		b.Run("", func(b *testing.B) {
			dir := b.TempDir()
			l := openLog(b, dir, Options{})
			g := NewGroupID(testSeed, 0, 0)
			id := RolloutID{g, 0}
			mustAppend(b, l, RunStarted{Seed: testSeed, Mode: "throughput"}, PromptAdmitted{Group: g, Size: 1}, AttemptStarted{Rollout: id, Attempt: 1})
			before := dirBytes(b, dir)
			const calls = 200
			var ctxLen uint32
			for c := range calls {
				mustAppend(b, l, benchCall(id, uint32(c), ctxLen, n.suffix, n.sampled))
				ctxLen += uint32(n.suffix + n.sampled)
			}
			per := float64(dirBytes(b, dir)-before) / calls
			tokenBytes := float64(4*(n.suffix+n.sampled) + 4*n.sampled)
			b.ReportMetric(per, "bytes/call")
			b.ReportMetric(float64(n.suffix+n.sampled), "new-tokens")
			b.ReportMetric(per-tokenBytes, "const-bytes")
			l.Close()
			for range b.N {
			}
		})
	}
}

func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	filepath.Walk(filepath.Join(dir, logSubdir), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && filepath.Ext(fi.Name()) != ".snap" {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// BenchmarkSnapshot: 10,000 in-flight rollouts (groups of 8) with 50 calls
// each; a base snapshot, then an incremental one after 1% of the rollouts
// changed.
func BenchmarkSnapshot(b *testing.B) {
	const groups, size, calls = 1250, 8, 50
	dir := b.TempDir()
	l := openLog(b, dir, Options{})
	defer l.Close()
	// Build the state in memory: the benchmark is about snapshots, not
	// about half a million appends.
	s := NewState()
	off := Offset(1 << 20)
	apply := func(ev Event) {
		if err := ApplyAt(s, ev, off); err != nil {
			b.Fatal(err)
		}
		off += 300
	}
	apply(RunStarted{Seed: testSeed, Mode: "throughput"})
	for gi := range groups {
		g := NewGroupID(testSeed, 0, uint64(gi))
		apply(PromptAdmitted{Cursor: uint64(gi), Group: g, Size: size})
		for m := range size {
			apply(AttemptStarted{Rollout: RolloutID{g, uint16(m)}, Attempt: 1})
		}
	}
	for c := range calls {
		for gi := range groups {
			g := NewGroupID(testSeed, 0, uint64(gi))
			for m := range size {
				id := RolloutID{g, uint16(m)}
				apply(&callRecord{CallFinished: CallFinished{Rollout: id, Attempt: 1, Call: uint32(c), PromptPrefix: uint32(c * 200), Finish: FinishStop, Selected: true},
					nSuffix: 100, nSampled: 100, nLogprobs: 100})
			}
		}
	}
	l.mu.Lock()
	l.s, l.w = s, s.Clone()
	for id := range s.Groups {
		l.dirty[id] = struct{}{}
	}
	l.mu.Unlock()
	ctx := context.Background()
	base, err := l.Snapshot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var last SnapshotInfo
	var took time.Duration
	for i := range b.N {
		b.StopTimer()
		// 1% of the rollouts (100) take one env step each.
		for k := range groups * size / 100 {
			gi := (i*7919 + k*131) % groups
			id := RolloutID{NewGroupID(testSeed, 0, uint64(gi)), uint16(k % size)}
			mustAppend(b, l, EnvStep{Rollout: id, Attempt: 1, Turn: uint32(i), Observation: "o"})
		}
		b.StartTimer()
		t0 := time.Now()
		if last, err = l.Snapshot(ctx); err != nil {
			b.Fatal(err)
		}
		took += time.Since(t0)
		if last.Base {
			b.Fatalf("expected an incremental snapshot")
		}
	}
	b.ReportMetric(float64(took.Microseconds())/1000/float64(b.N), "delta-ms")
	b.ReportMetric(float64(last.Bytes), "delta-bytes")
	b.ReportMetric(float64(last.Groups), "delta-groups")
	b.ReportMetric(float64(base.Bytes)/(groups*size), "base-bytes/rollout")
	b.ReportMetric(float64(base.Duration.Microseconds())/1000, "base-ms")
}

// BenchmarkReplay1M: Open of a log of 1,000,000 events with no snapshot.
func BenchmarkReplay1M(b *testing.B) {
	const total = 1_000_000
	dir := b.TempDir()
	l := openLog(b, dir, Options{})
	ctx := context.Background()
	var batch []Event
	n := 0
	flush := func() {
		if _, err := l.Append(ctx, batch...); err != nil {
			b.Fatal(err)
		}
		n += len(batch)
		batch = batch[:0]
	}
	add := func(ev Event) {
		batch = append(batch, ev)
		if len(batch) == 2000 {
			flush()
		}
	}
	add(RunStarted{Seed: testSeed, Mode: "throughput"})
	var step int64
	var committed []GroupID
	for gi := uint64(0); n+len(batch) < total; gi++ {
		g := NewGroupID(testSeed, 0, gi)
		add(PromptAdmitted{Cursor: gi, Group: g, Size: 4})
		for m := range 4 {
			id := RolloutID{g, uint16(m)}
			add(AttemptStarted{Rollout: id, Attempt: 1})
			var ctxLen uint32
			for c := range 10 {
				add(benchCall(id, uint32(c), ctxLen, 8, 8))
				ctxLen += 16
				add(EnvStep{Rollout: id, Attempt: 1, Turn: uint32(c), Action: "act", Observation: "observation"})
			}
			add(RolloutSealed{Rollout: id, Attempt: 1, Outcome: OutcomeCompleted, Reward: 1})
		}
		add(GroupCommitted{Group: g})
		if committed = append(committed, g); len(committed) == 8 {
			step++
			add(StepTrained{Step: step, Groups: committed, Version: step})
			committed = nil
		}
	}
	flush()
	l.Close()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		l := openLog(b, dir, Options{})
		b.ReportMetric(time.Since(t0).Seconds(), "s/replay")
		var applied uint64
		l.View(func(s *State) { applied = s.Applied })
		if applied != uint64(n) {
			b.Fatalf("replayed %d events, want %d", applied, n)
		}
		l.Close()
	}
	b.ReportMetric(float64(n), "events")
}
