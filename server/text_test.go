package server

import (
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// The byte model's Text through the chat and tokenize routes: what its
// template cannot render is a 400 naming the field, message keys an SDK
// sends back empty are accepted, and /tokenize refuses what it does not
// implement.
func TestByteTextRefusals(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	user := map[string]any{"role": "user", "content": "hi"}
	for _, tc := range []struct {
		path  string
		body  map[string]any
		param string // "" = 200
	}{
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "assistant", "content": nil,
			"tool_calls": []any{map[string]any{"id": "c", "type": "function", "function": map[string]any{"name": "f", "arguments": "{}"}}}}, user}}, "messages[0].tool_calls"},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x", "colour": "red"}}}, "messages[0].colour"},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "assistant", "content": "x", "refusal": nil, "annotations": []any{}}, user}}, ""},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "assistant", "content": "x", "refusal": "no"}, user}}, "messages[0].refusal"},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url"}}}}}, "messages[0].content"},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "wizard", "content": "x"}}}, "messages[0].role"},
		{"/v1/chat/completions", map[string]any{"messages": []any{user}, "chat_template_kwargs": map[string]any{"enable_thinking": false}}, "chat_template_kwargs"},
		{"/v1/chat/completions", map[string]any{"messages": []any{user}, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "f"}}}, "tool_choice"},
		{"/v1/chat/completions", map[string]any{"messages": "hi"}, "messages"},
		{"/v1/chat/completions", map[string]any{"messages": []any{user}, "tools": []any{map[string]any{"type": "function",
			"function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object"}}}}}, "tools"},
		{"/tokenize", map[string]any{"prompt": "x", "colour": 1}, "colour"},
		{"/tokenize", map[string]any{"messages": []any{user}, "continue_final_message": true}, "continue_final_message"},
		{"/tokenize", map[string]any{"messages": []any{user}, "continue_final_message": false, "chat_template": nil}, ""},
		{"/tokenize", map[string]any{"prompt": "x", "add_generation_prompt": true}, "prompt"},
		{"/detokenize", map[string]any{"tokens": []int{1}, "prompt": "x"}, "prompt"},
	} {
		tc.body["max_tokens"] = 2
		if tc.path != "/v1/chat/completions" {
			delete(tc.body, "max_tokens")
		}
		r := do(t, ts, "POST", tc.path, tc.body)
		if tc.param == "" {
			if r.status != 200 {
				t.Errorf("%s %v: %d %s", tc.path, tc.body, r.status, r.body)
			}
			continue
		}
		if r.status != 400 || paramOf(t, r) != tc.param {
			t.Errorf("%s %v: %d param %q, want 400 naming %q: %s", tc.path, tc.body, r.status, paramOf(t, r), tc.param, r.body)
		}
	}
}

// The stop token that ended a sample is not in its text (vLLM), and
// skip_special_tokens: false writes special tokens into it.
func TestStopTokenTextAndSpecials(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	full := decodeAs[completion](t, do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "Hi", "seed": 9, "max_tokens": 20,
		"ignore_eos": true, "return_token_ids": true}))
	tok := full.Choices[0].TokenIDs[6]
	cut := decodeAs[completion](t, do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "Hi", "seed": 9, "max_tokens": 20,
		"ignore_eos": true, "return_token_ids": true, "stop_token_ids": []int32{tok}}))
	c := cut.Choices[0]
	k := len(c.TokenIDs)
	if c.FinishReason != "stop" || c.TokenIDs[k-1] != tok || c.Text != bytetok.DecodeText(c.TokenIDs[:k-1]) {
		t.Fatalf("stopped at %q: text %q, tokens %v", rune(tok), c.Text, c.TokenIDs)
	}
	chat := func(skip bool) chatCompletion {
		return decodeAs[chatCompletion](t, do(t, ts, "POST", "/v1/chat/completions", map[string]any{
			"messages": []map[string]string{{"role": "user", "content": "x"}}, "max_tokens": 60, "n": 6, "seed": 2,
			"return_token_ids": true, "skip_special_tokens": skip, "ignore_eos": true}))
	}
	for i, ch := range chat(false).Choices {
		ids := ch.TokenIDs
		if ch.FinishReason == "stop" {
			ids = ids[:len(ids)-1] // the End that stopped it
		}
		if ch.Message.Content != bytetok.Decode(ids) {
			t.Fatalf("choice %d with specials: %q, want %q", i, ch.Message.Content, bytetok.Decode(ids))
		}
	}
	for i, ch := range chat(true).Choices {
		if strings.Contains(ch.Message.Content, "<|") {
			t.Fatalf("choice %d without specials: %q", i, ch.Message.Content)
		}
	}
}
