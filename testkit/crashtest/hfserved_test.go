package crashtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/internal/race"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// hfServedSteps is run.max_steps of TestHFServedRunKilled: enough steps
// that the kills land mid-run with steps left after each.
const hfServedSteps = 5

// TestHFServedRunKilled is issue 14's kill -9 equality test on the
// issue's path: `longhaul train` with the embedded HF trainer
// (model.path=DIR) and generator.kind=openai against a real `longhaul
// serve --model DIR` process on loopback; DIR is a tiny random Qwen3 from
// init-model with the real Qwen3 tokenizer and chat template. The task is
// guess over 0-3 (three guesses) after a 12-step warm start strong enough
// that rewards vary within groups, so most RL steps move the weights
// (asserted: with zero advantages the weights, and so the weights digest,
// never change). The killed run, with `longhaul serve --model DIR` started
// again after each of its kills as the README starts it (DIR's random
// weights, labelled version 0):
//  1. serve, while it answers calls at version 0: the run's warm-started
//     weights carry the label the restarted server gives DIR, so only its
//     process name (server.InstanceHeader) tells the client to publish
//     again;
//  2. train, at its 60th logged call (a crash point: mid-step,
//     mid-episode); resumed;
//  3. serve, the moment it serves version 1: DIR's label 0 is one version
//     behind, within the client's default window, so the strict fence and
//     the catch-up keep it out;
//  4. train, by the parent, once step 3 is in metrics.jsonl; resumed to
//     the end.
//
// It must end with the weights digest, trained prompts and call digest of
// an uninterrupted run of the same config through the same server, with
// no call logged twice and every call at the version the schedule names,
// and the restarted server must have answered calls and been brought to
// the last version.
func TestHFServedRunKilled(t *testing.T) {
	if race.Enabled {
		t.Skip("end to end with three processes: run without -race (.ci/steps/14-hfrun.sh)")
	}
	bin, modelDir := tinyQwen3(t, "")
	_, file, _, _ := runtime.Caller(0)
	work := t.TempDir()
	port := proctest.FreePort(t)
	// As the README starts it: from the directory that holds the run
	// directories (its default --allow-path), nothing but --model.
	srv := startReadme(t, bin, work, port, "serve", "--model", modelDir)
	o := Options{Binary: bin, Config: filepath.Join(filepath.Dir(file), "..", "..", "examples", "qwen3-guess.yaml"),
		Overrides: []string{"model.path=" + modelDir, "run.mode=deterministic", fmt.Sprint("run.max_steps=", hfServedSteps),
			"env.params.size=4", "env.params.max_guesses=3",
			"grpo.num_prompts_per_step=3", "grpo.num_generations_per_prompt=4",
			"warmstart.steps=12", "warmstart.batch_size=8", "warmstart.lr=2e-2",
			"checkpointing.enabled=true", "checkpointing.save_period=3", "checkpointing.keep_last_k=2",
			"rollout_checkpointing.enabled=true", "rollout_checkpointing.snapshot_attempt_interval_s=0.2",
			"generator.kind=openai", fmt.Sprintf("generator.urls=http://127.0.0.1:%d/v1", port),
			// calls refused by the fence while the restarted server is
			// caught up are infra failures, retried with backoff
			"rollout_failure.max_infra_attempts=20", "rollout_failure.backoff_base_s=0.1",
			"rollout_failure.backoff_cap_s=0.5", "rollout_failure.call_timeout_s=20"}}
	if os.Getenv("LONGHAUL_TEST_VERBOSE") != "" {
		o.Overrides = append(o.Overrides, "--log-level=info")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	ref := filepath.Join(work, "reference")
	t0 := time.Now()
	if _, err := o.start(ctx, ref, "").wait(); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	refDur := time.Since(t0)
	checkRewardsVary(t, ref)

	dir := filepath.Join(work, "killed")
	var kills []string
	var runs []*proc
	start := func(crashAt string) *proc {
		p := o.start(ctx, dir, crashAt)
		runs = append(runs, p)
		return p
	}
	defer func() {
		if t.Failed() {
			for i, p := range runs {
				t.Logf("killed run, process %d:\n%s", i+1, tail(p.out.String(), 30))
			}
			t.Logf("serve:\n%s", tail(srv.out.String(), 30))
		}
	}()
	// 1: the server, once it answers calls with version 0 published (the
	// warm-started weights, labelled as the server labels DIR): only its
	// process name tells the restart (server.InstanceHeader).
	before, _ := serverStats(t, port)
	p := start("call.logged:60")
	exited := make(chan struct{})
	var st string
	var waitErr error
	go func() { st, waitErr = p.wait(); close(exited) }()
	if !waitFor(exited, time.Minute, func() bool {
		n, v := serverStats(t, port)
		return v == 0 && n > before
	}) {
		t.Fatalf("run 1 ended (or stalled) before calls were served at version 0: %q, %v\n%s", st, waitErr, p.out.String())
	}
	step := lines(dir)
	srv.restart()
	kills = append(kills, fmt.Sprintf("serve at version 0 (step %d)", step))
	// 2: train, at a crash point in the child: mid-step, mid-episode.
	// A stalled run would be SIGKILLed by ctx at last, which reads like
	// the crash point: bound the wait well inside ctx.
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("run 1 did not reach its crash point (call.logged:60) within a minute of the restart (stalled?)\n%s", p.out.String())
	}
	if waitErr != nil || st != "killed" {
		t.Fatalf("run 1 (crash point call.logged:60) was not killed: %q, %v", st, waitErr)
	}
	kills = append(kills, fmt.Sprintf("train at call.logged:60 (step %d)", lines(dir)))
	// 3: the server, the moment version 1 is published to it.
	p = start("")
	exited = make(chan struct{})
	go func() { st, waitErr = p.wait(); close(exited) }()
	if !waitFor(exited, time.Minute, func() bool { return healthVersion(port) == 1 }) {
		t.Fatalf("run 2 ended (or stalled) before version 1 was published: %q, %v\n%s", st, waitErr, p.out.String())
	}
	step = lines(dir)
	srv.restart()
	if v := healthVersion(port); v != 0 && v != 1 {
		t.Fatalf("the restarted server reports version %d, want 0 (or 1 once caught up)", v)
	}
	kills = append(kills, fmt.Sprintf("serve at version 1 (step %d)", step))
	// 4: train again, by the parent, once step 3 has its row.
	if !waitFor(exited, time.Minute, func() bool { return lines(dir) >= 3 }) {
		t.Fatalf("run 2 ended (or stalled) before step 3: %q, %v\n%s", st, waitErr, p.out.String())
	}
	step = lines(dir)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	if waitErr != nil || st != "killed" {
		t.Fatalf("run 2 was not killed (it ended first): %q, %v", st, waitErr)
	}
	kills = append(kills, fmt.Sprintf("train by the parent (step %d)", step))
	if st, err := start("").wait(); err != nil || st != "" {
		t.Fatalf("final resume: %q (killed: ctx %v), %v", st, ctx.Err(), err)
	}
	for i, k := range kills {
		t.Logf("kill %d: %s", i+1, k)
	}
	if step >= hfServedSteps {
		t.Fatalf("the last kill landed after step %d of %d: it proves nothing", step, hfServedSteps)
	}

	served, version := serverStats(t, port)
	t.Logf("reference run %v; the restarted server answered %d completions and serves version %d", refDur.Round(time.Millisecond), served, version)
	if served == 0 || version != hfServedSteps {
		t.Fatalf("the restarted server answered %d completions and serves version %d, want > 0 and %d", served, version, hfServedSteps)
	}
	want, err := Summarize(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Summarize(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if want.Steps != hfServedSteps || want.Calls == 0 {
		t.Fatalf("reference summary looks incomplete: %+v", want)
	}
	checkNoCallTwice(t, dir)
	checkScheduledVersions(t, dir, 1) // run.max_lag defaults to 1
	if d := Compare(want, got); d != "" {
		t.Fatalf("the killed run differs from the uninterrupted one: %s", d)
	}
}

// checkRewardsVary: most steps of the run had a nonzero gradient, so its
// weights digest depends on what every step trained on.
func checkRewardsVary(t *testing.T, dir string) {
	t.Helper()
	steps, err := metrics.Read(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	curve := make([]float64, len(steps))
	for i, s := range steps {
		if s.GradNorm > 0 {
			moved++
		}
		curve[i] = s.SuccessRate
	}
	t.Logf("reference: success per step %v, %d of %d steps with a nonzero gradient", curve, moved, len(steps))
	if 2*moved < len(steps) {
		t.Fatalf("only %d of %d steps moved the weights: the equality of weights would prove little", moved, len(steps))
	}
}

// lines is how many steps a run directory's metrics.jsonl holds.
func lines(dir string) int { return proctest.CountLines(filepath.Join(dir, "metrics.jsonl")) }
