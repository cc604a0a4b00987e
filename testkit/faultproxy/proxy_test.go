package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/gen/openai"
)

// upstream is a stand-in for `longhaul serve`: /health and a
// /v1/completions that answers every request with the same three tokens.
func upstream(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"status":"ok"}`) })
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt []int32 `json:"prompt"`
			N      int     `json:"n"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n := max(req.N, 1)
		type lp struct {
			Tokens        []string  `json:"tokens"`
			TokenLogprobs []float32 `json:"token_logprobs"`
		}
		type choice struct {
			Index          int     `json:"index"`
			FinishReason   string  `json:"finish_reason"`
			TokenIDs       []int32 `json:"token_ids"`
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
			Logprobs       lp      `json:"logprobs"`
		}
		var out struct {
			Choices []choice `json:"choices"`
		}
		for i := range n {
			out.Choices = append(out.Choices, choice{Index: i, FinishReason: "length", TokenIDs: []int32{5, 6, 7},
				PromptTokenIDs: req.Prompt, Logprobs: lp{Tokens: []string{"token_id:5", "token_id:6", "token_id:7"},
					TokenLogprobs: []float32{-0.5, -0.25, -0.125}}})
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Longhaul-Weight-Version", "3")
		json.NewEncoder(w).Encode(out)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback HTTP with deadlines; skipped with -short")
	}
}

const completionBody = `{"prompt":[1,2,3],"max_tokens":4,"temperature":1,"top_p":1,"seed":1,"logprobs":1,"return_token_ids":true,"n":1}`

func post(hc *http.Client, url string) (*http.Response, []byte, error) {
	resp, err := hc.Post(url+"/v1/completions", "application/json", strings.NewReader(completionBody))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// TestPlainClientSeesEachFault: every fault as a plain net/http client sees
// it, and the proxy counts exactly the one it injected.
func TestPlainClientSeesEachFault(t *testing.T) {
	skipShort(t)
	up := upstream(t)
	for _, f := range append([]Fault{None}, Faults...) {
		t.Run(f.String(), func(t *testing.T) {
			p := New(up.URL, OnPath("/v1/completions", FirstK(1, f)))
			defer p.Close()
			hc := &http.Client{Timeout: 300 * time.Millisecond}
			resp, body, err := post(hc, p.URL())
			switch f {
			case None:
				if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Longhaul-Weight-Version") != "3" {
					t.Fatalf("pass-through: %v %v", resp, err)
				}
				var v map[string]any
				if err := json.Unmarshal(body, &v); err != nil {
					t.Fatalf("pass-through body: %v: %s", err, body)
				}
			case Status500, Status503, Status429, Status408, Status400:
				if err != nil || resp.StatusCode != f.Status() {
					t.Fatalf("want HTTP %d, got %v %v", f.Status(), resp, err)
				}
				if !strings.Contains(string(body), "injected "+f.String()) {
					t.Fatalf("error body %q", body)
				}
			case Timeout:
				var ne interface{ Timeout() bool }
				if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("want a client timeout, got %v %v", resp, err)
				}
			case Reset:
				if err == nil || !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "EOF") {
					t.Fatalf("want a reset connection, got %v %v", resp, err)
				}
			case Truncated:
				if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("want an unexpected EOF in the body, got %v (body %q)", err, body)
				}
			case Malformed:
				var v any
				if err != nil || resp.StatusCode != 200 || json.Unmarshal(body, &v) == nil {
					t.Fatalf("want a 200 that is not JSON, got %v %v %q", resp, err, body)
				}
			case ShortLogprobs:
				var v struct {
					Choices []struct {
						TokenIDs []int32 `json:"token_ids"`
						Logprobs struct {
							TokenLogprobs []float64 `json:"token_logprobs"`
						} `json:"logprobs"`
					} `json:"choices"`
				}
				if err != nil || json.Unmarshal(body, &v) != nil || len(v.Choices) != 1 {
					t.Fatalf("want a completion, got %v %q", err, body)
				}
				if c := v.Choices[0]; len(c.TokenIDs) != 3 || len(c.Logprobs.TokenLogprobs) != 2 {
					t.Fatalf("want 3 token ids and 2 logprobs, got %+v", c)
				}
			}
			if f != None && p.Injected(f) != 1 {
				t.Fatalf("injected %v %d times, want 1 (counts %v)", f, p.Injected(f), p.Counts())
			}
			if f != None && len(p.Counts()) != 1 {
				t.Fatalf("counts %v, want only %v", p.Counts(), f)
			}
			// The next request passes: FirstK(1) is spent.
			resp, _, err = post(&http.Client{Timeout: 5 * time.Second}, p.URL())
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("second request: %v %v", resp, err)
			}
		})
	}
}

// TestOpenAIClientClassifiesEachFault: gen/openai's client turns every
// fault into an *openai.Error of the class the design gives it.
func TestOpenAIClientClassifiesEachFault(t *testing.T) {
	skipShort(t)
	up := upstream(t)
	for _, f := range Faults {
		t.Run(f.String(), func(t *testing.T) {
			p := New(up.URL, OnPath("/v1/completions", FirstK(1, f)))
			defer p.Close()
			ctx := context.Background()
			c, err := openai.New(ctx, []string{p.URL() + "/v1"}, openai.Options{RequestTimeout: 300 * time.Millisecond,
				MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := []gen.Request{{Prompt: []int32{1, 2, 3}, MaxTokens: 4, Temperature: 1, Seed: 1}}
			_, err = c.Generate(ctx, req)
			if f.String() == "503" || f.String() == "reset" {
				// No server can take the call (overloaded, or the connection
				// dropped): an outage the client waits out and retries, not an
				// error of the call (docs/failures.md).
				if err != nil || p.Injected(f) != 1 {
					t.Fatalf("fault %v: %v after %d injections, want it waited out", f, err, p.Injected(f))
				}
				return
			}
			if err == nil {
				t.Fatalf("fault %v: no error", f)
			}
			var oe *openai.Error
			if !errors.As(err, &oe) {
				t.Fatalf("fault %v: %T %v is not an *openai.Error", f, err, err)
			}
			if got := failure.ClassOf(err); got != f.Class() {
				t.Errorf("fault %v classified %q, want %q: %v", f, got, f.Class(), err)
			}
			if st := f.Status(); st != 0 && oe.Status != st {
				t.Errorf("fault %v: status %d, want %d", f, oe.Status, st)
			}
			if p.Injected(f) != 1 {
				t.Errorf("injected %v %d times, want 1", f, p.Injected(f))
			}
			// The fault is spent: the next call succeeds (after a reset the
			// server's 1 ms backoff has passed).
			time.Sleep(5 * time.Millisecond)
			res, err := c.Generate(ctx, req)
			if err != nil || len(res) != 1 || len(res[0].Tokens) != 3 || res[0].Version != 3 {
				t.Fatalf("after the fault: %+v %v", res, err)
			}
		})
	}
}

// TestPlans: the counting plans decide what they say, and the proxy counts
// per kind under concurrent requests.
func TestPlans(t *testing.T) {
	r := &Request{Path: "/v1/completions"}
	decide := func(p Plan, n int) []Fault {
		out := make([]Fault, n)
		for i := range out {
			out[i] = p.Decide(r)
		}
		return out
	}
	if got := fmt.Sprint(decide(Every(3, Status503), 7)); got != "[none none 503 none none 503 none]" {
		t.Errorf("Every(3): %s", got)
	}
	if got := fmt.Sprint(decide(Cycle(2, Status500, Reset), 8)); got != "[none 500 none reset none 500 none reset]" {
		t.Errorf("Cycle(2): %s", got)
	}
	if got := fmt.Sprint(decide(FirstK(2, Malformed), 4)); got != "[malformed malformed none none]" {
		t.Errorf("FirstK(2): %s", got)
	}
	a, b := decide(Random(9, 0.3, Status500, Timeout), 200), decide(Random(9, 0.3, Status500, Timeout), 200)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("Random is not reproducible from its seed")
	}
	n := 0
	for _, f := range a {
		if f != None {
			n++
		}
	}
	if n < 30 || n > 90 {
		t.Errorf("Random(p=0.3) faulted %d of 200", n)
	}
	if f := OnPath("/health", Every(1, Status500)).Decide(r); f != None {
		t.Errorf("OnPath faulted another path: %v", f)
	}
	sticky := Sticky(1, 0.5, Malformed)
	hit, miss := 0, 0
	for i := range 64 {
		body := []byte(fmt.Sprintf(`{"prompt":[%d,2],"seed":1}`, i))
		f1 := sticky.Decide(&Request{Body: body})
		f2 := sticky.Decide(&Request{Body: bytes.Replace(body, []byte(`"seed":1`), []byte(`"seed":2`), 1)})
		if f1 != f2 {
			t.Fatalf("Sticky decided %v then %v for prompt %d", f1, f2, i)
		}
		if f1 == Malformed {
			hit++
		} else {
			miss++
		}
	}
	if hit == 0 || miss == 0 {
		t.Errorf("Sticky(p=0.5): %d hit, %d missed", hit, miss)
	}

	skipShort(t)
	up := upstream(t)
	p := New(up.URL, OnPath("/v1/completions", Every(4, Status503)))
	defer p.Close()
	var wg sync.WaitGroup
	hc := &http.Client{Timeout: 5 * time.Second}
	for range 40 {
		wg.Go(func() {
			if _, _, err := post(hc, p.URL()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if p.Injected(Status503) != 10 || p.Requests() != 40 || p.Forwarded() != 30 {
		t.Errorf("40 requests, every 4th a 503: injected %d, requests %d, forwarded %d", p.Injected(Status503), p.Requests(), p.Forwarded())
	}
}

func TestNthPrompt(t *testing.T) {
	p := NthPrompt(Malformed, 2)
	body := func(prompt, seed int) *Request {
		return &Request{Body: []byte(fmt.Sprintf(`{"prompt":[%d],"seed":%d}`, prompt, seed))}
	}
	got := []Fault{p.Decide(body(10, 1)), p.Decide(body(11, 1)), p.Decide(body(10, 2)), p.Decide(body(11, 2)), p.Decide(body(12, 1)),
		p.Decide(&Request{Body: []byte("{}")})}
	if fmt.Sprint(got) != "[none malformed none malformed none none]" {
		t.Errorf("NthPrompt(2): %v", got)
	}
}
