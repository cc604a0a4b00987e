package runlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/longhaul-rl/longhaul/failure"
	"pgregory.net/rapid"
)

func TestGroupIDs(t *testing.T) {
	a, b := NewGroupID(1, 0, 5), NewGroupID(1, 0, 5)
	if a != b {
		t.Fatalf("NewGroupID is not deterministic: %v vs %v", a, b)
	}
	if NewGroupID(1, 0, 6) == a || NewGroupID(2, 0, 5) == a || NewGroupID(1, 1, 5) == a {
		t.Fatalf("NewGroupID collides across inputs")
	}
	g, err := ParseGroupID(a.String())
	if err != nil || g != a {
		t.Fatalf("ParseGroupID(%q) = %v, %v", a.String(), g, err)
	}
	if s := GroupID(0x0123456789abcdef).String(); s != "g0123456789abcdef" {
		t.Fatalf("String = %q", s)
	}
	r := RolloutID{Group: a, Member: 3}
	got, err := ParseRolloutID(r.String())
	if err != nil || got != r {
		t.Fatalf("ParseRolloutID(%q) = %v, %v", r.String(), got, err)
	}
	for _, bad := range []string{"", "g123", "x0123456789abcdef", "g0123456789abcdeg", "g0123456789abcdef", "g0123456789abcdef-", "g0123456789abcdef-70000"} {
		if _, err := ParseRolloutID(bad); err == nil {
			t.Errorf("ParseRolloutID(%q) succeeded", bad)
		}
	}
}

// started returns a state with one admitted group of two members whose
// member 0 runs attempt 2.
func started(t *testing.T) (*State, GroupID) {
	t.Helper()
	s := NewState()
	g := NewGroupID(testSeed, 0, 0)
	for _, ev := range []Event{
		RunStarted{Seed: testSeed, Mode: "throughput"},
		PromptAdmitted{Epoch: 0, Cursor: 0, PromptID: "p0", Group: g, Size: 2},
		AttemptStarted{Rollout: RolloutID{g, 0}, Attempt: 1},
		AttemptStarted{Rollout: RolloutID{g, 0}, Attempt: 2},
	} {
		if err := Apply(s, ev); err != nil {
			t.Fatal(err)
		}
	}
	return s, g
}

func TestApplyRejects(t *testing.T) {
	s, g := started(t)
	r0 := RolloutID{g, 0}
	call := func(attempt, idx uint32) CallFinished {
		return CallFinished{Rollout: r0, Attempt: attempt, Call: idx, PromptSuffix: []int32{1}, Sampled: []int32{2}, Logprobs: []float32{-1}, Finish: FinishStop, Selected: true}
	}
	cases := []struct {
		name string
		ev   Event
		want error
	}{
		{"unknown group", AttemptStarted{Rollout: RolloutID{g + 1, 0}, Attempt: 1}, ErrUnknownGroup},
		{"unknown member", AttemptStarted{Rollout: RolloutID{g, 9}, Attempt: 1}, ErrUnknownRollout},
		{"stale attempt start", AttemptStarted{Rollout: r0, Attempt: 1}, ErrStaleAttempt},
		{"same attempt start", AttemptStarted{Rollout: r0, Attempt: 2}, ErrStaleAttempt},
		{"stale call", call(1, 0), ErrStaleAttempt},
		{"stale seal", RolloutSealed{Rollout: r0, Attempt: 1}, ErrStaleAttempt},
		{"future attempt", call(3, 0), ErrInvalidEvent},
		{"call out of order", call(2, 1), ErrCallOrder},
		{"prefix beyond context", CallFinished{Rollout: r0, Attempt: 2, PromptPrefix: 5, Finish: FinishStop}, ErrInvalidEvent},
		{"logprobs mismatch", CallFinished{Rollout: r0, Attempt: 2, Sampled: []int32{1}, Finish: FinishStop}, ErrInvalidEvent},
		{"commit unsealed", GroupCommitted{Group: g}, ErrGroupState},
		{"train uncommitted", StepTrained{Step: 1, Groups: []GroupID{g}, Version: 1}, ErrGroupState},
		{"step out of order", StepTrained{Step: 2, Groups: []GroupID{g}, Version: 1}, ErrInvalidEvent},
		{"compaction without call", Compaction{Rollout: r0, Attempt: 2}, ErrInvalidEvent},
		{"admit wrong id", PromptAdmitted{Epoch: 0, Cursor: 1, Group: 7, Size: 1}, ErrInvalidEvent},
		{"admit skips cursor", PromptAdmitted{Epoch: 0, Cursor: 2, Group: NewGroupID(testSeed, 0, 2), Size: 1}, ErrInvalidEvent},
		{"second run start", RunStarted{Seed: 1, Mode: "throughput"}, ErrInvalidEvent},
		{"bad failure class", RolloutFailed{Rollout: r0, Attempt: 2, Class: "weird"}, ErrInvalidEvent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Digest()
			err := Apply(s, tc.ev)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Apply(%#v) = %v, want %v", tc.ev, err, tc.want)
			}
			if s.Digest() != before {
				t.Fatalf("rejected event changed the state")
			}
			t.Log(err)
		})
	}
	// Sealing twice.
	if err := Apply(s, RolloutSealed{Rollout: r0, Attempt: 2, Outcome: OutcomeCompleted}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(s, RolloutSealed{Rollout: r0, Attempt: 2}); !errors.Is(err, ErrSealed) {
		t.Fatalf("second seal: %v, want ErrSealed", err)
	}
	if err := Apply(NewState(), AttemptStarted{}); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("event before RunStarted: %v", err)
	}
}

func TestSegmentsAfterCompaction(t *testing.T) {
	s, g := started(t)
	r0 := RolloutID{g, 0}
	evs := []Event{
		CallFinished{Rollout: r0, Attempt: 2, Call: 0, PromptSuffix: []int32{1, 2}, Sampled: []int32{3}, Logprobs: []float32{0}, Finish: FinishStop, Selected: true},
		CallFinished{Rollout: r0, Attempt: 2, Call: 1, PromptPrefix: 3, PromptSuffix: []int32{4}, Sampled: []int32{5}, Logprobs: []float32{0}, Finish: FinishStop, Selected: true},
		Compaction{Rollout: r0, Attempt: 2, Boundary: 0, AfterCall: 1, Policy: "recency"},
		CallFinished{Rollout: r0, Attempt: 2, Call: 2, PromptPrefix: 0, PromptSuffix: []int32{9}, Sampled: []int32{5}, Logprobs: []float32{0}, Finish: FinishStop, Selected: true},
	}
	for _, ev := range evs {
		if err := Apply(s, ev); err != nil {
			t.Fatal(err)
		}
	}
	var segs []uint32
	for _, c := range s.Rollout(r0).Calls {
		segs = append(segs, c.Segment)
	}
	if diff := cmp.Diff([]uint32{0, 0, 1}, segs); diff != "" {
		t.Fatalf("segments (-want +got):\n%s", diff)
	}
	_, prompts := Contexts(append([]Event{AttemptStarted{}}, evs...))
	if diff := cmp.Diff([][]int32{{1, 2}, {1, 2, 3, 4}, {9}}, prompts); diff != "" {
		t.Fatalf("prompts (-want +got):\n%s", diff)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := NewState()
		evs := genRun(s, rapidChooser{t}, rapid.IntRange(1, 80).Draw(t, "n"), t.Fatalf)
		for _, ev := range evs {
			b, err := EncodeEvent(nil, ev)
			if err != nil {
				t.Fatal(err)
			}
			b2, _ := EncodeEvent(nil, ev)
			if string(b) != string(b2) {
				t.Fatalf("encoding is not deterministic")
			}
			got, err := DecodeEvent(b)
			if err != nil {
				t.Fatalf("decode %v: %v", ev.Kind(), err)
			}
			if diff := cmp.Diff(ev, got); diff != "" {
				t.Fatalf("round trip (-want +got):\n%s", diff)
			}
		}
	})
	b, _ := EncodeEvent(nil, GroupCommitted{Group: 1})
	for _, v := range []byte{oldestVersion - 1, encodingVersion + 1} {
		b[0] = v
		if _, err := DecodeEvent(b); !errors.Is(err, ErrUnknownVersion) {
			t.Fatalf("version %d: %v", v, err)
		}
	}
	b[0], b[1] = encodingVersion, 200
	if _, err := DecodeEvent(b); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
}

// TestSnapshotFold: folding from a snapshot (a base at k1, a delta at k2)
// plus the tail equals folding everything.
func TestSnapshotFold(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ref := NewState()
		evs := genRun(ref, rapidChooser{t}, rapid.IntRange(1, 150).Draw(t, "n"), t.Fatalf)
		k1 := rapid.IntRange(0, len(evs)).Draw(t, "k1")
		k2 := rapid.IntRange(k1, len(evs)).Draw(t, "k2")
		s := NewState()
		for _, ev := range evs[:k1] {
			if err := Apply(s, ev); err != nil {
				t.Fatal(err)
			}
		}
		base := encodeStateBody(nil, s, true, nil, 0, 0)
		nt, nc := len(s.Trained), len(s.Checkpoints)
		dirty := map[GroupID]struct{}{}
		for _, ev := range evs[k1:k2] {
			if err := Apply(s, ev); err != nil {
				t.Fatal(err)
			}
			markDirty(dirty, ev)
		}
		var ids []GroupID
		for id := range dirty {
			ids = append(ids, id)
		}
		full := false
		for _, ev := range evs[k1:k2] {
			full = full || ev.Kind() == KindRewound // as Log.Snapshot: a rewind forces a base
		}
		delta := encodeStateBody(nil, s, full, ids, nt, nc)

		got := NewState()
		if err := decodeStateBody(got, base); err != nil {
			t.Fatal(err)
		}
		if full {
			got = NewState()
		}
		if err := decodeStateBody(got, delta); err != nil {
			t.Fatal(err)
		}
		rebuildOrder(got)
		if diff := cmp.Diff(s, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("snapshot state (-want +got):\n%s", diff)
		}
		for _, ev := range evs[k2:] {
			if err := Apply(got, ev); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff(ref, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("snapshot + tail (-want +got):\n%s", diff)
		}
		if !got.Equal(ref) {
			t.Fatalf("digests differ")
		}
		if c := ref.Clone(); !c.Equal(ref) || cmp.Diff(ref, c) != "" {
			t.Fatalf("Clone differs")
		}
	})
}

func TestModelRunsLong(t *testing.T) {
	s := NewState()
	genRun(s, randChooser{rand.New(rand.NewPCG(1, 2))}, 5000, t.Fatalf)
	if s.Step == 0 || s.Counts[KindCompaction] == 0 || s.Counts[KindRolloutFailed] == 0 || s.Counts[KindRewound] == 0 {
		t.Fatalf("model run too narrow: step %d counts %v", s.Step, s.Counts)
	}
	// The planner's scans skip the settled head (genRun checks that it
	// holds only groups done with); in a long run it must grow.
	if s.settled == 0 {
		t.Fatalf("nothing settled after %d steps (%d groups)", s.Step, len(s.Order))
	}
	t.Logf("step %d: %d of %d groups settled", s.Step, s.settled, len(s.Order))
}

func TestRewound(t *testing.T) {
	s := NewState()
	must := func(ev Event) {
		t.Helper()
		if err := Apply(s, ev); err != nil {
			t.Fatal(err)
		}
	}
	must(RunStarted{Seed: testSeed, Mode: "deterministic"})
	var gs []GroupID
	for i := range 3 {
		g := NewGroupID(testSeed, 0, uint64(i))
		gs = append(gs, g)
		must(PromptAdmitted{Cursor: uint64(i), Group: g, Size: 1})
		must(AttemptStarted{Rollout: RolloutID{g, 0}, Attempt: 1})
		must(RolloutSealed{Rollout: RolloutID{g, 0}, Attempt: 1, Outcome: OutcomeCompleted})
		must(GroupCommitted{Group: g})
		must(StepTrained{Step: int64(i + 1), Groups: []GroupID{g}, Version: int64(i + 1)})
	}
	if err := Apply(s, Rewound{Step: 4, Version: 4}); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("rewind to a future step: %v", err)
	}
	must(Rewound{Step: 1, Version: 1})
	if s.Step != 1 || s.Version != 1 || len(s.Trained) != 1 {
		t.Fatalf("after rewind: step %d version %d trained %v", s.Step, s.Version, s.Trained)
	}
	if diff := cmp.Diff(gs[1:], s.Committed()); diff != "" {
		t.Fatalf("groups back to committed (-want +got):\n%s", diff)
	}
	must(StepTrained{Step: 2, Groups: gs[1:], Version: 2})
	if len(s.TrainedAfter(1)) != 2 || len(s.TrainedAfter(0)) != 3 {
		t.Fatalf("TrainedAfter: %v %v", s.TrainedAfter(1), s.TrainedAfter(0))
	}
}

// TestRestartAttempt: a restarted attempt starts from a fresh context in a
// new segment, with call numbers continuing and an old attempt fenced.
func TestRestartAttempt(t *testing.T) {
	s, g := started(t)
	r0 := RolloutID{g, 0}
	for _, ev := range []Event{
		CallFinished{Rollout: r0, Attempt: 2, Call: 0, PromptSuffix: []int32{1, 2}, Sampled: []int32{3}, Logprobs: []float32{0}, Finish: FinishStop, Selected: true},
		EnvStep{Rollout: r0, Attempt: 2, Turn: 0, Reward: 1},
		Compaction{Rollout: r0, Attempt: 2, Boundary: 0, AfterCall: 0, Policy: "recency"},
		RolloutFailed{Rollout: r0, Attempt: 2, Class: failure.Data, Reason: "diverged"},
		AttemptStarted{Rollout: r0, Attempt: 3, Restart: true},
	} {
		if err := Apply(s, ev); err != nil {
			t.Fatal(err)
		}
	}
	r := s.Rollout(r0)
	if r.CtxLen != 0 || r.Compactions != 0 || r.EnvSteps != 0 || r.EnvReward != 0 {
		t.Fatalf("restart kept progress: %+v", r)
	}
	// A prompt kept from the old context is refused; a whole one is next.
	bad := CallFinished{Rollout: r0, Attempt: 3, Call: 1, PromptPrefix: 2, Sampled: []int32{3}, Logprobs: []float32{0}, Finish: FinishStop, Selected: true}
	if err := Apply(s, bad); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("prefix into the abandoned context: %v", err)
	}
	late := CallFinished{Rollout: r0, Attempt: 2, Call: 1, PromptSuffix: []int32{1}, Sampled: []int32{3}, Logprobs: []float32{0}, Finish: FinishStop, Selected: true}
	if err := Apply(s, late); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("late call of the abandoned attempt: %v", err)
	}
	ok := CallFinished{Rollout: r0, Attempt: 3, Call: 1, PromptSuffix: []int32{1, 2}, Sampled: []int32{3}, Logprobs: []float32{0}, Finish: FinishStop, Selected: true}
	if err := Apply(s, ok); err != nil {
		t.Fatal(err)
	}
	if c := s.Rollout(r0).Calls; c[1].Segment != c[0].Segment+1 {
		t.Fatalf("restarted call in segment %d after %d", c[1].Segment, c[0].Segment)
	}
	b, err := EncodeEvent(nil, AttemptStarted{Rollout: r0, Attempt: 3, Restart: true})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := DecodeEvent(b); err != nil || !ev.(AttemptStarted).Restart {
		t.Fatalf("round trip: %+v %v", ev, err)
	}
}

// TestBudgetsAreFolded: per-class failure counts are a fold of the log
// (what a restarted controller reads back), survive a snapshot, and only
// a logged GroupRequeued starts a new budget round.
func TestBudgetsAreFolded(t *testing.T) {
	s, g := started(t)
	id := RolloutID{g, 0}
	for _, ev := range []Event{
		RolloutFailed{Rollout: id, Attempt: 2, Class: failure.Infra, Reason: "x"},
		AttemptStarted{Rollout: id, Attempt: 3},
		RolloutFailed{Rollout: id, Attempt: 3, Class: failure.Data, Reason: "y"},
		AttemptStarted{Rollout: id, Attempt: 4},
		RolloutFailed{Rollout: id, Attempt: 4, Class: failure.Infra, Reason: "z"},
	} {
		if err := Apply(s, ev); err != nil {
			t.Fatal(err)
		}
	}
	r := s.Rollout(id)
	if r.InfraFailures != 2 || r.DataFailures != 1 || r.Failures != 3 {
		t.Fatalf("infra %d data %d total %d, want 2 1 3", r.InfraFailures, r.DataFailures, r.Failures)
	}
	snap := NewState()
	if err := decodeStateBody(snap, encodeStateBody(nil, s, true, nil, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if got := snap.Rollout(id); got.InfraFailures != 2 || got.DataFailures != 1 {
		t.Fatalf("after a snapshot: infra %d data %d", got.InfraFailures, got.DataFailures)
	}
	// Member 1 never started: the group cannot be requeued while... it is
	// pending, which is allowed; the step must move forward.
	if err := Apply(s, GroupRequeued{Group: g, Step: 0}); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("requeue to the same step: %v", err)
	}
	if err := Apply(s, GroupRequeued{Group: g, Step: 3, Class: failure.Infra, Reason: "exhausted"}); err != nil {
		t.Fatal(err)
	}
	gr := s.Groups[g]
	if r := s.Rollout(id); r.InfraFailures != 0 || r.DataFailures != 0 || r.Failures != 3 || gr.ForStep != 3 || gr.AdmittedFor != 0 || gr.Retries != 1 {
		t.Fatalf("after requeue: rollout %+v group for %d admitted for %d retries %d", r, gr.ForStep, gr.AdmittedFor, gr.Retries)
	}
}

// TestRegenerate: a regenerated member is pending again, its next attempt
// must restart the episode, and its old attempt is fenced.
func TestRegenerate(t *testing.T) {
	s, g := started(t)
	id := RolloutID{g, 0}
	if err := Apply(s, RolloutRegenerated{Rollout: id}); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("regenerating a running rollout: %v", err)
	}
	if err := Apply(s, RolloutSealed{Rollout: id, Attempt: 2, Outcome: OutcomeCompleted, Reward: 1}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(s, RolloutRegenerated{Rollout: id, Reason: "stale"}); err != nil {
		t.Fatal(err)
	}
	if r := s.Rollout(id); r.Status != StatusPending || r.Reward != 0 {
		t.Fatalf("after regenerate: %+v", r)
	}
	if err := Apply(s, EnvStep{Rollout: id, Attempt: 2, Turn: 0}); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("late env step of the regenerated attempt: %v", err)
	}
	if err := Apply(s, EnvStep{Rollout: RolloutID{g, 1}, Attempt: 0, Turn: 0}); err == nil || errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("an event of a rollout that never started: %v", err)
	}
	if err := Apply(s, AttemptStarted{Rollout: id, Attempt: 3}); err == nil {
		t.Fatal("a regenerated rollout continued its old episode")
	}
	if err := Apply(s, AttemptStarted{Rollout: id, Attempt: 3, Restart: true}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(s, RolloutSealed{Rollout: id, Attempt: 2}); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("late result of the fenced attempt: %v", err)
	}
}

// TestIDStrings holds the ids' hand-written forms to their fmt forms.
func TestIDStrings(t *testing.T) {
	for _, v := range []uint64{0, 1, 0xf, 0x0123456789abcdef, 1<<64 - 1, 0x8000000000000000} {
		g := GroupID(v)
		if got, want := g.String(), fmt.Sprintf("g%016x", v); got != want {
			t.Fatalf("GroupID(%#x).String() = %q, want %q", v, got, want)
		}
		for _, m := range []uint16{0, 7, 65535} {
			r := RolloutID{Group: g, Member: m}
			if got, want := r.String(), fmt.Sprintf("g%016x-%d", v, m); got != want {
				t.Fatalf("RolloutID.String() = %q, want %q", got, want)
			}
		}
	}
}

// TestDecodeVersion2Failure: a RolloutFailed written before failures had a
// cause (encoding version 2) still decodes; one whose reason is a diverged
// resume gets CauseDiverged, so its next attempt restarts as it did then.
func TestDecodeVersion2Failure(t *testing.T) {
	r0 := RolloutID{Group: 7, Member: 1}
	for _, tc := range []struct {
		reason string
		want   FailureCause
	}{
		{"data failure: rollout: data failure: resume: " + legacyDiverged + ": turn 2: logged action", CauseDiverged},
		{"infra failure: generate: 503", CauseOther},
	} {
		ev := RolloutFailed{Rollout: r0, Attempt: 2, Class: failure.Data, Reason: tc.reason, Cause: CauseCallTimeout}
		b, err := EncodeEvent(nil, ev)
		if err != nil {
			t.Fatal(err)
		}
		// Version 2 is version 3 without the cause byte at the end.
		v2 := append([]byte{2}, b[1:len(b)-1]...)
		got, err := DecodeEvent(v2)
		if err != nil {
			t.Fatalf("version 2 payload: %v", err)
		}
		ev.Cause = tc.want
		if diff := cmp.Diff(ev, got); diff != "" {
			t.Fatalf("version 2 failure (-want +got):\n%s", diff)
		}
	}
}
