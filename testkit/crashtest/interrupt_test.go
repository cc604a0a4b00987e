package crashtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/metrics/tb"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// interruptAt starts a run, waits until metrics.jsonl holds at least rows
// rows, sends sig, and returns the exit error and output.
func interruptAt(t *testing.T, bin, cfg, dir string, rows int, sigs ...syscall.Signal) (error, string) {
	t.Helper()
	cmd := exec.Command(bin, "train", "--config", cfg, "--run-dir", dir, "--no-progress", "--log-level", "warn")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for proctest.CountLines(filepath.Join(dir, "metrics.jsonl")) < rows {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no %d metric rows after 2 minutes:\n%s", rows, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, s := range sigs {
		cmd.Process.Signal(s)
	}
	err := cmd.Wait()
	return err, out.String()
}

// TestInterruptStopsCleanlyAndResumes: a first SIGINT or SIGTERM stops a run
// with exit 0 and a resume command; resumed after each, the deterministic
// run ends identical to an uninterrupted one, with one metrics row per step.
func TestInterruptStopsCleanlyAndResumes(t *testing.T) {
	bin := binary(t)
	cfg := tinyConfig(t)
	ref := filepath.Join(t.TempDir(), "ref")
	train(t, bin, cfg, ref)
	want, err := Summarize(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	for i, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		err, out := interruptAt(t, bin, cfg, dir, 4+6*i, sig)
		if err != nil {
			t.Fatalf("%s: exit %v, want 0:\n%s", sig, err, out)
		}
		if !strings.Contains(out, "resume with:") || !strings.Contains(out, "--run-dir "+dir) {
			t.Fatalf("%s: no resume command in the output:\n%s", sig, out)
		}
		if strings.Contains(out, "context canceled") {
			t.Fatalf("%s: the stop reads as an error:\n%s", sig, out)
		}
	}
	train(t, bin, cfg, dir)
	got, err := Summarize(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); d != "" {
		t.Fatalf("interrupted and resumed run differs: %s", d)
	}
	checkMetricsRows(t, ref, dir, want.Steps)
}

// TestKilledRunMetricsOnePerStep: SIGKILLed while the checkpoint of step 6
// is written, the run resumes from step 3's checkpoint and trains steps 4-6
// again; their rows replace the old ones. A torn row appended before the
// resume (a write cut short) is repaired. The rows equal the reference's.
func TestKilledRunMetricsOnePerStep(t *testing.T) {
	bin := binary(t)
	cfg := tinyConfig(t)
	ref := filepath.Join(t.TempDir(), "ref")
	train(t, bin, cfg, ref)
	dir := filepath.Join(t.TempDir(), "run")
	o := Options{Binary: bin, Config: cfg}
	// checkpoint.write is reached for checkpoint 0 (after the warm start),
	// then steps 3 and 6.
	if how, err := o.start(context.Background(), dir, "checkpoint.write:3").wait(); err != nil || how != "killed" {
		t.Fatalf("crash run: %q %v", how, err)
	}
	if n := proctest.CountLines(filepath.Join(dir, "metrics.jsonl")); n != 6 {
		t.Fatalf("%d rows before the resume, want 6 (the kill is at step 6's checkpoint)", n)
	}
	f, err := os.OpenFile(filepath.Join(dir, "metrics.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"step":7,"version":7,"rew`)
	f.Close()
	train(t, bin, cfg, dir)
	checkMetricsRows(t, ref, dir, 20)
}

// checkMetricsRows: dir's metrics.jsonl has exactly one row per step 1..n,
// in order, and the deterministic values equal the reference run's.
func checkMetricsRows(t *testing.T, ref, dir string, n int64) {
	t.Helper()
	p := filepath.Join(dir, "metrics.jsonl")
	if c := proctest.CountLines(p); int64(c) != n {
		t.Fatalf("metrics.jsonl has %d lines for %d steps", c, n)
	}
	got, err := metrics.Read(p)
	if err != nil {
		t.Fatal(err)
	}
	want, err := metrics.Read(filepath.Join(ref, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != n || len(want) != len(got) {
		t.Fatalf("%d rows, reference %d, want %d", len(got), len(want), n)
	}
	steps, err := tb.Steps(filepath.Join(dir, "tb"))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		if s != int64(i+1) || int64(len(steps)) != n {
			t.Fatalf("TensorBoard events for steps %v, want 1..%d once each", steps, n)
		}
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Step != int64(i+1) || g.Loss != w.Loss || g.RewardMean != w.RewardMean || g.GradNorm != w.GradNorm || g.TrainTokens != w.TrainTokens {
			t.Fatalf("row %d: step %d loss %v reward %v; reference step %d loss %v reward %v", i, g.Step, g.Loss, g.RewardMean, w.Step, w.Loss, w.RewardMean)
		}
	}
}
