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

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/runner"
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

// TestFlippedByteInEveryFileKind: one flipped byte in each kind of file of
// a run directory either resumes to the uninterrupted run's result (the
// damaged file was a shortcut: a snapshot, a checkpoint with an older one
// behind it, reported) or stops with an error naming the file and offset.
// None resumes with the damage unreported.
func TestFlippedByteInEveryFileKind(t *testing.T) {
	bin := binary(t)
	cfg := tinyConfig(t)
	ctx := context.Background()
	ref := filepath.Join(t.TempDir(), "ref")
	train(t, bin, cfg, ref, "run.max_steps=6")
	want, err := Summarize(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(t.TempDir(), "base")
	train(t, bin, cfg, base, "run.max_steps=4")
	rep, err := runlog.Inspect(ctx, base)
	if err != nil || rep.LastSnapshot == nil || rep.LastCheckpoint == nil {
		t.Fatalf("base run: %v (snapshot %v, checkpoint %v)", err, rep.LastSnapshot, rep.LastCheckpoint)
	}
	segs, _ := filepath.Glob(filepath.Join(base, "runlog", "*.seg"))
	packs, _ := filepath.Glob(filepath.Join(base, "runlog", "*.pack"))
	snaps, _ := filepath.Glob(filepath.Join(base, "runlog", "snap", "*.snap"))
	if len(segs) == 0 || len(packs) == 0 || len(snaps) == 0 {
		t.Fatalf("base run lacks a file kind: %v %v %v", segs, packs, snaps)
	}
	segSize := func() int64 { fi, _ := os.Stat(segs[0]); return fi.Size() }()
	snapOff := int64(rep.LastSnapshot.Offset)
	type flip struct {
		name string
		file string // relative to the run directory
		at   int64
		// mustFail: the damaged bytes are needed, so resume must stop and
		// name file and offset; otherwise either outcome is allowed.
		mustFail bool
		report   string // what a resume that goes on must say
	}
	rel := func(p string) string { r, _ := filepath.Rel(base, p); return r }
	cases := []flip{
		{"chunk before the snapshot", rel(segs[0]), snapOff / 2, true, ""},
		// The last append of a run is not yet verified by any resume: a
		// flip there is indistinguishable from a torn write, so it may be
		// cut back as a torn tail (reported, and redone identically).
		{"chunk after the snapshot", rel(segs[0]), (snapOff + segSize) / 2, false, "torn"},
		{"pack", rel(packs[0]), func() int64 { fi, _ := os.Stat(packs[0]); return fi.Size() / 2 }(), true, ""},
		{"snapshot", rel(snaps[len(snaps)-1]), 30, false, "snapshot not loaded"},
		{"checkpoint weights", filepath.Join(rep.LastCheckpoint.Path, "model.safetensors"), 4096, false, "checkpoint rejected"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			if out, err := exec.Command("cp", "-a", base, dir).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			path := filepath.Join(dir, c.file)
			b, err := os.ReadFile(path)
			if err != nil || int64(len(b)) <= c.at {
				t.Fatalf("%s: %v (%d bytes, flip at %d)", path, err, len(b), c.at)
			}
			b[c.at] ^= 0x20
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "train", "--config", cfg, "--run-dir", dir, "--no-progress", "run.max_steps=6",
				"--allow-config-change", "run.max_steps", "--log-level", "info")
			out, err := cmd.CombinedOutput()
			if err != nil {
				if !strings.Contains(string(out), filepath.Base(path)) || !strings.Contains(string(out), "offset") {
					t.Fatalf("resume failed without naming %s and an offset: %v\n%s", filepath.Base(path), err, out)
				}
				t.Logf("refused: %s", errorLine(string(out)))
				return
			}
			if c.mustFail {
				t.Fatalf("resume with a flipped byte in %s at %d succeeded:\n%s", c.file, c.at, out)
			}
			name := filepath.Base(path)
			if c.report == "checkpoint rejected" {
				name = filepath.Base(filepath.Dir(path)) // the checkpoint's directory
			}
			if !strings.Contains(string(out), c.report) || !strings.Contains(string(out), name) {
				t.Fatalf("resume succeeded without reporting the damaged %s (%q, %q):\n%s", c.file, c.report, name, out)
			}
			t.Logf("went on: %s", errorLine(string(out)))
			got, err := Summarize(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			if d := Compare(want, got); d != "" {
				t.Fatalf("resumed around damaged %s but differs: %s", c.file, d)
			}
		})
	}
}

// errorLine is the first line that reports damage.
func errorLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "corrupt") || strings.Contains(l, "torn") || strings.Contains(l, "not loaded") || strings.Contains(l, "rejected") || strings.Contains(l, "Error") {
			return l
		}
	}
	return ""
}
