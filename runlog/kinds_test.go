package runlog

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/longhaul-rl/longhaul/failure"
)

// everyKind is a short valid run that holds at least one event of every
// kind in the table, each with its fields set. A new kind fails
// TestEveryKindRoundTripsAndApplies until it has an event here, a row in
// kinds (kinds.go) and a case in apply (apply.go).
func everyKind() []Event {
	g := NewGroupID(testSeed, 0, 0)
	h := NewGroupID(testSeed, 0, 1)
	spare := NewGroupID(testSeed, 0, 2)
	r, q := RolloutID{g, 0}, RolloutID{h, 0}
	return []Event{
		RunStarted{ConfigDigest: [32]byte{1, 2}, Seed: testSeed, Mode: "deterministic"},
		ConfigChanged{Digest: [32]byte{3}, Changes: []string{"run.max_steps: 8 -> 9"}},
		PromptAdmitted{Epoch: 0, Cursor: 0, PromptID: "p0", Group: g, Size: 1, Step: 1},
		PromptAdmitted{Epoch: 0, Cursor: 1, PromptID: "p1", Group: h, Size: 1, Step: 1},
		AttemptStarted{Rollout: r, Attempt: 1, Seed: 7, Version: 0},
		CallFinished{Rollout: r, Attempt: 1, Call: 0, PromptSuffix: []int32{1, 2}, Sampled: []int32{3}, Logprobs: []float32{-0.5}, Finish: FinishStop, Selected: true},
		EnvStep{Rollout: r, Attempt: 1, Turn: 0, Action: "a", Observation: "o", Reward: 0.25, State: []byte{9}},
		Compaction{Rollout: r, Attempt: 1, Boundary: 0, AfterCall: 0, Policy: "recency", Lineage: []Lineage{{Message: 1, Op: LineageOp(1)}}, TokensBefore: 3, TokensAfter: 2},
		RolloutSealed{Rollout: r, Attempt: 1, Outcome: "ok", Reward: 1, Success: true},
		GroupCommitted{Group: g},
		AttemptStarted{Rollout: q, Attempt: 1, Seed: 8},
		RolloutFailed{Rollout: q, Attempt: 1, Class: failure.Infra, Reason: "503"},
		GroupRequeued{Group: h, Step: 2, Class: failure.Infra, Reason: "budget spent"},
		RolloutRegenerated{Rollout: q, Reason: "stale"},
		GroupDropped{Group: h, Class: failure.Data, Reason: "no attempts left"},
		PromptAdmitted{Epoch: 0, Cursor: 2, PromptID: "p2", Group: spare, Size: 1, Step: 2, Replaces: h},
		StepTrained{Step: 1, Groups: []GroupID{g}, Version: 1},
		CheckpointDurable{Step: 1, Version: 1, Path: "checkpoints/step-1", ManifestDigest: [32]byte{4}},
		SnapshotWritten{Offset: 12, Path: "snapshots/snap-1"},
		Rewound{Step: 0, Version: 0},
		LogDamaged{File: "runlog/00000000000000000000.seg", Offset: 40, Reason: "checksum"},
	}
}

func TestEveryKindRoundTripsAndApplies(t *testing.T) {
	s := NewState()
	seen := map[Kind]bool{}
	for i, ev := range everyKind() {
		k := ev.Kind()
		seen[k] = true
		b, err := EncodeEvent(nil, ev)
		if err != nil {
			t.Fatalf("event %d (%v): encode: %v", i, k, err)
		}
		got, err := DecodeEvent(b)
		if err != nil {
			t.Fatalf("event %d (%v): decode: %v", i, k, err)
		}
		if d := cmp.Diff(ev, got); d != "" {
			t.Errorf("event %d (%v) does not round-trip (-want +got):\n%s", i, k, d)
		}
		if err := Apply(s, got); err != nil {
			t.Fatalf("event %d (%v): apply: %v", i, k, err)
		}
	}
	for k := Kind(1); int(k) < numKinds; k++ {
		if !k.known() {
			t.Errorf("kind %d has no row in kinds (kinds.go)", k)
			continue
		}
		if !seen[k] {
			t.Errorf("kind %v has no event in everyKind: add one", k)
		}
		if s.Counts[k] == 0 {
			t.Errorf("kind %v was not applied", k)
		}
	}
}

// TestUnknownKindRefused: a kind byte beyond the table is an error, both
// ways, never a guess.
func TestUnknownKindRefused(t *testing.T) {
	if _, err := DecodeEvent([]byte{encodingVersion, uint8(numKinds)}); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("decode of kind %d: %v, want ErrUnknownKind", numKinds, err)
	}
	if _, err := EncodeEvent(nil, foreign{}); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("encode of a foreign event: %v, want ErrUnknownKind", err)
	}
	if err := Apply(NewState(), foreign{}); err == nil {
		t.Fatal("apply of a foreign event succeeded")
	}
}

type foreign struct{}

func (foreign) Kind() Kind { return Kind(numKinds) }
