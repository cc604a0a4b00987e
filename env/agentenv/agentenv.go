// Package agentenv runs an external agent program as an environment
// (env.kind agent): per rollout it serves an OpenAI-compatible chat
// endpoint on loopback, starts the user's command with OPENAI_BASE_URL
// pointing at it and the task in LONGHAUL_TASK, and answers every chat
// request through the rollout loop, which renders, samples (or replays
// from the log) and records it. Requests may carry function tools (the
// reply then carries parsed tool_calls) and ask for a stream (server-sent
// events, sse.go). The agent ends by posting its reward to
// $LONGHAUL_REWARD_URL and exiting 0.
package agentenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
)

// Env starts Command (argv) once per rollout attempt.
type Env struct {
	Command []string
	Dir     string // working directory; "" = the current one
	Logger  *slog.Logger
}

var _ env.Agent = (*Env)(nil)

// ErrNotStepped is returned by Reset and Step: an agent is driven.
var ErrNotStepped = errors.New("agentenv: an external agent is driven, not stepped")

// Reset implements env.Environment; agents are driven (env.Agent).
func (e *Env) Reset(context.Context, env.Task, uint64) (string, error) { return "", ErrNotStepped }

// Step implements env.Environment; agents are driven (env.Agent).
func (e *Env) Step(context.Context, string) (env.StepResult, error) {
	return env.StepResult{}, ErrNotStepped
}

// Close implements env.Environment.
func (e *Env) Close(context.Context) error { return nil }

// stderrTail keeps the last lines an agent wrote to stderr for the event.
type stderrTail struct {
	mu    sync.Mutex
	lines []string
	part  string
}

const tailLines = 10

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(p)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		t.lines = append(t.lines, l)
	}
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
	return len(p), nil
}

func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.lines...)
	if t.part != "" {
		out = append(out, t.part)
	}
	return strings.Join(out, "\n")
}

// Drive implements env.Agent.
func (e *Env) Drive(ctx context.Context, task env.Task, call env.AgentCallFunc) (env.AgentResult, error) {
	if len(e.Command) == 0 {
		return env.AgentResult{}, failure.NewData("agent", errors.New("agentenv: env.command is empty"))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return env.AgentResult{}, failure.NewInfra("agent", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h := &handler{call: call, ctx: ctx, fail: cancel}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	taskJSON, err := json.Marshal(task)
	if err != nil {
		return env.AgentResult{}, failure.NewData("agent", err)
	}
	base := "http://" + ln.Addr().String()
	cmd := exec.CommandContext(ctx, e.Command[0], e.Command[1:]...)
	cmd.Dir = e.Dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_KEY=longhaul",
		"LONGHAUL_TASK="+string(taskJSON), "LONGHAUL_REWARD_URL="+base+"/v1/longhaul/reward")
	tail := &stderrTail{}
	cmd.Stdout, cmd.Stderr = io.Discard, tail
	cmd.WaitDelay = 2 * time.Second
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return env.AgentResult{}, failure.NewData("agent", fmt.Errorf("agentenv: starting %q: %w", e.Command[0], err))
	}
	werr := cmd.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return env.AgentResult{}, cause // a call failed (e.g. diverged from the log): that is the error
	}
	if werr != nil {
		if ctx.Err() != nil {
			return env.AgentResult{}, ctx.Err()
		}
		return env.AgentResult{}, failure.NewData("agent", fmt.Errorf("agentenv: agent %q exited: %w; last stderr lines:\n%s", e.Command[0], werr, tail.String()))
	}
	res, ok := h.result()
	if !ok && !h.limited() {
		return env.AgentResult{}, failure.NewData("agent", fmt.Errorf("agentenv: agent %q exited 0 without posting its reward to $LONGHAUL_REWARD_URL", e.Command[0]))
	}
	return res, nil
}
