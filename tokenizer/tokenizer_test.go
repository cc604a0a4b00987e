package tokenizer

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestMessageReasoningJSON: reasoning_content "" survives JSON both ways
// (a template tells it from a missing field); null and a missing field
// are the same; other fields and a non-empty reasoning are as before.
func TestMessageReasoningJSON(t *testing.T) {
	cases := []struct {
		in   string
		want Message
		out  string
	}{
		{`{"role":"assistant","content":"<think>x</think>y","reasoning_content":""}`,
			Message{Role: "assistant", Content: "<think>x</think>y", ReasoningSet: true},
			`{"role":"assistant","content":"<think>x</think>y","reasoning_content":""}`},
		{`{"role":"assistant","content":"y","reasoning_content":null}`, Message{Role: "assistant", Content: "y"},
			`{"role":"assistant","content":"y"}`},
		{`{"role":"assistant","content":"y"}`, Message{Role: "assistant", Content: "y"}, `{"role":"assistant","content":"y"}`},
		{`{"role":"assistant","content":"y","reasoning_content":"r","tool_calls":[{"id":"c","name":"f","arguments":{"a":1}}],"tool_call_id":"t","name":"n"}`,
			Message{Role: "assistant", Content: "y", ReasoningContent: "r", ToolCalls: []ToolCall{{ID: "c", Name: "f", Arguments: json.RawMessage(`{"a":1}`)}}, ToolCallID: "t", Name: "n"},
			`{"role":"assistant","content":"y","tool_calls":[{"id":"c","name":"f","arguments":{"a":1}}],"tool_call_id":"t","name":"n","reasoning_content":"r"}`},
	}
	for _, c := range cases {
		var m Message
		if err := json.Unmarshal([]byte(c.in), &m); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, c.want) {
			t.Errorf("decode %s:\n got %#v\nwant %#v", c.in, m, c.want)
		}
		if got := m.HasReasoning(); got != (c.want.ReasoningContent != "" || c.want.ReasoningSet) {
			t.Errorf("%s: HasReasoning %v", c.in, got)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		err := enc.Encode(m)
		if out := strings.TrimSuffix(buf.String(), "\n"); err != nil || out != c.out {
			t.Errorf("encode %#v:\n got %s (%v)\nwant %s", m, out, err, c.out)
		}
		if html, _ := json.Marshal(m); !strings.Contains(string(html), `\u003c`) && strings.Contains(c.out, "<") {
			t.Errorf("json.Marshal of %#v did not escape HTML: %s", m, html)
		}
		// a list of messages (how callers hold them) goes through the same methods
		var ms []Message
		if err := json.Unmarshal([]byte("["+c.in+"]"), &ms); err != nil || !reflect.DeepEqual(ms[0], c.want) {
			t.Errorf("decode [%s]: %#v %v", c.in, ms, err)
		}
	}
	if _, err := json.Marshal(Message{Role: "user", ReasoningSet: true}); err != nil {
		t.Fatal(err)
	}
	var m Message
	if err := json.Unmarshal([]byte(`{"role":"user","reasoning_content":3}`), &m); err == nil {
		t.Error("a number as reasoning_content was accepted")
	}
}
