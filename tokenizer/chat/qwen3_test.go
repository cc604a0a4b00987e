package chat

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestQwen3NativeEqualsTemplate: the Go rendering of Qwen3's template
// equals the template rendered by the engine, byte for byte (errors
// alike), on generated conversations with the cases the template branches
// on: <think> blocks inside content, newlines at the edges, reasoning or
// not, user messages that are tool responses, runs of tool messages,
// system messages not first, unknown roles, argument strings and empty
// arguments, tools or not, enable_thinking on, off or absent, with or
// without the generation prompt; and each conversation rendered again
// from the state of the previous one (edited, extended, cut), as the
// bridge does.
func TestQwen3NativeEqualsTemplate(t *testing.T) {
	cfg, err := hf.LoadConfig(tokref.ModelDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	native, err := Compile("qwen3", cfg.ChatTemplate, cfg.BOS, cfg.EOS)
	if err != nil {
		t.Fatal(err)
	}
	if !native.qwen3 {
		t.Fatal("the Qwen3 template was not recognized: the test lost its point")
	}
	engine := native.EngineOnly()
	strs := tokref.Strings(5, 2000, []string{"<think>", "</think>", "<tool_response>", "</tool_response>", "<|im_end|>"})
	r := rand.New(rand.NewPCG(1, 2))
	k := 0
	text := func() string {
		k++
		s := strs[k%len(strs)]
		switch r.IntN(8) {
		case 0:
			s = "\n\n" + s + "\n"
		case 1:
			s = "<think>\n" + s + "\n</think>\n\n" + strs[(k+1)%len(strs)]
		case 2:
			s = s + "</think>" + strs[(k+2)%len(strs)] + "</think>\n"
		case 3:
			s = "<tool_response>" + s + "</tool_response>"
		case 4:
			s = ""
		case 5:
			s += "\ufdd0 \u2028\x1c" // noncharacters, U+2028 and a separator (str.strip() trims it) in text
		}
		return s
	}
	n := 400
	if tokref.Full() {
		n = 3000
	}
	// prev is the state of the latest render, dead one whose arrays a
	// render may reuse (renderQwen3's into).
	var prev, dead *values
	replace := func(v *values) { dead, prev = prev, v }
	same, errs, kept, flips := 0, 0, 0, 0
	for i := 0; i < n; i++ {
		msgs, tools := Conversation(r, text, false)
		for j := range msgs {
			switch r.IntN(12) {
			case 0:
				msgs[j].Role = "system"
			case 1:
				msgs[j].Role = "tool"
			case 2:
				msgs[j].Role = "developer"
			case 3:
				if len(msgs[j].ToolCalls) > 0 {
					msgs[j].ToolCalls[0].Arguments = nil
				}
			case 4:
				if len(msgs[j].ToolCalls) > 0 {
					msgs[j].ToolCalls[0].Arguments = json.RawMessage(`"a string"`)
				}
			case 5: // reasoning_content given as "": content's think block stays
				msgs[j].ReasoningContent, msgs[j].ReasoningSet = "", true
			}
		}
		opt := tokenizer.RenderOptions{Tools: tools, AddGenerationPrompt: r.IntN(2) == 0}
		switch r.IntN(3) {
		case 0:
			opt.Kwargs = map[string]any{"enable_thinking": true}
		case 1:
			opt.Kwargs = map[string]any{"enable_thinking": false}
		}
		want, werr := engine.Render(msgs, opt)
		msgsText := want
		rendered := false // prev is the render of msgs
		for _, p := range []*values{nil, prev} {
			got, v, gerr := native.render(msgs, opt, p)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("conversation %d: engine error %v, native error %v", i, werr, gerr)
			}
			if werr != nil {
				errs++
				break
			}
			if got != want {
				t.Fatalf("conversation %d (reuse %v) %s", i, p != nil, diffAt(got, want))
			}
			if v.qwen == nil {
				t.Fatalf("conversation %d: not rendered by the Go path", i)
			}
			same++
			replace(v)
			rendered = true
		}
		// the next conversation often extends or edits this one: rendered
		// from msgs' state comparing every message, and (when that state
		// is msgs') on the bridge's promise that the messages before the
		// cut are msgs' (keep), taking them from the state unseen; into a
		// dead state's arrays, or offered prev's own (which must not be
		// written)
		if r.IntN(2) == 0 && len(msgs) > 1 {
			cut := 1 + r.IntN(len(msgs))
			ext := slices.Clone(msgs[:cut])
			for range 1 + r.IntN(3) {
				ext = append(ext, tokenizer.Message{Role: []string{"user", "tool", "assistant"}[r.IntN(3)], Content: text(), ReasoningContent: []string{"", text()}[r.IntN(2)]})
			}
			flipped := false
			for k := range ext[:cut] {
				// only the field's presence changes, where it changes the
				// text (a think block in content): the state's message
				// must not pass for this one
				if ext[k].Role == "assistant" && ext[k].ReasoningContent == "" && strings.Contains(ext[k].Content, "</think>") {
					ext[k].ReasoningSet = !ext[k].ReasoningSet
					flipped = true
					flips++
				}
			}
			want, werr := engine.Render(ext, opt)
			keeps := []int{0}
			if rendered && !flipped {
				keeps = append(keeps, cut)
			}
			var v *values
			for _, keep := range keeps {
				into := dead
				if r.IntN(4) == 0 {
					into = prev
				}
				var got string
				var gerr error
				got, v, gerr = native.renderOn(native.t, nil, false, ext, opt, prev, keep, into)
				if (werr == nil) != (gerr == nil) || werr == nil && got != want {
					t.Fatalf("conversation %d extended (keep %d): differs (errors %v / %v)", i, keep, werr, gerr)
				}
				if keep > 0 && werr == nil {
					kept++
				}
			}
			if rendered {
				// prev was offered as into, and taken on its word that
				// nothing changed: it must still render msgs
				if got, _, err := native.renderOn(native.t, nil, false, msgs, opt, prev, len(msgs), nil); err != nil || got != msgsText {
					t.Fatalf("conversation %d: the state was changed by a later render (error %v)", i, err)
				}
			}
			if v != nil {
				replace(v)
			}
		}
	}
	if kept < n/8 {
		t.Fatalf("only %d renders on the promise of unchanged messages: the test lost its point", kept)
	}
	if errs > n/4 || flips < n/40 {
		t.Fatalf("%d of %d conversations raised, %d reasoning_content flips: the test lost its point", errs, n, flips)
	}
	t.Logf("%d renders identical to the engine's (%d conversations raised in both, %d extended on the promise, %d reasoning_content presence flips)", same, errs, kept, flips)
}

// TestQwen3KeepUnseen: on the Keep promise the Go rendering takes the kept
// messages' text from the previous render without looking at them (what
// makes a turn's cost independent of the history): a message changed
// behind a broken promise still renders as before, and is seen without
// the promise.
func TestQwen3KeepUnseen(t *testing.T) {
	cfg, err := hf.LoadConfig(tokref.ModelDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	native, err := Compile("qwen3", cfg.ChatTemplate, cfg.BOS, cfg.EOS)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []tokenizer.Message{{Role: "system", Content: "S"}, {Role: "user", Content: "first question"},
		{Role: "assistant", Content: "answer"}, {Role: "user", Content: "second"}}
	opt := tokenizer.RenderOptions{AddGenerationPrompt: true}
	_, prev, err := native.render(msgs, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	ext := append(slices.Clone(msgs), tokenizer.Message{Role: "assistant", Content: "reply"})
	ext[1].Content = "changed question"
	for _, keep := range []int{len(msgs), 0} {
		got, _, err := native.renderOn(native.t, nil, false, ext, opt, prev, keep, nil)
		if err != nil {
			t.Fatal(err)
		}
		if seen := strings.Contains(got, "changed question"); seen != (keep == 0) {
			t.Fatalf("keep %d: the changed message seen %v:\n%s", keep, seen, got)
		}
	}
}
