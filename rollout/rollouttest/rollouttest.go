// Package rollouttest holds test doubles for the rollout loop: a scripted
// generator, an in-memory recorder, and a scripted oracle agent for the
// ledger environment (also usable to make supervised warm-start data).
package rollouttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/model/tokenizer"
	"github.com/longhaul-rl/longhaul/runlog"
)

// Logprob is the logprob the scripted generators report for every token.
const Logprob = -0.25

// Func is a scripted generator: Reply returns the text of the reply to a
// rendered prompt; the generator samples its bytes and the end marker
// (truncated to MaxTokens, finishing with "length").
type Func struct {
	Reply   func(req gen.Request) (string, error)
	Version int64

	mu    sync.Mutex
	calls int
}

// Calls returns how many requests were answered.
func (f *Func) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Generate implements gen.Generator.
func (f *Func) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	out := make([]gen.Result, 0, len(reqs))
	for _, r := range reqs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		text, err := f.Reply(r)
		if err != nil {
			return nil, err
		}
		toks := append(tokenizer.Encode(text), tokenizer.End)
		finish := runlog.FinishStop
		if r.MaxTokens > 0 && len(toks) > r.MaxTokens {
			toks, finish = toks[:r.MaxTokens], runlog.FinishLength
		}
		lp := make([]float32, len(toks))
		for i := range lp {
			lp[i] = Logprob
		}
		out = append(out, gen.Result{Tokens: toks, Logprobs: lp, Finish: finish, Version: f.Version})
		f.mu.Lock()
		f.calls++
		f.mu.Unlock()
	}
	return out, nil
}

// Recorder keeps events in memory.
type Recorder struct {
	mu     sync.Mutex
	events []runlog.Event
	// Fail, when set, is returned by Record instead of recording.
	Fail error
}

// Record implements rollout.Recorder.
func (r *Recorder) Record(_ context.Context, ev runlog.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Fail != nil {
		return r.Fail
	}
	r.events = append(r.events, ev)
	return nil
}

// Events returns a copy of the recorded events.
func (r *Recorder) Events() []runlog.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runlog.Event(nil), r.events...)
}

// Messages splits a rendered prompt back into (role, text) pairs by its
// role markers, for scripted agents that read their context the way a
// model would: only from the tokens.
func Messages(prompt []int32) []tokenizer.Message {
	var out []tokenizer.Message
	var cur *tokenizer.Message
	for _, t := range prompt {
		var role tokenizer.Role
		switch t {
		case tokenizer.System:
			role = tokenizer.RoleSystem
		case tokenizer.User:
			role = tokenizer.RoleUser
		case tokenizer.Assistant:
			role = tokenizer.RoleAssistant
		case tokenizer.Tool:
			role = tokenizer.RoleTool
		case tokenizer.Summary:
			role = tokenizer.RoleSummary
		case tokenizer.End, tokenizer.BOS:
			cur = nil
			continue
		default:
			if cur != nil && t < 256 {
				cur.Content += string(rune(byte(t)))
			}
			continue
		}
		out = append(out, tokenizer.Message{Role: role})
		cur = &out[len(out)-1]
	}
	return out
}

// ErrOracle is returned when the oracle cannot read its context.
var ErrOracle = errors.New("rollouttest: oracle cannot read the context")

// LedgerOracle is the scripted ledger agent: it answers (last known
// balance + last delta) mod 10, where the last known balance is the most
// recent assistant answer or summary before the last user message, or the
// start of the task message. Asked to summarize (the last user message is
// summaryRequest), it replies with the balance it would carry forward. It
// reads only its context, so it succeeds exactly when compaction keeps the
// most recent answer.
func LedgerOracle(summaryRequest string) *Func {
	return &Func{Reply: func(req gen.Request) (string, error) {
		msgs := Messages(req.Prompt)
		// The prompt ends with the generation marker: drop that empty turn.
		if n := len(msgs); n > 0 && msgs[n-1].Role == tokenizer.RoleAssistant && msgs[n-1].Content == "" {
			msgs = msgs[:n-1]
		}
		last := -1
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == tokenizer.RoleUser {
				last = i
				break
			}
		}
		if last < 0 {
			return "", ErrOracle
		}
		if summaryRequest != "" && msgs[last].Content == summaryRequest {
			return balanceBefore(msgs, len(msgs))
		}
		f := strings.Fields(msgs[last].Content)
		if len(f) == 3 && f[0] == "start" { // the task message: start S D
			s, err1 := strconv.Atoi(f[1])
			d, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				return "", fmt.Errorf("%w: task %q", ErrOracle, msgs[last].Content)
			}
			return strconv.Itoa(((s+d)%10 + 10) % 10), nil
		}
		d, err := strconv.Atoi(msgs[last].Content)
		if err != nil {
			return "", fmt.Errorf("%w: delta %q", ErrOracle, msgs[last].Content)
		}
		b, err := balanceBefore(msgs, last)
		if err != nil {
			return "", err
		}
		v, _ := strconv.Atoi(b)
		return strconv.Itoa(((v+d)%10 + 10) % 10), nil
	}}
}

// balanceBefore returns the last balance stated before message end: an
// assistant answer, a summary, or the task's start + first delta.
func balanceBefore(msgs []tokenizer.Message, end int) (string, error) {
	for i := end - 1; i >= 0; i-- {
		m := msgs[i]
		switch m.Role {
		case tokenizer.RoleAssistant, tokenizer.RoleSummary:
			if _, err := strconv.Atoi(strings.TrimSpace(m.Content)); err == nil {
				return strings.TrimSpace(m.Content), nil
			}
		case tokenizer.RoleUser:
			f := strings.Fields(m.Content)
			if len(f) == 3 && f[0] == "start" {
				s, _ := strconv.Atoi(f[1])
				d, _ := strconv.Atoi(f[2])
				return strconv.Itoa(((s+d)%10 + 10) % 10), nil
			}
		}
	}
	return "", fmt.Errorf("%w: no balance before message %d", ErrOracle, end)
}
