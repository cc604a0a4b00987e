package crashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// serverKillSteps is long enough (a few seconds on loopback) that the
// restarted server is back, and taken up again by the generator's health
// prober (every 2 s), well before the run ends.
const serverKillSteps = 40

// TestServerKilledMidRun is issue 8: a `longhaul serve` process SIGKILLed
// in the middle of a run and started again on the same port, with
// `--weights RUN_DIR`, a moment later. The generator's routing marks it
// down (calls in flight move to the other server, or, with one server,
// the rollouts fail as infra and are retried with backoff until it is
// back), and the run finishes every step with nothing lost or repeated:
// each group trained exactly once and no logged call generated twice.
// When no attempt had to be retried (two servers: the calls only moved),
// the run must also equal the uninterrupted in-process one.
func TestServerKilledMidRun(t *testing.T) {
	bin := binary(t)
	cfg := tinyConfig(t)
	// The uninterrupted in-process run: a served run equals it
	// (TestThreeProcessesEqualInProcess), and so must one whose calls only
	// moved to another server, since a sample is a pure function of its seed.
	ref := filepath.Join(t.TempDir(), "ref")
	train(t, bin, cfg, ref, fmt.Sprint("run.max_steps=", serverKillSteps))
	want, err := Summarize(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		servers int
	}{{"two-servers", 2}, {"one-server", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			ports := make([]int, tc.servers)
			urls := make([]string, tc.servers)
			for i := range ports {
				ports[i] = proctest.FreePort(t)
				urls[i] = fmt.Sprintf("http://127.0.0.1:%d/v1", ports[i])
			}
			victim := serveProc(t, bin, ports[0], "serve", "--config", cfg)
			for _, p := range ports[1:] {
				serveProc(t, bin, p, "serve", "--config", cfg)
			}
			dir := filepath.Join(t.TempDir(), "run")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "train", "--config", cfg, "--run-dir", dir, "--no-progress",
				"--log-level", "info",
				fmt.Sprint("run.max_steps=", serverKillSteps),
				"generator.kind=openai", "generator.urls="+strings.Join(urls, ","), "trainer.kind=embedded",
				// A restart takes about a second; the backoffs
				// 0.1, 0.2, 0.4, 0.5, ... s over 20 attempts wait ≥ 8 s.
				"rollout_failure.max_infra_attempts=20", "rollout_failure.backoff_base_s=0.1",
				"rollout_failure.backoff_cap_s=0.5", "rollout_failure.call_timeout_s=20")
			out := &proctest.Buffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var waitErr error
			exited := make(chan struct{})
			go func() { waitErr = cmd.Wait(); close(exited) }()

			// Kill the server once two steps are in metrics.jsonl.
			metrics := filepath.Join(dir, "metrics.jsonl")
			if !waitFor(exited, 60*time.Second, func() bool { return proctest.CountLines(metrics) >= 2 }) {
				t.Fatalf("the run ended (or stalled) before step 2:\n%s", out.String())
			}
			if err := victim.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killedAt := proctest.CountLines(metrics)
			time.Sleep(500 * time.Millisecond)
			restartedAt := proctest.CountLines(metrics)
			serveProc(t, bin, ports[0], "serve", "--config", cfg, "--weights", dir)
			backAt := proctest.CountLines(metrics)

			select {
			case <-exited:
			case <-time.After(80 * time.Second):
				t.Fatalf("the run did not finish after the restart:\n%s", out.String())
			}
			if waitErr != nil {
				t.Fatalf("train: %v%s\n%s", waitErr, knownBugs(out.String()), out.String())
			}
			t.Logf("killed at step %d, restarting at step %d, healthy at step %d of %d", killedAt, restartedAt, backAt, serverKillSteps)
			if backAt >= serverKillSteps {
				t.Fatalf("the run finished before the server was back (step %d): make it longer", backAt)
			}
			logs := out.String()
			if !strings.Contains(logs, "generation server down") {
				t.Errorf("the generator never marked the killed server down:\n%s", logs)
			}
			// An outage is waited out by the generator client
			// (rollout_failure.max_outage_s), not charged to a rollout.
			if tc.servers == 1 && strings.Contains(logs, "rollout attempt failed") {
				t.Errorf("with its only server restarting, a rollout attempt failed (the outage spent a budget):\n%s", logs)
			}

			// The restarted server took calls and the run's later publishes.
			served, version := serverStats(t, ports[0])
			t.Logf("restarted server: %d completions answered, serving version %d; %s", served, version, retrySummary(logs))
			if served == 0 {
				t.Errorf("the restarted server answered no completions: the routing never took it back%s", knownBugs(logs))
			}
			if version != serverKillSteps {
				t.Errorf("the restarted server serves version %d, want %d (the last published)", version, serverKillSteps)
			}

			checkTrainedOnce(t, dir, serverKillSteps, 4)
			if retried := checkNoCallTwice(t, dir); retried == 0 {
				got, err := Summarize(context.Background(), dir)
				if err != nil {
					t.Fatal(err)
				}
				if d := Compare(want, got); d != "" {
					t.Errorf("no attempt was retried, yet the run differs from the uninterrupted one: %s", d)
				}
			} else {
				// A retried attempt samples with its own seeds (the attempt
				// is a fence), so the run legitimately departs from the
				// uninterrupted one.
				t.Logf("%d attempts retried: not compared with the uninterrupted run", retried)
			}
		})
	}
}

// checkTrainedOnce: every step trained, each with its full set of groups
// (none dropped), and no group or prompt trained twice.
func checkTrainedOnce(t *testing.T, dir string, steps int64, groupsPerStep int) {
	t.Helper()
	rep, err := runlog.Inspect(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Step != steps || int64(len(rep.Trained)) != steps {
		t.Fatalf("trained %d steps (%d StepTrained), want %d", rep.Step, len(rep.Trained), steps)
	}
	groups, prompts := map[string]int64{}, map[string]int64{}
	for _, tr := range rep.Trained {
		if len(tr.GroupIDs) != groupsPerStep {
			t.Errorf("step %d trained %d groups, want %d: %v", tr.Step, len(tr.GroupIDs), groupsPerStep, tr.GroupIDs)
		}
		for i, g := range tr.GroupIDs {
			if s, dup := groups[g]; dup {
				t.Errorf("group %s trained at step %d and again at step %d", g, s, tr.Step)
			}
			groups[g] = tr.Step
			p := tr.PromptIDs[i]
			if s, dup := prompts[p]; dup {
				t.Errorf("prompt %s trained at step %d and again at step %d", p, s, tr.Step)
			}
			prompts[p] = tr.Step
		}
	}
}

// checkNoCallTwice: one CallFinished per (rollout, call index); a retried
// attempt resumes after the calls already logged.
func checkNoCallTwice(t *testing.T, dir string) (retried int) {
	t.Helper()
	ctx := context.Background()
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type key struct {
		id   runlog.RolloutID
		call uint32
	}
	seen := map[key]uint32{}
	calls := 0
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		switch e := ev.(type) {
		case runlog.CallFinished:
			calls++
			k := key{e.Rollout, e.Call}
			if a, dup := seen[k]; dup {
				t.Errorf("call %d of rollout %s logged twice (attempts %d and %d)", e.Call, e.Rollout, a, e.Attempt)
			}
			seen[k] = e.Attempt
		case runlog.AttemptStarted:
			if e.Attempt > 1 {
				retried++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 || calls != len(seen) {
		t.Errorf("%d CallFinished events for %d distinct (rollout, call) pairs", calls, len(seen))
	}
	t.Logf("%d calls logged, %d retried attempts", calls, retried)
	return retried
}

// serverStats reads how many completions a server answered (since it
// started) and the weight version it serves.
func serverStats(t *testing.T, port int) (served int, version int64) {
	t.Helper()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Version int64 `json:"version"`
	}
	err = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	resp, err = hc.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "longhaul_server_requests_total{") || !strings.Contains(line, `endpoint="/v1/completions"`) ||
			!strings.Contains(line, `code="200"`) {
			continue
		}
		var n float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &n); err == nil {
			served += int(n)
		}
	}
	return served, h.Version
}

// knownBugs names the two faults this test found, when their signature is
// in the run's log, so that a failure points at its fix.
func knownBugs(logs string) string {
	var s string
	if strings.Contains(logs, "data failure: generate: request 0: openai infra error") {
		s += "\n  BUG: rollout.ClassOf classes gen/openai infra errors (\"no generation server is up\", 5xx) as data," +
			" so they are retried max_data_attempts times without backoff; fix: ClassOf honours an" +
			" interface{ FailureClass() string } that *openai.Error implements"
	}
	if strings.Contains(logs, "generation server down") {
		s += "\n  if the killed server was never retried: gen/openai markDown doubles the backoff once per" +
			" concurrent failed call (16 calls in flight reach MaxBackoff = 30 s at once); fix: double only" +
			" when the failure opens a new retry window (time.Now() ≥ b.retryAt)"
	}
	return s
}

// retrySummary counts the controller's and generator's failure lines.
func retrySummary(logs string) string {
	return fmt.Sprintf("log: %d \"generation server down\", %d \"generation server up\", %d \"rollout attempt failed\"",
		strings.Count(logs, "generation server down"), strings.Count(logs, "generation server up"),
		strings.Count(logs, "rollout attempt failed"))
}

// waitFor polls cond every 20 ms until it holds (true), the process ends or
// the timeout passes (false).
func waitFor(exited <-chan struct{}, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		select {
		case <-exited:
			return cond()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}
