package bridge

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/cputime"
	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
)

// BenchmarkBridgeTurn measures one Next (render with and without the new
// messages, encode, diff) for each template on a conversation (tool
// calls, a user message every fourth turn, append mode; Qwen3 with
// thinking on) of about 4k, 16k and 32k tokens; the measured turn is a
// tool call and its result (DeepSeek-V3: an answer and the next user
// message, as its template closes tool-call turns only after a second
// call), so the growth with history length shows in one run: path=fast
// renders the template in Go (qwen3.go, seq.go), re-rendering only
// messages whose inputs changed, and re-encodes from the last safe point;
// path=engine renders with the Jinja engine reusing the messages'
// template values and the encoding; path=ids reuses only the encoding;
// path=full renders and encodes the whole conversation twice. All in one
// run, for ratios.
func BenchmarkBridgeTurn(b *testing.B) {
	for _, s := range []struct {
		model   string
		kwargs  map[string]any
		noTools bool
	}{{"qwen3", map[string]any{"enable_thinking": true}, false}, {"llama3_1", nil, false}, {"deepseek_v3", nil, true}} {
		c := loadChatB(b, s.model)
		opt := tokenizer.RenderOptions{Tools: tools, Kwargs: s.kwargs}
		benchTurn(b, s.model, c, opt, s.noTools)
	}
}

func benchTurn(b *testing.B, model string, c chat.Chat, opt tokenizer.RenderOptions, noTools bool) {
	for _, target := range []int{4000, 16000, 32000} {
		for _, path := range []string{"fast", "engine", "ids", "full"} {
			b.Run(fmt.Sprintf("template=%s/tokens=%d/path=%s", model, target, path), func(b *testing.B) {
				br, sampled, msg, next := ledger(b, c, opt, target, noTools)
				br.full, br.idsOnly = path == "full", path == "ids"
				if path != "fast" {
					br.chat = chat.Chat{Template: c.Template.(*chat.Template).EngineOnly(), Tok: c.Tok}
				}
				turn := replay(b, br, sampled, msg, next)
				b.ResetTimer()
				cpu0 := int64(cputime.Process())
				for b.Loop() {
					turn()
				}
				// CPU time per turn (the process's, GC included): on a
				// shared machine wall time (ns/op) mostly measures the
				// other processes.
				b.ReportMetric(float64(int64(cputime.Process())-cpu0)/float64(b.N), "cpu_ns/op")
				b.ReportMetric(float64(len(br.Prompt())), "history_tokens")
				b.ReportMetric(float64(len(br.Messages())), "history_msgs")
			})
		}
	}
}

// ledger is the benchmark's conversation (append mode) grown to about
// target tokens, and the turn to measure on it: a tool call and its result
// (an answer and a user message with noTools).
func ledger(tb testing.TB, c chat.Chat, opt tokenizer.RenderOptions, target int, noTools bool) (br *Bridge, sampled []int32, msg tokenizer.Message, next []tokenizer.Message) {
	tb.Helper()
	msgs := []tokenizer.Message{{Role: "system", Content: "You keep a ledger."}, {Role: "user", Content: "Start."}}
	br, err := New(context.Background(), c, Append, opt, msgs)
	if err != nil {
		tb.Fatal(err)
	}
	// The model writes exactly the template's rendering of its turn (read
	// off a one-message conversation: Qwen3 renders the last turn's
	// <think> block; every template starts the reply after special tokens,
	// so its tokens do not depend on the history).
	reply := func(msg tokenizer.Message) []int32 {
		r, ok := idealReply(c, opt, []tokenizer.Message{{Role: "user", Content: "x"}}, msg)
		if !ok {
			tb.Fatal("no ideal reply")
		}
		return r
	}
	filler := strings.Repeat("The ledger balance is carried forward; 帳簿 ✓. ", 8)
	for i := 0; len(br.Prompt()) < target; i++ {
		msg, next := assistantTurn(i, noTools)
		msg.Content = filler
		if _, err := br.Next(context.Background(), reply(msg), msg, next); err != nil {
			tb.Fatal(err)
		}
	}
	msg, next = assistantTurn(1, noTools)
	return br, reply(msg), msg, next
}

// replay returns the measured turn on br, run on a copy of br each time
// as a live rollout would run it on br: the record and the message list
// grow in place (the same values land in br's spare capacity every time)
// and the two renders write into br's spare encodings, which then hold
// this turn's renders: what they share with br's last is lowered to that
// after a first run. Both runs are checked against the full path.
func replay(tb testing.TB, br *Bridge, sampled []int32, msg tokenizer.Message, next []tokenizer.Message) func() Turn {
	tb.Helper()
	saved := *br
	saved.spare = slices.Clone(br.spare)
	run := func() Turn {
		cp := saved
		cp.spare = slices.Clone(saved.spare)
		t, err := cp.Next(context.Background(), sampled, msg, next)
		if err != nil {
			tb.Fatal(err)
		}
		return t
	}
	ref := saved
	ref.full, ref.spare = true, nil
	want, err := ref.Next(context.Background(), sampled, msg, next)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range 2 {
		if got := run(); !reflect.DeepEqual(got, want) {
			tb.Fatalf("run %d: the measured turn differs from the full path's", i)
		}
		for k, s := range saved.spare {
			saved.spare[k].same = min(s.same, lcp(s.e.IDs, saved.last.IDs))
		}
	}
	return run
}
