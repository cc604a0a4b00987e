package crashtest

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
)

// EnvCrashAll enables TestEveryCrashPoint (about 30 processes: the CI step
// .ci/steps/11-crashpoints.sh runs it; the default test run does not).
const EnvCrashAll = "LONGHAUL_CRASH_ALL"

// TestEveryCrashPoint kills a run with SIGKILL at EVERY named crash point
// (crashtest.Points, an enumeration, not a sample), in deterministic and in
// throughput mode, and resumes it. Every point must be reached (a kill must
// land). The resumed process traces its generator requests: none may be a
// call the log already held when the process started (a resumed rollout
// that regenerated its logged calls fails here). Deterministic runs must
// end identical to an uninterrupted one; throughput runs must train every
// admitted group at most once, in admission order, with no call logged
// twice.
func TestEveryCrashPoint(t *testing.T) {
	if os.Getenv(EnvCrashAll) == "" {
		t.Skipf("set %s=1 (the CI step .ci/steps/11-crashpoints.sh does)", EnvCrashAll)
	}
	bin := binary(t)
	ctx := context.Background()
	for _, mode := range []string{"deterministic", "throughput"} {
		t.Run(mode, func(t *testing.T) {
			o := Options{Binary: bin, Config: tinyConfig(t), Overrides: []string{"run.mode=" + mode, "run.max_steps=6"}}
			ref := filepath.Join(t.TempDir(), "ref")
			if _, err := o.start(ctx, ref, "").wait(); err != nil {
				t.Fatal(err)
			}
			want, err := Summarize(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			for _, pt := range Points {
				t.Run(pt, func(t *testing.T) {
					dir := filepath.Join(t.TempDir(), "run")
					st, err := o.start(ctx, dir, pt+":1").wait()
					if err != nil {
						t.Fatal(err)
					}
					if st != "killed" {
						t.Fatalf("the run finished without reaching crash point %s", pt)
					}
					logged := loggedSeeds(t, dir)
					trace := filepath.Join(t.TempDir(), "trace")
					if _, err := o.start(ctx, dir, "", EnvGenTrace+"="+trace).wait(); err != nil {
						t.Fatalf("resume after %s: %v", pt, err)
					}
					again := 0
					for _, s := range traced(t, trace) {
						if logged[s] {
							again++
						}
					}
					if again > 0 {
						t.Fatalf("after a kill at %s the resumed run generated %d logged calls again (of %d logged)", pt, again, len(logged))
					}
					// A rollout that restarts its episode draws new call
					// indices (new seeds), so the trace alone would not see
					// it regenerate its work: nothing in these runs diverges,
					// so no attempt may restart.
					if n := restarts(t, dir); n > 0 {
						t.Fatalf("after a kill at %s, %d attempts restarted their episode instead of resuming from the log", pt, n)
					}
					got, err := Summarize(ctx, dir)
					if err != nil {
						t.Fatal(err)
					}
					if mode == "deterministic" {
						if d := Compare(want, got); d != "" {
							t.Fatalf("killed at %s: %s", pt, d)
						}
						return
					}
					if got.Steps != 6 {
						t.Fatalf("killed at %s: ended at step %d, want 6", pt, got.Steps)
					}
					checkOnceInOrder(t, dir)
				})
			}
		})
	}
}

// loggedSeeds returns the sampling seeds of every call in dir's log.
func loggedSeeds(t *testing.T, dir string) map[uint64]bool {
	t.Helper()
	l, err := runlog.Open(context.Background(), dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := map[uint64]bool{}
	l.View(func(s *runlog.State) {
		for _, g := range s.Groups {
			for _, r := range g.Members {
				for i := range r.Calls {
					out[rollout.SampleSeed(s.Seed, r.ID, uint32(i))] = true
				}
			}
		}
	})
	return out
}

// traced reads a generator trace (EnvGenTrace).
func traced(t *testing.T, path string) []uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			t.Fatalf("trace line %q: %v", sc.Text(), err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		t.Fatal("the generator trace is empty: the resumed run generated nothing")
	}
	return out
}

// checkOnceInOrder: every trained group was admitted, is trained once, in
// admission order, and no (rollout, call) is logged twice.
func checkOnceInOrder(t *testing.T, dir string) {
	t.Helper()
	l, err := runlog.Open(context.Background(), dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var admitted []runlog.GroupID
	calls := map[runlog.RolloutID]map[uint32]bool{}
	err = l.Events(context.Background(), func(_ runlog.Offset, ev runlog.Event) error {
		switch e := ev.(type) {
		case runlog.PromptAdmitted:
			admitted = append(admitted, e.Group)
		case runlog.CallFinished:
			if calls[e.Rollout] == nil {
				calls[e.Rollout] = map[uint32]bool{}
			}
			if calls[e.Rollout][e.Call] {
				t.Errorf("call %s/%d logged twice", e.Rollout, e.Call)
			}
			calls[e.Rollout][e.Call] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var trained []runlog.GroupID
	l.View(func(s *runlog.State) {
		for _, ts := range s.Trained {
			trained = append(trained, ts.Groups...)
		}
	})
	for i, g := range trained {
		if i >= len(admitted) || admitted[i] != g {
			t.Fatalf("trained group %d is %s, admitted %v: not admission order, or trained twice", i, g, admitted[:min(len(admitted), i+1)])
		}
	}
}

// restarts counts the attempts in dir's log that started their episode over.
func restarts(t *testing.T, dir string) int {
	t.Helper()
	l, err := runlog.Open(context.Background(), dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	if err := l.Events(context.Background(), func(_ runlog.Offset, ev runlog.Event) error {
		if a, ok := ev.(runlog.AttemptStarted); ok && a.Restart {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
