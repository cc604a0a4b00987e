package chat

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/race"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestRenderEncodingReuse: rendering a conversation with the state of a
// render of a different one (same length, one field of one message
// changed, tools changed, messages dropped or added) gives exactly
// RenderTokens' ids: reused template values never leak from one
// conversation into another.
func TestRenderEncodingReuse(t *testing.T) {
	if race.Enabled {
		t.Skip("compares the real tokenizers over a corpus, for tens of seconds under -race: run without it (.ci/steps/13-tokenizers.sh does)")
	}
	for _, model := range tokref.Models {
		t.Run(model, func(t *testing.T) {
			dir := tokref.ModelDir(t, model)
			tok, err := hf.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := Compile(model, tok.Config.ChatTemplate, tok.Config.BOS, tok.Config.EOS)
			if err != nil {
				t.Fatal(err)
			}
			if !tmpl.reusable {
				t.Fatalf("%s: template values are not reused: the test lost its point", model)
			}
			c := Chat{Template: tmpl, Tok: tok}
			strs := tokref.Strings(11, 500, nil)
			k := 0
			text := func() string { k++; return strings.TrimSpace(strs[k%len(strs)]) }
			r := rand.New(rand.NewPCG(3, uint64(len(model))))
			ctx := context.Background()
			checked := 0
			for i := 0; i < 40; i++ {
				a, tools := Conversation(r, text, model == "deepseek_v3")
				opt := tokenizer.RenderOptions{Tools: tools, AddGenerationPrompt: true}
				prev, err := c.RenderEncoding(ctx, a, opt, nil)
				if err != nil {
					continue // raised by the template (both paths raise the same)
				}
				b := slices.Clone(a)
				j := r.IntN(len(b))
				switch r.IntN(6) {
				case 0:
					b[j].Content += "x"
				case 1:
					b[j].ReasoningContent = "changed " + text()
				case 2:
					b[j].Role = map[string]string{"user": "system", "system": "user", "assistant": "user", "tool": "user"}[b[j].Role]
				case 3:
					if len(b[j].ToolCalls) > 0 {
						b[j].ToolCalls = slices.Clone(b[j].ToolCalls)
						b[j].ToolCalls[0].Arguments = json.RawMessage(`{"city": "changed"}`)
					} else {
						b[j].Name = "n"
					}
				case 4:
					opt.Tools = append(slices.Clone(opt.Tools), json.RawMessage(`{"type":"function","function":{"name":"extra"}}`))
				case 5:
					b = b[:j+1]
				}
				want, werr := c.RenderTokens(ctx, b, opt)
				got, gerr := c.RenderEncoding(ctx, b, opt, prev)
				if (werr == nil) != (gerr == nil) {
					t.Fatalf("conversation %d: errors differ: %v / %v", i, werr, gerr)
				}
				if werr != nil {
					continue
				}
				if !slices.Equal(got.IDs, want) {
					t.Fatalf("conversation %d: render reusing another conversation's state differs from RenderTokens", i)
				}
				checked++
			}
			if checked < 20 {
				t.Fatalf("only %d renders checked", checked)
			}
		})
	}
}
