package rollout

import (
	"context"
	"fmt"
	"slices"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// frame reads the framing tokens from the chat template: the empty
// conversation rendered without and with the generation prompt.
func (l *loop) frame(ctx context.Context) error {
	c := l.s.Chat
	if c == nil {
		c = bytetok.Chat{}
	}
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
func (l *loop) promptOf(ctx []int32) []int32 { return append(ctx, l.genPrompt...) }
