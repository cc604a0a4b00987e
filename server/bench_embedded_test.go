package server_test

// Serving overhead with the real backend: `longhaul serve`'s handler over
// runner.EmbeddedBackend (the default config's model, through the
// same gen.Batcher the server uses), against the same backend's generator
// called in process. Each op is one batch of 16 completions, run both
// ways back to back inside the same iteration, so the two paths share
// whatever the neighbours on a busy machine are doing:
//
//	GOEXPERIMENT=simd go test -run '^$' -bench ServingEmbedded -benchtime 40x ./server
//
// Shapes: n16 is one HTTP request with n=16 (a group, as gen/openai's
// GroupByPrompt sends it; in process one Generate of 16 requests); c16 is
// 16 concurrent loopback clients sending n=1 each (gen/openai's default;
// in process 16 goroutines calling Generate with one request each, which
// the Batcher merges). Figures and their reading: docs/serving-bench.md.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/cputime"
	"github.com/longhaul-rl/longhaul/runner"
	"github.com/longhaul-rl/longhaul/server"
)

const embeddedBatch = 16

func BenchmarkServingEmbedded(b *testing.B) {
	cfg := config.Default()
	for _, shape := range []struct {
		name           string
		prompt, tokens int
		grouped        bool
	}{
		{"n16-prompt32-tok32", 32, 32, true},
		{"c16-prompt32-tok32", 32, 32, false},
		{"n16-prompt40-tok6", 40, 6, true}, // the ledger run's call shape (sampling.max_tokens_per_call = 6)
		{"c16-prompt40-tok6", 40, 6, false},
	} {
		b.Run(shape.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			be, err := runner.EmbeddedBackend(ctx, cfg, "")
			if err != nil {
				b.Fatal(err)
			}
			h, err := server.New(be, server.Options{MaxBodyBytes: 1 << 24})
			if err != nil {
				b.Fatal(err)
			}
			ts := httptest.NewServer(h)
			defer ts.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 2 * embeddedBatch}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: time.Minute}

			prompt := make([]int32, shape.prompt)
			for i := range prompt {
				prompt[i] = int32('a' + i%26)
			}
			reqs := make([]gen.Request, embeddedBatch)
			for i := range reqs {
				reqs[i] = gen.Request{Prompt: prompt, MaxTokens: shape.tokens, Temperature: 1, TopP: 1, Seed: uint64(i + 1)}
			}
			inproc := func() (int, error) {
				if shape.grouped {
					res, err := be.Gen.Generate(ctx, reqs)
					return countTokens(res), err
				}
				return fanOut(func(i int) (int, error) {
					res, err := be.Gen.Generate(ctx, reqs[i:i+1])
					return countTokens(res), err
				})
			}
			post := func(n int, seed uint64) (int, error) {
				return postCompletion(ctx, hc, ts.URL, prompt, shape.tokens, n, seed)
			}
			overHTTP := func() (int, error) {
				if shape.grouped {
					return post(embeddedBatch, 1)
				}
				return fanOut(func(i int) (int, error) { return post(1, uint64(i+1)) })
			}
			// Warm both paths (connections, the model's scratch buffers).
			for range 2 {
				if _, err := inproc(); err != nil {
					b.Fatal(err)
				}
				if _, err := overHTTP(); err != nil {
					b.Fatal(err)
				}
			}

			var wall, cpu [2]time.Duration
			var toks [2]int
			ops := 0
			for b.Loop() {
				for k, f := range []func() (int, error){inproc, overHTTP} {
					t0, c0 := time.Now(), cputime.Process()
					n, err := f()
					cpu[k] += cputime.Process() - c0
					wall[k] += time.Since(t0)
					if err != nil {
						b.Fatal(err)
					}
					toks[k] += n
				}
				ops++
			}
			if toks[0] != toks[1] {
				b.Fatalf("in process sampled %d tokens, over HTTP %d", toks[0], toks[1])
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(ops) }
			b.ReportMetric(per(wall[0]), "inproc-ms/op")
			b.ReportMetric(per(wall[1]), "http-ms/op")
			b.ReportMetric(per(cpu[0]), "inproc-cpu-ms/op")
			b.ReportMetric(per(cpu[1]), "http-cpu-ms/op")
			b.ReportMetric(100*(wall[1].Seconds()/wall[0].Seconds()-1), "wall-overhead-%")
			b.ReportMetric(100*(cpu[1].Seconds()/cpu[0].Seconds()-1), "cpu-overhead-%")
			b.ReportMetric(float64(ops*embeddedBatch)/wall[1].Seconds(), "http-completions/s")
			b.ReportMetric(float64(toks[1])/wall[1].Seconds(), "http-tok/s")
			b.ReportMetric(float64(ops*embeddedBatch)/wall[0].Seconds(), "inproc-completions/s")
			b.ReportMetric(float64(toks[0])/wall[0].Seconds(), "inproc-tok/s")
		})
	}
}

// fanOut runs f for each member of the batch concurrently and sums what
// they return.
func fanOut(f func(i int) (int, error)) (int, error) {
	var wg sync.WaitGroup
	ns := make([]int, embeddedBatch)
	errs := make([]error, embeddedBatch)
	for i := range embeddedBatch {
		wg.Go(func() { ns[i], errs[i] = f(i) })
	}
	wg.Wait()
	total := 0
	for i := range ns {
		if errs[i] != nil {
			return 0, errs[i]
		}
		total += ns[i]
	}
	return total, nil
}

func countTokens(res []gen.Result) int {
	n := 0
	for _, r := range res {
		n += len(r.Tokens)
	}
	return n
}

// postCompletion sends the request gen/openai sends (token-id prompt,
// logprobs, token ids back, EOS ignored) with n choices and returns the
// number of sampled tokens.
func postCompletion(ctx context.Context, hc *http.Client, base string, prompt []int32, tokens, n int, seed uint64) (int, error) {
	body, err := json.Marshal(map[string]any{"prompt": prompt, "n": n, "max_tokens": tokens, "temperature": 1, "top_p": 1,
		"seed": seed, "logprobs": 1, "return_token_ids": true, "return_tokens_as_token_ids": true, "ignore_eos": true})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var c struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				TokenLogprobs []float64 `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	err = json.NewDecoder(resp.Body).Decode(&c)
	_, _ = io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || len(c.Choices) != n {
		return 0, fmt.Errorf("HTTP %d, %d choices: %v", resp.StatusCode, len(c.Choices), err)
	}
	total := 0
	for _, ch := range c.Choices {
		if len(ch.Logprobs.TokenLogprobs) != len(ch.TokenIDs) {
			return 0, fmt.Errorf("%d logprobs for %d tokens", len(ch.Logprobs.TokenLogprobs), len(ch.TokenIDs))
		}
		total += len(ch.TokenIDs)
	}
	return total, nil
}
