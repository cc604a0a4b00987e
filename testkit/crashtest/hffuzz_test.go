package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/internal/race"
	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// Bounds of TestServeModelNeverFails: requests, and the wall clock they
// may take (whichever ends first; the count reached is logged).
const (
	fuzzRequests = 1500
	fuzzBudget   = 90 * time.Second
)

// TestServeModelNeverFails sends seeded random requests to every route of
// `longhaul serve --model DIR` (a tiny Qwen3 with the real tokenizer and
// template), a real process under a 4 GiB address-space cap: valid bodies
// of each route with random fields set to random values (wrong types,
// out-of-range numbers and token ids, unknown keys, messages and tools of
// every shape, special-token strings, deep nesting), cut short, or not
// JSON at all. No answer may be a 5xx, every 4xx must be an OpenAI error
// body (JSON), and the server must still be up afterwards. Expensive values that are valid (n, max_tokens) are drawn
// small so the run stays bounded; their out-of-range values are drawn as
// often as any.
func TestServeModelNeverFails(t *testing.T) {
	if race.Enabled {
		t.Skip("processes on loopback for minutes: run without -race (.ci/steps/20-serve-model.sh)")
	}
	bin := binary(t)
	dir := initModel(t, bin, "qwen3", "qwen3", 256)
	port := proctest.FreePort(t)
	capped(t, bin, port, "serve", "--model", dir)
	rnd := rand.New(rand.NewPCG(30, 500))
	client := &http.Client{Timeout: 60 * time.Second}
	deadline := time.Now().Add(fuzzBudget)
	codes := map[int]int{}
	sent := 0
	for ; sent < fuzzRequests && time.Now().Before(deadline); sent++ {
		method, path, body := fuzzRequest(rnd)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), strings.NewReader(body))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("request %d %s %s %.300q: %v (the server died or hung?)", sent, method, path, body, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		codes[resp.StatusCode]++
		if resp.StatusCode >= 500 {
			t.Fatalf("request %d %s %s %.600q: %d %s", sent, method, path, body, resp.StatusCode, b)
		}
		if resp.StatusCode >= 400 && (!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !json.Valid(b)) {
			t.Fatalf("request %d %s %s %.300q: a %d that is not an OpenAI error: %s", sent, method, path, body, resp.StatusCode, b)
		}
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after %d requests the server is not healthy: %v", sent, err)
	}
	resp.Body.Close()
	t.Logf("%d requests, answers by status: %v", sent, codes)
	if sent < 200 {
		t.Fatalf("only %d requests in %v: too few to mean anything", sent, fuzzBudget)
	}
}

// fuzzRoutes are the routes and a valid body of each.
var fuzzRoutes = []struct {
	method, path string
	body         map[string]any
}{
	{"POST", "/v1/completions", map[string]any{"prompt": "The ledger", "max_tokens": 4, "seed": 1, "logprobs": 1}},
	{"POST", "/v1/completions", map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 3, "n": 2, "stream": true}},
	{"POST", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "max_tokens": 4,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "guess", "parameters": map[string]any{"type": "object"}}}}}},
	{"POST", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "max_tokens": 3,
		"stream": true, "stream_options": map[string]any{"include_usage": true}, "logprobs": true, "top_logprobs": 2}},
	{"POST", "/tokenize", map[string]any{"prompt": "hello", "return_token_strs": true}},
	{"POST", "/tokenize", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "add_generation_prompt": true}},
	{"POST", "/detokenize", map[string]any{"tokens": []int{9707, 1879}}},
	{"POST", "/inference/v1/generate", map[string]any{"token_ids": []int{1, 2}, "sampling_params": map[string]any{"max_tokens": 3, "logprobs": 0}}},
	{"POST", "/generate", map[string]any{"input_ids": []int{1, 2}, "sampling_params": map[string]any{"max_new_tokens": 3}, "return_logprob": true}},
	{"POST", "/update_weights_from_disk", map[string]any{"model_path": "/nonexistent"}},
	{"POST", "/collective_rpc", map[string]any{"method": "reload_weights", "kwargs": map[string]any{"weights_path": "/nonexistent"}}},
	{"POST", "/update_weight_version", map[string]any{"new_version": "0"}},
	{"GET", "/v1/models", nil}, {"GET", "/health", nil}, {"GET", "/is_paused", nil}, {"GET", "/weight_info", nil},
}

// fuzzKeys are the keys a mutation sets: every field some route knows,
// fields no route knows, and case variants.
var fuzzKeys = []string{"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "seed",
	"stop", "stop_token_ids", "ignore_eos", "stream", "stream_options", "logprobs", "top_logprobs", "prompt_logprobs", "return_token_ids",
	"return_tokens_as_token_ids", "skip_special_tokens", "add_special_tokens", "add_generation_prompt", "tools", "tool_choice",
	"parallel_tool_calls", "chat_template_kwargs", "continue_final_message", "chat_template", "echo", "logit_bias", "response_format",
	"return_token_strs", "tokens", "token_ids", "input_ids", "sampling_params", "text", "model_path", "weight_version", "method", "kwargs",
	"new_version", "frequency_penalty", "best_of", "user", "Stream", "MESSAGES", "x", ""}

// fuzzMessages are message shapes, valid and not.
var fuzzMessages = []any{
	map[string]any{"role": "user", "content": "hi"},
	map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c", "type": "function",
		"function": map[string]any{"name": "guess", "arguments": `{"n": 3}`}}}},
	map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"function": map[string]any{"name": "g", "arguments": map[string]any{"n": 1}}}}},
	map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"function": map[string]any{"name": "g", "arguments": "not json"}}}},
	map[string]any{"role": "assistant", "tool_calls": "x"},
	map[string]any{"role": "tool", "tool_call_id": "c", "content": "higher"},
	map[string]any{"role": "system", "content": []any{map[string]any{"type": "text", "text": "be brief"}}},
	map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url", "image_url": "x"}}},
	map[string]any{"role": "wizard", "content": "x"},
	map[string]any{"role": "", "content": 3},
	map[string]any{"role": "assistant", "reasoning_content": "", "content": "<think>x</think>y"},
	map[string]any{"role": "user", "content": "<|im_start|>system\n<|im_end|>\uFDD0\u2028"},
	map[string]any{"content": "no role"},
	"a string", 7, nil, []any{},
}

// fuzzValue draws a JSON value of any kind, depth-bounded.
func fuzzValue(rnd *rand.Rand, depth int) any {
	switch k := rnd.IntN(16); {
	case k == 0:
		return nil
	case k == 1:
		return rnd.IntN(2) == 0
	case k == 2:
		return []int64{-1, 0, 1, 2, 3, 255, 4096, 151668, 151669, 1 << 31, 1<<53 + 1, -1 << 63, 1<<63 - 1}[rnd.IntN(13)]
	case k == 3:
		return []float64{-0.5, 0, 0.5, 1, 1.5, 2, 1e308, -1e308, 3.14}[rnd.IntN(9)]
	case k == 4:
		return []string{"", "auto", "none", "required", "x", "<|im_end|>", "\u0000", "é🌍", strings.Repeat("a", 5000), "token_id:1"}[rnd.IntN(10)]
	case k == 5 && depth < 4:
		n := rnd.IntN(4)
		out := make([]any, n)
		for i := range out {
			out[i] = fuzzValue(rnd, depth+1)
		}
		return out
	case k == 6 && depth < 4:
		out := map[string]any{}
		for range rnd.IntN(4) {
			out[fuzzKeys[rnd.IntN(len(fuzzKeys))]] = fuzzValue(rnd, depth+1)
		}
		return out
	case k == 7:
		ids := make([]int64, rnd.IntN(6))
		for i := range ids {
			ids[i] = int64(rnd.IntN(160000)) - 100
		}
		return ids
	case k == 8:
		n := 1 + rnd.IntN(4)
		out := make([]any, n)
		for i := range out {
			out[i] = fuzzMessages[rnd.IntN(len(fuzzMessages))]
		}
		return out
	case k == 9:
		return []any{map[string]any{"type": "function", "function": map[string]any{"name": "t", "parameters": fuzzValue(rnd, depth+1)}}}
	case k == 10:
		var v any = 1
		for range 200 { // deep nesting
			v = []any{v}
		}
		return v
	}
	return rnd.IntN(8) // small numbers are the valid values of many fields
}

// fuzzRequest draws one request: a route's valid body with mutations, or
// a broken body.
func fuzzRequest(rnd *rand.Rand) (method, path, body string) {
	r := fuzzRoutes[rnd.IntN(len(fuzzRoutes))]
	if r.method == "GET" {
		return r.method, r.path, ""
	}
	m := map[string]any{}
	for k, v := range r.body {
		m[k] = v
	}
	for range rnd.IntN(4) {
		k := fuzzKeys[rnd.IntN(len(fuzzKeys))]
		if rnd.IntN(5) == 0 {
			delete(m, k)
			continue
		}
		m[k] = fuzzValue(rnd, 0)
	}
	bound(m)
	raw, err := json.Marshal(m)
	if err != nil {
		raw = []byte(`{"prompt": "x"}`)
	}
	switch rnd.IntN(12) {
	case 0:
		raw = raw[:rnd.IntN(len(raw)+1)] // cut short
	case 1:
		raw = bytes.ReplaceAll(raw, []byte(`"`), []byte(`'`)) // not JSON
	case 2:
		raw = append([]byte(`{"model": 1, `), raw[1:]...) // a duplicate key's first value
	}
	return r.method, r.path, string(raw)
}

// bound keeps valid but expensive values small: n ≤ 4 and max_tokens ≤ 16
// (values out of the valid range stay, to be refused).
func bound(m map[string]any) {
	for _, k := range []string{"n", "max_tokens", "max_completion_tokens", "max_new_tokens"} {
		limit := int64(16)
		if k == "n" {
			limit = 4
		}
		switch v := m[k].(type) {
		case int64:
			if v > limit && v <= 4096 {
				m[k] = limit
			}
		case int:
			if int64(v) > limit && v <= 4096 {
				m[k] = limit
			}
		case float64:
			if v > float64(limit) && v <= 4096 {
				m[k] = limit
			}
		}
	}
	if sp, ok := m["sampling_params"].(map[string]any); ok {
		bound(sp)
	}
}
