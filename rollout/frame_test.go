package rollout_test

import (
	"context"
	"slices"
	"testing"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// framedChat is the byte template with a two-token generation prompt and a
// second stop token, to show the rollout takes its framing from Spec.Chat.
type framedChat struct{ bytetok.Chat }

type framedTok struct{ bytetok.Tok }

func (framedTok) StopTokens() []int32 { return []int32{bytetok.End, bytetok.EOS} }

func (framedChat) Tokenizer() lhtok.Tokenizer { return framedTok{} }

func (c framedChat) RenderTokens(ctx context.Context, msgs []lhtok.Message, opt lhtok.RenderOptions) ([]int32, error) {
	out, err := c.Chat.RenderTokens(ctx, msgs, opt)
	if opt.AddGenerationPrompt {
		out = append(out, ' ')
	}
	return out, err
}

type spyGen struct {
	inner gen.Generator
	reqs  []gen.Request
}

func (s *spyGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	s.reqs = append(s.reqs, reqs...)
	return s.inner.Generate(ctx, reqs)
}

func TestFramingFromChat(t *testing.T) {
	for _, c := range []lhtok.Chat{nil, framedChat{}} {
		g := &spyGen{inner: scripted.LedgerOracle("")}
		spec := ledgerSpec(t, g, &scripted.Recorder{}, compaction.Config{})
		spec.Chat = c
		spec.Limits.MaxTurns = 2
		if _, err := rollout.Run(context.Background(), spec, nil); err != nil {
			t.Fatal(err)
		}
		wantGen, wantStop := []int32{bytetok.Assistant}, []int32{bytetok.End}
		if c != nil {
			wantGen, wantStop = []int32{bytetok.Assistant, ' '}, []int32{bytetok.End, bytetok.EOS}
		}
		for i, r := range g.reqs {
			if r.Prompt[0] != bytetok.BOS || !slices.Equal(r.Prompt[len(r.Prompt)-len(wantGen):], wantGen) || !slices.Equal(r.Stop, wantStop) {
				t.Fatalf("chat %T call %d: prompt ends %v, stop %v", c, i, r.Prompt[len(r.Prompt)-3:], r.Stop)
			}
		}
		if len(g.reqs) == 0 {
			t.Fatal("no calls")
		}
	}
}
