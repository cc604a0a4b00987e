package chat

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestSeqNativeEqualsTemplate: the Go renderings of Llama 3.1's and
// DeepSeek-V3's templates (seq.go) equal the templates rendered by the
// engine, byte for byte (errors alike), on generated conversations: system
// or not (also several, and not first), tools or not, tool calls with
// empty, string and malformed arguments, runs of tool results, assistant
// messages with and without content, unknown roles, whitespace at the
// edges of content (Llama trims it), special tokens and U+2028/U+FDD0 in
// text, multi-turn, with or without the generation prompt, and keyword
// arguments: ones the templates do not read (rendered natively:
// Llama's date_string and tools_in_user_message belong to Meta's other
// template) and ones named in the source (the engine renders them). Each
// conversation is rendered again from the state of the previous one
// (edited, extended, cut), and extended on the bridge's Keep promise,
// into a dead state's arrays or offered prev's own, as the bridge does.
func TestSeqNativeEqualsTemplate(t *testing.T) {
	for _, model := range []string{"llama3_1", "deepseek_v3"} {
		t.Run(model, func(t *testing.T) { testSeqNative(t, model) })
	}
}

func testSeqNative(t *testing.T, model string) {
	cfg, err := hf.LoadConfig(tokref.ModelDir(t, model))
	if err != nil {
		t.Fatal(err)
	}
	native, err := Compile(model, cfg.ChatTemplate, cfg.BOS, cfg.EOS)
	if err != nil {
		t.Fatal(err)
	}
	if native.seq == seqNone {
		t.Fatal("the template was not recognized: the test lost its point")
	}
	engine := native.EngineOnly()
	specials := []string{"<|eot_id|>", "<|start_header_id|>", "<｜User｜>", "<｜tool▁outputs▁end｜>", "```json"}
	strs := tokref.Strings(uint64(len(model)), 2000, specials)
	r := rand.New(rand.NewPCG(5, uint64(len(model))))
	k := 0
	text := func() string {
		k++
		s := strs[k%len(strs)]
		switch r.IntN(7) {
		case 0:
			s = "\n\n " + s + "\t\n"
		case 1:
			s = ""
		case 2:
			s += "\ufdd0 \u2028\x1c" // noncharacters, U+2028 and a separator (str.strip() trims it) in text
		case 3:
			s = "\u2028" + s + " \u3000"
		}
		return s
	}
	n := 500
	if tokref.Full() {
		n = 3000
	}
	var prev, dead *values
	replace := func(v *values) { dead, prev = prev, v }
	same, errs, kept, engineKw, convs := 0, 0, 0, 0, 0
	for i := 0; i < n; i++ {
		msgs, tools := Conversation(r, text, false)
		for j := range msgs {
			switch r.IntN(15) {
			case 0:
				msgs[j].Role = "system"
			case 1:
				msgs[j].Role = "tool"
			case 2:
				msgs[j].Role = "ipython"
			case 3:
				if len(msgs[j].ToolCalls) > 0 {
					msgs[j].ToolCalls[0].Arguments = nil
				}
			case 4:
				if len(msgs[j].ToolCalls) > 0 {
					msgs[j].ToolCalls[0].Arguments = json.RawMessage(`"a \u2028 string"`)
				}
			case 5:
				if len(msgs[j].ToolCalls) > 0 && r.IntN(3) == 0 {
					msgs[j].ToolCalls[0].Arguments = json.RawMessage(`{"city": `)
				}
			case 6:
				msgs[j].ToolCalls = append(msgs[j].ToolCalls, tokenizer.ToolCall{ID: "x", Name: "search", Arguments: json.RawMessage(`{"query": "` + fmt.Sprint(j) + `"}`)})
				msgs[j].Content = []string{"", text()}[r.IntN(2)]
			case 7: // raw U+2028 and U+FDD0 in arguments (written as they are)
				if len(msgs[j].ToolCalls) > 0 {
					msgs[j].ToolCalls[0].Arguments = json.RawMessage("{\"city\": \"a\u2028b" + []string{"", "\ufdd0"}[r.IntN(2)] + "\"}")
				}
			}
		}
		if r.IntN(40) == 0 {
			tools = append(slices.Clone(tools), json.RawMessage(`{"bad": `))
		}
		opt := tokenizer.RenderOptions{Tools: tools, AddGenerationPrompt: r.IntN(2) == 0}
		kwNamed := false // a keyword argument named in the source: the engine renders
		switch r.IntN(5) {
		case 0:
			opt.Kwargs = map[string]any{"date_string": "26 Jul 2024", "tools_in_user_message": r.IntN(2) == 0}
		case 1:
			opt.Kwargs = map[string]any{"enable_thinking": false}
		case 2:
			opt.Kwargs = map[string]any{"messages": "shadow", "bos_token": "X"}
			kwNamed = true
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
			if (v.seq == nil) != kwNamed {
				t.Fatalf("conversation %d: rendered by the Go path: %v, with keyword arguments %v", i, v.seq != nil, opt.Kwargs)
			}
			if kwNamed {
				engineKw++
				break
			}
			same++
			if p == nil {
				convs++
			}
			replace(v)
			rendered = true
		}
		if kwNamed || r.IntN(2) != 0 || len(msgs) < 2 {
			continue
		}
		// extend or edit: from msgs' state comparing every message, and
		// on the promise that the messages before the cut are msgs'
		cut := 1 + r.IntN(len(msgs))
		ext := slices.Clone(msgs[:cut])
		for range 1 + r.IntN(3) {
			m := tokenizer.Message{Role: []string{"user", "tool", "assistant", "system"}[r.IntN(4)], Content: text()}
			if m.Role == "assistant" && r.IntN(2) == 0 {
				m.Content = ""
				m.ToolCalls = []tokenizer.ToolCall{{ID: "e", Name: "get_weather", Arguments: json.RawMessage(`{"city": "` + fmt.Sprint(i) + `"}`)}}
			}
			ext = append(ext, m)
		}
		want, werr = engine.Render(ext, opt)
		keeps := []int{0}
		if rendered {
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
				t.Fatalf("conversation %d extended (keep %d): differs (errors %v / %v)\n got %q\nwant %q", i, keep, werr, gerr, got, want)
			}
			if keep > 0 && werr == nil {
				kept++
			}
		}
		if rendered {
			// prev was offered as into: it must still render msgs
			if got, _, err := native.renderOn(native.t, nil, false, msgs, opt, prev, len(msgs), nil); err != nil || got != msgsText {
				t.Fatalf("conversation %d: the state was changed by a later render (error %v)", i, err)
			}
		}
		if v != nil {
			replace(v)
		}
	}
	if kept < n/8 {
		t.Fatalf("only %d renders on the promise of unchanged messages: the test lost its point", kept)
	}
	if errs > n/4 || errs == 0 {
		t.Fatalf("%d of %d conversations raised: the test lost its point", errs, n)
	}
	if convs < 300 {
		t.Fatalf("only %d conversations rendered by the Go path", convs)
	}
	if engineKw == 0 {
		t.Fatal("no render fell back to the engine for a keyword argument")
	}
	t.Logf("%d conversations, %d renders identical to the engine's (%d conversations raised in both, %d extended on the promise, %d rendered by the engine for their keyword arguments)", convs, same, errs, kept, engineKw)
}

// TestSeqKeepUnseen: on the Keep promise the Go renderings take the kept
// messages' text from the previous render without looking at them: a
// message changed behind a broken promise still renders as before, and is
// seen without the promise.
func TestSeqKeepUnseen(t *testing.T) {
	for _, model := range []string{"llama3_1", "deepseek_v3"} {
		t.Run(model, func(t *testing.T) {
			cfg, err := hf.LoadConfig(tokref.ModelDir(t, model))
			if err != nil {
				t.Fatal(err)
			}
			native, err := Compile(model, cfg.ChatTemplate, cfg.BOS, cfg.EOS)
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
			if prev.seq == nil {
				t.Fatal("not rendered by the Go path")
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
		})
	}
}

// diffAt says where got first differs from want, with 80 bytes of context
// on each side.
func diffAt(got, want string) string {
	q := 0
	for q < len(got) && q < len(want) && got[q] == want[q] {
		q++
	}
	return fmt.Sprintf("differs at byte %d:\n got %q\nwant %q", q, got[max(0, q-80):min(len(got), q+80)], want[max(0, q-80):min(len(want), q+80)])
}
