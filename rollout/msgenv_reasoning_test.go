package rollout

import (
	"testing"

	"github.com/longhaul-rl/longhaul/env"
)

// TestChatMessagesReasoning: an agent's reasoning_content reaches the
// template as sent: "" present (HasReasoning), missing absent.
func TestChatMessagesReasoning(t *testing.T) {
	empty, r := "", "r"
	got := chatMessages([]env.Message{
		{Role: "assistant", Content: "<think>a</think>b", ReasoningContent: &empty},
		{Role: "assistant", Content: "c"},
		{Role: "assistant", Content: "d", ReasoningContent: &r},
	})
	if !got[0].HasReasoning() || got[0].ReasoningContent != "" {
		t.Errorf("\"\": %+v", got[0])
	}
	if got[1].HasReasoning() {
		t.Errorf("missing: %+v", got[1])
	}
	if !got[2].HasReasoning() || got[2].ReasoningContent != "r" || got[2].ReasoningSet {
		t.Errorf("\"r\": %+v", got[2])
	}
}
