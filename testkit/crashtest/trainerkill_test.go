package crashtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// configWithSteps writes the tiny config with run.max_steps = steps into
// dir, so that every process of a run is started with only --config.
func configWithSteps(t *testing.T, dir string, steps int) string {
	t.Helper()
	b, err := os.ReadFile(tinyConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "max_steps: 20") {
		t.Fatal("examples/ledger-tiny.yaml has no `max_steps: 20` line to change")
	}
	s := strings.Replace(string(b), "max_steps: 20", fmt.Sprintf("max_steps: %d", steps), 1)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const trainerKillSteps = 12

// inProcessRef builds the binary, writes the tiny config with steps in a
// fresh work directory and runs it in one process: the run a three-process
// run must equal.
func inProcessRef(t *testing.T, steps int) (bin, work, cfg string, want Summary) {
	t.Helper()
	bin = binary(t)
	work = t.TempDir()
	cfg = configWithSteps(t, work, steps)
	ref := filepath.Join(work, "ref")
	train(t, bin, cfg, ref)
	want, err := Summarize(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return bin, work, cfg, want
}

// TestTrainerKilledMidRun is issue 12's trainer restart: the run's
// `longhaul serve-trainer` is SIGKILLed in the middle of a deterministic
// run and started again as the README starts it, so it comes back at step
// 0 knowing nothing of the run. The controller finds it restarted
// (remote.ErrTrainerRestarted, or a step conflict when it is back before
// the next call), loads the newest durable checkpoint into it and rewinds
// through the log, exactly as after its own crash: the run ends with the
// weights, trained prompts and calls of the uninterrupted in-process run.
func TestTrainerKilledMidRun(t *testing.T) {
	bin, work, cfg, want := inProcessRef(t, trainerKillSteps)
	tport, gport := proctest.FreePort(t), proctest.FreePort(t)
	trainer := startReadme(t, bin, work, tport, "serve-trainer", "--config", cfg)
	startReadme(t, bin, work, gport, "serve", "--config", cfg)
	dir := filepath.Join(work, "run")
	tp := startTrain(t, bin, work, "--config", cfg, "--run-dir", dir,
		"generator.kind=openai", fmt.Sprintf("generator.urls=http://127.0.0.1:%d/v1", gport),
		"trainer.kind=remote", fmt.Sprintf("trainer.url=http://127.0.0.1:%d", tport))
	metrics := filepath.Join(dir, "metrics.jsonl")
	// Step 4 is past the checkpoint of step 3 (save_period 3), so the
	// restore loads a trained checkpoint and rewinds the steps after it.
	if !waitFor(tp.exited, 60*time.Second, func() bool { return proctest.CountLines(metrics) >= 4 }) {
		t.Fatalf("the run ended (or stalled) before step 4:\n%s", tail(tp.out.String(), 40))
	}
	trainer.restart()
	killedAt := proctest.CountLines(metrics)
	if err := tp.wait(t, 120*time.Second); err != nil {
		t.Fatalf("train: %v\n%s", err, tail(tp.out.String(), 60))
	}
	logs := tp.out.String()
	t.Logf("trainer killed and restarted after step %d of %d; %d recoveries", killedAt, trainerKillSteps,
		strings.Count(logs, "the trainer lost its state"))
	if killedAt >= trainerKillSteps {
		t.Fatalf("the run finished before the trainer was killed: make it longer")
	}
	if !strings.Contains(logs, "the trainer lost its state") {
		t.Errorf("the controller never noticed the restarted trainer:\n%s", tail(logs, 40))
	}
	got, err := Summarize(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); d != "" {
		t.Fatalf("the run whose trainer restarted differs from the uninterrupted one: %s\n%s", d, tail(logs, 40))
	}
}
