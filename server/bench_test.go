package server

// Serving overhead: the same batched generation in process and through
// HTTP on loopback. The fake spends FakePerToken of CPU per sampled token
// (about the embedded model A's batch-16 decode cost on one core, from
// reference/tinylm-perf.md), so the ratio of ns/op is HTTP's share.
// Rerun with the embedded model by swapping the Backend:
//
//	go test -run '^$' -bench Serving -benchtime 3s ./server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/gen/openai"
	"github.com/longhaul-rl/longhaul/internal/cputime"
)

const benchPerToken = 30 * time.Microsecond

func BenchmarkServing(b *testing.B) {
	for _, shape := range []struct{ batch, tokens int }{{16, 64}, {16, 16}, {1, 64}} {
		name := fmt.Sprintf("batch%d-tok%d", shape.batch, shape.tokens)
		reqs := make([]gen.Request, shape.batch)
		for i := range reqs {
			reqs[i] = gen.Request{Prompt: make([]int32, 128), MaxTokens: shape.tokens, Temperature: 1, Seed: uint64(i)}
		}
		report := func(b *testing.B) {
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/sec, "req/s")
			b.ReportMetric(float64(b.N*shape.batch*shape.tokens)/sec, "tok/s")
		}
		b.Run(name+"/inproc", func(b *testing.B) {
			f := NewFake(0)
			f.PerToken = benchPerToken
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := f.Generate(b.Context(), reqs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			report(b)
		})
		httpBench := func(b *testing.B, perToken time.Duration, parallel bool) {
			f := NewFake(0)
			f.PerToken = perToken
			s, _ := New(f.Backend("bench"), Options{MaxBodyBytes: 1 << 24})
			ts := httptest.NewServer(s)
			defer ts.Close()
			body, _ := json.Marshal(map[string]any{"prompt": reqs[0].Prompt, "n": shape.batch, "max_tokens": shape.tokens,
				"logprobs": 1, "return_token_ids": true, "seed": 1})
			run := b.RunParallel
			if !parallel {
				run = func(body func(*testing.PB)) { b.SetParallelism(1); b.RunParallel(body) }
			}
			run(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := ts.Client().Post(ts.URL+"/v1/completions", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					var c struct {
						Choices []struct {
							TokenIDs []int32 `json:"token_ids"`
						} `json:"choices"`
					}
					err = json.NewDecoder(resp.Body).Decode(&c)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK || len(c.Choices) != shape.batch {
						b.Errorf("status %d: %v", resp.StatusCode, err)
						return
					}
				}
			})
			report(b)
		}
		b.Run(name+"/http", func(b *testing.B) { httpBench(b, benchPerToken, true) })
		// With a free generator, what is left is the HTTP and JSON cost of
		// one request, to set against batch × tokens × benchPerToken.
		// cpu-µs/op (user+system time of the whole process, client and
		// server) is the figure to use on a shared machine: wall time there
		// measures the neighbours.
		b.Run(name+"/http-overhead", func(b *testing.B) {
			start := cputime.Process()
			httpBench(b, 0, false)
			b.ReportMetric(float64((cputime.Process()-start).Microseconds())/float64(b.N), "cpu-µs/op")
		})
		b.Run(name+"/inproc-overhead", func(b *testing.B) {
			f := NewFake(0)
			start := cputime.Process()
			for b.Loop() {
				if _, err := f.Generate(b.Context(), reqs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cputime.Process()-start).Microseconds())/float64(b.N), "cpu-µs/op")
		})
		// By default the gen/openai client sends one HTTP call per request
		// (n=1, own seed), so the generator sees batches of 1: for the
		// embedded model, which batches, the cost is higher than this fake
		// shows. GroupByPrompt sends the group as one n=16 call.
		clientBench := func(b *testing.B, grouped bool) {
			f := NewFake(0)
			f.PerToken = benchPerToken
			s, _ := New(f.Backend("bench"), Options{})
			ts := httptest.NewServer(s)
			defer ts.Close()
			c, err := openai.New(b.Context(), []string{ts.URL}, openai.Options{GroupByPrompt: grouped})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Generate(b.Context(), reqs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			report(b)
		}
		b.Run(name+"/openai-client", func(b *testing.B) { clientBench(b, false) })
		b.Run(name+"/openai-client-grouped", func(b *testing.B) { clientBench(b, true) })
	}
}
