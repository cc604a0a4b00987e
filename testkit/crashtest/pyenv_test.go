package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// pyEnv is examples/envs/notebook_env.py running as a real process.
type pyEnv struct {
	cmd  *exec.Cmd
	port int
	out  bytes.Buffer
}

func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("no python3 on this machine: the example environment cannot run")
	return ""
}

func startPyEnv(t *testing.T, py, root, journal string, port int) *pyEnv {
	t.Helper()
	e := &pyEnv{port: port}
	e.cmd = exec.Command(py, filepath.Join(root, "examples", "envs", "notebook_env.py"),
		"--port", fmt.Sprint(port), "--journal", journal)
	e.cmd.Stdout, e.cmd.Stderr = &e.out, &e.out
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cmd.Process.Kill(); e.cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/stats", port)); err == nil {
			resp.Body.Close()
			return e
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("example environment did not come up:\n%s", e.out.String())
	return nil
}

// journalEffects reads the environment's journal (its durable record of
// side effects) and counts effects by key.
func journalEffects(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct {
			T      string          `json:"t"`
			Key    string          `json:"key"`
			Effect json.RawMessage `json:"effect"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue // a torn last line
		}
		if rec.T == "step" && len(rec.Effect) > 0 && string(rec.Effect) != "null" {
			out[rec.Key]++
		}
	}
	return out
}

// TestPythonEnvKilledMidRun: `longhaul train` against the Python example
// environment, with the environment process SIGKILLed and restarted on
// its journal mid-run and the trainer SIGKILLed and resumed: the run
// completes and the journal holds every logged note exactly once.
func TestPythonEnvKilledMidRun(t *testing.T) {
	bin := binary(t)
	py := python(t)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir := t.TempDir()
	journal := filepath.Join(dir, "journal.jsonl")
	port := proctest.FreePort(t)
	env := startPyEnv(t, py, root, journal, port)
	runDir := filepath.Join(dir, "run")
	args := []string{"train", "--config", filepath.Join(root, "examples", "envs", "notebook.yaml"), "--run-dir", runDir,
		"--no-progress", "--log-level", "warn", fmt.Sprintf("env.url=http://127.0.0.1:%d", port),
		"data.path=" + filepath.Join(root, "examples", "envs", "notebook.jsonl"),
		"warmstart.data=" + filepath.Join(root, "examples", "envs", "notebook-demos.jsonl"),
		"run.max_steps=4", "warmstart.steps=30"}
	var out bytes.Buffer
	start := func() *exec.Cmd {
		c := exec.Command(bin, args...)
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Wait until the run (not the warm start) has made n effects.
	runEffects := func() int {
		b, err := os.ReadFile(filepath.Join(runDir, "run-id"))
		if err != nil {
			return 0
		}
		id := strings.TrimSpace(string(b)) + "/"
		n := 0
		for k, c := range journalEffects(t, journal) {
			if strings.HasPrefix(k, id) {
				n += c
			}
		}
		return n
	}
	waitEffects := func(c *exec.Cmd, n int) {
		deadline := time.Now().Add(90 * time.Second)
		for runEffects() < n {
			if time.Now().After(deadline) {
				t.Fatalf("run made %d effects, waited for %d:\n%s", runEffects(), n, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	tr := start()
	waitEffects(tr, 10)
	env.cmd.Process.Signal(syscall.SIGKILL) // the environment dies mid-run
	env.cmd.Wait()
	time.Sleep(300 * time.Millisecond)
	env = startPyEnv(t, py, root, journal, port) // and comes back on its journal
	waitEffects(tr, 30)
	tr.Process.Signal(syscall.SIGKILL) // then the trainer dies
	tr.Wait()
	tr = start()
	if err := tr.Wait(); err != nil {
		t.Fatalf("resumed run: %v\n%s", err, out.String())
	}

	id := readRunID(t, runDir)
	fx := journalEffects(t, journal)
	for k, n := range fx {
		if n != 1 {
			t.Errorf("effect of key %s is in the journal %d times", k, n)
		}
	}
	// Every step the run logged had its effect (each step is metered; a
	// note also writes the notebook), under its key: the rollout loop keys
	// a step by the attempt that started its episode, attempt 1 unless a
	// divergence restarted it (none should here).
	l, err := runlog.Open(context.Background(), runDir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	notes, missing := 0, 0
	failed := map[string]int{}
	l.Events(context.Background(), func(_ runlog.Offset, ev runlog.Event) error {
		if f, ok := ev.(runlog.RolloutFailed); ok {
			failed[f.Class]++
		}
		s, ok := ev.(runlog.EnvStep)
		if !ok {
			return nil
		}
		notes++
		if fx[fmt.Sprintf("%s/%s/a1/%d", id, s.Rollout, s.Turn)] != 1 {
			missing++
		}
		return nil
	})
	if notes == 0 {
		t.Fatalf("the run logged no steps; nothing was tested\n%s", out.String())
	}
	if missing > 0 {
		t.Errorf("%d of %d logged steps have no effect in the journal under their key", missing, notes)
	}
	t.Logf("%d logged steps, %d effects in the journal (warm start included); failed attempts by class: %v", notes, len(fx), failed)
}
