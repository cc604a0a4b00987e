// Package pytorch runs the PyTorch trainer (python/longhaul_trainer) as a
// real process on loopback and drives it with train/remote's Go client,
// unchanged: the protocol round trip, exact resume across processes, and a
// SIGKILL mid-step followed by a restart from the checkpoint.
//
// The tests need /usr/bin/python3 (or $LONGHAUL_PYTHON) with torch; without
// it they skip, unless LONGHAUL_REQUIRE_PYTORCH=1 (CI's
// .ci/steps/15-pytorch.sh), which makes the skip a failure.
package pytorch

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/internal/race"

	"github.com/longhaul-rl/longhaul/train"
)

func python(t testing.TB) string {
	t.Helper()
	if race.Enabled && os.Getenv("LONGHAUL_REQUIRE_PYTORCH") != "1" {
		// Minutes of Python training whose Go side (train/remote, the
		// controller) has race-detected tests of its own: CI runs these
		// once, without -race, in .ci/steps/15-pytorch.sh.
		t.Skip("PyTorch trainer tests run without -race (.ci/steps/15-pytorch.sh)")
	}
	py := os.Getenv("LONGHAUL_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	out, err := exec.Command(py, "-c", "import torch, numpy; print(torch.__version__)").CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("%s with torch and numpy is needed for the PyTorch trainer tests: %v: %s", py, err, strings.TrimSpace(string(out)))
		if os.Getenv("LONGHAUL_REQUIRE_PYTORCH") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// pkgDir is python/ of this repository.
func pkgDir(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	d, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", "python"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func pyCmd(ctx context.Context, t testing.TB, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, python(t), args...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pkgDir(t), "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1")
	return cmd
}

var (
	modelOnce sync.Once
	modelDir  string
	modelErr  error
	tmpRoot   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

// tinyModel is a tiny random Qwen3 HF directory, written once per test
// binary (each python start costs seconds of torch import). Tests only read it.
func tinyModel(t testing.TB) string {
	t.Helper()
	python(t)
	modelOnce.Do(func() {
		if tmpRoot, modelErr = os.MkdirTemp("", "lh-pytorch-test-"); modelErr != nil {
			return
		}
		modelDir = filepath.Join(tmpRoot, "model")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a bound for a hung run only
		defer cancel()
		out, err := pyCmd(ctx, t, "-m", "longhaul_trainer.tiny", "--out", modelDir, "--vocab", "96", "--hidden", "32", "--heads", "4", "--kv-heads", "2", "--intermediate", "64").CombinedOutput()
		if err != nil {
			modelErr = fmt.Errorf("tiny model: %w: %s", err, out)
		}
	})
	if modelErr != nil {
		t.Fatal(modelErr)
	}
	return modelDir
}

// proc is one trainer process.
type proc struct {
	cmd    *exec.Cmd
	url    string
	stderr *strings.Builder
	mu     *sync.Mutex
	done   chan struct{} // closed when the process has exited
}

// start launches `python3 -m longhaul_trainer --model dir --port 0` and
// waits for the line that names its address.
func start(t testing.TB, dir string, extra ...string) *proc {
	return startWith(t, nil, dir, extra...)
}

// startWith runs the trainer under a launcher: launcher is python's
// arguments before "-m longhaul_trainer" (e.g. torch.distributed.run's).
func startWith(t testing.TB, launcher []string, dir string, extra ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	args := append(append(launcher, "-m", "longhaul_trainer", "--model", dir, "--port", "0", "--threads", "1", "--device", "cpu",
		"--lr", "0.01", "--warmup-steps", "2", "--log-level", "WARNING"), extra...)
	cmd := pyCmd(ctx, t, args...)
	// Its own process group, so cleanup reaches a launcher's children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	p := &proc{cmd: cmd, stderr: &strings.Builder{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	cmd.Stderr = lockedWriter{p.mu, p.stderr}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done); cancel() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever is left of the group
	})
	line := make(chan string, 1)
	go func() {
		// The first line with {"listening": ...}; a launcher may prefix it
		// ("[default0]:") or print lines of its own first.
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if i := strings.Index(sc.Text(), `{"listening"`); i >= 0 {
				line <- sc.Text()[i:]
				break
			}
		}
		close(line)
		for sc.Scan() {
		}
	}()
	select {
	case l, ok := <-line:
		var hello struct {
			Listening string `json:"listening"`
		}
		if !ok || json.Unmarshal([]byte(l), &hello) != nil || hello.Listening == "" {
			t.Fatalf("trainer did not announce its address (got %q); stderr:\n%s", l, p.logs())
		}
		p.url = "http://" + hello.Listening
	case <-time.After(2 * time.Minute):
		t.Fatalf("trainer did not start in 2 minutes; stderr:\n%s", p.logs())
	}
	return p
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// batch is a deterministic PG batch of rows rows over vocab tokens.
func batch(seed uint64, rows, minLen, maxLen, vocab int) train.Batch {
	r := rand.New(rand.NewPCG(seed, 15))
	b := train.Batch{Loss: train.LossPG}
	for range rows {
		n := minLen + r.IntN(maxLen-minLen+1)
		row := train.Row{Tokens: make([]int32, n), Mask: make([]uint8, n), Advantages: make([]float32, n), OldLogprobs: make([]float32, n)}
		for j := range n {
			row.Tokens[j] = int32(r.IntN(vocab))
			if j > 0 && r.Float64() < 0.7 {
				row.Mask[j] = 1
				row.Advantages[j] = float32(r.NormFloat64())
				row.OldLogprobs[j] = float32(-5 * r.Float64())
			}
		}
		b.Rows = append(b.Rows, row)
	}
	return b
}
