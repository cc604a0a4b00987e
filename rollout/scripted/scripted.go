// Package scripted drives the rollout loop from a script: a scripted
// generator, an in-memory recorder, and a scripted oracle agent for the
// ledger environment. The warm start makes its demonstrations with them;
// tests use them as doubles of a model.
package scripted

import (
	"context"
	"sync"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
)

// Logprob is the logprob the scripted generators report for every token.
const Logprob = -0.25

// Func is a scripted generator: Reply returns the text of the reply to a
// rendered prompt; the generator samples its tokens and the first stop
// token of Chat's tokenizer (truncated to MaxTokens, finishing with
// "length").
type Func struct {
	Reply   func(req gen.Request) (string, error)
	Version int64
	// Chat is the template the prompts are rendered with; nil is the
	// default chat (rollout.DefaultChat, the byte template).
	Chat lhtok.Appender

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
		tok := chatOf(f.Chat).Tokenizer()
		toks := append(tok.Encode(text), tok.StopTokens()[0])
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
func (r *Recorder) Record(_ context.Context, evs ...runlog.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Fail != nil {
		return r.Fail
	}
	r.events = append(r.events, evs...)
	return nil
}

// Events returns a copy of the recorded events.
func (r *Recorder) Events() []runlog.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runlog.Event(nil), r.events...)
}

// Messages splits a prompt rendered with the default chat back into
// messages, for scripted agents that read their context the way a model
// would.
func Messages(prompt []int32) []lhtok.Message { return rollout.DefaultChat.Messages(prompt) }

func chatOf(c lhtok.Appender) lhtok.Appender {
	if c == nil {
		return rollout.DefaultChat
	}
	return c
}

// ErrOracle is returned when the oracle cannot read its context.
var ErrOracle = env.ErrOracle

// LedgerOracle is env.LedgerOracle as a scripted generator.
func LedgerOracle(summaryRequest string) *Func {
	return &Func{Reply: func(req gen.Request) (string, error) {
		return env.LedgerOracle(Messages(req.Prompt), summaryRequest)
	}}
}
