package bridge

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
)

// BenchmarkBridgeTurn measures one Next (render with and without the new
// messages, encode, diff) on a Qwen3 conversation (thinking on, tool calls,
// a user message every fourth turn, append mode) of about 4k, 16k and 32k
// tokens; the measured turn is a tool call and its result, so the growth with history length shows in one run: path=fast
// renders Qwen3's template in Go, re-rendering only messages whose inputs
// changed, and re-encodes from the last safe point; path=engine renders
// with the Jinja engine reusing the messages' template values and the
// encoding; path=ids reuses only the encoding (main's path before this
// work); path=full renders and encodes the whole conversation twice. All
// four in one run, for ratios.
func BenchmarkBridgeTurn(b *testing.B) {
	c := loadChatB(b, "qwen3")
	opt := tokenizer.RenderOptions{Tools: tools, Kwargs: map[string]any{"enable_thinking": true}}
	for _, target := range []int{4000, 16000, 32000} {
		for _, path := range []string{"fast", "engine", "ids", "full"} {
			b.Run(fmt.Sprintf("tokens=%d/path=%s", target, path), func(b *testing.B) {
				msgs := []tokenizer.Message{{Role: "system", Content: "You keep a ledger."}, {Role: "user", Content: "Start."}}
				br, err := New(context.Background(), c, Append, opt, msgs)
				if err != nil {
					b.Fatal(err)
				}
				// The model writes exactly the template's rendering of its
				// turn (read off a one-message conversation: Qwen3 renders
				// the last turn's <think> block and starts the reply after
				// special tokens, so its tokens do not depend on the
				// history).
				reply := func(msg tokenizer.Message) []int32 {
					r, ok := idealReply(c, opt, []tokenizer.Message{{Role: "user", Content: "x"}}, msg)
					if !ok {
						b.Fatal("no ideal reply")
					}
					return r
				}
				filler := strings.Repeat("The ledger balance is carried forward; 帳簿 ✓. ", 8)
				for i := 0; len(br.Prompt()) < target; i++ {
					msg, next := assistantTurn(i, false)
					msg.Content = filler
					if _, err := br.Next(context.Background(), reply(msg), msg, next); err != nil {
						b.Fatal(err)
					}
				}
				msg, next := assistantTurn(1, false)
				sampled := reply(msg)
				saved := *br
				saved.full, saved.idsOnly = path == "full", path == "ids"
				if path != "fast" {
					saved.chat = chat.Chat{Template: c.Template.(*chat.Template).EngineOnly(), Tok: c.Tok}
				}
				b.ResetTimer()
				cpu0 := cpuTime()
				for b.Loop() {
					// Each turn starts from the same state; the record and
					// message list grow in place as in a live rollout (the
					// same values land in saved's spare capacity every
					// time), and the recycled encodings are the copy's own.
					cp := saved
					cp.spare = slices.Clone(saved.spare)
					if _, err := cp.Next(context.Background(), sampled, msg, next); err != nil {
						b.Fatal(err)
					}
				}
				// CPU time per turn (the process's, GC included): on a
				// shared machine wall time (ns/op) mostly measures the
				// other processes.
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu_ns/op")
				b.ReportMetric(float64(len(br.Prompt())), "history_tokens")
				b.ReportMetric(float64(len(br.Messages())), "history_msgs")
			})
		}
	}
}

// cpuTime is the process's user+system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
