package rollout

import (
	"context"
	"fmt"
	"sync"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/model/tokenizer"
	"github.com/longhaul-rl/longhaul/runlog"
)

// drive runs an external agent (env.Agent): each chat request it makes is
// rendered to tokens and goes through the same call path as the loop's own
// calls, so a resumed rollout answers the agent's calls from the log while
// their prompts match the logged ones token for token, generates the first
// call past the log live, and fails with ErrDiverged (the controller then
// restarts the attempt) on a call that does not match.
func (l *loop) drive(ctx context.Context, a env.Agent) (Result, error) {
	var mu sync.Mutex // one call at a time: the log's order is the agent's
	limit := ""
	call := func(ctx context.Context, c env.AgentCall) (env.AgentReply, error) {
		mu.Lock()
		defer mu.Unlock()
		lim := l.s.Limits
		switch {
		case limit != "":
			return env.AgentReply{}, fmt.Errorf("%w: %s", env.ErrAgentLimit, limit)
		case lim.MaxTurns > 0 && int(l.nextCall) >= lim.MaxTurns:
			limit = runlog.OutcomeMaxTurns
		case lim.MaxSampledTokens > 0 && l.sampled >= lim.MaxSampledTokens:
			limit = runlog.OutcomeMaxTokens
		}
		prompt := []int32{tokenizer.BOS}
		for i, m := range c.Messages {
			role := tokenizer.Role(m.Role)
			if m.Role == "tool" {
				role = tokenizer.RoleTool
			}
			var err error
			if prompt, err = tokenizer.AppendMessage(prompt, tokenizer.Message{Role: role, Content: m.Content}); err != nil {
				return env.AgentReply{}, Data("agent.call", fmt.Errorf("message %d: %w", i, err))
			}
		}
		prompt = append(prompt, tokenizer.Assistant)
		if limit == "" && l.overBudget(len(prompt)) {
			limit = runlog.OutcomeMaxTokens
		}
		if limit != "" {
			return env.AgentReply{}, fmt.Errorf("%w: %s", env.ErrAgentLimit, limit)
		}
		fc, err := l.selectCall(ctx, prompt, nil)
		if err != nil {
			return env.AgentReply{}, err
		}
		l.turns++
		return env.AgentReply{Text: tokenizer.DecodeText(fc.Sampled), PromptTokens: len(prompt),
			CompletionTokens: len(fc.Sampled), Finish: fc.Finish}, nil
	}
	res, err := a.Drive(ctx, l.s.Task, call)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return Result{}, classify("agent", err)
	}
	if limit != "" {
		return l.seal(ctx, limit)
	}
	l.reward, l.success, l.done = res.Reward, res.Success, true
	return l.seal(ctx, runlog.OutcomeCompleted)
}
