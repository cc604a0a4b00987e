package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/testkit/faultproxy"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// faultSteps is short: every case runs `longhaul serve` and `longhaul
// train` as processes and must end well within a minute on two cores.
const faultSteps = 4

// faultRun is one `longhaul train` against one `longhaul serve` with a
// faultproxy between them (the proxy runs in the test process, so the test
// reads its counters directly).
type faultRun struct {
	dir   string
	proxy *faultproxy.Proxy
	out   string
	err   error
}

func runWithFaults(t *testing.T, bin string, plan faultproxy.Plan, args ...string) *faultRun {
	t.Helper()
	cfg := tinyConfig(t)
	port := proctest.FreePort(t)
	serveProc(t, bin, port, "serve", "--config", cfg)
	p := faultproxy.New(fmt.Sprintf("http://127.0.0.1:%d", port), faultproxy.OnPath("/v1/completions", plan))
	t.Cleanup(p.Close)
	dir := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{"train", "--config", cfg, "--run-dir", dir, "--no-progress", "--log-level", "info",
		fmt.Sprint("run.max_steps=", faultSteps), "warmstart.enabled=false",
		"generator.kind=openai", "generator.urls=" + p.URL() + "/v1", "trainer.kind=embedded",
		"rollout_failure.backoff_base_s=0.05", "rollout_failure.backoff_cap_s=0.2",
		// A Timeout fault holds its call until the client gives up.
		"rollout_failure.call_timeout_s=1"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	out := &proctest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	err := cmd.Run()
	t.Logf("train took %v; proxy: %d requests, injected %v", time.Since(start).Round(time.Millisecond), p.Requests(), p.Counts())
	return &faultRun{dir: dir, proxy: p, out: out.String(), err: err}
}

// failures counts RolloutFailed events by class, and per rollout.
type failures struct {
	byClass   map[string]int
	perRollup map[runlog.RolloutID]map[string]int
}

func rolloutFailures(t *testing.T, dir string) failures {
	t.Helper()
	ctx := context.Background()
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := failures{byClass: map[string]int{}, perRollup: map[runlog.RolloutID]map[string]int{}}
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		if e, ok := ev.(runlog.RolloutFailed); ok {
			f.byClass[e.Class]++
			if f.perRollup[e.Rollout] == nil {
				f.perRollup[e.Rollout] = map[string]int{}
			}
			f.perRollup[e.Rollout][e.Class]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// accounting is case (c), checked at the end of every run: every admitted
// group is trained, dropped, or in flight (admitted by the lookahead for a
// step after maxSteps); no group is trained twice; and the dropped count
// agrees between inspect's `dropped`, its per-status group counts, and the
// GroupDropped events. It returns the trained and dropped group counts.
func accounting(t *testing.T, dir string, maxSteps int64) (trained, dropped int) {
	t.Helper()
	ctx := context.Background()
	rep, err := runlog.Inspect(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	trainedAt := map[string]int64{}
	for _, tr := range rep.Trained {
		for _, g := range tr.GroupIDs {
			if s, dup := trainedAt[g]; dup {
				t.Errorf("group %s trained at step %d and again at step %d", g, s, tr.Step)
			}
			trainedAt[g] = tr.Step
		}
	}
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	admitted, inFlight := 0, 0
	var bad []string
	l.View(func(s *runlog.State) {
		for _, id := range s.Order {
			g := s.Groups[id]
			admitted++
			switch st := g.Status.String(); {
			case st == "trained":
				trained++
				if _, ok := trainedAt[id.String()]; !ok {
					bad = append(bad, fmt.Sprintf("group %s is trained but in no StepTrained", id))
				}
			case st == "dropped":
				dropped++
				if _, ok := trainedAt[id.String()]; ok {
					bad = append(bad, fmt.Sprintf("group %s is dropped but was trained", id))
				}
			case g.ForStep > maxSteps:
				inFlight++
			default:
				bad = append(bad, fmt.Sprintf("group %s (prompt %s) for step %d ends %s: neither trained, dropped nor lookahead", id, g.PromptID, g.ForStep, st))
			}
		}
	})
	for _, b := range bad {
		t.Error(b)
	}
	if len(trainedAt) != trained {
		t.Errorf("StepTrained lists %d groups, the state has %d trained", len(trainedAt), trained)
	}
	if admitted != trained+dropped+inFlight {
		t.Errorf("admitted %d groups != trained %d + dropped %d + in flight %d", admitted, trained, dropped, inFlight)
	}
	if n := int(rep.Counts["GroupDropped"]); n != dropped {
		t.Errorf("%d GroupDropped events, %d groups with status dropped", n, dropped)
	}
	if n := rep.Groups["dropped"]; n != dropped {
		t.Errorf("inspect groups[dropped] = %d, want %d", n, dropped)
	}
	// `inspect --json` carries `dropped` (issue 7).
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if v, ok := m["dropped"].(float64); !ok {
		t.Errorf("inspect --json has no numeric \"dropped\" (issue 7): %v", m["dropped"])
	} else if int(v) != dropped {
		t.Errorf("inspect --json dropped = %v, want %d", v, dropped)
	}
	if rep.Step != maxSteps || int64(len(rep.Trained)) != maxSteps {
		t.Errorf("trained %d steps (%d StepTrained), want %d", rep.Step, len(rep.Trained), maxSteps)
	}
	t.Logf("accounting: admitted %d = trained %d + dropped %d + in flight %d", admitted, trained, dropped, inFlight)
	return trained, dropped
}

// TestInfraFaultsAreRetried is case (a): HTTP 500, 503, 429, 408, calls
// held past the call timeout, reset connections and answers cut short of
// their length (a server killed mid-answer), on about one
// completion in eight. Each is an infra failure: the rollout is retried
// with backoff, resuming from its logged calls, and with a budget that
// suffices no group is dropped and the run trains every step in full.
func TestInfraFaultsAreRetried(t *testing.T) {
	bin := binary(t)
	infra := []faultproxy.Fault{faultproxy.Status500, faultproxy.Status503, faultproxy.Status429,
		faultproxy.Status408, faultproxy.Timeout, faultproxy.Reset, faultproxy.Truncated}
	r := runWithFaults(t, bin, faultproxy.Cycle(8, infra...), "rollout_failure.max_infra_attempts=20",
		"rollout_failure.max_data_attempts=1")
	fs := rolloutFailures(t, r.dir)
	if r.err != nil {
		t.Fatalf("train: %v\n%s%s\n%s", r.err, retrySummary(r.out), downHint(r.out), tail(r.out, 30))
	}
	for _, f := range infra {
		if r.proxy.Injected(f) == 0 {
			t.Errorf("fault %v never injected (the run made %d requests): lengthen the run", f, r.proxy.Requests())
		}
	}
	most := 0
	for _, c := range fs.perRollup {
		most = max(most, c["infra"])
	}
	t.Logf("RolloutFailed by class: %v; at most %d infra failures of one rollout (budget 20); %s", fs.byClass, most, retrySummary(r.out))
	if fs.byClass["infra"] == 0 {
		t.Error("no RolloutFailed with class infra: the faults were not retried as infra")
	}
	if fs.byClass["data"] != 0 {
		t.Errorf("%d RolloutFailed with class data: an infra fault was misclassified", fs.byClass["data"])
	}
	_, dropped := accounting(t, r.dir, faultSteps)
	if dropped != 0 {
		t.Errorf("%d groups dropped with an infra budget of 20", dropped)
	}
	checkTrainedOnce(t, r.dir, faultSteps, 4)
	checkNoCallTwice(t, r.dir)
}

// TestDataFaultsAreRetriedThenDropped is case (b): malformed and
// wrong-length-logprobs answers. A random few are data failures retried
// within max_data_attempts; two prompts are broken on every try, so the
// rollouts that send them exhaust the data budget and their groups are
// dropped, the step shrinking or taking a spare prompt per
// on_dropped_prompt, and the run still finishes.
func TestDataFaultsAreRetriedThenDropped(t *testing.T) {
	bin := binary(t)
	data := []faultproxy.Fault{faultproxy.Malformed, faultproxy.ShortLogprobs}
	for _, policy := range []string{"shrink", "replace"} {
		t.Run(policy, func(t *testing.T) {
			plan := faultproxy.FirstOf(
				// The 2nd and 30th distinct prompts fail every time.
				faultproxy.NthPrompt(faultproxy.Malformed, 2, 30),
				faultproxy.Cycle(25, data...))
			r := runWithFaults(t, bin, plan, "rollout_failure.on_dropped_prompt="+policy,
				"rollout_failure.max_data_attempts=4", "rollout_failure.max_infra_attempts=10",
				"rollout_failure.max_skipped_prompts=50", "rollout_failure.max_consecutive_dropped_prompts=50",
				// Which calls a fault hits depends on timing, so a step may lose
				// most of its groups; it must still train what is left.
				"rollout_failure.min_step_batch_fraction=0.25")
			fs := rolloutFailures(t, r.dir)
			t.Logf("RolloutFailed by class: %v", fs.byClass)
			for _, f := range data {
				if r.proxy.Injected(f) == 0 {
					t.Errorf("fault %v never injected (%d requests)", f, r.proxy.Requests())
				}
			}
			if fs.byClass["data"] == 0 {
				t.Error("no RolloutFailed with class data")
			}
			if fs.byClass["infra"] != 0 {
				t.Errorf("%d RolloutFailed with class infra: a data fault was misclassified", fs.byClass["infra"])
			}
			exhausted, retriedOK := 0, 0
			for id, c := range fs.perRollup {
				switch {
				case c["data"] > 4:
					t.Errorf("rollout %s failed %d times as data, over max_data_attempts=4", id, c["data"])
				case c["data"] == 4:
					exhausted++
				default:
					retriedOK++
				}
			}
			t.Logf("%d rollouts retried within budget, %d exhausted it", retriedOK, exhausted)
			if exhausted == 0 {
				t.Error("no rollout exhausted its data budget: the poisoned prompts were never sent")
			}
			if r.err != nil {
				t.Fatalf("train (the drop policy of issue 7 should have dropped the %d exhausted rollouts' groups): %v\n%s",
					exhausted, r.err, tail(r.out, 20))
			}
			_, dropped := accounting(t, r.dir, faultSteps)
			if dropped == 0 {
				t.Error("no group dropped, yet rollouts exhausted their data budget")
			}
			checkPolicy(t, r.dir, policy, faultSteps, 4)
			checkNoCallTwice(t, r.dir)
		})
	}
}

// checkPolicy: for every trained step, its groups are those admitted for
// it less those dropped; with shrink no step admits more than its
// groupsPerStep (a drop makes it train fewer), with replace each dropped
// group's slot is refilled by a spare admitted for the same step.
func checkPolicy(t *testing.T, dir, policy string, steps int64, groupsPerStep int) {
	t.Helper()
	ctx := context.Background()
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	admitted, dropped, trained := map[int64]int{}, map[int64]int{}, map[int64]int{}
	l.View(func(s *runlog.State) {
		for _, id := range s.Order {
			g := s.Groups[id]
			admitted[g.ForStep]++
			if g.Status.String() == "dropped" {
				dropped[g.ForStep]++
			}
		}
		for _, tr := range s.Trained {
			trained[tr.Step] += len(tr.Groups)
		}
	})
	shrunk, replaced := 0, 0
	for k := int64(1); k <= steps; k++ {
		if trained[k] != admitted[k]-dropped[k] {
			t.Errorf("step %d trained %d groups, admitted %d less dropped %d", k, trained[k], admitted[k], dropped[k])
		}
		switch policy {
		case "shrink":
			if admitted[k] != groupsPerStep {
				t.Errorf("shrink: step %d admitted %d groups, want %d (no spares)", k, admitted[k], groupsPerStep)
			}
			if dropped[k] > 0 {
				shrunk++
			}
		case "replace":
			if admitted[k] != groupsPerStep+dropped[k] {
				t.Errorf("replace: step %d admitted %d groups with %d dropped, want %d + one spare per drop", k, admitted[k], dropped[k], groupsPerStep)
			}
			if dropped[k] > 0 {
				replaced++
			}
		}
	}
	t.Logf("%s: per step admitted %v, dropped %v, trained %v; %d steps shrunk, %d refilled", policy, admitted, dropped, trained, shrunk, replaced)
	if shrunk+replaced == 0 {
		t.Errorf("%s: no trained step lost a group, so the policy was not exercised", policy)
	}
}

// downHint names the generator fault that turns a few reset connections
// into a run-wide outage, when its signature is in the run's output.
func downHint(logs string) string {
	n := strings.Count(logs, "no generation server is up")
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("\n  %d failures were \"no generation server is up\": with one server, each reset marks it down, and"+
		" gen/openai never marks a server up when a call to it is answered; only the /health prober does, and it"+
		" skips a down server until its retryAt, while calls resume the moment retryAt passes, so the next reset"+
		" doubles the backoff before a probe sees the server (toward MaxBackoff, 30 s) and every call fails at once;"+
		" fix: in Client.call, markUp(b) when post reports answered", n)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestDropCapAbortsRun: two prompts that fail every time, with
// rollout_failure.max_skipped_prompts=1, drop two groups: the run aborts
// with an error that names the cap, and the log holds both drops.
func TestDropCapAbortsRun(t *testing.T) {
	bin := binary(t)
	r := runWithFaults(t, bin, faultproxy.NthPrompt(faultproxy.Malformed, 2, 30),
		"rollout_failure.max_skipped_prompts=1", "rollout_failure.max_consecutive_dropped_prompts=50",
		"rollout_failure.on_dropped_prompt=shrink")
	if r.err == nil {
		t.Fatalf("the run finished with two prompts failing every time and max_skipped_prompts=1:\n%s", tail(r.out, 20))
	}
	if !strings.Contains(r.out, "rollout_failure.max_skipped_prompts") {
		t.Errorf("the error does not name the cap:\n%s", tail(r.out, 10))
	}
	rep, err := runlog.Inspect(context.Background(), r.dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Counts["GroupDropped"]; n < 2 {
		t.Errorf("%d GroupDropped events, want ≥ 2 (one over the cap)", n)
	}
	if rep.Step >= faultSteps {
		t.Errorf("the aborted run still trained all %d steps", rep.Step)
	}
	fs := rolloutFailures(t, r.dir)
	if fs.byClass["data"] == 0 || fs.byClass["infra"] != 0 {
		t.Errorf("RolloutFailed by class %v, want data only", fs.byClass)
	}
}
