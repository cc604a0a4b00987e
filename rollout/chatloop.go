package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/runlog"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bridge"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// RerenderPolicy names the boundary a tokenizer.history: rerender switch
// declares (runlog.Compaction.Policy): the prompt stops extending the
// previous one there, as after a compaction.
const RerenderPolicy = "tokenizer.rerender"

// chatState is a bridged rollout's token record and what the next turn
// appends to it.
type chatState struct {
	br      *bridge.Bridge
	tok     lhtok.Tokenizer
	parser  toolcall.Parser
	sampled []int32         // the last selected reply, not yet in the record
	next    []lhtok.Message // observations since that reply
	turn    bool            // a reply is waiting to be appended
	reply   lhtok.Message   // the parsed message of that reply
	// menv is the environment when it speaks messages (msgenv.go).
	menv env.MessageEnvironment
}

// initBridged decides between the appending loop (a tokenizer.Appender
// such as the byte template, the default: the context grows by rendered
// messages) and the bridge.
func (l *loop) initBridged() error {
	c := l.s.Chat
	if c == nil {
		c = DefaultChat
	}
	if a, ok := c.(lhtok.Appender); ok {
		l.app = a
		return nil
	}
	l.bridged = true
	l.cb.tok = l.s.Chat.Tokenizer()
	l.cb.parser = l.s.ToolParser
	if l.cb.parser == nil {
		l.cb.parser, _ = toolcall.New("none")
	}
	return nil
}

// text is the decoded reply a validator sees.
func (l *loop) text(sampled []int32) string {
	if l.bridged {
		return l.cb.tok.Decode(l.cb.trim(sampled))
	}
	return l.app.Text(sampled)
}

// trim drops a final stop token: the parsers read the turn's text without it.
func (c *chatState) trim(sampled []int32) []int32 {
	if n := len(sampled); n > 0 && slices.Contains(c.tok.StopTokens(), sampled[n-1]) {
		return sampled[:n-1]
	}
	return sampled
}

func (c *chatState) parse(sampled []int32) toolcall.Parsed {
	return c.parser.Parse(c.tok.Decode(c.trim(sampled)))
}

// runChat is run's loop for a bridged Chat: the same calls, steps, limits
// and resume rules, with prompts from the bridge. Sampled tokens enter the
// record as sampled; only the new messages are rendered.
func (l *loop) runChat(ctx context.Context) (Result, error) {
	msgs, opt, err := l.openChat(ctx)
	if err != nil {
		return Result{}, err
	}
	mode := l.s.History
	if mode == "" {
		mode = bridge.Append
	}
	if l.cb.br, err = bridge.New(ctx, l.s.Chat, mode, opt, msgs); err != nil {
		return Result{}, failure.NewData("chat", err)
	}
	lim := l.s.Limits
	for {
		switch {
		case l.done:
			return l.seal(ctx, runlog.OutcomeCompleted)
		case lim.MaxTurns > 0 && l.turns >= lim.MaxTurns:
			return l.seal(ctx, runlog.OutcomeMaxTurns)
		case lim.MaxSampledTokens > 0 && l.sampled >= lim.MaxSampledTokens:
			return l.seal(ctx, runlog.OutcomeMaxTokens)
		}
		if err := l.bridgeTurn(ctx); err != nil {
			return Result{}, err
		}
		if err := l.maybeCompactChat(ctx); err != nil {
			if errors.Is(err, errOverBudget) {
				return l.seal(ctx, runlog.OutcomeMaxTokens)
			}
			return Result{}, err
		}
		prompt := slices.Clone(l.cb.br.Prompt())
		if l.overBudget(len(prompt)) {
			return l.seal(ctx, runlog.OutcomeMaxTokens)
		}
		call, err := l.selectCall(ctx, prompt, l.s.Validator)
		if err != nil {
			return Result{}, err
		}
		l.cb.turn = true
		if err := l.step(ctx, l.chatAction(call.Sampled)); err != nil {
			return Result{}, err
		}
	}
}

// bridgeTurn appends the last reply and the observations to the record.
// A rerender switch is declared as a boundary (runlog.Compaction with
// RerenderPolicy), logged before it is acted on and checked on resume.
func (l *loop) bridgeTurn(ctx context.Context) error {
	if !l.cb.turn {
		return nil
	}
	t, err := l.cb.br.Next(ctx, l.cb.sampled, l.cb.reply, l.cb.next)
	if err != nil {
		return failure.NewData("chat", err)
	}
	l.cb.turn, l.cb.next, l.cb.sampled = false, nil, nil
	return l.declareRerender(ctx, t)
}

// declareRerender declares a rerender switch of the bridge as a boundary.
func (l *loop) declareRerender(ctx context.Context, t bridge.Turn) error {
	if t.Boundary == nil {
		return nil
	}
	ev := runlog.Compaction{Rollout: l.s.Rollout, Attempt: l.s.Attempt, Boundary: l.compactions, AfterCall: l.lastSelected,
		Policy: RerenderPolicy, TokensBefore: uint32(len(t.Prompt) - len(t.Boundary.Inserted) + len(t.Boundary.Removed)), TokensAfter: uint32(len(t.Prompt))}
	if pev := l.peek(); pev != nil {
		c, ok := pev.(runlog.Compaction)
		if !ok {
			return l.diverged("Compaction")
		}
		if c.Boundary != ev.Boundary || c.AfterCall != ev.AfterCall || c.Policy != ev.Policy {
			return failure.NewData("resume", fmt.Errorf("%w: rerender boundary %d differs from the log", ErrDiverged, ev.Boundary))
		}
		l.pos++
	} else if err := l.record(ctx, ev); err != nil {
		return err
	}
	l.prev = nil
	l.compactions++
	return nil
}
