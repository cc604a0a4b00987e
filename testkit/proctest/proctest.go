// Package proctest holds the helpers tests use to run longhaul's processes
// for real (testkit/crashtest, test/threeproc): a free loopback port, a
// locked buffer for a child's output, a started process in its own process
// group that a test SIGKILLs, a /health poll, and line counts of the files
// a run writes. It is imported only by tests.
package proctest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Buffer is an io.Writer safe for a child's stdout and stderr copiers and
// the test reading it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// CountLines counts the newlines of the file at path (0 when unreadable: a
// run that has not written it yet).
func CountLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// Tail is the last n bytes of s, marked when cut.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// LastLine is the last line of s that contains sub.
func LastLine(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return ""
}

// Proc is one started process, in its own process group so a kill reaches
// whatever it started.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Out  *Buffer
	Done chan struct{} // closed when the process has exited
	Err  error         // its exit, once Done is closed
}

// Launch starts argv with env added to the test's, its output into out; the
// test's cleanup kills it.
func Launch(t testing.TB, name string, out *Buffer, env []string, argv ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Out: out, Done: make(chan struct{})}
	p.Cmd = exec.Command(argv[0], argv[1:]...)
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = out, out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(out, "=== start %s\n", name)
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.Err = p.Cmd.Wait(); close(p.Done) }()
	t.Cleanup(func() { p.Kill() })
	return p
}

// Kill SIGKILLs the process group and waits for the exit; it reports
// whether the process was still running.
func (p *Proc) Kill() bool {
	select {
	case <-p.Done:
		return false
	default:
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.Done
	return true
}

// WaitHealthy polls url until it answers 200, the process exits, or ctx
// ends.
func (p *Proc) WaitHealthy(ctx context.Context, url string) error {
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
		case <-p.Done:
			return fmt.Errorf("%s exited before it was healthy: %v\n%s", p.Name, p.Err, Tail(p.Out.String(), 3000))
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy: %w\n%s", p.Name, ctx.Err(), Tail(p.Out.String(), 3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
