package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
)

// A bridged rollout over a message-level environment (env.MessageEnvironment,
// e.g. an HTTP environment of protocol version 2) speaks messages end to
// end: the environment's tools go to the chat template's tools argument,
// the sampled reply goes through the tool parser into an assistant message
// with structured tool calls, and the environment's tool and user messages
// are rendered by the template. Nothing is flattened to text.
//
// The log keeps the messages as JSON: EnvStep.Action is the assistant
// message the environment received, EnvStep.Observation the JSON array of
// its reply messages ("" when none). Both are canonical (encoding/json of
// the same values), so a replayed step is compared byte for byte.
//
// The byte template (the embedded model) has no tool syntax: its rollouts
// keep the text rendering of httpenv.Client (a "tools: name(args)" line and
// "name args" actions, docs/protocols.md).

// openChat resets the environment and returns the opening messages and
// render options of a bridged rollout: the system message, then the
// environment's first messages, with its tools.
func (l *loop) openChat(ctx context.Context) ([]lhtok.Message, lhtok.RenderOptions, error) {
	opt := l.s.Render
	var msgs []lhtok.Message
	if l.s.System != "" {
		msgs = append(msgs, lhtok.Message{Role: "system", Content: l.s.System})
	}
	me, ok := l.env.(env.MessageEnvironment)
	if !ok {
		obs, err := l.env.Reset(l.envCtx(ctx, -1), l.s.Task, l.s.EnvSeed)
		if err != nil {
			return nil, opt, failure.Wrap("env.reset", err)
		}
		return append(msgs, lhtok.Message{Role: "user", Content: obs}), opt, nil
	}
	first, tools, err := me.ResetMessages(l.envCtx(ctx, -1), l.s.Task, l.s.EnvSeed)
	if err != nil {
		return nil, opt, failure.Wrap("env.reset", err)
	}
	l.cb.menv = me
	opt.Tools = append([]json.RawMessage(nil), opt.Tools...)
	for i, t := range tools {
		if t.Type == "" {
			t.Type = "function"
		}
		raw, err := json.Marshal(t)
		if err != nil {
			return nil, opt, failure.NewData("env.reset", fmt.Errorf("rollout: tool %d: %w", i, err))
		}
		opt.Tools = append(opt.Tools, raw)
	}
	return append(msgs, chatMessages(first)...), opt, nil
}

// chatAction parses a selected reply into the assistant message the
// template renders for it (kept for the bridge's next turn) and returns
// the environment's action: the message as JSON for a message-level
// environment, else its text.
func (l *loop) chatAction(sampled []int32) string {
	p := l.cb.parse(sampled)
	l.cb.reply = p.Message
	if l.cb.menv == nil {
		if l.s.Parse != nil {
			return l.s.Parse(sampled)
		}
		return strings.TrimSpace(p.Message.Content)
	}
	// Call ids unique over the episode (the parser numbers each turn from
	// 0): tool messages answer them, and some templates render them.
	msg := env.Message{Role: "assistant", Content: p.Message.Content, ToolCallErrors: p.Errors}
	for i := range p.Message.ToolCalls {
		tc := &p.Message.ToolCalls[i]
		tc.ID = fmt.Sprintf("call_%d_%d", l.turns, i)
		msg.ToolCalls = append(msg.ToolCalls, env.ToolCall{ID: tc.ID, Type: "function",
			Function: env.FunctionCall{Name: tc.Name, Arguments: string(tc.Arguments)}})
	}
	b, _ := json.Marshal(msg) // plain strings and slices: cannot fail
	return string(b)
}

// envStep applies one step: Step with the text action, or, for a
// message-level environment, StepMessage with the logged message (the
// reply messages become the observation's JSON).
func (l *loop) envStep(ctx context.Context, turn int, action string) (env.StepResult, error) {
	if err := l.flush(ctx); err != nil { // the previous step is durable before this one
		return env.StepResult{}, err
	}
	ctx = l.envCtx(ctx, turn)
	if l.cb.menv == nil {
		return l.env.Step(ctx, action)
	}
	var msg env.Message
	if err := json.Unmarshal([]byte(action), &msg); err != nil {
		return env.StepResult{}, failure.NewData("env.step", fmt.Errorf("rollout: turn %d: logged action is not a message: %w", turn, err))
	}
	res, err := l.cb.menv.StepMessage(ctx, msg)
	if err != nil {
		return env.StepResult{}, err
	}
	out := env.StepResult{Reward: res.Reward, Done: res.Done, Success: res.Success, Info: res.Info}
	if len(res.Messages) > 0 {
		b, err := json.Marshal(res.Messages)
		if err != nil {
			return env.StepResult{}, failure.NewData("env.step", err)
		}
		out.Observation = string(b)
	}
	return out, nil
}

// observe queues an observation for the next turn's render.
func (c *chatState) observe(obs string, role string) error {
	if c.menv == nil {
		c.next = append(c.next, lhtok.Message{Role: role, Content: obs})
		return nil
	}
	var msgs []env.Message
	if err := json.Unmarshal([]byte(obs), &msgs); err != nil {
		return failure.NewData("env.step", fmt.Errorf("rollout: logged observation is not a message list: %w", err))
	}
	c.next = append(c.next, chatMessages(msgs)...)
	return nil
}

// chatMessages converts environment messages to the template's shape.
func chatMessages(ms []env.Message) []lhtok.Message {
	out := make([]lhtok.Message, 0, len(ms))
	for _, m := range ms {
		cm := lhtok.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.ReasoningContent != nil {
			cm.ReasoningContent, cm.ReasoningSet = *m.ReasoningContent, *m.ReasoningContent == ""
		}
		for _, tc := range m.ToolCalls {
			args := json.RawMessage(tc.Function.Arguments)
			if !json.Valid(args) {
				args, _ = json.Marshal(tc.Function.Arguments) // templates see a string
			}
			cm.ToolCalls = append(cm.ToolCalls, lhtok.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
		}
		out = append(out, cm)
	}
	return out
}
