package server

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// TestVLLMGenerateLogprobs: vLLM's /inference/v1/generate with
// sampling_params.logprobs = 3 lists, per sampled token, its logprob and
// the model's 3 most likely tokens (ChatCompletionLogProbs.top_logprobs),
// and prompt_logprobs = 2 the prompt's (null first, then a dict by id),
// all equal to the model's own log-softmax; out-of-range counts answer
// 400 naming the field.
func TestVLLMGenerateLogprobs(t *testing.T) {
	ts, m := newModelServer(t)
	prompt := append([]int32{bytetok.BOS}, bytetok.Encode("the cat")...)
	r := do(t, ts, "POST", "/inference/v1/generate", map[string]any{"request_id": "r1", "token_ids": prompt,
		"sampling_params": map[string]any{"max_tokens": 5, "seed": 3, "logprobs": 3, "prompt_logprobs": 2, "ignore_eos": true}})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	type alt struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
	}
	var g struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				Content []struct {
					alt
					TopLogprobs []alt `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		PromptLogprobs []map[string]struct {
			Logprob float64 `json:"logprob"`
			Rank    int     `json:"rank"`
		} `json:"prompt_logprobs"`
	}
	if err := json.Unmarshal(r.body, &g); err != nil {
		t.Fatal(err)
	}
	ch := g.Choices[0]
	ref := refDist(t, m, append(append([]int32{}, prompt...), ch.TokenIDs...))
	if len(ch.TokenIDs) == 0 || len(ch.Logprobs.Content) != len(ch.TokenIDs) {
		t.Fatalf("%d logprob entries for %d tokens", len(ch.Logprobs.Content), len(ch.TokenIDs))
	}
	for k, e := range ch.Logprobs.Content {
		d := ref[len(prompt)+k-1]
		if e.Token != tokenString(ch.TokenIDs[k], false) || math.Abs(e.Logprob-d[ch.TokenIDs[k]]) > lpTol {
			t.Fatalf("token %d: %+v, want %q lp %g", k, e.alt, tokenString(ch.TokenIDs[k], false), d[ch.TokenIDs[k]])
		}
		ids := topIDs(d, 3)
		if len(e.TopLogprobs) != 3 {
			t.Fatalf("token %d: %d alternatives, want 3", k, len(e.TopLogprobs))
		}
		for j, a := range e.TopLogprobs {
			if a.Token != tokenString(int32(ids[j]), false) || math.Abs(a.Logprob-d[ids[j]]) > lpTol {
				t.Fatalf("token %d alt %d: %+v, want id %d lp %g", k, j, a, ids[j], d[ids[j]])
			}
		}
	}
	if len(g.PromptLogprobs) != len(prompt) || g.PromptLogprobs[0] != nil {
		t.Fatalf("prompt_logprobs: %d entries for %d tokens", len(g.PromptLogprobs), len(prompt))
	}
	for i := 1; i < len(prompt); i++ {
		d := ref[i-1]
		e, ok := g.PromptLogprobs[i][strconv.Itoa(int(prompt[i]))]
		if !ok || math.Abs(e.Logprob-d[prompt[i]]) > lpTol || len(g.PromptLogprobs[i]) < 2 {
			t.Fatalf("prompt %d: %v, want token %d at lp %g with 2 alternatives", i, g.PromptLogprobs[i], prompt[i], d[prompt[i]])
		}
	}

	// logprobs: 0 is the sampled token alone, with no alternatives.
	r = do(t, ts, "POST", "/inference/v1/generate", map[string]any{"token_ids": prompt,
		"sampling_params": map[string]any{"max_tokens": 2, "seed": 3, "logprobs": 0}})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var z struct {
		Choices []struct {
			Logprobs struct {
				Content []struct {
					TopLogprobs []alt `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(r.body, &z); err != nil || len(z.Choices[0].Logprobs.Content) == 0 || len(z.Choices[0].Logprobs.Content[0].TopLogprobs) != 0 {
		t.Fatalf("logprobs 0: %s (%v)", r.body, err)
	}
	for field, sp := range map[string]map[string]any{
		"sampling_params.logprobs":        {"logprobs": maxTopLogprobs + 1},
		"sampling_params.prompt_logprobs": {"prompt_logprobs": -1},
	} {
		r := do(t, ts, "POST", "/inference/v1/generate", map[string]any{"token_ids": prompt, "sampling_params": sp})
		if r.status != 400 || !json.Valid(r.body) || !strings.Contains(string(r.body), field) {
			t.Fatalf("%s: %d %s", field, r.status, r.body)
		}
	}
}
