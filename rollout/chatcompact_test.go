package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/race"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bridge"
)

// TestQwen3Compaction runs rollouts through the real Qwen3 template with
// a fake backend (qwenGen: fixed replies in Qwen3 tokens, one with a
// <think> block) and each compaction policy, in both history modes. The
// test rebuilds the conversation from the log alone (replies, observations,
// and each Compaction's lineage applied to it) and checks that every
// prompt is the template's render of it: the first prompt after a
// compaction exactly (the boundary restarts the record from a fresh
// render), the others exactly in rerender mode and up to the kept <think>
// blocks in append mode; a summary request is a user message after the
// pending observations and the summary comes back as a user message. A
// resume from every cut of the log reproduces it.
func TestQwen3Compaction(t *testing.T) {
	if race.Enabled {
		t.Skip("Qwen3 tokenizer work for tens of seconds under -race: run without it (.ci/steps/14-hfrun.sh does)")
	}
	for _, cc := range []compaction.Config{
		{Policy: compaction.PolicyRecency, KeepTurns: 1, Threshold: 90},
		{Policy: compaction.PolicyElideTool, KeepTurns: 1, Threshold: 90, Marker: "[elided]"},
		{Policy: compaction.PolicySummarize, Threshold: 90, SummaryPrompt: "Summarize the ledger so far."},
	} {
		for _, mode := range []bridge.History{bridge.Append, bridge.Rerender} {
			t.Run(cc.Policy+"/"+string(mode), func(t *testing.T) { testQwen3Compaction(t, cc, mode) })
		}
	}
}

func testQwen3Compaction(t *testing.T, cc compaction.Config, mode bridge.History) {
	c := qwen3(t)
	ctx := context.Background()
	const think = "<think>\nhm\n</think>\n\n"
	obsRole := lhtok.RoleUser
	if cc.Policy == compaction.PolicyElideTool {
		obsRole = lhtok.RoleTool
	}
	mk := func(rec rollout.Recorder) rollout.Spec {
		g := &promptGen{qwenGen{tok: c.Tok, replies: []string{"balance", "add 3 to rent", think + "show", "add 2 to food"}}}
		s := ledgerSpec(t, g, rec, cc)
		s.Limits.MaxTurns, s.Limits.ContextBudget = 24, 0
		s.NewEnv = func(context.Context) (env.Environment, error) {
			return reg.New("ledger", json.RawMessage(`{"stop_on_error":false}`))
		}
		s.Chat, s.History, s.ObservationRole = c, mode, obsRole
		s.System = "You keep a ledger."
		return s
	}
	rec := &scripted.Recorder{}
	res, err := rollout.Run(ctx, mk(rec), nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := rec.Events()
	msgs := []lhtok.Message{{Role: "system", Content: "You keep a ledger."}, {Role: "user"}}
	var prev []int32
	replies := map[uint32]string{} // call -> parsed reply content
	fresh, compactions, summaryCalls, n := false, 0, 0, 0
	for i, ev := range evs {
		switch e := ev.(type) {
		case runlog.CallFinished:
			prompt := append(slices.Clone(prev[:e.PromptPrefix]), e.PromptSuffix...)
			if n == 0 {
				msgs[1].Content = firstUser(t, c, prompt)
			}
			n++
			// a call followed by a Compaction without an EnvStep between
			// is the summary call: its prompt ends with the request
			summary := cc.Policy == compaction.PolicySummarize && i+1 < len(evs) && isCompaction(evs[i+1], cc.Policy)
			conv := msgs
			if summary {
				conv = append(slices.Clone(msgs), lhtok.Message{Role: "user", Content: cc.SummaryPrompt})
				summaryCalls++
			}
			want, err := c.RenderTokens(ctx, conv, lhtok.RenderOptions{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			got := prompt
			if mode == bridge.Append && !fresh {
				// the record keeps sampled think blocks the render drops
				got = c.Tok.Encode(strings.ReplaceAll(c.Tok.Decode(prompt), think, ""))
				want = c.Tok.Encode(strings.ReplaceAll(c.Tok.Decode(want), think, ""))
			}
			if fresh && e.PromptPrefix != 0 {
				t.Fatalf("call %d: the first prompt after a compaction extends the previous one (prefix %d)", e.Call, e.PromptPrefix)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("call %d (after compaction: %v): prompt is not the Qwen3 render of the conversation:\n got %q\nwant %q", e.Call, fresh, c.Tok.Decode(got), c.Tok.Decode(want))
			}
			fresh = false
			prev = append(prompt, e.Sampled...)
			text := c.Tok.Decode(e.Sampled[:len(e.Sampled)-1])
			m := lhtok.Message{Role: "assistant", Content: text}
			if r, body, ok := cutThink(text); ok {
				m.ReasoningContent, m.Content = r, body
			}
			replies[e.Call] = strings.TrimSpace(m.Content)
			if !summary {
				msgs = append(msgs, m)
			}
		case runlog.Compaction:
			if e.Policy == rollout.RerenderPolicy {
				continue
			}
			if e.Policy != cc.Policy || len(e.Lineage) == 0 {
				t.Fatalf("compaction %+v", e)
			}
			msgs = applyLineage(t, msgs, e, cc, replies[e.AfterCall])
			compactions++
			fresh = true
		case runlog.EnvStep:
			if !e.Done && e.Observation != "" {
				msgs = append(msgs, lhtok.Message{Role: string(obsRole), Content: e.Observation})
			}
		}
	}
	if compactions < 2 || res.Compactions < compactions || cc.Policy == compaction.PolicySummarize && summaryCalls != compactions {
		t.Fatalf("%d compactions (%d summary calls) in %d calls: the test lost its point", compactions, summaryCalls, n)
	}
	t.Logf("%d calls, %d %s compactions, last prompt %d tokens", n, compactions, cc.Policy, len(prev))
	for cut := 1; cut < len(evs); cut++ {
		// every cut next to a compaction, and every fourth elsewhere
		near := false
		for _, k := range []int{cut - 2, cut - 1, cut, cut + 1} {
			near = near || k >= 0 && k < len(evs) && isCompaction(evs[k], cc.Policy)
		}
		if !near && cut%4 != 0 {
			continue
		}
		rec2 := &scripted.Recorder{}
		for _, ev := range evs[:cut] {
			_ = rec2.Record(ctx, ev)
		}
		if _, err := rollout.Run(ctx, mk(rec2), evs[:cut]); err != nil {
			t.Fatalf("resume at %d: %v", cut, err)
		}
		got := rec2.Events()
		if len(got) != len(evs) {
			t.Fatalf("resume at %d: %d events, want %d", cut, len(got), len(evs))
		}
		for i := range got {
			if a, b := fmt.Sprintf("%+v", got[i]), fmt.Sprintf("%+v", evs[i]); a != b {
				t.Fatalf("resume at %d: event %d differs:\n%s\n%s", cut, i, a, b)
			}
		}
	}
}

func isCompaction(ev runlog.Event, policy string) bool {
	c, ok := ev.(runlog.Compaction)
	return ok && c.Policy == policy
}

// applyLineage applies a logged compaction to the conversation, as the
// test reads the policies: kept, dropped, replaced by the marker, or
// summarized into one user message at the first summarized position.
func applyLineage(t *testing.T, msgs []lhtok.Message, e runlog.Compaction, cc compaction.Config, summary string) []lhtok.Message {
	t.Helper()
	var out []lhtok.Message
	placed := false
	for _, ln := range e.Lineage {
		i := int(ln.Message)
		if i >= len(msgs) {
			continue // the summary request and reply
		}
		switch ln.Op {
		case runlog.OpKept:
			out = append(out, msgs[i])
		case runlog.OpReplaced:
			m := msgs[i]
			m.Content, m.ReasoningContent, m.ToolCalls = cc.Marker, "", nil
			out = append(out, m)
		case runlog.OpSummarized:
			if !placed {
				out = append(out, lhtok.Message{Role: rollout.SummaryRole, Content: summary})
				placed = true
			}
		case runlog.OpDropped:
		default:
			t.Fatalf("lineage op %v", ln.Op)
		}
	}
	return out
}

// promptGen is qwenGen choosing the reply from the prompt's length, so a
// resumed rollout is answered as the original was.
type promptGen struct{ qwenGen }

func (g *promptGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	var out []gen.Result
	for _, r := range reqs {
		g.n = len(r.Prompt)
		res, err := g.qwenGen.Generate(ctx, []gen.Request{r})
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	return out, nil
}
