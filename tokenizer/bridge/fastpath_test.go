package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestFastPathEqualsFullRender: the bridge's fast path (Qwen3's template
// rendered in Go re-rendering only changed messages, template values and
// ids reused from the previous render) gives, on every turn of many
// generated conversations, exactly what the full path gives (every render
// evaluates the template with the Jinja engine and encodes the whole
// conversation): the same prompt, the same
// divergence and boundary, the same error; and its render of the whole
// conversation equals RenderTokens'. Per template (Qwen3 with thinking on
// and off, Llama 3.1, DeepSeek-V3), per history mode; replies are either
// the template's own rendering (an ideal model) or other tokens (a model
// that writes what the template would not), so divergent turns are
// covered too.
func TestFastPathEqualsFullRender(t *testing.T) {
	type setup struct {
		model  string
		kwargs map[string]any
	}
	convs, turns := 4, 5
	if tokref.Full() {
		convs, turns = 16, 10
	}
	for _, s := range []setup{
		{"qwen3", map[string]any{"enable_thinking": true}},
		{"qwen3", map[string]any{"enable_thinking": false}},
		{"llama3_1", nil},
		{"deepseek_v3", nil},
	} {
		for _, mode := range []History{Append, Rerender} {
			t.Run(fmt.Sprintf("%s/%v/%s", s.model, s.kwargs["enable_thinking"], mode), func(t *testing.T) {
				c := loadChat(t, s.model)
				// the reference: the template rendered by the Jinja engine
				// (no Go rendering of a known template), nothing reused
				ref := chat.Chat{Template: c.Template.(*chat.Template).EngineOnly(), Tok: c.Tok}
				tok := c.Tokenizer()
				var specials []string
				for _, a := range tok.Special() {
					specials = append(specials, a.Content)
				}
				text := tokref.Strings(uint64(len(s.model)), 400, specials[:min(len(specials), 8)])
				r := rand.New(rand.NewPCG(7, uint64(len(s.model))))
				pick := func() string {
					x := text[r.IntN(len(text))]
					if r.IntN(8) == 0 {
						x += "</think>\n" + text[r.IntN(len(text))] // the template splits content on it
					}
					return x
				}
				ran, diverged := 0, 0
				for conv := 0; conv < convs; conv++ {
					opt := tokenizer.RenderOptions{Kwargs: s.kwargs}
					if r.IntN(2) == 0 {
						opt.Tools = tools
					}
					var msgs []tokenizer.Message
					if r.IntN(2) == 0 {
						msgs = append(msgs, tokenizer.Message{Role: "system", Content: pick()})
					}
					msgs = append(msgs, tokenizer.Message{Role: "user", Content: pick()})
					fast, err1 := New(context.Background(), c, mode, opt, msgs)
					full, err2 := New(context.Background(), ref, mode, opt, msgs)
					if err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
					full.full = true
					var kept held
					for turn := 0; turn < turns; turn++ {
						msg, next := genTurn(r, pick, s.model != "deepseek_v3" && len(opt.Tools) > 0, turn)
						if s.kwargs["enable_thinking"] == false {
							msg.ReasoningContent = ""
						}
						sampled, ok := idealReply(c, opt, fast.Messages(), msg)
						if !ok || r.IntN(6) == 0 {
							sampled = append(tok.Encode(pick()), tok.StopTokens()[0])
						}
						a, errA := fast.Next(context.Background(), sampled, msg, next)
						b, errB := full.Next(context.Background(), sampled, msg, next)
						if fmt.Sprint(errA) != fmt.Sprint(errB) {
							t.Fatalf("conv %d turn %d: errors differ: fast %v, full %v", conv, turn, errA, errB)
						}
						if errA != nil {
							break // append refusing an inseparable re-render: both paths did
						}
						ran++
						if a.Diverged != nil {
							diverged++
						}
						if !reflect.DeepEqual(a, b) {
							t.Fatalf("conv %d turn %d: fast path differs from the full render:\nfast %+v\nfull %+v", conv, turn, a, b)
						}
						kept.add(a)
						kept.check(t)
						o := opt
						o.AddGenerationPrompt = true
						want, err := ref.RenderTokens(context.Background(), fast.Messages(), o)
						if err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(fast.last.IDs, want) {
							t.Fatalf("conv %d turn %d: incremental render differs from RenderTokens", conv, turn)
						}
					}
				}
				if ran < convs*turns/2 || diverged == 0 {
					t.Fatalf("%d turns compared, %d divergent: the test lost its point", ran, diverged)
				}
				t.Logf("%d turns compared, %d divergent", ran, diverged)
			})
		}
	}
}

// idealReply is what a model writing exactly the template's rendering of
// msg samples after the prompt, if the template's render of msg extends
// the prompt and holds a stop token.
func idealReply(c tokenizer.Chat, opt tokenizer.RenderOptions, hist []tokenizer.Message, msg tokenizer.Message) ([]int32, bool) {
	opt.AddGenerationPrompt = true
	prompt, err := c.RenderTokens(context.Background(), hist, opt)
	if err != nil {
		return nil, false
	}
	opt.AddGenerationPrompt = false
	h, err := c.RenderTokens(context.Background(), append(slices.Clone(hist), msg), opt)
	if err != nil || !hasPrefix(h, prompt) {
		return nil, false
	}
	k := lastStop(h, c.Tokenizer().StopTokens())
	if k < len(prompt) {
		return nil, false
	}
	return slices.Clone(h[len(prompt) : k+1]), true
}

// genTurn is a random assistant turn (content, reasoning, tool calls) and
// the messages that follow it (tool results or the next user message).
func genTurn(r *rand.Rand, pick func() string, toolsOK bool, i int) (tokenizer.Message, []tokenizer.Message) {
	m := tokenizer.Message{Role: "assistant", Content: pick()}
	if r.IntN(2) == 0 {
		m.ReasoningContent = pick()
	}
	if toolsOK && r.IntN(2) == 0 {
		args, _ := json.Marshal(map[string]any{"amount": r.IntN(1000), "memo": pick()})
		m.ToolCalls = []tokenizer.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "ledger_add", Arguments: args}}
		if r.IntN(2) == 0 {
			m.Content = ""
		}
		return m, []tokenizer.Message{{Role: "tool", ToolCallID: fmt.Sprintf("c%d", i), Name: "ledger_add", Content: pick()}}
	}
	return m, []tokenizer.Message{{Role: "user", Content: pick()}}
}

// TestAdd: messages added after the prompt's generation prompt (a
// summary request) extend the record exactly like the full render on
// prefix-stable templates, differ only by kept <think> blocks in Qwen3's
// append mode, switch to the full render with a boundary in rerender mode,
// and the fast path equals the engine-only full path.
func TestAdd(t *testing.T) {
	for _, s := range []struct {
		model  string
		kwargs map[string]any
		stable bool
	}{{"qwen3", map[string]any{"enable_thinking": true}, false}, {"qwen3", map[string]any{"enable_thinking": false}, false}, {"llama3_1", nil, true}, {"deepseek_v3", nil, true}} {
		for _, mode := range []History{Append, Rerender} {
			t.Run(fmt.Sprintf("%s/%v/%s", s.model, s.kwargs["enable_thinking"], mode), func(t *testing.T) {
				c := loadChat(t, s.model)
				ref := chat.Chat{Template: c.Template.(*chat.Template).EngineOnly(), Tok: c.Tok}
				opt := tokenizer.RenderOptions{Kwargs: s.kwargs}
				msgs := []tokenizer.Message{{Role: "system", Content: "You keep a ledger."}, {Role: "user", Content: "Start."}}
				fast, _ := New(context.Background(), c, mode, opt, msgs)
				full, _ := New(context.Background(), ref, mode, opt, msgs)
				full.full = true
				for i := 0; i < 3; i++ {
					msg, next := assistantTurn(i, true)
					if s.kwargs["enable_thinking"] == false {
						msg.ReasoningContent = ""
					}
					sampled := sample(t, c, opt, fast.Messages(), msg)
					if _, err := fast.Next(context.Background(), sampled, msg, next); err != nil {
						t.Fatal(err)
					}
					if _, err := full.Next(context.Background(), sampled, msg, next); err != nil {
						t.Fatal(err)
					}
				}
				add := []tokenizer.Message{{Role: "user", Content: "Summarize the ledger so far."}}
				a, errA := fast.Add(context.Background(), add)
				b, errB := full.Add(context.Background(), add)
				if errA != nil || errB != nil {
					t.Fatal(errA, errB)
				}
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("fast path differs from the full render:\n%+v\n%+v", a, b)
				}
				o := opt
				o.AddGenerationPrompt = true
				want, err := ref.RenderTokens(context.Background(), fast.Messages(), o)
				if err != nil {
					t.Fatal(err)
				}
				if s.stable || mode == Rerender {
					if !slices.Equal(a.Prompt, want) {
						t.Fatalf("prompt differs from the full render:\n%q\n%q", c.Tok.Decode(a.Prompt), c.Tok.Decode(want))
					}
				} else if got, w := thinkBlock.ReplaceAllString(c.Tok.Decode(a.Prompt), ""), thinkBlock.ReplaceAllString(c.Tok.Decode(want), ""); got != w {
					t.Fatalf("append prompt differs beyond <think> blocks:\n%q\n%q", got, w)
				}
				if !strings.HasSuffix(c.Tok.Decode(a.Prompt), c.Tok.Decode(want[len(want)-8:])) {
					t.Fatalf("prompt does not end like the render")
				}
			})
		}
	}
}

// TestFastPathHistoryRewrite: a template that rewrites the start of the
// conversation on every turn (a message count in its first line, or after
// a fixed system turn, so that the renders share a few ids before it)
// makes each fresh render differ from the previous one before the
// record's known-equal prefix: the fast path must find that difference (it
// compares from where the renders reused ids, not from where the record
// last agreed) and report the same divergence and boundary as the full
// path. In append mode the diverged hunk starts at the count on every
// turn while its tokens change: Inserted must not come from the tokens
// kept from an earlier turn (Bridge.ins), nor may keeping them change a
// turn handed out earlier.
//
// The third template starts with the first letter of the last message,
// and the turns' messages start with a, a, b, b, ...: the render without
// the new messages differs from the start on every other turn while the
// turn before shared everything, so the render with them must not take
// ids from a spare encoding that only the previous renders shared.
func TestFastPathHistoryRewrite(t *testing.T) {
	count := func(turn int) (string, string) { return fmt.Sprintf("%d", turn), "next" }
	letter := func(turn int) (string, string) {
		c := string(rune('a' + turn/2%2))
		return c + " is my letter", c + " is yours"
	}
	for _, c := range []struct {
		header string
		words  func(turn int) (reply, next string)
		every  bool // every turn's render differs from the record
	}{
		{"{{ messages | length }} messages\n", count, true},
		{"<|im_start|>system\nYou count the messages of this conversation, one by one.<|im_end|>\n{{ messages | length }} messages\n", count, true},
		{"{{ messages[-1].content[:1] }}\n", letter, false},
	} {
		testHistoryRewrite(t, c.header, c.words, c.every)
	}
}

func testHistoryRewrite(t *testing.T, header string, words func(turn int) (reply, next string), every bool) {
	q := loadChat(t, "qwen3")
	tm, err := chat.Compile("count.jinja", header+"{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"+
		"{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := chat.Chat{Template: tm, Tok: q.Tok}
	for _, mode := range []History{Append, Rerender} {
		msgs := []tokenizer.Message{{Role: "user", Content: "Count with me."}}
		fast, err1 := New(context.Background(), c, mode, tokenizer.RenderOptions{}, msgs)
		full, err2 := New(context.Background(), c, mode, tokenizer.RenderOptions{}, msgs)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		full.full = true
		var kept held
		for turn := range 12 {
			reply, user := words(turn)
			msg := tokenizer.Message{Role: "assistant", Content: reply}
			sampled := append(q.Tok.Encode(msg.Content), q.Tok.StopTokens()[0])
			next := []tokenizer.Message{{Role: "user", Content: user}}
			a, errA := fast.Next(context.Background(), sampled, msg, next)
			b, errB := full.Next(context.Background(), sampled, msg, next)
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if a.Diverged == nil && every {
				t.Fatalf("%s turn %d: the rewritten start was not noticed", mode, turn)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s turn %d: fast path differs from the full render:\nfast %+v\nfull %+v", mode, turn, a, b)
			}
			kept.add(a)
			kept.check(t)
		}
	}
}
