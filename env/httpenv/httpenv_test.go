package httpenv_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/env/httpenv"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
)

func server(t *testing.T) (*httpenv.Server, *httptest.Server) {
	t.Helper()
	s := httpenv.NewServer(env.Builtin(), nil)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	srv, ts := server(t)
	reg := env.Builtin()
	task, _ := reg.Task("ledger", nil, 3, 0)
	// Arbitrary answers are mostly wrong: keep the episode going.
	keepGoing := json.RawMessage(`{"stop_on_error":false}`)
	local, _ := reg.New("ledger", keepGoing)
	remote := httpenv.New(ts.URL, "", keepGoing)

	lo, err1 := local.Reset(ctx, task, 0)
	ro, err2 := remote.Reset(ctx, task, 0)
	if err1 != nil || err2 != nil || lo != ro {
		t.Fatalf("%q %v / %q %v", lo, err1, ro, err2)
	}
	for i, a := range []string{"1", "2", "3"} {
		lr, _ := local.Step(ctx, a)
		rr, err := remote.Step(ctx, a)
		if err != nil || !cmp.Equal(lr, rr) {
			t.Fatalf("step %d: %+v vs %+v (%v)", i, lr, rr, err)
		}
	}
	state, err := remote.Snapshot(ctx)
	if err != nil || len(state) == 0 {
		t.Fatalf("snapshot %v", err)
	}
	// Restore into a fresh client (new session) and continue identically.
	other := httpenv.New(ts.URL, "ledger", keepGoing)
	if err := other.Restore(ctx, state); err != nil {
		t.Fatal(err)
	}
	a, _ := remote.Step(ctx, "4")
	b, err := other.Step(ctx, "4")
	if err != nil || !cmp.Equal(a, b) {
		t.Fatalf("%+v vs %+v (%v)", a, b, err)
	}
	if srv.Sessions() != 2 {
		t.Fatalf("%d sessions", srv.Sessions())
	}
	_ = remote.Close(ctx)
	_ = other.Close(ctx)
	_ = other.Close(ctx) // twice is fine
	if srv.Sessions() != 0 {
		t.Fatalf("%d sessions after close", srv.Sessions())
	}
	// Errors: an unknown session is data, an unknown env is data.
	if _, err := remote.Step(ctx, "1"); failure.ClassOf(err) != failure.Data {
		t.Fatalf("step without session: %v", err)
	}
	bad := httpenv.New(ts.URL, "nope", nil)
	if _, err := bad.Reset(ctx, task, 0); failure.ClassOf(err) != failure.Data || !strings.Contains(err.Error(), "unknown environment") {
		t.Fatalf("unknown env: %v", err)
	}
}

// TestRolloutOverHTTP runs the ledger oracle against the reference server
// and resumes it at every cut through remote snapshots.
func TestRolloutOverHTTP(t *testing.T) {
	ctx := context.Background()
	srv, ts := server(t)
	task, _ := env.Builtin().Task("ledger", nil, 3, 1)
	spec := func(rec rollout.Recorder) rollout.Spec {
		return rollout.Spec{
			Seed: 1, Rollout: runlog.RolloutID{Group: 1}, Attempt: 1, Task: task,
			NewEnv:    func(context.Context) (env.Environment, error) { return httpenv.New(ts.URL, "", nil), nil },
			Generator: scripted.LedgerOracle(""), Recorder: rec,
			Limits:     rollout.Limits{MaxTurns: 40, MaxTokensPerCall: env.LedgerMaxTokensPerCall, ContextBudget: env.LedgerContextBudget},
			Compaction: compaction.Config{Policy: compaction.PolicyRecency, KeepTurns: env.LedgerKeepTurns, Threshold: env.LedgerCompactThreshold},
		}
	}
	rec := &scripted.Recorder{}
	res, err := rollout.Run(ctx, spec(rec), nil)
	if err != nil || !res.Success {
		t.Fatalf("%+v %v", res, err)
	}
	full := rec.Events()
	for k := 0; k < len(full); k++ {
		rec := &scripted.Recorder{}
		if _, err := rollout.Run(ctx, spec(rec), full[:k:k]); err != nil {
			t.Fatalf("cut %d: %v", k, err)
		}
		if diff := cmp.Diff(full, append(append([]runlog.Event(nil), full[:k]...), rec.Events()...)); diff != "" {
			t.Fatalf("cut %d:\n%s", k, diff)
		}
	}
	if srv.Sessions() != 0 {
		t.Fatalf("%d sessions leaked", srv.Sessions())
	}
}

func TestGarbageServer(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>definitely not json</html>"))
	}))
	defer ts.Close()
	_, err := httpenv.New(ts.URL, "ledger", nil).Reset(context.Background(), env.Task{}, 0)
	var f *failure.Failure
	if !errors.As(err, &f) || f.Class != failure.Data {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{"not the protocol's JSON", "/reset", "<html>definitely not json</html>"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q lacks %q", err, want)
		}
	}
}

func TestStatusClasses(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		class  string
	}{
		{503, "overloaded", failure.Infra},
		{429, "", failure.Infra},
		{408, "", failure.Infra},
		{400, `{"error":{"class":"data","message":"bad action"}}`, failure.Data},
		{500, `{"error":{"class":"data","message":"env bug"}}`, failure.Data}, // the server's class wins
	} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		}))
		_, err := httpenv.New(ts.URL, "ledger", nil).Reset(context.Background(), env.Task{}, 0)
		ts.Close()
		if got := failure.ClassOf(err); got != tc.class {
			t.Errorf("%d %q: class %s (%v)", tc.status, tc.body, got, err)
		}
	}
}

func TestHangingServer(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer ts.Close()
	defer close(release)
	c := httpenv.New(ts.URL, "ledger", nil)
	c.Timeout = 50 * time.Millisecond
	start := time.Now()
	_, err := c.Reset(context.Background(), env.Task{}, 0)
	if failure.ClassOf(err) != failure.Infra || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %v", d)
	}
}

func TestServerRejects(t *testing.T) {
	_, ts := server(t)
	resp, err := http.Post(ts.URL+httpenv.PathStep, "application/json", strings.NewReader("{nope"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d", resp.StatusCode)
	}
	resp, err = http.Get(ts.URL + httpenv.PathStep)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
