package toolcall

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHermes(t *testing.T) {
	p, _ := New("qwen")
	got := p.Parse("<think>\nplan\n</think>\n\nLet me add it.\n<tool_call>\n{\"name\": \"ledger_add\", \"arguments\": {\"amount\": 2.5, \"memo\": \"x\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": 1}\"}\n</tool_call>")
	m := got.Message
	if len(got.Errors) != 0 || m.ReasoningContent != "plan" || m.Content != "Let me add it." || len(m.ToolCalls) != 2 {
		t.Fatalf("%+v", got)
	}
	if m.ToolCalls[0].Name != "ledger_add" || string(m.ToolCalls[0].Arguments) != `{"amount": 2.5, "memo": "x"}` || string(m.ToolCalls[1].Arguments) != `{"q": 1}` {
		t.Fatalf("%+v", m.ToolCalls)
	}
}

func TestMalformedIsData(t *testing.T) {
	cases := []struct{ parser, text, err string }{
		{"hermes", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>", "not a JSON object"},
		{"hermes", "<tool_call>\n{\"arguments\": {}}\n</tool_call>", "no \"name\""},
		{"hermes", "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>", "arguments are not a JSON object"},
		{"hermes", "ok <tool_call>{\"name\": \"f\"", "without </tool_call>"},
		{"llama3_json", `{"name": "f", "parameters": {"a": 1}`, "not a JSON object"},
		{"llama3_json", `{"name": "f", "parameters": {"a": 1}} trailing`, "text after"},
		{"deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{bad}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "arguments are not a JSON object"},
		{"deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}", "no <｜tool▁call▁end｜>"},
	}
	for _, c := range cases {
		p, err := New(c.parser)
		if err != nil {
			t.Fatal(err)
		}
		got := p.Parse(c.text)
		if len(got.Errors) == 0 || !strings.Contains(strings.Join(got.Errors, "; "), c.err) {
			t.Errorf("%s %q: errors %v, want %q", c.parser, c.text, got.Errors, c.err)
		}
		if len(got.Message.ToolCalls) != 0 || got.Message.Content == "" {
			t.Errorf("%s %q: a malformed call must leave no call and keep the text: %+v", c.parser, c.text, got.Message)
		}
	}
	if _, err := New("mistral"); err == nil || !strings.Contains(err.Error(), "tokenizer.tool_parser") {
		t.Errorf("unknown parser: %v", err)
	}
}

func TestLlama3AndDeepSeek(t *testing.T) {
	p, _ := New("llama3_json")
	got := p.Parse(`<|python_tag|>{"name": "a", "parameters": {"x": "; {"}}; {"name": "b", "parameters": {}}`)
	if len(got.Errors) != 0 || len(got.Message.ToolCalls) != 2 || got.Message.ToolCalls[1].Name != "b" || string(got.Message.ToolCalls[0].Arguments) != `{"x": "; {"}` {
		t.Fatalf("%+v", got)
	}
	if got := p.Parse("The answer is 4."); len(got.Message.ToolCalls) != 0 || got.Message.Content != "The answer is 4." {
		t.Fatalf("%+v", got)
	}
	d, _ := New("deepseek_v3")
	got = d.Parse("Sure.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Zürich\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
	if len(got.Errors) != 0 || got.Message.Content != "Sure." || len(got.Message.ToolCalls) != 2 || got.Message.ToolCalls[0].Name != "get_weather" || string(got.Message.ToolCalls[0].Arguments) != `{"city": "Zürich"}` {
		t.Fatalf("%+v", got)
	}
}

// FuzzParsers: no input crashes a parser, and every parsed call has a
// name and a JSON object of arguments.
func FuzzParsers(f *testing.F) {
	f.Add("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>")
	f.Add(`{"name": "f", "parameters": {"a": [1, {"b": "}"}]}}; {"name": "g"}`)
	f.Add("<think>x</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>")
	f.Add("<tool_call>\"\\u0000\"</tool_call><tool_call>")
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range Names {
			p, _ := New(name)
			got := p.Parse(s)
			for _, c := range got.Message.ToolCalls {
				if c.Name == "" || len(c.Arguments) == 0 || c.Arguments[0] != '{' || !json.Valid(c.Arguments) {
					t.Fatalf("%s: bad call %+v from %q", name, c, s)
				}
			}
			if utf8.ValidString(s) && !utf8.ValidString(got.Message.Content) {
				t.Fatalf("%s: content not UTF-8", name)
			}
		}
	})
}
