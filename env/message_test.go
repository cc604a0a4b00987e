package env

import (
	"context"
	"encoding/json"
	"testing"
)

func TestKeyRoundTrip(t *testing.T) {
	for _, k := range []Key{
		{Run: "abc", Rollout: "g1-0", Attempt: 2, Step: 7},
		{Run: "abc-warmstart", Rollout: "g0-0", Attempt: 1, Step: -1},
		{Run: "with/slash", Rollout: "g9-3", Attempt: 4, Step: 0},
	} {
		got, err := ParseKey(k.String())
		if err != nil || got != k {
			t.Fatalf("%s: %+v %v", k, got, err)
		}
	}
	for _, bad := range []string{"", "x", "r/g/1/2", "r/g/a1/-3", "g/a1/2", "r/g/ax/2"} {
		if _, err := ParseKey(bad); err == nil {
			t.Fatalf("ParseKey(%q) accepted", bad)
		}
	}
	ctx := WithKey(WithRun(context.Background(), "run9"), Key{Rollout: "g1-1", Attempt: 1, Step: 3})
	if k, ok := KeyOf(ctx); !ok || k.String() != "run9/g1-1/a1/3" || IsReplay(ctx) || !IsReplay(WithReplay(ctx)) {
		t.Fatalf("context key %+v %v", k, ok)
	}
}

func TestParseToolCall(t *testing.T) {
	tools := []Tool{
		{Type: "function", Function: FunctionSpec{Name: "read", Parameters: json.RawMessage(`{"type":"object","properties":{"page":{"type":"integer"}},"required":["page"]}`)}},
		{Type: "function", Function: FunctionSpec{Name: "note", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}},
		{Type: "function", Function: FunctionSpec{Name: "move", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}}}`)}},
	}
	for _, tc := range []struct{ text, name, args string }{
		{"read 3", "read", `{"page":3}`},
		{"note 3", "note", `{"text":"3"}`},
		{"note hello world", "note", `{"text":"hello world"}`},
		{`move {"x":1,"y":2}`, "move", `{"x":1,"y":2}`},
		{"move 1 2", "move", `{"input":"1 2"}`},
		{"read", "read", `{}`},
		{"7", "", ""},
		{"delete 3", "", ""},
	} {
		m := ParseToolCall(tc.text, tools, "call_1")
		if tc.name == "" {
			if len(m.ToolCalls) != 0 || m.Content != tc.text {
				t.Fatalf("%q: %+v, want plain text", tc.text, m)
			}
			continue
		}
		if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != tc.name || m.ToolCalls[0].Function.Arguments != tc.args || m.ToolCalls[0].ID != "call_1" {
			t.Fatalf("%q: %+v", tc.text, m)
		}
	}
	if got := RenderTools(tools[:2]); got != "tools: read(page) note(text)" {
		t.Fatalf("RenderTools = %q", got)
	}
}
