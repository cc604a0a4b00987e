package runner

import (
	"strings"
	"testing"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/env"
)

// TestChatMLMessages reads a Qwen3 render back into the turns the oracles
// read: roles, contents trimmed, the assistant's think block dropped, the
// generation prompt an empty assistant turn; a non-ChatML prompt is refused.
func TestChatMLMessages(t *testing.T) {
	text := "<|im_start|>user\nguess 0-7<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n3<|im_end|>\n" +
		"<|im_start|>user\nhigher<|im_end|>\n<|im_start|>assistant\n"
	msgs, err := chatMLMessages(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []lhtok.Message{{Role: "user", Content: "guess 0-7"}, {Role: "assistant", Content: "3"},
		{Role: "user", Content: "higher"}, {Role: "assistant", Content: ""}}
	if len(msgs) != len(want) {
		t.Fatalf("got %+v", msgs)
	}
	for i := range want {
		if msgs[i].Role != want[i].Role || msgs[i].Content != want[i].Content {
			t.Fatalf("message %d: %+v, want %+v", i, msgs[i], want[i])
		}
	}
	if a, err := env.GuessOracle(msgs); err != nil || a != "5" {
		t.Fatalf("oracle on the read turns: %q, %v (want 5)", a, err)
	}
	if _, err := chatMLMessages("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi"); err == nil || !strings.Contains(err.Error(), "not ChatML") {
		t.Fatalf("a Llama 3 prompt: %v", err)
	}
}
