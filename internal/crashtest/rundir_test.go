package crashtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/internal/runner"
	"github.com/longhaul-rl/longhaul/runlog"
)

// TestSecondTrainerRefused: a second `train` on a run directory another
// process is writing exits at once, naming the holder's PID and host; the
// first finishes and its log is intact.
func TestSecondTrainerRefused(t *testing.T) {
	bin := binary(t)
	cfg := tinyConfig(t)
	dir := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	first := exec.CommandContext(ctx, bin, "train", "--config", cfg, "--run-dir", dir, "--no-progress", "run.max_steps=4")
	var out1 bytes.Buffer
	first.Stdout, first.Stderr = &out1, &out1
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the first holds the lock (it writes its identity there).
	want := fmt.Sprintf("pid %d", first.Process.Pid)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(dir, runner.LockFile)); strings.Contains(string(b), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first train never took the lock\n%s", out1.String())
		}
	}
	t0 := time.Now()
	second := exec.CommandContext(ctx, bin, "train", "--config", cfg, "--run-dir", dir, "--no-progress", "run.max_steps=4")
	out2, err := second.CombinedOutput()
	took := time.Since(t0)
	if err == nil {
		t.Fatalf("second train on a locked run directory succeeded:\n%s", out2)
	}
	host, _ := os.Hostname()
	if !strings.Contains(string(out2), want) || !strings.Contains(string(out2), host) {
		t.Fatalf("second train's error does not name the holder (%s on %s):\n%s", want, host, out2)
	}
	if took > 10*time.Second {
		t.Fatalf("second train took %v to give up; want at once", took)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first train: %v\n%s", err, out1.String())
	}
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatalf("log after both: %v", err)
	}
	defer l.Close()
	if rec := l.Recovery(); rec.Truncated {
		t.Fatalf("log had a torn tail after a clean finish: %+v", rec)
	}
	var step int64
	l.View(func(s *runlog.State) { step = s.Step })
	if step != 4 {
		t.Fatalf("log ends at step %d, want 4", step)
	}
	l.Close()

	// Config on resume, through the command line: with config.yaml deleted,
	// a changed key is refused naming it, with or without --config.
	if err := os.Remove(filepath.Join(dir, runner.ConfigFile)); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"train", "--run-dir", dir, "--no-progress", "optim.lr=0.002"},
		{"train", "--config", cfg, "--run-dir", dir, "--no-progress", "run.max_steps=4", "compaction.trigger_tokens=50"},
	} {
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		changed := args[len(args)-1][:strings.Index(args[len(args)-1], "=")]
		if err == nil || !strings.Contains(string(out), "config changed") || !strings.Contains(string(out), changed) {
			t.Fatalf("%v: want a refusal naming %s, got %v:\n%s", args, changed, err, out)
		}
	}
}
