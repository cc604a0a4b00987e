package agentenv_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/google/go-cmp/cmp"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/env/agentenv"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
)

func agentCommand(t *testing.T) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3: the example agent cannot run")
	}
	_, file, _, _ := runtime.Caller(0)
	return []string{py, filepath.Join(filepath.Dir(file), "..", "..", "examples", "agents", "ledger_agent.py")}
}

// gen answers from the prompt alone (deterministic), counting calls.
func generator() *scripted.Func {
	return &scripted.Func{Reply: func(r gen.Request) (string, error) { return fmt.Sprint(len(r.Prompt) % 10), nil }}
}

func spec(t *testing.T, cmd []string, g gen.Generator, rec rollout.Recorder) rollout.Spec {
	reg := env.Builtin()
	task, err := reg.Task("ledger", nil, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rollout.Spec{Seed: 1, Rollout: runlog.RolloutID{Group: 1}, Attempt: 1, Task: task,
		NewEnv:    func(context.Context) (env.Environment, error) { return &agentenv.Env{Command: cmd}, nil },
		Generator: g, Recorder: rec,
		Limits: rollout.Limits{MaxTokensPerCall: 4, ContextBudget: 120, MaxTurns: 20}}
}

// TestAgentReplayAtEveryCut: an external agent's rollout resumed from any
// prefix of its log answers the logged calls from the log (the generator
// is asked only for calls past it) and ends with exactly the log of the
// uninterrupted rollout.
func TestAgentReplayAtEveryCut(t *testing.T) {
	cmd := agentCommand(t)
	ctx := context.Background()
	rec := &scripted.Recorder{}
	g := generator()
	res, err := rollout.Run(ctx, spec(t, cmd, g, rec), nil)
	if err != nil {
		t.Fatal(err)
	}
	full := rec.Events()
	if res.Outcome != runlog.OutcomeCompleted || res.Calls < 10 || g.Calls() != res.Calls || res.Compactions == 0 {
		t.Fatalf("uninterrupted: %+v, %d generator calls", res, g.Calls())
	}
	// The agent declares each rewrite of its context: every prefix break
	// is a declared boundary, so segments build with undeclared breaks
	// as errors.
	calls, bounds := rollout.Trace(full, runlog.RolloutID{Group: 1})
	if _, st, err := segment.Build(calls, bounds, segment.Config{OnUndeclaredBreak: segment.OnBreakError}); err != nil || st.Declared != res.Compactions {
		t.Fatalf("segments: %+v %v; want %d declared boundaries", st, err, res.Compactions)
	}
	for _, k := range []int{0, 1, 2, len(full) / 2, len(full) - 2, len(full) - 1, len(full)} {
		prior := slices.Clone(full[:k])
		rec := &scripted.Recorder{}
		g := generator()
		if _, err := rollout.Run(ctx, spec(t, cmd, g, rec), prior); err != nil {
			t.Fatalf("cut %d: %v", k, err)
		}
		got := append(prior, rec.Events()...)
		if d := cmp.Diff(full, got); d != "" {
			t.Fatalf("cut %d: log differs (-want +got):\n%s", k, d)
		}
		live := 0
		for _, ev := range full[k:] {
			if _, ok := ev.(runlog.CallFinished); ok {
				live++
			}
		}
		if g.Calls() != live {
			t.Fatalf("cut %d: generator asked %d times, want %d (the calls past the log)", k, g.Calls(), live)
		}
	}
}

// TestAgentDivergence: a log whose calls the agent does not make again is
// a divergence (the controller restarts the attempt), never a mix.
func TestAgentDivergence(t *testing.T) {
	cmd := agentCommand(t)
	ctx := context.Background()
	rec := &scripted.Recorder{}
	if _, err := rollout.Run(ctx, spec(t, cmd, generator(), rec), nil); err != nil {
		t.Fatal(err)
	}
	prior := rec.Events()[:3]
	c := prior[1].(runlog.CallFinished)
	c.Sampled = append(bytetok.Encode("x"), c.Sampled...) // the agent will echo another reply
	c.Logprobs = append([]float32{-1}, c.Logprobs...)
	prior[1] = c
	rec2 := &scripted.Recorder{}
	_, err := rollout.Run(ctx, spec(t, cmd, generator(), rec2), prior)
	if !errors.Is(err, rollout.ErrDiverged) || failure.ClassOf(err) != failure.Data {
		t.Fatalf("err = %v, want a data failure wrapping ErrDiverged", err)
	}
}

// TestAgentFailures: an agent that exits non-zero is a data failure with
// its last stderr lines; one that exits 0 without a reward too.
func TestAgentFailures(t *testing.T) {
	py := agentCommand(t)[0]
	for _, tc := range []struct {
		script, want string
	}{
		{"import sys; sys.stderr.write('line1\\nagent broke: no key\\n'); sys.exit(3)", "agent broke: no key"},
		{"pass", "without posting its reward"},
	} {
		rec := &scripted.Recorder{}
		_, err := rollout.Run(context.Background(), spec(t, []string{py, "-c", tc.script}, generator(), rec), nil)
		if failure.ClassOf(err) != failure.Data || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%q: err = %v, want a data failure with %q", tc.script, err, tc.want)
		}
		evs := rec.Events()
		if f, ok := evs[len(evs)-1].(runlog.RolloutFailed); !ok || f.Class != failure.Data || !strings.Contains(f.Reason, tc.want) {
			t.Fatalf("%q: last event %+v, want RolloutFailed (data) with %q", tc.script, evs[len(evs)-1], tc.want)
		}
	}
}

// TestOpenAINodeSDKAgent: an agent written with the official OpenAI Node
// SDK (a client no one here wrote) runs against the per-rollout endpoint,
// and resumes from half its log answered from the log.
func TestOpenAINodeSDKAgent(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "test", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skip("test/node/node_modules missing: run npm ci in test/node")
	}
	cmd := []string{node, filepath.Join(dir, "agent.mjs")}
	rec := &scripted.Recorder{}
	g := generator()
	res, err := rollout.Run(context.Background(), spec(t, cmd, g, rec), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != runlog.OutcomeCompleted || res.Calls < 10 || g.Calls() != res.Calls {
		t.Fatalf("%+v, %d generator calls", res, g.Calls())
	}
	full := rec.Events()
	k := len(full) / 2
	rec2 := &scripted.Recorder{}
	g2 := generator()
	if _, err := rollout.Run(context.Background(), spec(t, cmd, g2, rec2), slices.Clone(full[:k])); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(full, append(slices.Clone(full[:k]), rec2.Events()...)); d != "" {
		t.Fatalf("resumed log differs (-want +got):\n%s", d)
	}
	if g2.Calls() >= res.Calls {
		t.Fatalf("resume generated %d calls of %d: the log was not replayed", g2.Calls(), res.Calls)
	}
}

// TestAgentHangs: an agent that never finishes is stopped at the
// attempt's deadline (the controller's rollout_failure.rollout_timeout_s),
// and its process is killed.
func TestAgentHangs(t *testing.T) {
	py := agentCommand(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := rollout.Run(ctx, spec(t, []string{py, "-c", "import time; time.sleep(60)"}, generator(), &scripted.Recorder{}), nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 10*time.Second {
		t.Fatalf("err = %v after %v, want the deadline within seconds", err, time.Since(t0))
	}
}
