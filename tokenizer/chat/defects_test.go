package chat

import (
	"encoding/json"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestParityDefects renders the inputs an independent check found
// rendered differently from the official templates, through the Go
// rendering and the engine alone. The expected texts were produced by
// Python Jinja2 set up as transformers' apply_chat_template
// (test/tokenizers/ref_jinja.py, the first chats of corpus.py); where
// @huggingface/jinja renders the same (all but jsDiffers) the test also
// asks it, live. TestReferenceCorpus compares the same chats with both.
func TestParityDefects(t *testing.T) {
	think := "<think>\nplan \ufdd0 it\n</think>\n\nthe answer"
	toolTurn := func(model string) ([]tokenizer.Message, []json.RawMessage) {
		args := `{"city": "Z` + "\ufdd0" + `rich` + "\ufdd1" + `", "note": "` + "\u2028" + `line` + "\u2029" + `", "n": 3}`
		return []tokenizer.Message{
			{Role: "system", Content: "\ufdd0sys\ufdd1"},
			{Role: "user", Content: "weather \ufdd0 in Z\ufdd1rich?"},
			{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(args)}}},
			{Role: "tool", Content: `{"temp": 21, "sky": "` + "\ufdd0" + `"}`, ToolCallID: "call_1", Name: "get_weather"},
			{Role: "assistant", Content: "21 \ufdd1 degrees"},
		}, []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "` + "\ufdd0 \u2028 \ufdd1" + `", "parameters": {"type": "object", "properties": {}}}}`)}
	}
	type tc struct {
		name, model string
		msgs        []tokenizer.Message
		tools       []json.RawMessage
		genPrompt   bool
		want        string
		jsDiffers   bool // @huggingface/jinja departs from Python here
	}
	var cases []tc
	// Qwen3: reasoning_content "" is present; the think block in content stays.
	cases = append(cases,
		tc{"reasoning empty, before the last query", "qwen3", []tokenizer.Message{{Role: "user", Content: "q1"},
			{Role: "assistant", Content: think, ReasoningSet: true}, {Role: "user", Content: "q2"}}, nil, true,
			"<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n" + think + "<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n", false},
		tc{"reasoning empty, last", "qwen3", []tokenizer.Message{{Role: "user", Content: "q1"},
			{Role: "assistant", Content: think, ReasoningSet: true}}, nil, false,
			"<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n" + think + "<|im_end|>\n", false},
		tc{"reasoning missing, last", "qwen3", []tokenizer.Message{{Role: "user", Content: "q1"},
			{Role: "assistant", Content: think}}, nil, false,
			"<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n" + think + "<|im_end|>\n", false},
	)
	// U+FDD0/U+FDD1 in text, arguments, results and tools: kept as they are.
	for _, c := range []struct{ model, want string }{
		{"qwen3", "<|im_start|>system\n\ufdd0sys\ufdd1\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"\ufdd0 \u2028 \ufdd1\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nweather \ufdd0 in Z\ufdd1rich?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\ufdd0rich\ufdd1\", \"note\": \"\u2028line\u2029\", \"n\": 3}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21, \"sky\": \"\ufdd0\"}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n21 \ufdd1 degrees<|im_end|>\n<|im_start|>assistant\n"},
		{"llama3_1", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\ufdd0sys\ufdd1<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nweather \ufdd0 in Z\ufdd1rich?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|><|start_header_id|>tool<|end_header_id|>\n\n{\"temp\": 21, \"sky\": \"\ufdd0\"}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n21 \ufdd1 degrees<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"deepseek_v3", "<｜begin▁of▁sentence｜>\ufdd0sys\ufdd1<｜User｜>weather \ufdd0 in Z\ufdd1rich?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Z\ufdd0rich\ufdd1\", \"note\": \"\u2028line\u2029\", \"n\": 3}\n```<｜tool▁call▁end｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{\"temp\": 21, \"sky\": \"\ufdd0\"}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>21 \ufdd1 degrees<｜end▁of▁sentence｜><｜Assistant｜>"},
	} {
		msgs, tools := toolTurn(c.model)
		cases = append(cases, tc{"noncharacters", c.model, msgs, tools, true, c.want, false})
	}
	// Llama 3.1 trims as str.strip(): the information separators too.
	cases = append(cases, tc{"separators at the edges", "llama3_1", []tokenizer.Message{{Role: "system", Content: "\x1c\x1dsys\x1e\x1f"},
		{Role: "user", Content: "\x1f\x1e \x1d\x1chi\x1c \x1f"}, {Role: "assistant", Content: "\x1d\u0085ok\u0085\x1e"}}, nil, true,
		"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nsys<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nok<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", true})
	// Floats through tojson in repr's form.
	cases = append(cases, tc{"floats", "qwen3", []tokenizer.Message{{Role: "user", Content: "add"},
		{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{ID: "call_1", Name: "ledger_add", Arguments: json.RawMessage(`{"amount": 2.0, "x": 1234567.5, "y": 1e-05, "z": 1e16, "w": -0.0}`)}}}}, nil, false,
		"<|im_start|>user\nadd<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"ledger_add\", \"arguments\": {\"amount\": 2.0, \"x\": 1234567.5, \"y\": 1e-05, \"z\": 1e+16, \"w\": -0.0}}\n</tool_call><|im_end|>\n", true})

	tmpls := map[string]*Template{}
	jsReqs, jsCases := map[string][]request{}, map[string][]tc{}
	for _, c := range cases {
		tm := tmpls[c.model]
		if tm == nil {
			cfg, err := hf.LoadConfig(tokref.ModelDir(t, c.model))
			if err != nil {
				t.Fatal(err)
			}
			if tm, err = Compile(c.model, cfg.ChatTemplate, cfg.BOS, cfg.EOS); err != nil {
				t.Fatal(err)
			}
			tmpls[c.model] = tm
		}
		opt := tokenizer.RenderOptions{Tools: c.tools, AddGenerationPrompt: c.genPrompt}
		for _, path := range []*Template{tm, tm.EngineOnly()} {
			got, err := path.Render(c.msgs, opt)
			if err != nil || got != c.want {
				t.Errorf("%s, %s (engine only %v):\n got %q (%v)\nwant %q", c.model, c.name, path.engineOnly, got, err, c.want)
			}
		}
		jsReqs[c.model] = append(jsReqs[c.model], request{Messages: tm.Wire(c.msgs), Tools: c.tools, AddGenerationPrompt: c.genPrompt})
		jsCases[c.model] = append(jsCases[c.model], c)
	}
	for model, reqs := range jsReqs {
		var js []json.RawMessage
		tokref.Run(t, reqs, &js, "template", model)
		for i, c := range jsCases[model] {
			var text string
			_ = json.Unmarshal(js[i], &text)
			if (text == c.want) == c.jsDiffers {
				t.Errorf("%s, %s: @huggingface/jinja renders %q; differing from Python expected: %v", model, c.name, text, c.jsDiffers)
			}
		}
	}
}
