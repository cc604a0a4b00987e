package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
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
		prompt, err := l.agentPrompt(ctx, c)
		if err != nil {
			return env.AgentReply{}, err
		}
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
		rep := l.agentReply(fc, c.Tools)
		rep.PromptTokens = len(prompt)
		return rep, nil
	}
	res, err := a.Drive(ctx, l.s.Task, call)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return Result{}, failure.Wrap("agent", err)
	}
	if limit != "" {
		return l.seal(ctx, limit)
	}
	l.reward, l.success, l.done = res.Reward, res.Success, true
	return l.seal(ctx, runlog.OutcomeCompleted)
}

// agentPrompt renders an agent's request: through the chat template, with
// the request's tools in its tools argument, or, under the byte template
// (which has no tool syntax), as today's byte messages, the tools as a
// first system message in env.RenderTools' one-line form.
func (l *loop) agentPrompt(ctx context.Context, c env.AgentCall) ([]int32, error) {
	if l.bridged {
		opt := l.s.Render
		opt.AddGenerationPrompt = true
		opt.Tools = append([]json.RawMessage(nil), opt.Tools...)
		for i, t := range c.Tools {
			if t.Type == "" {
				t.Type = "function"
			}
			raw, err := json.Marshal(t)
			if err != nil {
				return nil, failure.NewData("agent.call", fmt.Errorf("tool %d: %w", i, err))
			}
			opt.Tools = append(opt.Tools, raw)
		}
		p, err := l.s.Chat.RenderTokens(ctx, chatMessages(c.Messages), opt)
		if err != nil {
			return nil, failure.NewData("agent.call", err)
		}
		return p, nil
	}
	msgs := c.Messages
	if t := env.RenderTools(c.Tools); t != "" {
		msgs = append([]env.Message{{Role: "system", Content: t}}, msgs...)
	}
	prompt := l.app.AppendStart(nil)
	for i, m := range msgs {
		role := m.Role
		if m.Role == "tool" {
			role = lhtok.RoleTool
		}
		var err error
		if prompt, err = l.app.AppendMessage(prompt, lhtok.Message{Role: role, Content: m.Content}); err != nil {
			return nil, failure.NewData("agent.call", fmt.Errorf("message %d: %w", i, err))
		}
	}
	return l.app.AppendGenerationPrompt(prompt), nil
}

// agentReply reads a sampled reply for the agent: under a chat template
// through the tool parser (content without the calls); under the byte
// template, with tools, by env.ParseToolCall, keeping the raw text as the
// content so the agent's echo of it renders to the sampled bytes. Call ids
// name the call (call_<call>_<i>), so a replayed reply has the same ids.
func (l *loop) agentReply(fc runlog.CallFinished, tools []env.Tool) env.AgentReply {
	rep := env.AgentReply{CompletionTokens: len(fc.Sampled), Finish: fc.Finish}
	if l.bridged {
		p := l.cb.parse(fc.Sampled)
		rep.Text = p.Message.Content
		for i, tc := range p.Message.ToolCalls {
			rep.ToolCalls = append(rep.ToolCalls, env.ToolCall{ID: fmt.Sprintf("call_%d_%d", fc.Call, i), Type: "function",
				Function: env.FunctionCall{Name: tc.Name, Arguments: string(tc.Arguments)}})
		}
	} else {
		rep.Text = l.app.Text(fc.Sampled)
		if len(tools) > 0 {
			rep.ToolCalls = env.ParseToolCall(rep.Text, tools, fmt.Sprintf("call_%d_0", fc.Call)).ToolCalls
		}
	}
	if len(rep.ToolCalls) > 0 && rep.Finish == runlog.FinishStop {
		rep.Finish = FinishToolCalls
	}
	return rep
}

// FinishToolCalls is the OpenAI finish reason of a reply that calls tools.
const FinishToolCalls = "tool_calls"

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
			return failure.NewData("resume", fmt.Errorf("%w: agent compaction %d differs from the log", ErrDiverged, ev.Boundary))
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
