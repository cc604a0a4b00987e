package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/longhaul-rl/longhaul/gen"
)

const testModel = "tinylm"

func newTest(t *testing.T, opts Options) (*httptest.Server, *Fake, *Server) {
	t.Helper()
	f := NewFake(3)
	s, err := New(f.Backend(testModel), opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, f, s
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, ts *httptest.Server, method, path string, body any, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, raw}
}

func decodeAs[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

func wantError(t *testing.T, r reply, status int, typ, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error == nil {
		t.Fatalf("not an OpenAI error: %s (%v)", r.body, err)
	}
	if e.Error.Type != typ || e.Error.Message == "" {
		t.Fatalf("error %+v, want type %q", *e.Error, typ)
	}
	if code != "" && (e.Error.Code == nil || *e.Error.Code != code) {
		t.Fatalf("error code %v, want %q", e.Error.Code, code)
	}
	// Every key of the envelope is present, null or not.
	var keys map[string]map[string]json.RawMessage
	_ = json.Unmarshal(r.body, &keys)
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := keys["error"][k]; !ok {
			t.Fatalf("error lacks %q: %s", k, r.body)
		}
	}
}

type completion struct {
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index    int    `json:"index"`
		Text     string `json:"text"`
		Logprobs *struct {
			Tokens        []string  `json:"tokens"`
			TokenLogprobs []float32 `json:"token_logprobs"`
			TextOffset    []int     `json:"text_offset"`
		} `json:"logprobs"`
		FinishReason   string  `json:"finish_reason"`
		TokenIDs       []int32 `json:"token_ids"`
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	WeightVersion  int64   `json:"weight_version"`
}

func TestCompletionByTokenIDs(t *testing.T) {
	ts, f, _ := newTest(t, Options{})
	prompt := []int32{bytetok.BOS, 'h', 'i', bytetok.Assistant}
	r := do(t, ts, "POST", "/v1/completions", map[string]any{
		"model": testModel, "prompt": prompt, "max_tokens": 12, "logprobs": 0, "seed": 7,
		"return_token_ids": true, "stop_token_ids": []int32{bytetok.End},
	})
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if got := r.header.Get(VersionHeader); got != "3" {
		t.Fatalf("version header %q", got)
	}
	c := decodeAs[completion](t, r)
	if c.Object != "text_completion" || c.Model != testModel || c.WeightVersion != 3 || len(c.Choices) != 1 {
		t.Fatalf("bad envelope: %s", r.body)
	}
	ch := c.Choices[0]
	if !slices.Equal(c.PromptTokenIDs, prompt) || !slices.Equal(ch.PromptTokenIDs, prompt) {
		t.Fatalf("prompt ids %v / %v", c.PromptTokenIDs, ch.PromptTokenIDs)
	}
	if len(ch.TokenIDs) == 0 || len(ch.TokenIDs) > 12 || ch.Logprobs == nil ||
		len(ch.Logprobs.Tokens) != len(ch.TokenIDs) || len(ch.Logprobs.TokenLogprobs) != len(ch.TokenIDs) ||
		len(ch.Logprobs.TextOffset) != len(ch.TokenIDs) {
		t.Fatalf("shapes: %s", r.body)
	}
	for i, tok := range ch.TokenIDs {
		if ch.Logprobs.TokenLogprobs[i] != FakeLogprob(tok, i) {
			t.Fatalf("logprob %d = %v, want %v", i, ch.Logprobs.TokenLogprobs[i], FakeLogprob(tok, i))
		}
		if want := tokenString(tok, false); ch.Logprobs.Tokens[i] != want {
			t.Fatalf("token string %q, want %q", ch.Logprobs.Tokens[i], want)
		}
	}
	if ch.Text != bytetok.DecodeText(ch.TokenIDs) {
		t.Fatalf("text %q vs tokens %v", ch.Text, ch.TokenIDs)
	}
	last := ch.TokenIDs[len(ch.TokenIDs)-1]
	if (last == bytetok.End) != (ch.FinishReason == "stop") {
		t.Fatalf("finish %q with last token %d", ch.FinishReason, last)
	}
	if c.Usage.PromptTokens != 4 || c.Usage.CompletionTokens != len(ch.TokenIDs) || c.Usage.TotalTokens != 4+len(ch.TokenIDs) {
		t.Fatalf("usage %+v", c.Usage)
	}
	if f.Calls() != 1 {
		t.Fatalf("calls %d", f.Calls())
	}
}

func TestCompletionByText(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	r := do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 5, "seed": 1, "return_token_ids": true})
	c := decodeAs[completion](t, r)
	want := append([]int32{bytetok.BOS}, bytetok.Encode("Once")...)
	if r.status != 200 || !slices.Equal(c.PromptTokenIDs, want) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	ch := c.Choices[0]
	if len(ch.TokenIDs) != 5 || ch.FinishReason != "length" || ch.Logprobs != nil || ch.Text != bytetok.DecodeText(ch.TokenIDs) {
		t.Fatalf("choice %+v", ch)
	}
	// Without return_token_ids the ids stay out of the body.
	r = do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "Once", "max_tokens": 5, "seed": 1})
	if bytes.Contains(r.body, []byte("token_ids")) {
		t.Fatalf("token ids leaked: %s", r.body)
	}
	if decodeAs[completion](t, r).Choices[0].Text != ch.Text {
		t.Fatal("same seed, different text")
	}
}

func TestBatchedNAndSeeds(t *testing.T) {
	ts, f, _ := newTest(t, Options{})
	body := map[string]any{"prompt": []int32{1, 2, 3}, "max_tokens": 20, "n": 8, "seed": 42, "return_token_ids": true}
	a := decodeAs[completion](t, do(t, ts, "POST", "/v1/completions", body))
	if got := f.Batches(); !slices.Equal(got, []int{8}) {
		t.Fatalf("batches %v, want one call of 8", got)
	}
	b := decodeAs[completion](t, do(t, ts, "POST", "/v1/completions", body))
	if len(a.Choices) != 8 {
		t.Fatalf("%d choices", len(a.Choices))
	}
	distinct := map[string]bool{}
	for i := range a.Choices {
		if a.Choices[i].Index != i || !slices.Equal(a.Choices[i].TokenIDs, b.Choices[i].TokenIDs) {
			t.Fatalf("choice %d not deterministic", i)
		}
		distinct[fmt.Sprint(a.Choices[i].TokenIDs)] = true
	}
	if len(distinct) < 7 {
		t.Fatalf("choices share seeds: %d distinct of 8", len(distinct))
	}
	body["seed"] = 43
	c := decodeAs[completion](t, do(t, ts, "POST", "/v1/completions", body))
	if slices.Equal(c.Choices[0].TokenIDs, a.Choices[0].TokenIDs) {
		t.Fatal("different seeds gave the same sample")
	}
	// Two prompts × n=2 are still one call, indexed prompt-major.
	r := do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": [][]int32{{1}, {2, 2}}, "n": 2, "max_tokens": 2, "return_token_ids": true})
	m := decodeAs[completion](t, r)
	if len(m.Choices) != 4 || !slices.Equal(m.Choices[3].PromptTokenIDs, []int32{2, 2}) || m.PromptTokenIDs != nil || m.Usage.PromptTokens != 3 {
		t.Fatalf("multi-prompt: %s", r.body)
	}
	if got := f.Batches(); got[len(got)-1] != 4 {
		t.Fatalf("batches %v", got)
	}
}

func TestStopStrings(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	base := map[string]any{"prompt": []int32{5}, "max_tokens": 40, "seed": 9, "return_token_ids": true, "logprobs": 0}
	full := decodeAs[completion](t, do(t, ts, "POST", "/v1/completions", base)).Choices[0]
	// Take a two-letter stop from the middle of the unconstrained sample.
	stop := full.Text[10:12]
	cut := strings.Index(full.Text, stop)
	base["stop"] = []string{stop, "zzzzzz"}
	ch := decodeAs[completion](t, do(t, ts, "POST", "/v1/completions", base)).Choices[0]
	if ch.Text != full.Text[:cut] || ch.FinishReason != "stop" {
		t.Fatalf("text %q finish %q, want %q stop", ch.Text, ch.FinishReason, full.Text[:cut])
	}
	if !slices.Equal(ch.TokenIDs, full.TokenIDs[:cut+2]) || len(ch.Logprobs.TokenLogprobs) != cut+2 {
		t.Fatalf("tokens %v, want through the stop string %v", ch.TokenIDs, full.TokenIDs[:cut+2])
	}
	// A one-byte stop goes to the generator as a token stop.
	base["stop"] = string(full.Text[3])
	ch = decodeAs[completion](t, do(t, ts, "POST", "/v1/completions", base)).Choices[0]
	if ch.FinishReason != "stop" || strings.Contains(ch.Text, string(full.Text[3])) || ch.TokenIDs[len(ch.TokenIDs)-1] != int32(full.Text[3]) {
		t.Fatalf("single-byte stop: %+v", ch)
	}
}

type chatCompletion struct {
	Object  string `json:"object"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Logprobs *struct {
			Content []struct {
				Token       string            `json:"token"`
				Logprob     float32           `json:"logprob"`
				Bytes       []int             `json:"bytes"`
				TopLogprobs []json.RawMessage `json:"top_logprobs"`
			} `json:"content"`
		} `json:"logprobs"`
		FinishReason string  `json:"finish_reason"`
		TokenIDs     []int32 `json:"token_ids"`
	} `json:"choices"`
	Usage          struct{ PromptTokens, CompletionTokens int } `json:"usage"`
	PromptTokenIDs []int32                                      `json:"prompt_token_ids"`
	WeightVersion  int64                                        `json:"weight_version"`
}

func TestChat(t *testing.T) {
	ts, f, _ := newTest(t, Options{})
	msgs := []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": []map[string]string{{"type": "text", "text": "hi"}}}}
	r := do(t, ts, "POST", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "logprobs": true,
		"n": 4, "seed": 5, "max_tokens": 64, "return_token_ids": true})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	c := decodeAs[chatCompletion](t, r)
	want, _ := bytetok.Render([]lhtok.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}, true)
	if c.Object != "chat.completion" || !slices.Equal(c.PromptTokenIDs, want) || len(c.Choices) != 4 || c.WeightVersion != 3 {
		t.Fatalf("envelope: %s", r.body)
	}
	if got := f.Batches(); !slices.Equal(got, []int{4}) {
		t.Fatalf("batches %v", got)
	}
	stopped := 0
	for _, ch := range c.Choices {
		if ch.Message.Role != "assistant" || ch.Message.Content != bytetok.DecodeText(ch.TokenIDs) {
			t.Fatalf("message %+v", ch.Message)
		}
		if len(ch.Logprobs.Content) != len(ch.TokenIDs) {
			t.Fatalf("logprobs %d vs %d tokens", len(ch.Logprobs.Content), len(ch.TokenIDs))
		}
		for i, e := range ch.Logprobs.Content {
			tok := ch.TokenIDs[i]
			if e.Logprob != FakeLogprob(tok, i) || e.TopLogprobs == nil || len(e.TopLogprobs) != 0 {
				t.Fatalf("entry %d: %+v", i, e)
			}
			if tok < 256 && (len(e.Bytes) != 1 || e.Bytes[0] != int(tok)) || tok == bytetok.End && (e.Bytes != nil || e.Token != "<|end|>") {
				t.Fatalf("entry %d: %+v", i, e)
			}
		}
		if ch.FinishReason == "stop" {
			stopped++
			if ch.TokenIDs[len(ch.TokenIDs)-1] != bytetok.End {
				t.Fatal("stop without End")
			}
		}
	}
	if stopped == 0 {
		t.Fatal("no choice stopped at End in 64 tokens")
	}
	// Bad role and empty messages.
	wantError(t, do(t, ts, "POST", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "wizard", "content": "x"}}}),
		400, "invalid_request_error", "invalid_value")
	wantError(t, do(t, ts, "POST", "/v1/chat/completions", map[string]any{"messages": []any{}}), 400, "invalid_request_error", "")
}

func TestTokenizeDetokenize(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	type tok struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []int32  `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}
	text := "héllo, wörld"
	r := decodeAs[tok](t, do(t, ts, "POST", "/tokenize", map[string]any{"prompt": text, "add_special_tokens": false, "return_token_strs": true}))
	if !slices.Equal(r.Tokens, bytetok.Encode(text)) || r.Count != len(text) || len(r.TokenStrs) != len(text) || r.MaxModelLen != 4096 {
		t.Fatalf("tokenize: %+v", r)
	}
	d := decodeAs[map[string]string](t, do(t, ts, "POST", "/detokenize", map[string]any{"tokens": r.Tokens}))
	if d["prompt"] != text {
		t.Fatalf("round trip %q", d["prompt"])
	}
	r = decodeAs[tok](t, do(t, ts, "POST", "/tokenize", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}}}))
	if !slices.Equal(r.Tokens, []int32{bytetok.BOS, bytetok.User, 'x', bytetok.End, bytetok.Assistant}) {
		t.Fatalf("chat tokenize %v", r.Tokens)
	}
	wantError(t, do(t, ts, "POST", "/detokenize", map[string]any{"tokens": []int{999}}), 400, "invalid_request_error", "invalid_value")
	wantError(t, do(t, ts, "POST", "/tokenize", map[string]any{}), 400, "invalid_request_error", "")
}

func TestModelsHealthMetrics(t *testing.T) {
	ts, _, s := newTest(t, Options{})
	m := decodeAs[struct {
		Object string `json:"object"`
		Data   []struct{ ID, Object, OwnedBy string }
	}](t, do(t, ts, "GET", "/v1/models", nil))
	if m.Object != "list" || len(m.Data) != 1 || m.Data[0].ID != testModel || m.Data[0].Object != "model" {
		t.Fatalf("models %+v", m)
	}
	if r := do(t, ts, "GET", "/health", nil); r.status != 200 || r.header.Get(VersionHeader) != "3" {
		t.Fatalf("health %d", r.status)
	}
	do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "a", "max_tokens": 3})
	do(t, ts, "POST", "/v1/completions", "{not json")
	s.SetLoading(true)
	wantError(t, do(t, ts, "GET", "/health", nil), 503, "service_unavailable", "model_loading")
	wantError(t, do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "a"}), 503, "service_unavailable", "model_loading")
	s.SetLoading(false)
	r := do(t, ts, "GET", "/metrics", nil)
	fams := parseMetrics(t, r.body)
	for _, c := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"longhaul_server_requests_total", map[string]string{"endpoint": "/v1/completions", "code": "200"}, 1},
		{"longhaul_server_requests_total", map[string]string{"endpoint": "/v1/completions", "code": "400"}, 1},
		{"longhaul_server_requests_total", map[string]string{"endpoint": "/v1/completions", "code": "503"}, 1},
		{"longhaul_server_request_duration_seconds", map[string]string{"endpoint": "/v1/completions"}, 3},
		{"longhaul_server_request_duration_seconds", map[string]string{"endpoint": "/health"}, 2},
		{"vllm:e2e_request_latency_seconds", map[string]string{"model_name": testModel}, 1},
		{"vllm:prompt_tokens_total", map[string]string{"model_name": testModel}, 2},
		{"vllm:generation_tokens_total", map[string]string{"model_name": testModel}, 3},
		{"vllm:num_requests_running", map[string]string{"model_name": testModel}, 1}, // the /metrics request itself
		{"longhaul_server_weight_version", nil, 3},
	} {
		if got, ok := metricValue(fams, c.family, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.family, c.labels, got, ok, c.want)
		}
	}
}

// parseMetrics parses a /metrics body with the Prometheus text parser.
func parseMetrics(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return fams
}

// metricValue is the value of the series of family with exactly labels: a
// counter's or gauge's value, a histogram's sample count.
func metricValue(fams map[string]*dto.MetricFamily, family string, labels map[string]string) (float64, bool) {
	f := fams[family]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			match = match && labels[l.GetName()] == l.GetValue()
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func TestErrors(t *testing.T) {
	ts, _, _ := newTest(t, Options{APIKey: "sekrit", MaxBodyBytes: 512})
	auth := []string{"Authorization", "Bearer sekrit"}
	ok := map[string]any{"prompt": "a", "max_tokens": 1}
	wantError(t, do(t, ts, "POST", "/v1/completions", ok), 401, "authentication_error", "invalid_api_key")
	wantError(t, do(t, ts, "POST", "/v1/completions", ok, "Authorization", "Bearer wrong"), 401, "authentication_error", "invalid_api_key")
	if r := do(t, ts, "POST", "/v1/completions", ok, auth...); r.status != 200 {
		t.Fatalf("authorized: %d %s", r.status, r.body)
	}
	if r := do(t, ts, "GET", "/health", nil); r.status != 200 {
		t.Fatal("health must not need the key")
	}
	big := map[string]any{"prompt": strings.Repeat("x", 600)}
	wantError(t, do(t, ts, "POST", "/v1/completions", big, auth...), 413, "invalid_request_error", "request_too_large")
	// Chunked (no Content-Length) bodies are cut by the reader instead.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", ts.URL+"/v1/completions", io.MultiReader(strings.NewReader(`{"prompt":"`), strings.NewReader(strings.Repeat("x", 600)+`"}`)))
	req.Header.Set("Authorization", "Bearer sekrit")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantError(t, reply{resp.StatusCode, resp.Header, raw}, 413, "invalid_request_error", "request_too_large")

	wantError(t, do(t, ts, "POST", "/v1/completions", `{"prompt": [1,2`, auth...), 400, "invalid_request_error", "invalid_json")
	wantError(t, do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": []int{1, 300}}, auth...), 400, "invalid_request_error", "invalid_value")
	wantError(t, do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "a", "n": 0}, auth...), 400, "invalid_request_error", "invalid_value")
	wantError(t, do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "a", "temperature": -1}, auth...), 400, "invalid_request_error", "invalid_value")
	wantError(t, do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "a", "frequency_penalty": 0.5}, auth...), 400, "invalid_request_error", "invalid_value")
	wantError(t, do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "a", "max_tokens": 5000}, auth...), 400, "invalid_request_error", "")
	wantError(t, do(t, ts, "POST", "/v1/completions", map[string]any{"model": "gpt-9", "prompt": "a"}, auth...), 404, "invalid_request_error", "model_not_found")
	wantError(t, do(t, ts, "GET", "/v1/nope", nil, auth...), 404, "invalid_request_error", "unknown_url")
	r := do(t, ts, "GET", "/v1/completions", nil, auth...)
	wantError(t, r, 405, "invalid_request_error", "method_not_allowed")
	if r.header.Get("Allow") != "POST" || r.header.Get(VersionHeader) != "3" {
		t.Fatalf("405 headers %v", r.header)
	}
}

type failingGen struct{}

func (failingGen) Generate(context.Context, []gen.Request) ([]gen.Result, error) {
	return nil, errors.New("device on fire")
}

func TestGeneratorFailureIs500(t *testing.T) {
	txt := ByteText()
	s, err := New(Backend{Gen: failingGen{}, Model: testModel, Text: &txt}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	r := do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "a"})
	wantError(t, r, 500, "server_error", "")
	if r.header.Get(VersionHeader) != "-1" {
		t.Fatalf("version header %q", r.header.Get(VersionHeader))
	}
	wantError(t, do(t, ts, "POST", "/update_weights_from_disk", map[string]any{"model_path": "/x"}), 501, "invalid_request_error", "not_implemented")
}

func TestReloadUnderLoad(t *testing.T) {
	ts, f, _ := newTest(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	const workers, perWorker = 6, 25
	for w := range workers {
		wg.Go(func() {
			last := int64(-1)
			for i := range perWorker {
				body, _ := json.Marshal(map[string]any{"prompt": []int{w, i}, "max_tokens": 4, "n": 2, "seed": i})
				req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", bytes.NewReader(body))
				resp, err := ts.Client().Do(req)
				if err != nil {
					errs <- err
					return
				}
				var c completion
				err = json.NewDecoder(resp.Body).Decode(&c)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					errs <- fmt.Errorf("status %d: %v", resp.StatusCode, err)
					return
				}
				if h := resp.Header.Get(VersionHeader); h != fmt.Sprint(c.WeightVersion) {
					errs <- fmt.Errorf("header %s vs body %d", h, c.WeightVersion)
					return
				}
				if c.WeightVersion < last {
					errs <- fmt.Errorf("version went back from %d to %d", last, c.WeightVersion)
					return
				}
				last = c.WeightVersion
			}
		})
	}
	type reloadReply struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
		Version int64  `json:"version"`
	}
	for i := range 10 {
		r := decodeAs[reloadReply](t, do(t, ts, "POST", "/update_weights_from_disk", map[string]any{"model_path": fmt.Sprintf("/w/%d", i)}))
		if !r.Success || r.Version != int64(4+i) || r.Message == "" {
			t.Fatalf("reload %d: %+v", i, r)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if f.Version() != 13 {
		t.Fatalf("version %d", f.Version())
	}
	// The next request reports the new version.
	c := decodeAs[completion](t, do(t, ts, "POST", "/v1/completions", map[string]any{"prompt": "a", "max_tokens": 1}))
	if c.WeightVersion != 13 {
		t.Fatalf("version after reloads %d", c.WeightVersion)
	}
	f.FailReload(errors.New("no such file"))
	r := do(t, ts, "POST", "/update_weights_from_disk", map[string]any{"model_path": "/missing"})
	rr := decodeAs[reloadReply](t, r)
	if r.status != 400 || rr.Success || rr.Version != 13 || !strings.Contains(rr.Message, "no such file") {
		t.Fatalf("failed reload: %d %s", r.status, r.body)
	}
	wantError(t, do(t, ts, "POST", "/update_weights_from_disk", map[string]any{}), 400, "invalid_request_error", "missing_required_parameter")
}
