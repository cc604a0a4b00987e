package agentenv

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/env"
)

// TestChatRequestReasoningContent: an agent's assistant messages keep
// reasoning_content as sent: "" is present (a template tells it from a
// missing field), null and a missing field are absent.
func TestChatRequestReasoningContent(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var got env.AgentCall
	h := &handler{ctx: ctx, fail: cancel, call: func(_ context.Context, c env.AgentCall) (env.AgentReply, error) {
		got = c
		return env.AgentReply{Text: "ok"}, nil
	}}
	body := `{"messages": [{"role": "user", "content": "q"},
		{"role": "assistant", "content": "<think>a</think>b", "reasoning_content": ""},
		{"role": "assistant", "content": "c", "reasoning_content": null},
		{"role": "assistant", "content": "d"},
		{"role": "assistant", "content": "e", "reasoning_content": "r"}]}`
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	want := []*string{nil, ptr(""), nil, nil, ptr("r")}
	if len(got.Messages) != len(want) {
		t.Fatalf("%d messages", len(got.Messages))
	}
	for i, w := range want {
		g := got.Messages[i].ReasoningContent
		if (g == nil) != (w == nil) || g != nil && *g != *w {
			t.Errorf("message %d: reasoning_content %v, want %v", i, g, w)
		}
	}
}

func ptr(s string) *string { return &s }
