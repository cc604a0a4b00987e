package server

import (
	"encoding/json"
	"math"
	"net/http/httptest"
	"sort"
	"strconv"
	"testing"

	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// newModelServer serves a small random embedded model (the real sampler
// and forward, not the fake), and returns the model to check against.
func newModelServer(t *testing.T) (*httptest.Server, *model.Model) {
	t.Helper()
	cfg := model.DefaultConfig()
	cfg.Dim, cfg.HeadDim, cfg.Hidden, cfg.Layers, cfg.MaxPos = 32, 8, 96, 1, 64
	m, err := model.NewBuiltin(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	eg := gembedded.New(m, 2)
	txt := ByteText()
	s, err := New(Backend{Gen: eg, Scorer: eg, Model: testModel, Version: func() int64 { return 2 }, MaxModelLen: m.Context(), Text: &txt}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, m
}

// refDist is the model's log-softmax at every position of toks, computed
// here in float64 from the training forward's logits.
func refDist(t *testing.T, m *model.Model, toks []int32) [][]float64 {
	t.Helper()
	logits, err := m.Logits(toks)
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config().Vocab
	out := make([][]float64, len(toks))
	for p := range toks {
		row := logits[p*V : (p+1)*V]
		mx := math.Inf(-1)
		for _, x := range row {
			mx = math.Max(mx, float64(x))
		}
		var s float64
		for _, x := range row {
			s += math.Exp(float64(x) - mx)
		}
		out[p] = make([]float64, V)
		for i, x := range row {
			out[p][i] = float64(x) - mx - math.Log(s)
		}
	}
	return out
}

// topIDs are the n most likely ids of a distribution, ties by lower id.
func topIDs(d []float64, n int) []int {
	ids := make([]int, len(d))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return d[ids[a]] > d[ids[b]] })
	return ids[:n]
}

const lpTol = 1e-4

func TestTopLogprobsFromModel(t *testing.T) {
	ts, m := newModelServer(t)
	prompt := append([]int32{bytetok.BOS}, bytetok.Encode("the cat")...)
	r := do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 6, "seed": 3,
		"logprobs": 3, "return_token_ids": true, "ignore_eos": true})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var c struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				Tokens        []string             `json:"tokens"`
				TokenLogprobs []float32            `json:"token_logprobs"`
				TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatal(err)
	}
	ch := c.Choices[0]
	ref := refDist(t, m, append(append([]int32{}, prompt...), ch.TokenIDs...))
	if len(ch.Logprobs.TopLogprobs) != len(ch.TokenIDs) {
		t.Fatalf("%d top_logprobs for %d tokens", len(ch.Logprobs.TopLogprobs), len(ch.TokenIDs))
	}
	for k, tok := range ch.TokenIDs {
		d := ref[len(prompt)+k-1]
		// The sampled token's logprob (the generator's) is the model's.
		if math.Abs(float64(ch.Logprobs.TokenLogprobs[k])-d[tok]) > lpTol {
			t.Fatalf("token %d: logprob %g, model %g", k, ch.Logprobs.TokenLogprobs[k], d[tok])
		}
		top := ch.Logprobs.TopLogprobs[k]
		want := map[string]float64{tokenString(tok, false): d[tok]}
		for _, id := range topIDs(d, 3) {
			want[tokenString(int32(id), false)] = d[id]
		}
		if len(top) != len(want) {
			t.Fatalf("token %d: top %v, want %v", k, top, want)
		}
		for s, lp := range want {
			if got, ok := top[s]; !ok || math.Abs(got-lp) > lpTol {
				t.Fatalf("token %d: top %v, want %v", k, top, want)
			}
		}
	}
}

func TestChatTopLogprobsAndPromptLogprobs(t *testing.T) {
	ts, m := newModelServer(t)
	r := do(t, ts, "POST", "/v1/chat/completions", map[string]any{
		"messages": []map[string]string{{"role": "user", "content": "hey"}}, "max_tokens": 5, "seed": 5,
		"logprobs": true, "top_logprobs": 4, "prompt_logprobs": 2, "return_token_ids": true, "temperature": 1.5,
	})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	type alt struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	var c struct {
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		PromptLogprobs []map[string]struct {
			Logprob      float64 `json:"logprob"`
			Rank         int     `json:"rank"`
			DecodedToken string  `json:"decoded_token"`
		} `json:"prompt_logprobs"`
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				Content []struct {
					alt
					TopLogprobs []alt `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatal(err)
	}
	prompt, ch := c.PromptTokenIDs, c.Choices[0]
	ref := refDist(t, m, append(append([]int32{}, prompt...), ch.TokenIDs...))
	for k, e := range ch.Logprobs.Content {
		d := ref[len(prompt)+k-1]
		ids := topIDs(d, 4)
		if len(e.TopLogprobs) != 4 {
			t.Fatalf("token %d: %d alternatives", k, len(e.TopLogprobs))
		}
		for j, a := range e.TopLogprobs {
			if a.Token != tokenString(int32(ids[j]), false) || math.Abs(a.Logprob-d[ids[j]]) > lpTol {
				t.Fatalf("token %d alt %d: %+v, want id %d lp %g", k, j, a, ids[j], d[ids[j]])
			}
		}
	}
	if len(c.PromptLogprobs) != len(prompt) || c.PromptLogprobs[0] != nil {
		t.Fatalf("prompt_logprobs: %d entries for %d tokens, first %v", len(c.PromptLogprobs), len(prompt), c.PromptLogprobs[0])
	}
	for i := 1; i < len(prompt); i++ {
		d := ref[i-1]
		e := c.PromptLogprobs[i]
		want := map[int]bool{int(prompt[i]): true}
		for _, id := range topIDs(d, 2) {
			want[id] = true
		}
		if len(e) != len(want) {
			t.Fatalf("prompt %d: %v, want ids %v", i, e, want)
		}
		for id := range want {
			got, ok := e[strconv.Itoa(id)]
			rank := 1
			for _, x := range d {
				if x > d[id] {
					rank++
				}
			}
			if !ok || math.Abs(got.Logprob-d[id]) > lpTol || got.Rank != rank || got.DecodedToken != tokenString(int32(id), false) {
				t.Fatalf("prompt %d id %d: %+v, want lp %g rank %d", i, id, got, d[id], rank)
			}
		}
	}
}

// The request fields need a scorer, and refuse out-of-range counts.
func TestLogprobsLimits(t *testing.T) {
	ts, _ := newModelServer(t)
	for _, tc := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"logprobs": 21}, "logprobs"},
		{map[string]any{"logprobs": -1}, "logprobs"},
		{map[string]any{"prompt_logprobs": -1}, "prompt_logprobs"},
		{map[string]any{"prompt_logprobs": 21}, "prompt_logprobs"},
	} {
		tc.body["prompt"] = "a"
		r := do(t, ts, "POST", "/v1/completions", tc.body)
		if r.status != 400 || paramOf(t, r) != tc.param {
			t.Errorf("%v: %d %s", tc.body, r.status, r.body)
		}
	}
}
