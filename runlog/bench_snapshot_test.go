package runlog

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// snapShape is the logged history of every in-flight rollout in
// BenchmarkSnapshotScale.
type snapShape struct {
	name  string
	calls int
	// compactAfter lists the calls after which a Compaction is declared
	// (the next call then stores its prompt whole).
	compactAfter []int
	envSteps     bool // an EnvStep after every call
	suffix       uint32
	sampled      uint32
}

var (
	// ledger12: the shipped ledger task (12 turns, recency compaction at 45
	// tokens fires twice): 12 calls, 12 env steps, 2 compactions.
	shapeLedger12 = snapShape{name: "ledger12", calls: 12, compactAfter: []int{4, 8}, envSteps: true, suffix: 5, sampled: 2}
	// calls50: the shape runlog's BenchmarkSnapshot uses (50 calls of 100
	// new prompt tokens and 100 sampled ones, no env steps).
	shapeCalls50 = snapShape{name: "calls50", calls: 50, suffix: 100, sampled: 100}
)

// buildSnapState folds n in-flight rollouts (groups of 8) of shape sh into
// a state, events interleaved across rollouts as a live run logs them.
func buildSnapState(tb testing.TB, n int, sh snapShape) *State {
	const size = 8
	groups := (n + size - 1) / size
	s := NewState()
	off := Offset(1 << 20)
	apply := func(ev Event) {
		if err := ApplyAt(s, ev, off); err != nil {
			tb.Fatal(err)
		}
		off += 120
	}
	apply(RunStarted{Seed: testSeed, Mode: "throughput"})
	ids := make([]RolloutID, 0, n)
	for gi := range groups {
		g := NewGroupID(testSeed, 0, uint64(gi))
		apply(PromptAdmitted{Cursor: uint64(gi), Group: g, Size: size, PromptID: fmt.Sprintf("ledger-%05d", gi)})
		for m := range size {
			id := RolloutID{g, uint16(m)}
			apply(AttemptStarted{Rollout: id, Attempt: 1, Seed: uint64(gi*size + m)})
			ids = append(ids, id)
		}
	}
	ctxLen := make([]uint32, len(ids))
	boundary := make([]uint32, len(ids))
	for c := range sh.calls {
		compact := slices.Contains(sh.compactAfter, c)
		for i, id := range ids {
			apply(&callRecord{CallFinished: CallFinished{Rollout: id, Attempt: 1, Call: uint32(c), PromptPrefix: ctxLen[i],
				Finish: FinishStop, Selected: true}, nSuffix: sh.suffix, nSampled: sh.sampled, nLogprobs: sh.sampled})
			ctxLen[i] += sh.suffix + sh.sampled
			if sh.envSteps {
				apply(EnvStep{Rollout: id, Attempt: 1, Turn: uint32(c), Action: "7", Observation: "+2", Reward: 1.0 / 12})
			}
			if compact {
				apply(Compaction{Rollout: id, Attempt: 1, Boundary: boundary[i], AfterCall: uint32(c), Policy: "recency",
					Lineage: []Lineage{{0, OpKept}, {1, OpDropped}, {2, OpDropped}, {3, OpKept}}, TokensBefore: ctxLen[i], TokensAfter: 20})
				boundary[i]++
				ctxLen[i] = 0
			}
		}
	}
	return s
}

// chainShare is the mean snapshot time over one chain cycle under the
// policy of Log.Snapshot (a base, then deltas until SnapshotChain of them
// or until they outweigh the base), and the number of deltas per cycle.
func chainShare(base, delta time.Duration, baseBytes, deltaBytes int64, chain int) (mean time.Duration, deltas int) {
	var sum int64
	for deltas = 0; deltas < chain && sum <= baseBytes; deltas++ {
		sum += deltaBytes
	}
	return (base + time.Duration(deltas)*delta) / time.Duration(deltas+1), deltas
}

// BenchmarkSnapshotScale: base and incremental (1% of the rollouts changed)
// snapshots of 100, 1,000 and 10,000 in-flight rollouts, for the ledger
// shape and the 50-call shape, written through a real Log (tmp, fsync,
// rename, fsync dir, SnapshotWritten append). Each op writes one base and
// one delta; the metrics are the best over the ops, plus the share of a
// 30 s interval spent snapshotting under the chain policy.
//
//	GOEXPERIMENT=simd go test ./runlog -run '^$' -bench SnapshotScale -benchtime 5x
func BenchmarkSnapshotScale(b *testing.B) {
	for _, sh := range []snapShape{shapeLedger12, shapeCalls50} {
		for _, n := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/rollouts=%d", sh.name, n), func(b *testing.B) { benchSnapshotScale(b, n, sh) })
		}
	}
}

func benchSnapshotScale(b *testing.B, n int, sh snapShape) {
	l := openLog(b, b.TempDir(), Options{})
	defer l.Close()
	s := buildSnapState(b, n, sh)
	l.mu.Lock()
	l.s, l.w = s, s.Clone()
	for id := range s.Groups {
		l.dirty[id] = struct{}{}
	}
	l.mu.Unlock()
	ctx := context.Background()
	var ids []RolloutID
	for _, id := range s.Order {
		for _, r := range s.Groups[id].Members {
			ids = append(ids, r.ID)
		}
	}
	changed := max(1, n/100)
	var bestBase, bestDelta time.Duration = 1 << 62, 1 << 62
	var baseInfo, deltaInfo SnapshotInfo
	turn := uint32(1000)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		l.mu.Lock()
		l.forceBase = true
		l.mu.Unlock()
		b.StartTimer()
		t0 := time.Now()
		bi, err := l.Snapshot(ctx)
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if !bi.Base {
			b.Fatal("expected a base snapshot")
		}
		bestBase, baseInfo = min(bestBase, d), bi
		b.StopTimer()
		// 1% of the rollouts take one env step each (real appends).
		evs := make([]Event, 0, changed)
		for k := range changed {
			id := ids[(i*7919+k*131)%len(ids)]
			evs = append(evs, EnvStep{Rollout: id, Attempt: 1, Turn: turn, Action: "7", Observation: "+2"})
		}
		turn++
		mustAppend(b, l, evs...)
		b.StartTimer()
		t0 = time.Now()
		di, err := l.Snapshot(ctx)
		d = time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if di.Base {
			b.Fatal("expected an incremental snapshot")
		}
		bestDelta, deltaInfo = min(bestDelta, d), di
	}
	b.StopTimer()
	mean, deltas := chainShare(bestBase, bestDelta, baseInfo.Bytes, deltaInfo.Bytes, l.opts.SnapshotChain)
	b.ReportMetric(float64(bestBase.Microseconds())/1000, "base-ms")
	b.ReportMetric(float64(baseInfo.Bytes), "base-bytes")
	b.ReportMetric(float64(baseInfo.Bytes)/float64(n), "base-B/rollout")
	b.ReportMetric(float64(bestDelta.Microseconds())/1000, "delta-ms")
	b.ReportMetric(float64(deltaInfo.Bytes), "delta-bytes")
	b.ReportMetric(float64(deltaInfo.Groups), "delta-groups")
	b.ReportMetric(float64(deltas), "deltas/cycle")
	b.ReportMetric(100*mean.Seconds()/30, "share30s-%")
	b.ReportMetric(100*bestBase.Seconds()/30, "base-share30s-%")
}
