package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestLedgerSnapshotJSON holds the ledger's hand-written snapshot encoder
// to json.Marshal's bytes (logged snapshots must not change with it) over
// random states: nil, empty and long delta lists, negative and
// multi-digit numbers.
func TestLedgerSnapshotJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	states := []ledgerState{{}, {Task: LedgerTask{Deltas: []int{}}}}
	for range 200 {
		st := ledgerState{Task: LedgerTask{Start: r.IntN(2000) - 1000}, Turn: r.IntN(30), Balance: r.IntN(10) - 3, Correct: r.IntN(40)}
		for range r.IntN(14) {
			st.Task.Deltas = append(st.Task.Deltas, r.IntN(41)-20)
		}
		states = append(states, st)
	}
	for _, st := range states {
		want, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.appendJSON(nil); string(got) != string(want) {
			t.Fatalf("appendJSON(%+v) = %s, json.Marshal = %s", st, got, want)
		}
	}
}

// TestSigned holds the ledger's observation to fmt's "%+d".
func TestSigned(t *testing.T) {
	for d := -25; d <= 25; d++ {
		if got, want := signed(d), fmt.Sprintf("%+d", d); got != want {
			t.Fatalf("signed(%d) = %q, want %q", d, got, want)
		}
	}
}

// TestKeyContext checks the key context: the key and the parent's values
// read back, the parent's cancellation reaches it and its children, and
// it costs one allocation.
func TestKeyContext(t *testing.T) {
	parent, cancel := context.WithCancelCause(WithRun(context.Background(), "run7"))
	k := Key{Rollout: "g2.m1", Attempt: 3, Step: 4}
	ctx := WithKey(parent, k)
	got, ok := KeyOf(ctx)
	if want := (Key{Run: "run7", Rollout: "g2.m1", Attempt: 3, Step: 4}); !ok || got != want {
		t.Fatalf("KeyOf = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := KeyOf(parent); ok {
		t.Fatal("KeyOf found a key in a context without one")
	}
	if RunOf(ctx) != "run7" || IsReplay(ctx) || !IsReplay(WithReplay(ctx)) {
		t.Fatal("a value of the parent or a child is lost")
	}
	child, ccancel := context.WithCancel(ctx)
	defer ccancel()
	errStop := errors.New("stop")
	cancel(errStop)
	<-child.Done()
	if !errors.Is(context.Cause(child), errStop) || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("cancellation: cause %v, err %v", context.Cause(child), ctx.Err())
	}
	bg := context.Background()
	if n := testing.AllocsPerRun(100, func() { _, _ = KeyOf(WithKey(bg, k)) }); n > 1 {
		t.Fatalf("WithKey+KeyOf allocate %v times, want 1", n)
	}
}

// TestKeyContexts checks the chunked key contexts: each carries its own
// key (an earlier one is not rewritten by later ones), the run comes from
// the parent, and a chunk of contexts costs one allocation.
func TestKeyContexts(t *testing.T) {
	var kc KeyContexts
	parent := WithRun(context.Background(), "run3")
	var ctxs []context.Context
	for step := -1; step < 3*keyChunk; step++ {
		ctxs = append(ctxs, kc.WithKey(parent, Key{Rollout: "g1.m0", Attempt: 2, Step: step}))
	}
	for i, ctx := range ctxs {
		k, ok := KeyOf(ctx)
		if want := (Key{Run: "run3", Rollout: "g1.m0", Attempt: 2, Step: i - 1}); !ok || k != want {
			t.Fatalf("context %d carries %+v, want %+v", i, k, want)
		}
	}
	bg := context.Background()
	k := Key{Rollout: "g1.m0", Step: 1}
	if n := testing.AllocsPerRun(10*keyChunk, func() { _, _ = KeyOf(kc.WithKey(bg, k)) }); n > 2.0/keyChunk {
		t.Fatalf("KeyContexts.WithKey allocates %v times per call, want 1 per %d", n, keyChunk)
	}
}

// TestParseLedgerTask holds the fast task decoder to decodeParams: on
// json.Marshal's form of random tasks it decodes the same task, and on
// every input it accepts (the marshaled forms cut, edited and spaced
// out) decodeParams accepts it with the same value.
func TestParseLedgerTask(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var inputs [][]byte
	for range 300 {
		lt := LedgerTask{Start: r.IntN(2_000_000_000) - 1_000_000_000, Deltas: []int{}}
		if r.IntN(2) == 0 {
			lt.Start = r.IntN(21) - 10
		}
		for range r.IntN(14) {
			lt.Deltas = append(lt.Deltas, r.IntN(41)-20)
		}
		raw, err := json.Marshal(lt)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parseLedgerTask(raw)
		var want LedgerTask
		if derr := decodeParams(raw, &want); derr != nil {
			t.Fatal(derr)
		}
		if len(lt.Deltas) > 0 && lt.Start > -1e9 && lt.Start < 1e9 && !ok {
			t.Fatalf("parseLedgerTask refused json.Marshal's %s", raw)
		}
		if ok && fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("parseLedgerTask(%s) = %+v, decodeParams = %+v", raw, got, want)
		}
		inputs = append(inputs, raw)
	}
	edits := []string{" ", "0", "-", "x", ",", "]", "}", `"`, "00", "-0", "1e2", "9999999999"}
	for _, raw := range inputs {
		for range 20 {
			b := []byte(string(raw))
			i := r.IntN(len(b) + 1)
			switch r.IntN(3) {
			case 0:
				b = b[:i]
			case 1:
				b = append(b[:i:i], append([]byte(edits[r.IntN(len(edits))]), b[i:]...)...)
			default:
				if i < len(b) {
					b = append(b[:i:i], b[i+1:]...)
				}
			}
			got, ok := parseLedgerTask(b)
			if !ok {
				continue
			}
			var want LedgerTask
			if err := decodeParams(b, &want); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("parseLedgerTask(%s) = %+v; decodeParams = %+v, %v", b, got, want, err)
			}
		}
	}
}

// TestParamsMemo: the memo decodes once per distinct params, returns the
// new value when they change, and keeps no failed decode.
func TestParamsMemo(t *testing.T) {
	var m paramsMemo[LedgerConfig]
	n := 0
	decode := func(p json.RawMessage) (LedgerConfig, error) { n++; return ledgerConfig(p) }
	a, b := json.RawMessage(`{"turns":3}`), json.RawMessage(`{"turns":5}`)
	for _, c := range []struct {
		p     json.RawMessage
		turns int
		calls int
	}{{a, 3, 1}, {a, 3, 1}, {b, 5, 2}, {b, 5, 2}, {a, 3, 3}} {
		cfg, err := m.get(c.p, decode)
		if err != nil || cfg.Turns != c.turns || n != c.calls {
			t.Fatalf("get(%s) = %+v, %v after %d decodes; want turns %d after %d", c.p, cfg, err, n, c.turns, c.calls)
		}
	}
	// The memo keeps its own copy: a caller reusing its buffer for other
	// params gets those.
	buf := []byte(`{"turns":7}`)
	if cfg, _ := m.get(buf, decode); cfg.Turns != 7 {
		t.Fatalf("get(%s) = %+v", buf, cfg)
	}
	copy(buf, `{"turns":8}`)
	if cfg, _ := m.get(buf, decode); cfg.Turns != 8 || n != 5 {
		t.Fatalf("get of a rewritten buffer %s = %+v after %d decodes, want turns 8 after 5", buf, cfg, n)
	}
	bad := json.RawMessage(`{"turns":0}`)
	for i := range 2 {
		if _, err := m.get(bad, decode); !errors.Is(err, ErrBadParams) || n != 6+i {
			t.Fatalf("bad params: err %v after %d decodes", err, n)
		}
	}
}

// TestLedgerSnapshots: snapshots cut from one buffer stay as they were
// taken (a later snapshot never writes into an earlier one), each equals
// json.Marshal of its state, and an episode's snapshots cost well under
// one allocation each.
func TestLedgerSnapshots(t *testing.T) {
	ctx := context.Background()
	cfg := LedgerConfig{Turns: 200, MaxDelta: 9}
	l := &Ledger{cfg: cfg}
	if _, err := l.Reset(ctx, Task{}, 7); err != nil {
		t.Fatal(err)
	}
	var snaps [][]byte
	var want []string
	for range 150 {
		if _, err := l.Step(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		b, err := l.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, _ := json.Marshal(l.st)
		snaps, want = append(snaps, b), append(want, string(w))
	}
	for i := range snaps {
		if string(snaps[i]) != want[i] {
			t.Fatalf("snapshot %d changed after later ones: %s, want %s", i, snaps[i], want[i])
		}
	}
	short := &Ledger{cfg: DefaultLedgerConfig()}
	if _, err := short.Reset(ctx, Task{}, 7); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(200, func() { _, _ = short.Snapshot(ctx) }); n > 0.1 {
		t.Fatalf("a snapshot allocates %v times, want well under 1", n)
	}
}
