package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/env/httpenv"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/runlog"
)

// misbehaving serves the ledger through the reference server, except that
// /step misbehaves the way mode says: a real loopback server, so the
// client's failures are the ones a real broken service causes.
func misbehaving(t *testing.T, mode string) string {
	t.Helper()
	ref := httpenv.NewServer(env.Builtin(), nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != httpenv.PathStep {
			ref.ServeHTTP(w, r)
			return
		}
		switch mode {
		case "hang":
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		case "crash":
			// The process dies mid-request: the connection drops unanswered.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case "malformed":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"observation": "7", "reward": `)
		case "unknown-tool":
			body, _ := io.ReadAll(r.Body)
			var req httpenv.StepRequest
			json.Unmarshal(body, &req)
			rep := httpenv.StepReply{Messages: []env.Message{{Role: "tool", ToolCallID: "call_0", Name: "rm_rf", Content: "done"}}}
			rep.Observation = "done"
			json.NewEncoder(w).Encode(rep)
		default:
			t.Errorf("mode %q", mode)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestMisbehavingHTTPEnvironment: an environment server that hangs,
// crashes, answers malformed JSON or names a tool the agent never called
// fails rollouts with the failure rules' class (infra for the first two,
// data for the others), each rollout retried exactly within its class's
// budget before its group is dropped; with no drops allowed the run stops.
func TestMisbehavingHTTPEnvironment(t *testing.T) {
	for _, tc := range []struct{ mode, class, reason string }{
		{"hang", failure.Infra, "deadline exceeded"},
		{"crash", failure.Infra, "EOF"},
		{"malformed", failure.Data, "not the protocol's JSON"},
		{"unknown-tool", failure.Data, "did not make"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			cfg := tiny(t, "env.kind=http", "env.url="+misbehaving(t, tc.mode), "env.timeout_s=0.3",
				"rollout_failure.max_infra_attempts=3", "rollout_failure.max_data_attempts=2",
				"rollout_failure.backoff_base_s=0.01", "rollout_failure.backoff_cap_s=0.02",
				"rollout_failure.max_skipped_prompts=0", "rollout_failure.max_consecutive_dropped_prompts=0",
				// shrink: a dropped group is final, so the drop cap is what stops
				// the run (retry, the default, would requeue it first).
				"rollout_failure.on_dropped_prompt=shrink")
			err := Train(context.Background(), cfg, Options{RunDir: dir})
			if !errors.Is(err, controller.ErrTooManyDropped) {
				t.Fatalf("err = %v, want the drop cap", err)
			}
			budget := map[string]int{failure.Infra: 3, failure.Data: 2}[tc.class]
			fails := map[runlog.RolloutID]int{}
			dropped := 0
			l, err := runlog.Open(context.Background(), dir, runlog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			l.Events(context.Background(), func(_ runlog.Offset, ev runlog.Event) error {
				switch e := ev.(type) {
				case runlog.RolloutFailed:
					if e.Class != tc.class || !strings.Contains(e.Reason, tc.reason) {
						t.Errorf("rollout %s failed as %s (%s), want %s with %q", e.Rollout, e.Class, e.Reason, tc.class, tc.reason)
					}
					fails[e.Rollout]++
				case runlog.GroupDropped:
					dropped++
					if e.Class != tc.class {
						t.Errorf("group %s dropped as %s, want %s", e.Group, e.Class, tc.class)
					}
				}
				return nil
			})
			if dropped == 0 || len(fails) == 0 {
				t.Fatalf("%d groups dropped, %d rollouts failed", dropped, len(fails))
			}
			for id, n := range fails {
				if n > budget {
					t.Errorf("rollout %s failed %d times; the %s budget is %d attempts", id, n, tc.class, budget)
				}
			}
			if !hasN(fails, budget) {
				t.Errorf("no rollout used its whole %s budget of %d: %v", tc.class, budget, fails)
			}
		})
	}
}

func hasN(m map[runlog.RolloutID]int, n int) bool {
	for _, v := range m {
		if v == n {
			return true
		}
	}
	return false
}

// TestHTTPEnvironmentTrains: a run whose environment is the reference
// server on loopback, with tasks from a JSONL file and warm-start
// demonstrations from a JSONL file, trains; demonstrations that do not fit
// their episode are errors naming the file and line.
func TestHTTPEnvironmentTrains(t *testing.T) {
	hs := httpenv.NewServer(env.Builtin(), nil)
	hs.MaxSessions = 2 // beyond env.max_sessions the server would answer 503
	srv := httptest.NewServer(hs)
	defer srv.Close()
	dir := t.TempDir()
	tasks, demos := filepath.Join(dir, "tasks.jsonl"), filepath.Join(dir, "demos.jsonl")
	var tb, db bytes.Buffer
	var first []byte
	reg := env.Builtin()
	for i := range 8 {
		task, err := reg.Task("ledger", nil, 5, i)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(task)
		if first == nil {
			first = b
		}
		tb.WriteString(`{"id": "` + task.ID + `", "task": ` + string(b) + "}\n")
		db.WriteString(`{"task": ` + string(b) + `, "calls": ["1", "2", "3"]}` + "\n")
	}
	os.WriteFile(tasks, tb.Bytes(), 0o644)
	os.WriteFile(demos, db.Bytes(), 0o644)
	base := []string{"env.kind=http", "env.url=" + srv.URL, "env.max_sessions=2", "data.source=jsonl", "data.path=" + tasks,
		"warmstart.enabled=true", "warmstart.steps=2", "warmstart.batch_size=2", "warmstart.data=" + demos,
		"rollout.max_turns=3", "compaction.enabled=false"}
	if err := Train(context.Background(), tiny(t, base...), Options{RunDir: filepath.Join(dir, "run")}); err != nil {
		t.Fatal(err)
	}
	rep, err := runlog.Inspect(context.Background(), filepath.Join(dir, "run"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Step != 1 || rep.Counts["EnvStep"] == 0 || rep.Counts["RolloutFailed"] != 0 {
		t.Fatalf("step %d, %d env steps, %d failed attempts (env.max_sessions not kept?)", rep.Step, rep.Counts["EnvStep"], rep.Counts["RolloutFailed"])
	}
	// A demonstration with more calls than its episode takes.
	os.WriteFile(demos, []byte(`{"task": `+string(first)+`, "calls": ["1", "2", "3", "4", "5"]}`+"\n"), 0o644)
	err = Train(context.Background(), tiny(t, base...), Options{RunDir: filepath.Join(dir, "run2")})
	if err == nil || !strings.Contains(err.Error(), demos+":1") {
		t.Fatalf("err = %v, want one naming %s:1", err, demos)
	}
	if n := hs.Sessions(); n != 0 {
		t.Fatalf("%d sessions left open", n)
	}
	if hs.Keys() == 0 {
		t.Fatal("the server stored no idempotency keys")
	}
}
