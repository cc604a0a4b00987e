package server

import (
	"encoding/json"
	"slices"
	"testing"
)

// paramOf reads the param of an OpenAI error body ("" when null).
func paramOf(t *testing.T, r reply) string {
	t.Helper()
	var e struct {
		Error struct {
			Param *string `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	if e.Error.Param == nil {
		return ""
	}
	return *e.Error.Param
}

// Every request field is either implemented, accepted at a value that
// changes nothing, or refused with a 400 naming it.
func TestRequestFieldsTable(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	msgs := []map[string]string{{"role": "user", "content": "hi"}}
	for _, tc := range []struct {
		path, field string
		value       any
		param       string // "" = accepted (200)
	}{
		{"/v1/completions", "frequency_penalty", 0.5, "frequency_penalty"},
		{"/v1/completions", "frequency_penalty", 0, ""},
		{"/v1/completions", "presence_penalty", -1, "presence_penalty"},
		{"/v1/completions", "presence_penalty", nil, ""},
		{"/v1/completions", "repetition_penalty", 1.1, "repetition_penalty"},
		{"/v1/completions", "repetition_penalty", 1.0, ""},
		{"/v1/completions", "logit_bias", map[string]int{"97": 5}, "logit_bias"},
		{"/v1/completions", "logit_bias", map[string]int{}, ""},
		{"/v1/completions", "best_of", 2, "best_of"},
		{"/v1/completions", "best_of", "1", "best_of"}, // a string is not the number 1
		{"/v1/completions", "best_of", 1, ""},
		{"/v1/completions", "echo", true, "echo"},
		{"/v1/completions", "echo", false, ""},
		{"/v1/completions", "suffix", "!", "suffix"},
		{"/v1/completions", "min_p", 0.1, "min_p"},
		{"/v1/completions", "min_tokens", 3, "min_tokens"},
		{"/v1/completions", "use_beam_search", true, "use_beam_search"},
		{"/v1/completions", "include_stop_str_in_output", true, "include_stop_str_in_output"},
		{"/v1/completions", "skip_special_tokens", false, ""},
		{"/v1/completions", "truncate_prompt_tokens", 4, "truncate_prompt_tokens"},
		{"/v1/completions", "allowed_token_ids", []int{97}, "allowed_token_ids"},
		{"/v1/completions", "response_format", map[string]string{"type": "json_object"}, "response_format"},
		{"/v1/completions", "response_format", map[string]string{"type": "text"}, ""},
		{"/v1/completions", "guided_regex", "a+", "guided_regex"},
		{"/v1/completions", "user", "someone", ""},
		{"/v1/completions", "frobnicate", 1, "frobnicate"},
		{"/v1/completions", "Stream", true, "Stream"},          // Go's decoder would fold the case
		{"/v1/completions", "top_logprobs", 2, "top_logprobs"}, // chat's field, not completions'
		{"/v1/completions", "stream_options", map[string]bool{"include_usage": true}, "stream_options"},
		{"/v1/chat/completions", "tools", []map[string]any{{"type": "function"}}, "tools"},
		{"/v1/chat/completions", "tools", []any{}, ""},
		{"/v1/chat/completions", "tool_choice", "required", "tool_choice"},
		{"/v1/chat/completions", "tool_choice", "none", ""},
		{"/v1/chat/completions", "logit_bias", map[string]int{"97": 5}, "logit_bias"},
		{"/v1/chat/completions", "reasoning_effort", "high", "reasoning_effort"},
		{"/v1/chat/completions", "modalities", []string{"text", "audio"}, "modalities"},
		{"/v1/chat/completions", "modalities", []string{"text"}, ""},
		{"/v1/chat/completions", "continue_final_message", true, "continue_final_message"},
		{"/v1/chat/completions", "chat_template", "{{x}}", "chat_template"},
		{"/v1/chat/completions", "logprobs", 3, "logprobs"}, // the wrong type, named
		{"/v1/chat/completions", "prompt", "x", "prompt"},   // completions' field, not chat's
	} {
		body := map[string]any{"max_tokens": 2, "seed": 1}
		if tc.path == "/v1/completions" {
			body["prompt"] = "a"
		} else {
			body["messages"] = msgs
		}
		body[tc.field] = tc.value
		r := do(t, ts, "POST", tc.path, body)
		switch {
		case tc.param == "":
			if r.status != 200 {
				t.Errorf("%s %s=%v: status %d, want 200: %s", tc.path, tc.field, tc.value, r.status, r.body)
			}
		default:
			if r.status != 400 || paramOf(t, r) != tc.param {
				t.Errorf("%s %s=%v: status %d param %q, want 400 naming %q: %s", tc.path, tc.field, tc.value, r.status, paramOf(t, r), tc.param, r.body)
			}
		}
	}
}

// Every entry of the unimplemented table refuses a value that is not its
// no-op (an object no rule accepts), on both routes.
func TestEveryUnimplementedFieldRefused(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	names := make([]string, 0, len(unimplemented))
	for k := range unimplemented {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if unimplemented[k].want == "any" {
			continue
		}
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			body := map[string]any{"max_tokens": 1, k: map[string]int{"x": 1}}
			if path == "/v1/completions" {
				body["prompt"] = "a"
			} else {
				body["messages"] = []map[string]string{{"role": "user", "content": "hi"}}
			}
			r := do(t, ts, "POST", path, body)
			if r.status != 400 || paramOf(t, r) != k {
				t.Errorf("%s %s: status %d param %q: %s", path, k, r.status, paramOf(t, r), r.body)
			}
		}
	}
}

func TestStreamOptionsChecked(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	for _, tc := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"stream_options": map[string]any{"include_usage": true}}, "stream_options"},
		{map[string]any{"stream": true, "stream_options": map[string]any{"continuous_usage_stats": true}}, "stream_options.continuous_usage_stats"},
		{map[string]any{"stream": true, "stream_options": map[string]any{"bogus": 1}}, "stream_options.bogus"},
		{map[string]any{"stream": true, "prompt_logprobs": 0}, "prompt_logprobs"},
		{map[string]any{"logprobs": 2}, "logprobs"}, // the fake has no full distribution
		{map[string]any{"prompt_logprobs": 0}, "prompt_logprobs"},
	} {
		tc.body["prompt"], tc.body["max_tokens"] = "a", 2
		r := do(t, ts, "POST", "/v1/completions", tc.body)
		if r.status != 400 || paramOf(t, r) != tc.param {
			t.Errorf("%v: status %d param %q, want 400 naming %q: %s", tc.body, r.status, paramOf(t, r), tc.param, r.body)
		}
	}
	r := do(t, ts, "POST", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}}, "top_logprobs": 2})
	if r.status != 400 || paramOf(t, r) != "top_logprobs" {
		t.Errorf("top_logprobs without logprobs: %d %s", r.status, r.body)
	}
}
