package deploy

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The sbatch script runs under bash with STUBS for the cluster's tools
// (torchrun, scontrol, and longhaul itself, which here only records the
// signals it gets): what is tested is the script's own handling of
// SIGTERM and of the run's exit, not SLURM.
func stubs(t *testing.T, longhaulExit int) (dir, log string) {
	t.Helper()
	dir = t.TempDir()
	log = filepath.Join(dir, "calls.log")
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/bash\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("torchrun", "trap 'exit 0' TERM\nwhile true; do sleep 0.05; done\n")
	write("scontrol", "echo \"scontrol $*\" >> "+log+"\n")
	if longhaulExit >= 0 {
		write("longhaul", "echo \"longhaul $*\" >> "+log+"\nexit "+string(rune('0'+longhaulExit))+"\n")
	} else {
		write("longhaul", "trap 'echo TERM >> "+log+"; sleep 0.2; echo stopped >> "+log+"; exit 0' TERM\n"+
			"echo started >> "+log+"\nwhile true; do sleep 0.05; done\n")
	}
	return dir, log
}

func sbatch(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join("slurm", "longhaul.sbatch"))
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "SLURM_JOB_ID=42", "SLURM_TMPDIR="+dir,
		"SLURM_GPUS_ON_NODE=2", "RUN=s3://b/run", "LONGHAUL=longhaul")
	return cmd
}

func readLog(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// SIGTERM (the time limit's warning, or a preemption) stops the run
// cleanly: the script forwards it, waits for the run to finish stopping,
// and only then requeues the job.
func TestSbatchStopsCleanlyAndRequeuesOnSIGTERM(t *testing.T) {
	dir, log := stubs(t, -1)
	cmd := sbatch(t, dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(readLog(log), "started") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the run never started:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the script after SIGTERM: %v\n%s", err, out.String())
	}
	got := readLog(log)
	i, j, k := strings.Index(got, "TERM"), strings.Index(got, "stopped"), strings.Index(got, "scontrol requeue 42")
	if i < 0 || j < i || k < j {
		t.Fatalf("want TERM forwarded, the run stopped, then the requeue; calls:\n%s\noutput:\n%s", got, out.String())
	}
}

// A run that ends on its own is not requeued, and its exit status is the
// script's.
func TestSbatchPassesTheRunsExit(t *testing.T) {
	for _, code := range []int{0, 3} {
		dir, log := stubs(t, code)
		cmd := sbatch(t, dir)
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case code == 0 && err != nil, code != 0 && (!errors.As(err, &ee) || ee.ExitCode() != code):
			t.Fatalf("run exit %d: script returned %v", code, err)
		}
		got := readLog(log)
		if strings.Contains(got, "requeue") || !strings.Contains(got, "--run-dir s3://b/run") || !strings.Contains(got, "store.cache_dir="+dir+"/longhaul-42") {
			t.Fatalf("run exit %d: calls\n%s", code, got)
		}
	}
}
