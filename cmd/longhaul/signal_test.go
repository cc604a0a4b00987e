package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// When LONGHAUL_SIGNAL_CHILD is set the test binary plays a command whose
// clean stop hangs (a remote server that never answers, say): it waits for
// the first signal's cancel, then never returns.
func TestMain(m *testing.M) {
	if os.Getenv(fakeTrainEnv) == "1" {
		fakeTrain(os.Args[1:])
		os.Exit(0)
	}
	if os.Getenv(cliChildEnv) == "1" {
		// The test binary plays longhaul itself (bench summaries' runs).
		if err := newRootCmd().Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "longhaul:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("LONGHAUL_SIGNAL_CHILD") == "1" {
		ctx, stop := interruptContext(context.Background(), os.Stderr)
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("stopping", interrupted(ctx))
		time.Sleep(time.Minute)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func TestSecondSignalExitsAtOnce(t *testing.T) {
	for _, first := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "LONGHAUL_SIGNAL_CHILD=1")
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		expect := func(want string) {
			t.Helper()
			if !lines.Scan() || !strings.HasPrefix(lines.Text(), want) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child said %q, want %q", lines.Text(), want)
			}
		}
		expect("ready")
		cmd.Process.Signal(first)
		expect("stopping true") // the first signal cancels with errInterrupted
		t0 := time.Now()
		cmd.Process.Signal(syscall.SIGINT)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Fatalf("after %s and SIGINT: %v, want exit status 130", first, err)
		}
		if d := time.Since(t0); d > 10*time.Second {
			t.Fatalf("second signal took %s to end the process", d)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	var out strings.Builder
	root := newRootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "longhaul version ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("--version printed %q", out.String())
	}
}
