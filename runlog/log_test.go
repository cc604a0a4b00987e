package runlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/longhaul-rl/longhaul/store"
	"pgregory.net/rapid"
)

func openLog(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func mustAppend(t testing.TB, l *Log, evs ...Event) Offset {
	t.Helper()
	off, err := l.Append(context.Background(), evs...)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return off
}

// logEvents reads back every event of l.
func logEvents(t testing.TB, l *Log) ([]Offset, []Event) {
	t.Helper()
	var offs []Offset
	var evs []Event
	if err := l.Events(context.Background(), func(off Offset, ev Event) error {
		offs = append(offs, off)
		evs = append(evs, ev)
		return nil
	}); err != nil {
		t.Fatalf("Events: %v", err)
	}
	return offs, evs
}

func foldAt(t testing.TB, offs []Offset, evs []Event) *State {
	t.Helper()
	s := NewState()
	for i, ev := range evs {
		if err := ApplyAt(s, ev, offs[i]); err != nil {
			t.Fatalf("fold: %v", err)
		}
	}
	return s
}

func viewDigest(l *Log) (d [32]byte) {
	l.View(func(s *State) { d = s.Digest() })
	return d
}

func TestLogAppendReopen(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{ChunkSize: 4 << 10})
	model := NewState()
	evs := genRun(model, randChooser{rand.New(rand.NewPCG(3, 4))}, 600, t.Fatalf)
	for i := 0; i < len(evs); {
		n := min(1+i%3, len(evs)-i)
		mustAppend(t, l, evs[i:i+n]...)
		i += n
	}
	offs, got := logEvents(t, l)
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Fatalf("events read back (-want +got):\n%s", diff)
	}
	want := viewDigest(l)
	if foldAt(t, offs, got).Digest() != want {
		t.Fatalf("state differs from a fold of the log")
	}
	// Every rollout's events replay to the same calls and contexts.
	var ids []RolloutID
	l.View(func(s *State) {
		for _, g := range s.Groups {
			for _, r := range g.Members {
				ids = append(ids, r.ID)
			}
		}
	})
	for _, id := range ids {
		revs, err := l.RolloutEvents(id)
		if err != nil {
			t.Fatal(err)
		}
		var wantEvs []Event
		for _, ev := range got {
			if rid, ok := rolloutOf(ev); ok && rid == id {
				wantEvs = append(wantEvs, ev)
			}
		}
		if diff := cmp.Diff(wantEvs, revs, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("RolloutEvents(%v) (-want +got):\n%s", id, diff)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Options{ChunkSize: 4 << 10})
	defer l.Close()
	if viewDigest(l) != want {
		t.Fatalf("reopened state differs")
	}
	if r := l.Recovery(); r.Truncated {
		t.Fatalf("clean log reported a recovery: %+v", r)
	}
	segs, _ := listChunks(store.OS, filepath.Join(dir, logSubdir))
	if len(segs) < 3 {
		t.Fatalf("expected several chunks, got %d", len(segs))
	}
	// Rejected events are never written.
	n := l.End()
	if _, err := l.Append(context.Background(), GroupCommitted{Group: 12345}); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("append of an invalid event: %v", err)
	}
	if l.End() != n {
		t.Fatalf("rejected event was written")
	}
}

func rolloutOf(ev Event) (RolloutID, bool) {
	switch v := ev.(type) {
	case AttemptStarted:
		return v.Rollout, true
	case CallFinished:
		return v.Rollout, true
	case EnvStep:
		return v.Rollout, true
	case Compaction:
		return v.Rollout, true
	case RolloutSealed:
		return v.Rollout, true
	case RolloutFailed:
		return v.Rollout, true
	}
	return RolloutID{}, false
}

// TestAppendBatchAtomic: an append whose second event is invalid writes
// nothing, and the first event does not leak into the state.
func TestAppendBatchAtomic(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	defer l.Close()
	g := NewGroupID(testSeed, 0, 0)
	mustAppend(t, l, RunStarted{Seed: testSeed, Mode: "deterministic"})
	before, end := viewDigest(l), l.End()
	_, err := l.Append(context.Background(),
		PromptAdmitted{Group: g, Size: 1},
		AttemptStarted{Rollout: RolloutID{g, 1}, Attempt: 1})
	if !errors.Is(err, ErrUnknownRollout) {
		t.Fatalf("batch with a bad event: %v", err)
	}
	if viewDigest(l) != before || l.End() != end {
		t.Fatalf("rejected batch changed the log")
	}
	mustAppend(t, l, PromptAdmitted{Group: g, Size: 1}, AttemptStarted{Rollout: RolloutID{g, 0}, Attempt: 1})
}

func TestConcurrentAppends(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{ChunkSize: 16 << 10})
	defer l.Close()
	const writers, each = 16, 40
	g := NewGroupID(testSeed, 0, 0)
	mustAppend(t, l, RunStarted{Seed: testSeed, Mode: "throughput"}, PromptAdmitted{Group: g, Size: writers})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			id := RolloutID{g, uint16(w)}
			mustAppend(t, l, AttemptStarted{Rollout: id, Attempt: 1})
			for i := range each {
				mustAppend(t, l, testCall(id, 1, uint32(i), w*1000+i))
			}
		})
	}
	wg.Wait()
	offs, evs := logEvents(t, l)
	if len(evs) != 2+writers*(each+1) {
		t.Fatalf("got %d events", len(evs))
	}
	if foldAt(t, offs, evs).Digest() != viewDigest(l) {
		t.Fatalf("state differs from the log")
	}
	ctx, err := l.Context(RolloutID{g, 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(ctx) != each*3 {
		t.Fatalf("context has %d tokens, want %d", len(ctx), each*3)
	}
}

// testCall is an append-compatible call whose tokens are a function of v.
func testCall(id RolloutID, attempt, call uint32, v int) CallFinished {
	return CallFinished{Rollout: id, Attempt: attempt, Call: call, PromptPrefix: 3 * call,
		PromptSuffix: []int32{int32(v), int32(v >> 8)}, Sampled: []int32{int32(v % 251)}, Logprobs: []float32{-float32(v % 7)},
		Finish: FinishStop, Version: 0, Selected: true}
}

// buildLog writes a small log of single-event appends and returns the
// record offsets and events.
func buildLog(t *testing.T, dir string, n int) ([]Offset, []Event) {
	t.Helper()
	l := openLog(t, dir, Options{})
	s := NewState()
	evs := genRun(s, randChooser{rand.New(rand.NewPCG(5, 6))}, n, t.Fatalf)
	var offs []Offset
	for _, ev := range evs {
		offs = append(offs, mustAppend(t, l, ev))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return offs, evs
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// onlyChunk returns the path of the single non-empty chunk file of dir.
func onlyChunk(t *testing.T, dir string) string {
	t.Helper()
	segs, err := listChunks(store.OS, filepath.Join(dir, logSubdir))
	if err != nil {
		t.Fatal(err)
	}
	var path string
	for _, b := range segs {
		p := filepath.Join(dir, logSubdir, chunkName(b))
		if fi, _ := os.Stat(p); fi.Size() > chunkHeaderSize {
			if path != "" {
				t.Fatalf("more than one chunk with records")
			}
			path = p
		}
	}
	return path
}

func stateOf(t *testing.T, offs []Offset, evs []Event, n int) [32]byte {
	return foldAt(t, offs[:n], evs[:n]).Digest()
}

// TestTruncateTail cuts the chunk file at every byte inside its last three
// records: Open recovers to the last whole record and reports the cut.
func TestTruncateTail(t *testing.T) {
	src := t.TempDir()
	offs, evs := buildLog(t, src, 30)
	seg := onlyChunk(t, src)
	fi, _ := os.Stat(seg)
	size := fi.Size()
	first := int64(offs[len(offs)-3]) // chunk base is 0
	for cut := first; cut < size; cut++ {
		dir := t.TempDir()
		copyDir(t, src, dir)
		p := filepath.Join(dir, logSubdir, filepath.Base(seg))
		if err := os.Truncate(p, cut); err != nil {
			t.Fatal(err)
		}
		// Records wholly before the cut survive.
		n := 0
		for n < len(offs) && (n+1 >= len(offs) || int64(offs[n+1]) <= cut) && (n+1 < len(offs) || cut == size) {
			n++
		}
		l := openLog(t, dir, Options{})
		rec := l.Recovery()
		wantDropped := cut - int64(offs[n-1+btoi(n < len(offs))])
		if n < len(offs) {
			wantDropped = cut - int64(offs[n])
		}
		if got := viewDigest(l); got != stateOf(t, offs, evs, n) {
			t.Fatalf("cut at %d: state is not the fold of the first %d records", cut, n)
		}
		if wantDropped > 0 && (!rec.Truncated || rec.Bytes != wantDropped || rec.Records != 1) {
			t.Fatalf("cut at %d: recovery %+v, want %d bytes, 1 record", cut, rec, wantDropped)
		}
		if wantDropped == 0 && rec.Truncated {
			t.Fatalf("cut at a record boundary %d reported %+v", cut, rec)
		}
		// The log goes on after the repair.
		var next Event
		l.View(func(s *State) { next = nextEvent(s, randChooser{rand.New(rand.NewPCG(uint64(cut), 1))}) })
		mustAppend(t, l, next)
		l.Close()
		l = openLog(t, dir, Options{})
		if l.Recovery().Truncated {
			t.Fatalf("cut at %d: second open recovered again: %+v", cut, l.Recovery())
		}
		l.Close()
	}
}

// TestBitFlips flips one bit at every byte of the chunk file: in the last
// record it is a torn tail, cut and reported; anywhere before it, Open
// fails with a CorruptionError naming the damaged record's offset.
func TestBitFlips(t *testing.T) {
	src := t.TempDir()
	offs, evs := buildLog(t, src, 12)
	seg := onlyChunk(t, src)
	orig, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	last := int(offs[len(offs)-1])
	for pos := range orig {
		dir := t.TempDir()
		copyDir(t, src, dir)
		b := append([]byte(nil), orig...)
		b[pos] ^= 1 << (pos % 8)
		p := filepath.Join(dir, logSubdir, filepath.Base(seg))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(context.Background(), dir, Options{})
		if pos >= last {
			if err != nil {
				t.Fatalf("flip at %d (last record): %v", pos, err)
			}
			rec := l.Recovery()
			if !rec.Truncated || rec.Offset != Offset(last) || rec.Bytes != int64(len(orig)-last) {
				t.Fatalf("flip at %d: recovery %+v", pos, rec)
			}
			if viewDigest(l) != stateOf(t, offs, evs, len(offs)-1) {
				t.Fatalf("flip at %d: state is not the fold before the last record", pos)
			}
			l.Close()
			continue
		}
		if err == nil {
			l.Close()
			t.Fatalf("flip at %d was not detected", pos)
		}
		var ce *CorruptionError
		if !errors.As(err, &ce) {
			if pos < chunkHeaderSize && errors.Is(err, ErrUnknownVersion) {
				continue
			}
			t.Fatalf("flip at %d: error %v is not a CorruptionError", pos, err)
		}
		want := Offset(0)
		for _, o := range offs {
			if int(o) <= pos {
				want = o
			}
		}
		if pos < chunkHeaderSize {
			want = 0
		}
		if ce.Offset != want {
			t.Fatalf("flip at %d: error names offset %d, want %d (%v)", pos, ce.Offset, want, err)
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
			t.Fatalf("flip at %d: %v is not ErrCorrupt", pos, err)
		}
	}
}

// TestBlobCorruption: a flipped bit in a pack is found by the Open that
// first verifies it, naming the pack and offset; damage that appears after
// verification (below the watermark) is still found when the tokens are read.
func TestBlobCorruption(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 40)
	segs, _ := listChunks(store.OS, filepath.Join(dir, logSubdir))
	p := filepath.Join(dir, logSubdir, packName(segs[0]))
	b, err := os.ReadFile(p)
	if err != nil || len(b) < 40 {
		t.Fatalf("pack: %v, %d bytes", err, len(b))
	}
	b[30] ^= 4
	os.WriteFile(p, b, 0o644)
	_, err = Open(context.Background(), dir, Options{})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Offset > 30 || ce.Path != p {
		t.Fatalf("Open over an unverified corrupt pack: %v", err)
	}
	b[30] ^= 4
	os.WriteFile(p, b, 0o644)
	openLog(t, dir, Options{}).Close() // verified up to the end now
	b[30] ^= 4
	os.WriteFile(p, b, 0o644)
	l := openLog(t, dir, Options{}) // below the watermark: not read again
	defer l.Close()
	err = l.Events(context.Background(), func(Offset, Event) error { return nil })
	if !errors.As(err, &ce) || ce.Offset > 30 {
		t.Fatalf("Events over a corrupt pack: %v", err)
	}
	t.Log(err)
}

func TestLogSnapshots(t *testing.T) {
	dir := t.TempDir()
	opts := Options{ChunkSize: 8 << 10, SnapshotChain: 3}
	l := openLog(t, dir, opts)
	r := rand.New(rand.NewPCG(7, 8))
	for round := range 12 {
		var evs []Event
		l.View(func(s *State) {
			c := s.Clone()
			evs = genRun(c, randChooser{r}, 20+r.IntN(40), t.Fatalf)
		})
		for _, ev := range evs {
			mustAppend(t, l, ev)
		}
		info, err := l.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %+v", round, info)
		if round%4 == 3 {
			want := viewDigest(l)
			l.Close()
			l = openLog(t, dir, opts)
			if viewDigest(l) != want {
				t.Fatalf("round %d: state after reopen from snapshot differs", round)
			}
			offs, all := logEvents(t, l)
			if foldAt(t, offs, all).Digest() != want {
				t.Fatalf("round %d: snapshot state differs from a full fold", round)
			}
		}
	}
	l.Close()
	snaps, _ := os.ReadDir(filepath.Join(dir, logSubdir, snapSubdir))
	if len(snaps) > opts.SnapshotChain+2 {
		t.Fatalf("old snapshot chains were not removed: %d files", len(snaps))
	}
}

func ExampleParseRolloutID() {
	id, _ := ParseRolloutID("g0123456789abcdef-3")
	fmt.Println(id.Group, id.Member)
	// Output: g0123456789abcdef 3
}

// TestLogSnapshotProperty: for random valid runs appended in random
// batches, a snapshot at a random offset plus replay of the tail (Open)
// equals the fold of the whole log.
func TestLogSnapshotProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		l := openLog(t, dir, Options{ChunkSize: 2 << 10})
		ref := NewState()
		evs := genRun(ref, rapidChooser{rt}, rapid.IntRange(1, 60).Draw(rt, "n"), rt.Fatalf)
		snapAt := rapid.IntRange(0, len(evs)).Draw(rt, "snapAt")
		snapAt2 := rapid.IntRange(snapAt, len(evs)).Draw(rt, "snapAt2")
		for i := 0; i < len(evs); {
			if i == snapAt || i == snapAt2 {
				if _, err := l.Snapshot(context.Background()); err != nil {
					rt.Fatal(err)
				}
			}
			n := rapid.IntRange(1, 5).Draw(rt, "batch")
			if i < snapAt {
				n = min(n, snapAt-i)
			} else if i < snapAt2 {
				n = min(n, snapAt2-i)
			}
			n = min(n, len(evs)-i)
			mustAppend(t, l, evs[i:i+n]...)
			i += n
		}
		want := viewDigest(l)
		l.Close()
		l = openLog(t, dir, Options{ChunkSize: 2 << 10})
		defer l.Close()
		if viewDigest(l) != want {
			rt.Fatalf("state from snapshot + tail differs from the live state")
		}
		l.View(func(s *State) {
			if err := settledOK(s); err != nil {
				rt.Fatalf("state from snapshot + tail: %v", err)
			}
		})
		offs, all := logEvents(t, l)
		if foldAt(t, offs, all).Digest() != want {
			rt.Fatalf("state differs from a full fold")
		}
	})
}

// TestBitFlipsEveryBit flips every single bit of a chunk file and checks what
// the scanner (the part of Open that judges damage) concludes: damage in
// the last record is a torn tail ending at that record; damage before it
// is corruption naming the damaged record.
func TestBitFlipsEveryBit(t *testing.T) {
	src := t.TempDir()
	offs, _ := buildLog(t, src, 12)
	orig, err := os.ReadFile(onlyChunk(t, src))
	if err != nil {
		t.Fatal(err)
	}
	last := int(offs[len(offs)-1])
	for bit := range len(orig) * 8 {
		pos := bit / 8
		b := append([]byte(nil), orig...)
		b[pos] ^= 1 << (bit % 8)
		n := 0
		res, err := scanChunk(b, 0, 0, func(Offset, []byte) error { n++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if res.err == nil {
			t.Fatalf("flip of bit %d not detected", bit)
		}
		want := 0
		for _, o := range offs {
			if int(o) <= pos {
				want = int(o)
			}
		}
		switch {
		case pos < chunkHeaderSize:
			if res.damage != 0 || res.torn {
				t.Fatalf("flip of header bit %d: %+v", bit, res)
			}
		case pos >= last:
			if !res.torn || res.end != last || n != len(offs)-1 {
				t.Fatalf("flip of bit %d in the last record: %+v after %d records", bit, res, n)
			}
		default:
			if res.torn || res.damage != want {
				t.Fatalf("flip of bit %d (record at %d): %+v", bit, want, res)
			}
		}
	}
}
