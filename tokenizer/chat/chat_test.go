package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// TestPythonStripSemantics: HF templates are written for Python Jinja2,
// where s.strip('\n') removes only newlines.
func TestPythonStripSemantics(t *testing.T) {
	tm, err := Compile("t", `[{{ messages[0].content.strip('\n') }}]`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tm.Render([]tokenizer.Message{{Role: "user", Content: "\n  x \n\n"}}, tokenizer.RenderOptions{})
	if err != nil || got != "[  x ]" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestToJSONKeepsOrderAndLineSeparators: tool arguments keep their key
// order and U+2028 is written raw, as Python's json.dumps(ensure_ascii=False).
func TestToJSONKeepsOrderAndLineSeparators(t *testing.T) {
	tm, err := Compile("t", `{% for m in messages %}{{ m.tool_calls[0].function.arguments | tojson }}{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []tokenizer.Message{{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{Name: "f", Arguments: json.RawMessage(`{"z": 1, "a": "x\u2028y<&>", "m": [1.5, null]}`)}}}}
	got, err := tm.Render(msgs, tokenizer.RenderOptions{})
	want := "{\"z\": 1, \"a\": \"x\u2028y<&>\", \"m\": [1.5, null]}"
	if err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

// TestRaiseExceptionIsAnError: a template's raise_exception comes back as an
// error with its message, naming the template.
func TestRaiseExceptionIsAnError(t *testing.T) {
	tm, err := Compile("model/tokenizer_config.json", `{{ raise_exception('only one tool call') }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tm.Render(nil, tokenizer.RenderOptions{})
	if err == nil || !strings.Contains(err.Error(), "only one tool call") || !strings.Contains(err.Error(), "tokenizer_config.json") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Compile("x.json", `{% if %}`, "", ""); err == nil || !strings.Contains(err.Error(), "x.json") {
		t.Fatalf("compile err = %v", err)
	}
}
