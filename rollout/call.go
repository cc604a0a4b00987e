package rollout

// The model-call half of the loop: make (or replay) a call, select a
// candidate, and extend the context with it.

import (
	"context"
	"fmt"
	"slices"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/runlog"
)

// selectCall makes a call, resampling rejected candidates, and appends the
// selected response to the context.
func (l *loop) selectCall(ctx context.Context, prompt []int32, validate Validator) (runlog.CallFinished, error) {
	for resample := 0; ; resample++ {
		call, err := l.call(ctx, prompt, validate)
		if err != nil {
			return call, err
		}
		if call.Selected {
			l.accept(prompt, call)
			return call, nil
		}
		if resample >= l.s.MaxResamples {
			return call, failure.NewData("select", fmt.Errorf("%w: %d candidates rejected, last: %s", ErrSelectionExhausted, resample+1, call.Reject))
		}
	}
}

func (l *loop) accept(prompt []int32, call runlog.CallFinished) {
	l.lastSelected, l.hasCall = call.Call, true
	l.sampled += len(call.Sampled)
	if l.bridged {
		l.prev = append(prompt[:len(prompt):len(prompt)], call.Sampled...)
		l.cb.sampled = call.Sampled
		return
	}
	var marker []int32
	if len(call.Sampled) == 0 || !slices.Contains(l.stops, call.Sampled[len(call.Sampled)-1]) {
		// A length-truncated reply gets its end marker as prompt context;
		// the context still extends prompt + sampled.
		marker = l.stops[:1]
	}
	// The context is exactly prompt + sampled (+ end marker), appended in
	// place to the arena the prompt ends (ctxbuf.go) rather than
	// re-rendered; prev and the reply's message tokens are views of it.
	// A live call already wrote its reply there (keep).
	var buf []int32
	if l.follows(prompt, call.Sampled) {
		buf = l.reserve(l.arena[l.base:], len(marker))
	} else {
		buf = append(l.reserve(prompt, len(call.Sampled)+len(marker)), call.Sampled...)
	}
	l.ctx = l.commit(append(buf, marker...))
	l.prev = l.ctx[: len(prompt)+len(call.Sampled) : len(prompt)+len(call.Sampled)]
	var toks []int32
	if g := len(l.genPrompt); len(prompt) >= g && slices.Equal(prompt[len(prompt)-g:], l.genPrompt) {
		toks = l.ctx[len(prompt)-g:]
	} else {
		// A prompt that does not end with the generation prompt (an
		// agent's own rendering): the message is rendered on its own.
		toks = append(append(append(make([]int32, 0, len(l.genPrompt)+len(call.Sampled)+len(marker)), l.genPrompt...), call.Sampled...), marker...)
	}
	l.reply, l.replyOf = l.app.Text(call.Sampled), call.Sampled
	l.msgs = append(l.msgs, compaction.Message{Role: lhtok.RoleAssistant, Content: l.reply, Tokens: toks})
}

// delta returns the call's stored prompt form against the previous
// context; the suffix is a view of prompt, copied only when logged.
func (l *loop) delta(prompt []int32) (uint32, []int32) {
	p := 0
	if l.prev != nil {
		n := min(len(l.prev), len(prompt))
		for p < n && l.prev[p] == prompt[p] {
			p++
		}
	}
	return uint32(p), prompt[p:]
}

// call makes (or replays) one model call.
func (l *loop) call(ctx context.Context, prompt []int32, validate Validator) (runlog.CallFinished, error) {
	prefix, suffix := l.delta(prompt)
	idx := l.nextCall
	if ev := l.peek(); ev != nil {
		c, ok := ev.(runlog.CallFinished)
		if !ok {
			return c, l.diverged("CallFinished")
		}
		if c.Call != idx || c.PromptPrefix != prefix || !slices.Equal(c.PromptSuffix, suffix) {
			return c, failure.NewData("resume", fmt.Errorf("%w: call %d (logged %d): prompt differs from the log", ErrDiverged, idx, c.Call))
		}
		l.pos++
		l.nextCall++
		return c, nil
	}
	req := gen.Request{
		Prompt:      prompt,
		MaxTokens:   l.s.Limits.MaxTokensPerCall,
		Temperature: l.s.Sampling.Temperature,
		TopP:        l.s.Sampling.TopP,
		TopK:        l.s.Sampling.TopK,
		Stop:        l.stops[:len(l.stops):len(l.stops)], // a generator reads it, never writes it
		Seed:        SampleSeed(l.s.Seed, l.s.Rollout, idx),
	}
	l.req[0] = req
	// A held step is not flushed before the call: generation acts on
	// nothing outside the process, and the step goes out in the call's own
	// append (record), so a durable call always has its step. A crash in
	// between costs the call (not logged, generated again) and retakes
	// the step under its idempotency key, as a crash after any step does.
	out, err := l.s.Generator.Generate(ctx, l.req[:])
	if err != nil {
		return runlog.CallFinished{}, failure.Wrap("generate", err)
	}
	if len(out) != 1 || len(out[0].Tokens) == 0 || len(out[0].Tokens) != len(out[0].Logprobs) {
		return runlog.CallFinished{}, failure.NewData("generate", fmt.Errorf("rollout: generator broke the contract: %d results, want 1 with tokens and one logprob each", len(out)))
	}
	r := out[0]
	// The event's slices are kept by the log's cache, so nothing may
	// write into them: its tokens are views of the write-once context
	// arena, or one copy (keep); its logprobs are the generator's, handed
	// over (gen.Generator).
	suffix, sampled := l.keep(prompt, suffix, r.Tokens)
	c := runlog.CallFinished{
		Rollout: l.s.Rollout, Attempt: l.s.Attempt, Call: idx,
		PromptPrefix: prefix, PromptSuffix: suffix,
		Sampled: sampled, Logprobs: r.Logprobs[:len(r.Logprobs):len(r.Logprobs)],
		Finish: r.Finish, Version: r.Version, Selected: true,
	}
	if validate != nil {
		if verr := validate(ctx, l.text(r.Tokens), r.Tokens); verr != nil {
			c.Selected, c.Reject = false, verr.Error()
		}
	}
	if err := l.recordCall(ctx, c); err != nil {
		return c, err
	}
	l.nextCall++
	return c, nil
}
