package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/server"
)

// TestEngineShapesAgainstLonghaulServe: each API's request shape, sent to
// longhaul serve's route of that shape, samples exactly what the backend
// samples in process, with the version it served.
func TestEngineShapesAgainstLonghaulServe(t *testing.T) {
	for _, api := range []string{APIOpenAI, APIVLLM, APISGLang} {
		t.Run(api, func(t *testing.T) {
			ts, f := newLonghaul(t, nil, 3)
			c := newClient(t, []string{ts.URL}, Options{API: api})
			reqs := []gen.Request{req(1), req(2), req(3)}
			reqs[2].TopK, reqs[2].TopP = 5, 0.9
			got, err := c.Generate(t.Context(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			want, err := f.Generate(context.Background(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range reqs {
				if !slices.Equal(got[i].Tokens, want[i].Tokens) || !slices.Equal(got[i].Logprobs, want[i].Logprobs) ||
					got[i].Finish != want[i].Finish || got[i].Version != 3 {
					t.Fatalf("request %d: got %+v, want %+v at version 3", i, got[i], want[i])
				}
			}
		})
	}
}

// stockVLLM strips what longhaul serve adds to vLLM's answer (the version
// header and body field), so the client must attribute versions itself, as
// against a real vLLM.
func stockVLLM(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/inference/v1/generate" {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var body map[string]any
		raw := rec.Body.Bytes()
		if json.Unmarshal(raw, &body) == nil {
			delete(body, "weight_version")
			raw, _ = json.Marshal(body)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(raw)
	})
}

// TestUpdateWeightsVersionsEveryCall: calls run while UpdateWeights moves
// two servers through versions; every result's tokens are the ones the
// backend samples at the version the result names, so no call is
// attributed to the wrong version, on every API.
func TestUpdateWeightsVersionsEveryCall(t *testing.T) {
	for _, api := range []string{APIOpenAI, APIVLLM, APISGLang} {
		t.Run(api, func(t *testing.T) {
			var urls []string
			var fakes []*server.Fake
			for range 2 {
				f := server.NewFake(0)
				s, err := server.New(f.Backend("tinylm"), server.Options{})
				if err != nil {
					t.Fatal(err)
				}
				ts := httptest.NewServer(stockVLLM(s))
				t.Cleanup(ts.Close)
				urls, fakes = append(urls, ts.URL), append(fakes, f)
			}
			c := newClient(t, urls, Options{API: api})
			ctx := t.Context()
			if err := c.UpdateWeights(ctx, "/weights/v1", 1); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var results []gen.Result
			var reqs []gen.Request
			for w := range 4 {
				wg.Go(func() {
					for k := uint64(0); ; k++ {
						select {
						case <-stop:
							return
						default:
						}
						r := req(uint64(w)<<32 | k)
						res, err := c.Generate(ctx, []gen.Request{r})
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						results, reqs = append(results, res[0]), append(reqs, r)
						mu.Unlock()
					}
				})
			}
			for v := int64(2); v <= 4; v++ {
				if err := c.UpdateWeights(ctx, "/weights/v", v); err != nil {
					t.Fatal(err)
				}
			}
			close(stop)
			wg.Wait()
			for u, v := range c.ServedVersions() {
				if v != 4 {
					t.Fatalf("%s confirmed at %d, want 4", u, v)
				}
			}
			seen := map[int64]int{}
			for i, res := range results {
				want, err := server.NewFake(res.Version).Generate(context.Background(), []gen.Request{reqs[i]})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.Tokens, want[0].Tokens) {
					t.Fatalf("call %d says version %d but sampled other tokens", i, res.Version)
				}
				seen[res.Version]++
			}
			if len(results) == 0 || seen[-1] != 0 {
				t.Fatalf("versions seen %v over %d calls", seen, len(results))
			}
			_ = fakes
		})
	}
}

// TestUpdateWeightsFailureFences: a reload that fails leaves the server out
// of rotation (its weights are in doubt) until an update succeeds.
func TestUpdateWeightsFailureFences(t *testing.T) {
	for _, api := range []string{APIOpenAI, APIVLLM, APISGLang} {
		t.Run(api, func(t *testing.T) {
			ts, f := newLonghaul(t, nil, 0)
			// A short outage limit: the fenced server is an outage to wait out.
			c := newClient(t, []string{ts.URL}, Options{API: api, MaxOutage: 200 * time.Millisecond})
			f.FailReload(io.ErrUnexpectedEOF)
			if err := c.UpdateWeights(t.Context(), "/w", 1); err == nil {
				t.Fatal("a failed reload reported success")
			}
			if _, err := c.Generate(t.Context(), []gen.Request{req(1)}); err == nil || !strings.Contains(err.Error(), "no generation server is up") {
				t.Fatalf("generation on a fenced server: %v", err)
			}
			// Once reloads work again the prober brings the server to the
			// last version (the fake's reload bumps its version by one).
			f.FailReload(nil)
			deadline := time.Now().Add(10 * time.Second)
			for c.ServedVersions()[ts.URL] != 1 {
				if time.Now().After(deadline) {
					t.Fatal("the fenced server was not brought to version 1")
				}
				time.Sleep(5 * time.Millisecond)
			}
			res, err := c.Generate(t.Context(), []gen.Request{req(1)})
			if err != nil || res[0].Version != 1 {
				t.Fatalf("after a good update: %+v %v", res, err)
			}
			// A version the server does not report is a failed update.
			if err := c.UpdateWeights(t.Context(), "/w", 7); err == nil {
				t.Fatal("version 7 confirmed while the server loaded 2")
			}
		})
	}
}

// stub answers from recorded responses (testdata/*.json, built from the
// engines' documented examples) and records each request body by path.
type stub struct {
	mu   sync.Mutex
	seen map[string][]map[string]any
	t    *testing.T
}

func newStub(t *testing.T, answers map[string]string) (*httptest.Server, *stub) {
	st := &stub{seen: map[string][]map[string]any{}, t: t}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		key := r.Method + " " + r.URL.RequestURI()
		st.mu.Lock()
		st.seen[key] = append(st.seen[key], body)
		st.mu.Unlock()
		file, ok := answers[key]
		if !ok {
			http.Error(w, `{"detail":"Not Found"}`, http.StatusNotFound)
			return
		}
		b, err := readTestdata(file)
		if err != nil {
			t.Error(err)
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(ts.Close)
	return ts, st
}

func readTestdata(name string) ([]byte, error) {
	b, err := os.ReadFile("testdata/" + name)
	return bytes.TrimSpace(b), err
}

func (s *stub) body(key string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen[key]) == 0 {
		s.t.Fatalf("no request to %s; saw %v", key, keys(s.seen))
	}
	return s.seen[key][len(s.seen[key])-1]
}

func keys(m map[string][]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestRecordedVLLM: the field names of vLLM's GenerateRequest/Response and
// of its dev-mode weight routes, against answers shaped as vLLM writes them.
func TestRecordedVLLM(t *testing.T) {
	ts, st := newStub(t, map[string]string{
		"POST /inference/v1/generate": "vllm_generate.json",
		"GET /health":                 "health.txt", // both engines answer 200 with an empty body
		"POST /pause?mode=wait":       "vllm_pause.json",
		"POST /collective_rpc":        "vllm_collective_rpc.json",
		"POST /update_weight_version": "vllm_update_weight_version.json",
		"GET /weight_info":            "vllm_weight_info.json",
		"POST /resume":                "vllm_resume.json",
	})
	c := newClient(t, []string{ts.URL}, Options{API: APIVLLM, Model: "Qwen/Qwen3-0.6B"})
	if err := c.UpdateWeights(t.Context(), "/ckpt/step-5", 5); err != nil {
		t.Fatal(err)
	}
	rpc := st.body("POST /collective_rpc")
	if rpc["method"] != "reload_weights" || rpc["kwargs"].(map[string]any)["weights_path"] != "/ckpt/step-5" {
		t.Fatalf("collective_rpc body %v", rpc)
	}
	if st.body("POST /update_weight_version")["new_version"] != "5" {
		t.Fatal("update_weight_version must send new_version as a string")
	}
	// The engine acknowledged every call but still reports version 5.
	if err := c.UpdateWeights(t.Context(), "/ckpt/step-6", 6); err == nil || !strings.Contains(err.Error(), `want "6"`) {
		t.Fatalf("unconfirmed version 6: %v", err)
	}
	if err := c.UpdateWeights(t.Context(), "/ckpt/step-5", 5); err != nil {
		t.Fatal(err)
	}
	// generator.reload_method: the longhaul_vllm worker extension's method.
	ext := newClient(t, []string{ts.URL}, Options{API: APIVLLM, Model: "Qwen/Qwen3-0.6B", ReloadMethod: "longhaul_reload_weights"})
	if err := ext.UpdateWeights(t.Context(), "/ckpt/step-5", 5); err != nil {
		t.Fatal(err)
	}
	if m := st.body("POST /collective_rpc")["method"]; m != "longhaul_reload_weights" {
		t.Fatalf("collective_rpc method %v, want the configured longhaul_reload_weights", m)
	}
	r := gen.Request{Prompt: []int32{151644, 872, 198}, MaxTokens: 4, Temperature: 1, Seed: 9}
	res, err := c.Generate(t.Context(), []gen.Request{r})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res[0].Tokens, []int32{785, 6722, 315, 151645}) || res[0].Logprobs[1] != -0.0612 || res[0].Finish != "stop" || res[0].Version != 5 {
		t.Fatalf("parsed %+v", res[0])
	}
	b := st.body("POST /inference/v1/generate")
	sp, _ := b["sampling_params"].(map[string]any)
	if b["token_ids"] == nil || sp["max_tokens"] != 4.0 || sp["seed"] != 9.0 || sp["logprobs"] != 0.0 || b["request_id"] == nil || b["model"] != "Qwen/Qwen3-0.6B" {
		t.Fatalf("generate request %v", b)
	}
}

// TestRecordedSGLang: SGLang's /generate and weight routes.
func TestRecordedSGLang(t *testing.T) {
	ts, st := newStub(t, map[string]string{
		"POST /generate":                 "sglang_generate.json",
		"GET /health":                    "health.txt", // both engines answer 200 with an empty body
		"POST /pause_generation":         "sglang_pause_generation.json",
		"POST /update_weights_from_disk": "sglang_update_weights_from_disk.json",
		"POST /continue_generation":      "sglang_continue_generation.json",
		"GET /get_weight_version":        "sglang_get_weight_version.json",
	})
	c := newClient(t, []string{ts.URL}, Options{API: APISGLang})
	if err := c.UpdateWeights(t.Context(), "/ckpt/step-5", 5); err != nil {
		t.Fatal(err)
	}
	if b := st.body("POST /update_weights_from_disk"); b["model_path"] != "/ckpt/step-5" || b["weight_version"] != "5" {
		t.Fatalf("update_weights_from_disk body %v", b)
	}
	if err := c.UpdateWeights(t.Context(), "/ckpt/step-6", 6); err == nil || !strings.Contains(err.Error(), `want "6"`) {
		t.Fatalf("unconfirmed version 6: %v", err)
	}
	if err := c.UpdateWeights(t.Context(), "/ckpt/step-5", 5); err != nil {
		t.Fatal(err)
	}
	r := gen.Request{Prompt: []int32{151644, 872, 198, 9707, 11}, MaxTokens: 4, Temperature: 1, Seed: 9}
	res, err := c.Generate(t.Context(), []gen.Request{r})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res[0].Tokens, []int32{785, 6722, 315, 9625}) || res[0].Logprobs[0] != -0.3312 || res[0].Finish != "length" || res[0].Version != 5 {
		t.Fatalf("parsed %+v", res[0])
	}
	b := st.body("POST /generate")
	sp, _ := b["sampling_params"].(map[string]any)
	if b["input_ids"] == nil || b["return_logprob"] != true || sp["max_new_tokens"] != 4.0 || sp["sampling_seed"] != 9.0 {
		t.Fatalf("generate request %v", b)
	}
}

// TestFencedServerCatchesUp: a server that failed an update (here: it
// answered 503 while down) is brought to the last version by the health
// prober once it is back, and only then takes calls.
func TestFencedServerCatchesUp(t *testing.T) {
	for _, api := range []string{APIVLLM, APISGLang} {
		t.Run(api, func(t *testing.T) {
			f := server.NewFake(0)
			s, err := server.New(f.Backend("tinylm"), server.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var down sync.Mutex
			isDown := true
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				down.Lock()
				d := isDown
				down.Unlock()
				if d {
					http.Error(w, "restarting", http.StatusServiceUnavailable)
					return
				}
				s.ServeHTTP(w, r)
			}))
			t.Cleanup(ts.Close)
			c := newClient(t, []string{ts.URL}, Options{API: api})
			if err := c.UpdateWeights(t.Context(), "/w", 1); err == nil {
				t.Fatal("update of a server answering 503 succeeded")
			}
			down.Lock()
			isDown = false
			down.Unlock()
			deadline := time.Now().Add(10 * time.Second)
			for c.ServedVersions()[ts.URL] != 1 {
				if time.Now().After(deadline) {
					t.Fatal("the returning server was not brought to version 1")
				}
				time.Sleep(10 * time.Millisecond)
			}
			res, err := c.Generate(t.Context(), []gen.Request{req(1)})
			if err != nil || res[0].Version != 1 || f.Version() != 1 {
				t.Fatalf("after catching up: %+v %v (server at %d)", res, err, f.Version())
			}
		})
	}
}

// TestEngineShapesGrouped: with GroupByPrompt a group is one call with
// n = k (SGLang then answers an array of outputs); every API gets the
// choices the OpenAI route gives for the same call.
func TestEngineShapesGrouped(t *testing.T) {
	reqs := []gen.Request{req(5), req(6), req(7)}
	var first []gen.Result
	for _, api := range []string{APIOpenAI, APIVLLM, APISGLang} {
		ts, f := newLonghaul(t, nil, 2)
		c := newClient(t, []string{ts.URL}, Options{API: api, GroupByPrompt: true})
		got, err := c.Generate(t.Context(), reqs)
		if err != nil {
			t.Fatalf("%s: %v", api, err)
		}
		if f.Calls() != 1 {
			t.Fatalf("%s: %d calls, want one n=3 call", api, f.Calls())
		}
		if first == nil {
			first = got
			continue
		}
		for i := range got {
			if !slices.Equal(got[i].Tokens, first[i].Tokens) || !slices.Equal(got[i].Logprobs, first[i].Logprobs) || got[i].Version != 2 {
				t.Fatalf("%s choice %d: %+v, openai gave %+v", api, i, got[i], first[i])
			}
		}
	}
}
