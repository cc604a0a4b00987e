package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/server"
)

// TestHFServeTokenIDs serves an HF directory written by model.Init over
// HTTP on loopback: token-id completions return the model's tokens with
// logprobs equal to the model's own; text, chat, stop strings and ids
// outside the vocabulary are 400s naming the field.
func TestHFServeTokenIDs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	m, err := model.Init(model.InitOptions{Family: model.FamilyQwen3, Layers: 2, Hidden: 32, Heads: 4, KVHeads: 2, Vocab: 700, MaxPos: 64, Seed: 2}, dir)
	if err != nil {
		t.Fatal(err)
	}
	be, err := HFBackend(ctx, dir, HFServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(be, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	post := func(path, body string) (int, map[string]any) {
		resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.NewDecoder(bytes.NewReader(b)).Decode(&out)
		return resp.StatusCode, out
	}
	code, out := post("/v1/completions", `{"model":"`+be.Model+`","prompt":[5,600,7],"max_tokens":6,"temperature":1,"seed":3,"logprobs":0,"return_token_ids":true}`)
	if code != 200 {
		t.Fatalf("completion: %d %v", code, out)
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	var toks []int32
	for _, v := range ch["token_ids"].([]any) {
		toks = append(toks, int32(v.(float64)))
	}
	if len(toks) == 0 || ch["text"] != "" {
		t.Fatalf("choice %v", ch)
	}
	lps, err := m.Logprobs(ctx, [][]int32{append([]int32{5, 600, 7}, toks...)})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range ch["logprobs"].(map[string]any)["token_logprobs"].([]any) {
		if got := float32(v.(float64)); got != lps[0][3+i] {
			t.Fatalf("token %d: served logprob %v, model %v", i, got, lps[0][3+i])
		}
	}
	for _, c := range []struct{ path, body, want string }{
		{"/v1/completions", `{"prompt":"hello","max_tokens":2}`, "without a tokenizer"},
		{"/v1/completions", `{"prompt":[1,700],"max_tokens":2}`, "out of range [0, 700)"},
		{"/v1/completions", `{"prompt":[1,2],"max_tokens":2,"stop":"x"}`, "stop strings"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, "without a tokenizer"},
		{"/tokenize", `{"prompt":"hi"}`, "without a tokenizer"},
		{"/detokenize", `{"tokens":[1]}`, "without a tokenizer"},
	} {
		code, out := post(c.path, c.body)
		msg, _ := json.Marshal(out)
		if code != 400 || !strings.Contains(string(msg), c.want) {
			t.Errorf("%s %s: %d %s, want 400 with %q", c.path, c.body, code, msg, c.want)
		}
	}
}
