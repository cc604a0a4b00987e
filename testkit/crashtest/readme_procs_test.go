package crashtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// readmeProc is a `longhaul serve` or `longhaul serve-trainer` started the
// way the README starts it: `--config FILE --port N` and nothing else,
// from a working directory (its default --allow-path) that holds the run
// directory. It can be SIGKILLed and started again on the same port.
type readmeProc struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *proctest.Buffer
	starts int
}

func startReadme(t *testing.T, bin, workDir string, port int, args ...string) *readmeProc {
	t.Helper()
	p := &readmeProc{t: t, bin: bin, dir: workDir, port: port, args: args, out: &proctest.Buffer{}}
	t.Cleanup(p.kill)
	p.start()
	return p
}

func (p *readmeProc) start() {
	p.t.Helper()
	cmd := exec.Command(p.bin, append(append([]string{}, p.args...), "--port", fmt.Sprint(p.port))...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.starts++
	p.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			p.t.Fatalf("%v exited:\n%s", p.args, p.out.String())
		default:
		}
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", p.port)); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%v did not become healthy:\n%s", p.args, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill SIGKILLs the process and waits until it is gone (its port free).
func (p *readmeProc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
}

// restart is kill then start: the process comes back as the README starts
// it, knowing nothing of the run (a server serves its initial weights as
// version 0, a trainer stands at step 0).
func (p *readmeProc) restart() {
	p.t.Helper()
	p.kill()
	p.start()
}

// healthVersion is the weight version a `longhaul serve` reports on
// /health (-1 when it does not answer).
func healthVersion(port int) int64 {
	hc := &http.Client{Timeout: time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var h struct {
		Version int64 `json:"version"`
	}
	if json.NewDecoder(resp.Body).Decode(&h) != nil {
		return -1
	}
	return h.Version
}

// startTrain starts `longhaul train` in workDir and returns a channel
// closed when it exits, with its error and output.
type trainProc struct {
	cmd    *exec.Cmd
	out    *proctest.Buffer
	exited chan struct{}
	err    error
}

func startTrain(t *testing.T, bin, workDir string, args ...string) *trainProc {
	t.Helper()
	tp := &trainProc{out: &proctest.Buffer{}, exited: make(chan struct{})}
	tp.cmd = exec.Command(bin, append([]string{"train", "--no-progress", "--log-level", "info"}, args...)...)
	tp.cmd.Dir = workDir
	tp.cmd.Stdout, tp.cmd.Stderr = tp.out, tp.out
	if err := tp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { tp.err = tp.cmd.Wait(); close(tp.exited) }()
	t.Cleanup(func() { tp.cmd.Process.Kill(); <-tp.exited })
	return tp
}

// wait waits for train to exit, at most d.
func (tp *trainProc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-tp.exited:
		return tp.err
	case <-time.After(d):
		t.Fatalf("train did not finish in %v:\n%s", d, tail(tp.out.String(), 60))
		return nil
	}
}
