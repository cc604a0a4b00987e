package rollout_test

// The environments that act outside the process, as they ship: an HTTP
// environment (httpenv.Client, stepping a real server) and an external
// agent (agentenv.Env, a real program answered over HTTP). Neither may be
// env.InProcess: its effects (a server's step, an agent reading its
// answer) must come after the call they act on is durable.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/env/agentenv"
	"github.com/longhaul-rl/longhaul/env/httpenv"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
)

// durableFirst is a generator that checks, at every call, that each call
// made before it is durable: the environment or agent that asked for this
// call acted on the previous call's answer.
type durableFirst struct {
	t     *testing.T
	inner gen.Generator
	rec   *stagingRecorder
	made  *atomic.Int32
}

func (g durableFirst) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	if n, got := int(g.made.Load()), g.rec.durableCalls(); got != n {
		g.t.Errorf("call %d asked for with %d of the %d calls before it durable", n+1, got, n)
	}
	g.made.Add(1)
	return g.inner.Generate(ctx, reqs)
}

// TestOutsideEnvsNeverStaged: with a recorder that can stage, a rollout
// over the real httpenv.Client or agentenv.Env stages nothing, and each
// effect outside (the HTTP server's step, the agent's next call) comes
// after the calls it follows are durable. Marking either type
// env.InProcess fails this test (TestStagedCalls uses a wrapper type and
// cannot see the real ones).
func TestOutsideEnvsNeverStaged(t *testing.T) {
	ctx := context.Background()
	t.Run("httpenv", func(t *testing.T) {
		rec := &stagingRecorder{t: t}
		var made atomic.Int32
		srv := httpenv.NewServer(env.Builtin(), nil)
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == httpenv.PathStep {
				if n, got := int(made.Load()), rec.durableCalls(); got != n {
					t.Errorf("the HTTP environment stepped with %d of the %d calls made durable", got, n)
				}
			}
			srv.ServeHTTP(w, r)
		}))
		defer ts.Close()
		spec := ledgerSpec(t, durableFirst{t, scripted.LedgerOracle(""), rec, &made}, rec, recency)
		spec.NewEnv = func(context.Context) (env.Environment, error) { return httpenv.New(ts.URL, "ledger", nil), nil }
		res, err := rollout.Run(ctx, spec, nil)
		if err != nil || res.Calls < 4 {
			t.Fatalf("%+v, %v", res, err)
		}
		if rec.stages != 0 {
			t.Fatalf("%d call records staged for an HTTP environment", rec.stages)
		}
	})
	t.Run("agentenv", func(t *testing.T) {
		py, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("no python3: the example agent cannot run")
		}
		_, file, _, _ := runtime.Caller(0)
		cmd := []string{py, filepath.Join(filepath.Dir(file), "..", "examples", "agents", "ledger_agent.py")}
		task, err := env.Builtin().Task("ledger", nil, 4, 0)
		if err != nil {
			t.Fatal(err)
		}
		rec := &stagingRecorder{t: t}
		var made atomic.Int32
		reply := &scripted.Func{Reply: func(r gen.Request) (string, error) { return fmt.Sprint(len(r.Prompt) % 10), nil }}
		spec := rollout.Spec{Seed: 1, Rollout: runlog.RolloutID{Group: 1}, Attempt: 1, Task: task,
			NewEnv:    func(context.Context) (env.Environment, error) { return &agentenv.Env{Command: cmd}, nil },
			Generator: durableFirst{t, reply, rec, &made}, Recorder: rec,
			Limits: rollout.Limits{MaxTokensPerCall: 4, ContextBudget: 120, MaxTurns: 20}}
		res, err := rollout.Run(ctx, spec, nil)
		if err != nil || res.Calls < 4 {
			t.Fatalf("%+v, %v", res, err)
		}
		if rec.stages != 0 {
			t.Fatalf("%d call records staged for an external agent", rec.stages)
		}
	})
}
