package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/env/httpenv"
	"github.com/longhaul-rl/longhaul/runlog"
)

// effects counts an environment's side effects by idempotency key. A step
// is the effect (think: an email sent, a row written); a replayed step
// only moves a fresh instance's state and has none.
type effects struct {
	mu    sync.Mutex
	byKey map[string]int
	nokey int
}

func (e *effects) add(ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k, ok := env.KeyOf(ctx)
	if !ok || k.Run == "" || k.Rollout == "" {
		e.nokey++
		return
	}
	e.byKey[k.String()]++
}

// countingEnv is the ledger with side effects and without snapshots, so a
// resumed rollout brings a fresh session forward by replaying every
// logged step: the path where a lost key or store repeats effects.
type countingEnv struct {
	inner env.Environment
	fx    *effects
}

func (c *countingEnv) Reset(ctx context.Context, t env.Task, seed uint64) (string, error) {
	return c.inner.Reset(ctx, t, seed)
}

func (c *countingEnv) Step(ctx context.Context, action string) (env.StepResult, error) {
	if !env.IsReplay(ctx) {
		c.fx.add(ctx)
	}
	return c.inner.Step(ctx, action)
}

func (c *countingEnv) Close(ctx context.Context) error { return c.inner.Close(ctx) }

// TestEnvEffectsOnceUnderKills is the exactly-once guarantee of HTTP
// environments (docs/protocols.md, idempotency keys): `longhaul train`
// against an environment server, SIGKILLed at crash points and at random
// moments and resumed after each kill, ends identical to an uninterrupted
// run, and every environment step it logged had its effect exactly once.
func TestEnvEffectsOnceUnderKills(t *testing.T) {
	bin := binary(t)
	fx := &effects{byKey: map[string]int{}}
	reg := env.NewRegistry()
	ledger := env.LedgerDefinition()
	if err := reg.Register(env.Definition{Name: "ledger", Task: ledger.Task, New: func(p json.RawMessage) (env.Environment, error) {
		e, err := ledger.New(p)
		return &countingEnv{inner: e, fx: fx}, err
	}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpenv.NewServer(reg, nil)) // a real listener on 127.0.0.1
	defer srv.Close()

	var log bytes.Buffer
	dir := t.TempDir()
	res, err := Run(context.Background(), Options{Binary: bin, Config: tinyConfig(t), Kills: 6, Seed: 11, Dir: dir, Log: &log,
		Overrides: []string{"env.kind=http", "env.url=" + srv.URL, "env.max_sessions=8", "run.max_steps=12"}})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Kills) < 6 {
		t.Fatalf("only %d kills landed", len(res.Kills))
	}
	if !res.Identical {
		t.Fatalf("resumed run differs from the uninterrupted one: %s", res.Difference)
	}

	killedID := readRunID(t, filepath.Join(dir, "killed"))
	steps := loggedSteps(t, filepath.Join(dir, "killed"))
	fx.mu.Lock()
	defer fx.mu.Unlock()
	if fx.nokey > 0 {
		t.Errorf("%d environment steps carried no idempotency key", fx.nokey)
	}
	repeated, killedKeys := 0, 0
	for k, n := range fx.byKey {
		if n != 1 {
			repeated++
			if repeated <= 5 {
				t.Errorf("effect of key %s happened %d times", k, n)
			}
		}
		if strings.HasPrefix(k, killedID+"/") {
			killedKeys++
		}
	}
	if repeated > 0 {
		t.Errorf("%d of %d keys had their effect more than once", repeated, len(fx.byKey))
	}
	// Every logged step had its effect: as many keyed effects as logged
	// steps at least (more when a killed attempt's unlogged step was
	// abandoned by a restart).
	if steps == 0 || killedKeys < steps {
		t.Errorf("killed run logged %d environment steps but the environment saw %d keyed effects", steps, killedKeys)
	}
	t.Logf("killed run: %d logged steps, %d effects; %d effects over both runs and warm starts", steps, killedKeys, len(fx.byKey))
}

func readRunID(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "run-id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// loggedSteps counts the distinct (rollout, attempt, turn) steps a log holds.
func loggedSteps(t *testing.T, dir string) int {
	t.Helper()
	l, err := runlog.Open(context.Background(), dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type k struct {
		id      runlog.RolloutID
		attempt uint32
		turn    uint32
	}
	seen := map[k]bool{}
	err = l.Events(context.Background(), func(_ runlog.Offset, ev runlog.Event) error {
		if s, ok := ev.(runlog.EnvStep); ok {
			seen[k{s.Rollout, s.Attempt, s.Turn}] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(seen)
}
