package bridge

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// BenchmarkBridgeTurn measures one Next (render with and without the new
// messages, encode, diff) on a Qwen3 conversation of about 2k, 8k and 32k
// tokens, so the growth with history length shows in one run.
func BenchmarkBridgeTurn(b *testing.B) {
	c := loadChatB(b, "qwen3")
	opt := tokenizer.RenderOptions{Tools: tools, Kwargs: map[string]any{"enable_thinking": true}}
	for _, target := range []int{2000, 8000, 32000} {
		b.Run(fmt.Sprintf("tokens=%d", target), func(b *testing.B) {
			msgs := []tokenizer.Message{{Role: "system", Content: "You keep a ledger."}, {Role: "user", Content: "Start."}}
			br, err := New(context.Background(), c, Append, opt, msgs)
			if err != nil {
				b.Fatal(err)
			}
			filler := strings.Repeat("The ledger balance is carried forward; 帳簿 ✓. ", 8)
			for i := 0; len(br.Prompt()) < target; i++ {
				msg, next := assistantTurn(i, false)
				msg.Content = filler
				sampled := c.Tokenizer().Encode(msg.Content + "<|im_end|>")
				if _, err := br.Next(context.Background(), sampled, msg, next); err != nil {
					b.Fatal(err)
				}
			}
			msg, next := assistantTurn(1, false)
			sampled := c.Tokenizer().Encode("<tool_call>\n{}\n</tool_call><|im_end|>")
			saved := *br
			b.ResetTimer()
			for b.Loop() {
				cp := saved
				cp.msgs, cp.record = slices.Clip(saved.msgs), slices.Clip(saved.record)
				if _, err := cp.Next(context.Background(), sampled, msg, next); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(br.Prompt())), "history_tokens")
		})
	}
}
