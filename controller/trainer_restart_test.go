package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/train"
)

// losingTrainer is the harness's trainer that loses its state (as a
// restarted serve-trainer does: back at step 0) at chosen TrainStep
// calls, failing them with train.ErrStateLost.
type losingTrainer struct {
	*fakeTrainer
	mu    sync.Mutex
	calls int
	lose  func(call int) bool
}

func (t *losingTrainer) TrainStep(ctx context.Context, b train.Batch) (train.StepStats, error) {
	t.mu.Lock()
	t.calls++
	n := t.calls
	t.mu.Unlock()
	if t.lose(n) {
		t.fakeTrainer.mu.Lock()
		was := t.fakeTrainer.v
		t.fakeTrainer.v = 0
		t.fakeTrainer.mu.Unlock()
		return train.StepStats{}, fmt.Errorf("trainer came back at step 0, the run expected %d: %w", was, train.ErrStateLost)
	}
	return t.fakeTrainer.TrainStep(ctx, b)
}

func trainedGroups(st *runlog.State) [][]runlog.GroupID {
	var out [][]runlog.GroupID
	for _, tr := range st.Trained {
		out = append(out, slices.Clone(tr.Groups))
	}
	return out
}

// TestTrainerLostStateRecovers: a trainer that loses its state in the
// middle of a run gets the newest durable state loaded (here: none, so
// the initial policy) and the log is rewound; the run trains the same
// groups in the same steps as an uninterrupted one and generates no
// logged call again, in both modes.
func TestTrainerLostStateRecovers(t *testing.T) {
	for _, mode := range []string{"deterministic", "throughput"} {
		t.Run(mode, func(t *testing.T) {
			over := []string{"run.mode=" + mode, "run.max_steps=4"}
			ref := newHarness(t, testConfig(t, over...))
			if err := ref.run(context.Background()); err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, testConfig(t, over...))
			lt := &losingTrainer{fakeTrainer: h.tr, lose: func(n int) bool { return n == 3 }}
			if err := h.runWith(context.Background(), lt); err != nil {
				t.Fatalf("run whose trainer lost its state at its third step: %v", err)
			}
			st := h.state()
			if st.Step != 4 || h.tr.v != 4 {
				t.Fatalf("log at step %d, trainer at %d; want 4 and 4", st.Step, h.tr.v)
			}
			rewound := 0
			for _, ev := range h.events() {
				if _, ok := ev.(runlog.Rewound); ok {
					rewound++
				}
			}
			if rewound != 1 {
				t.Fatalf("%d Rewound events, want 1", rewound)
			}
			sameAsUninterrupted(t, h, ref)
		})
	}
}

// exportLosingTrainer loses its state (back at step 0) at its first
// ExportWeights call, as a serve-trainer SIGKILLed and started again
// between the last step and the final export does; it records the step
// its weights were at when an export succeeded.
type exportLosingTrainer struct {
	*fakeTrainer
	exports  int
	exported []int64
}

func (t *exportLosingTrainer) ExportWeights(ctx context.Context, path string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exports++; t.exports == 1 {
		was := t.v
		t.v = 0
		return fmt.Errorf("trainer came back at step 0, the run expected %d: %w", was, train.ErrStateLost)
	}
	t.exported = append(t.exported, t.v)
	return nil
}

// TestTrainerLostStateBeforeFinalWeights: a trainer that loses its state
// after the last step, when the final weights are exported, is restored
// and the rewound steps trained again from the log, so the exported
// weights are the last step's (not the restarted trainer's step 0, and
// not an error at the end of a finished run).
func TestTrainerLostStateBeforeFinalWeights(t *testing.T) {
	over := []string{"run.max_steps=3"}
	ref := newHarness(t, testConfig(t, over...))
	if err := ref.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testConfig(t, over...))
	h.final = filepath.Join(h.dir, "weights.safetensors")
	et := &exportLosingTrainer{fakeTrainer: h.tr}
	if err := h.runWith(context.Background(), et); err != nil {
		t.Fatalf("run whose trainer lost its state at the final export: %v", err)
	}
	if !slices.Equal(et.exported, []int64{3}) {
		t.Fatalf("exports succeeded with the trainer at steps %v, want [3]", et.exported)
	}
	sameAsUninterrupted(t, h, ref)
}

// sameAsUninterrupted checks that h trained the groups ref trained, step
// by step, and generated every call once.
func sameAsUninterrupted(t *testing.T, h, ref *harness) {
	t.Helper()
	if got, want := trainedGroups(h.state()), trainedGroups(ref.state()); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("trained groups %v, want the uninterrupted run's %v", got, want)
	}
	h.gen.mu.Lock()
	defer h.gen.mu.Unlock()
	for k, n := range h.gen.calls {
		if n != 1 {
			t.Fatalf("call %s generated %d times", k, n)
		}
	}
}

// TestTrainerAlwaysLosingStateStops: a trainer that loses its state at
// every step is a fault to report, not to loop on.
func TestTrainerAlwaysLosingStateStops(t *testing.T) {
	h := newHarness(t, testConfig(t, "run.max_steps=3"))
	lt := &losingTrainer{fakeTrainer: h.tr, lose: func(int) bool { return true }}
	err := h.runWith(context.Background(), lt)
	if !errors.Is(err, train.ErrStateLost) || !strings.Contains(err.Error(), "without training a step in between") {
		t.Fatalf("err = %v", err)
	}
}
