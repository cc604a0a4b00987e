package rollout

import (
	"context"
	"fmt"
	"slices"
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
		if c.Compacted && l.hasCall && !extends(prompt, l.prev) {
			if err := l.agentCompaction(ctx, len(prompt)); err != nil {
				return env.AgentReply{}, err
			}
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

// extends reports whether prompt continues ctx exactly.
func extends(prompt, ctx []int32) bool {
	return len(prompt) >= len(ctx) && slices.Equal(prompt[:len(ctx)], ctx)
}

// agentCompaction records (or replays) the boundary an agent declared
// before a call whose prompt breaks the previous context; a declaration
// without a break is ignored, since there is no boundary to mark.
func (l *loop) agentCompaction(ctx context.Context, after int) error {
	ev := runlog.Compaction{Rollout: l.s.Rollout, Attempt: l.s.Attempt, Boundary: l.compactions, AfterCall: l.nextCall - 1,
		Policy: AgentPolicy, TokensBefore: uint32(len(l.prev)), TokensAfter: uint32(after)}
	if pev := l.peek(); pev != nil {
		c, ok := pev.(runlog.Compaction)
		if !ok {
			return l.diverged("Compaction")
		}
		if c.Boundary != ev.Boundary || c.AfterCall != ev.AfterCall || c.Policy != ev.Policy {
			return Data("resume", fmt.Errorf("%w: agent compaction %d differs from the log", ErrDiverged, ev.Boundary))
		}
		l.pos++
	} else if err := l.record(ctx, ev); err != nil {
		return err
	}
	l.prev = nil // the next prompt is stored whole
	l.compactions++
	return nil
}

// AgentPolicy is the policy name of a compaction an external agent declared.
const AgentPolicy = "agent"
