package rollout

import (
	"context"
	"fmt"
	"slices"
	"sync"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
)

// frame reads the framing tokens from the chat template: the empty
// conversation rendered without and with the generation prompt.
func (l *loop) frame(ctx context.Context) error {
	c := l.s.Chat
	if c == nil {
		c = DefaultChat
	}
	if c == DefaultChat {
		// The default template's framing is fixed: read once per
		// process, not three allocations per rollout. The loop only
		// reads it.
		f := byteFrame()
		if f.err != nil {
			return f.err
		}
		l.open, l.genPrompt, l.stops = f.open, f.genPrompt, f.stops
		return nil
	}
	return l.frameOf(ctx, c)
}

// framing is a chat template's framing tokens.
type framing struct {
	open, genPrompt, stops []int32
	err                    error
}

// byteFrame is the byte template's framing, computed on first use.
var byteFrame = sync.OnceValue(func() framing {
	var l loop
	err := l.frameOf(context.Background(), DefaultChat)
	return framing{l.open, l.genPrompt, l.stops, err}
})

// frameOf reads c's framing into the loop.
func (l *loop) frameOf(ctx context.Context, c lhtok.Chat) error {
	open, err := c.RenderTokens(ctx, nil, lhtok.RenderOptions{})
	if err != nil {
		return fmt.Errorf("rollout: chat template: %w", err)
	}
	withGen, err := c.RenderTokens(ctx, nil, lhtok.RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		return fmt.Errorf("rollout: chat template: %w", err)
	}
	if len(withGen) < len(open) || !slices.Equal(withGen[:len(open)], open) {
		return fmt.Errorf("rollout: chat template: the generation prompt does not extend the empty conversation")
	}
	l.open, l.genPrompt = open, withGen[len(open):]
	if l.stops = c.Tokenizer().StopTokens(); len(l.stops) == 0 {
		return fmt.Errorf("rollout: chat template: the tokenizer has no stop token")
	}
	return nil
}

// promptOf is the generation prompt after context ctx.
// It extends ctx in place (ctxbuf.go), so accepting the call's reply
// extends the prompt in place in turn.
func (l *loop) promptOf(ctx []int32) []int32 { return l.extend(ctx, l.genPrompt) }
