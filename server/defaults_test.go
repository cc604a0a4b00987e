package server

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/longhaul-rl/longhaul/gen"
)

// recordGen answers one token per request and keeps the requests.
type recordGen struct {
	mu   sync.Mutex
	reqs []gen.Request
}

func (g *recordGen) Generate(_ context.Context, reqs []gen.Request) ([]gen.Result, error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, reqs...)
	g.mu.Unlock()
	out := make([]gen.Result, len(reqs))
	for i := range out {
		out[i] = gen.Result{Tokens: []int32{'a'}, Logprobs: []float32{-1}, Finish: "length"}
	}
	return out, nil
}

func (g *recordGen) last() gen.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reqs[len(g.reqs)-1]
}

// A model's generation_config.json defaults fill the sampling fields a
// request leaves out, as vLLM fills them; a field the request sends wins,
// and top_k -1 turns the default top_k off.
func TestGenerationDefaults(t *testing.T) {
	g := &recordGen{}
	temp, topP, topK, maxNew := 0.6, 0.95, 20, 7
	txt := ByteText()
	s, err := New(Backend{Gen: g, Model: testModel, Text: &txt, MaxModelLen: 64,
		Defaults: Defaults{Temperature: &temp, TopP: &topP, TopK: &topK, MaxTokens: &maxNew}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	for _, tc := range []struct {
		body       map[string]any
		temp, topP float32
		topK, max  int
	}{
		{map[string]any{"prompt": "x"}, 0.6, 0.95, 20, 7},
		{map[string]any{"prompt": "x", "temperature": 1, "top_p": 1, "top_k": -1, "max_tokens": 3}, 1, 1, 0, 3},
		{map[string]any{"prompt": "x", "top_k": 0}, 0.6, 0.95, 0, 7},
		{map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}}}, 0.6, 0.95, 20, 7},
	} {
		path := "/v1/completions"
		if tc.body["messages"] != nil {
			path = "/v1/chat/completions"
		}
		if r := do(t, ts, "POST", path, tc.body); r.status != 200 {
			t.Fatalf("%v: %d %s", tc.body, r.status, r.body)
		}
		r := g.last()
		if r.Temperature != tc.temp || r.TopP != tc.topP || r.TopK != tc.topK || r.MaxTokens != tc.max {
			t.Errorf("%v: sampled with temperature %v top_p %v top_k %d max_tokens %d, want %v %v %d %d",
				tc.body, r.Temperature, r.TopP, r.TopK, r.MaxTokens, tc.temp, tc.topP, tc.topK, tc.max)
		}
	}
}
