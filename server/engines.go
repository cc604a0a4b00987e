package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// The vLLM and SGLang routes, so that gen/openai's APIVLLM and APISGLang
// paths (token-in/token-out generation, pause/resume, versioned weight
// reload) run against a real server here. Shapes: docs/serving.md,
// "vLLM and SGLang routes".

func (s *Server) addEngineRoutes() {
	for path, h := range map[string]map[string]http.HandlerFunc{
		// vLLM
		"/inference/v1/generate": {http.MethodPost: s.handleVLLMGenerate},
		"/pause":                 {http.MethodPost: s.handlePause},
		"/resume":                {http.MethodPost: s.handleResume},
		"/is_paused":             {http.MethodGet: s.handleIsPaused},
		"/collective_rpc":        {http.MethodPost: s.handleCollectiveRPC},
		"/update_weight_version": {http.MethodPost: s.handleUpdateWeightVersion},
		"/weight_info":           {http.MethodGet: s.handleWeightVersion},
		// SGLang
		"/generate":            {http.MethodPost: s.handleSGLangGenerate},
		"/pause_generation":    {http.MethodPost: s.handlePause},
		"/continue_generation": {http.MethodPost: s.handleResume},
		"/get_weight_version":  {http.MethodGet: s.handleWeightVersion},
	} {
		s.routes[path] = h
	}
}

// gate holds generation back while the server is paused.
type gate struct {
	mu     sync.Mutex
	paused bool
	open   chan struct{} // closed on resume
}

func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	if !g.paused {
		g.mu.Unlock()
		return nil
	}
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the server to resume: %w", ctx.Err())
	}
}

func (g *gate) set(paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if paused && !g.paused {
		g.open = make(chan struct{})
	}
	if !paused && g.paused {
		close(g.open)
	}
	g.paused = paused
}

func (g *gate) isPaused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// handlePause (vLLM /pause?mode=..., SGLang /pause_generation) stops new
// generations and returns once those in flight have finished: every mode
// drains here (vLLM's "abort" and "keep" included), because a request
// finished under the old weights is the only kind whose version is sure.
func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) {
	if m := r.URL.Query().Get("mode"); m != "" && m != "abort" && m != "wait" && m != "keep" {
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "mode", "invalid_value",
			fmt.Sprintf("mode must be abort, wait or keep, got %q.", m))
		return
	}
	s.gate.set(true)
	s.mu.Lock() // waits for the generations holding the read lock
	s.mu.Unlock()
	writeJSON(w, s.version(), http.StatusOK, map[string]any{"status": "paused", "message": "Generation paused successfully."})
}

func (s *Server) handleResume(w http.ResponseWriter, _ *http.Request) {
	s.gate.set(false)
	writeJSON(w, s.version(), http.StatusOK, map[string]any{"status": "resumed", "message": "Generation continued successfully."})
}

func (s *Server) handleIsPaused(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.version(), http.StatusOK, map[string]bool{"is_paused": s.gate.isPaused()})
}

// handleWeightVersion answers vLLM's /weight_info and SGLang's
// /get_weight_version: both spell the version as a string.
func (s *Server) handleWeightVersion(w http.ResponseWriter, _ *http.Request) {
	v := s.version()
	writeJSON(w, v, http.StatusOK, map[string]string{"weight_version": strconv.FormatInt(v, 10)})
}

// handleCollectiveRPC implements one worker method: reload_weights with
// kwargs {"weights_path": P}, the reload a vLLM worker extension provides.
func (s *Server) handleCollectiveRPC(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Method string            `json:"method"`
		Args   []string          `json:"args"`
		Kwargs map[string]string `json:"kwargs"`
	}
	if !s.decode(w, r, &req) {
		return
	}
	if req.Method != "reload_weights" {
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "method", "invalid_value",
			fmt.Sprintf("method %q is not one this server implements (reload_weights).", req.Method))
		return
	}
	path := req.Kwargs["weights_path"]
	if path == "" {
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "kwargs.weights_path", "missing_required_parameter",
			"kwargs.weights_path is required.")
		return
	}
	v, err := s.reload(r.Context(), path)
	if err != nil {
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "kwargs.weights_path", "reload_failed", err.Error())
		return
	}
	writeJSON(w, v, http.StatusOK, map[string]any{"results": []any{nil}})
}

// reload swaps the weights under the write lock.
func (s *Server) reload(ctx context.Context, path string) (int64, error) {
	if s.be.Loader == nil {
		return s.version(), fmt.Errorf("this server cannot reload weights")
	}
	s.mu.Lock()
	v, err := s.be.Loader.Reload(ctx, path)
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("weight reload failed", "path", path, "err", err)
		return 0, err
	}
	s.metrics.version.Set(float64(v))
	s.log.Info("weights reloaded", "path", path, "version", v)
	return v, nil
}

// handleUpdateWeightVersion is vLLM's label setter. Here the version is the
// one recorded beside the loaded weights, so a label that disagrees with it
// is refused rather than believed.
func (s *Server) handleUpdateWeightVersion(w http.ResponseWriter, r *http.Request) {
	var req struct {
		NewVersion *string `json:"new_version"`
	}
	if !s.decode(w, r, &req) {
		return
	}
	if req.NewVersion == nil {
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "new_version", "missing_required_parameter", "new_version is required.")
		return
	}
	if cur := strconv.FormatInt(s.version(), 10); *req.NewVersion != cur {
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "new_version", "invalid_value",
			fmt.Sprintf("new_version %q disagrees with the loaded weights' version %s.", *req.NewVersion, cur))
		return
	}
	writeJSON(w, s.version(), http.StatusOK, map[string]any{"success": true, "new_version": *req.NewVersion})
}

// ---- POST /inference/v1/generate (vLLM GenerateRequest) ----

type vllmSamplingParams struct {
	sampling
	Logprobs       *int `json:"logprobs"`
	PromptLogprobs *int `json:"prompt_logprobs"`
}

type vllmGenerateRequest struct {
	RequestID      string              `json:"request_id"`
	TokenIDs       []int32             `json:"token_ids"`
	SamplingParams *vllmSamplingParams `json:"sampling_params"`
	Model          string              `json:"model"`
	Stream         bool                `json:"stream"`
}

type vllmChoice struct {
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`
	FinishReason string  `json:"finish_reason"`
	TokenIDs     []int32 `json:"token_ids"`
}

func (s *Server) handleVLLMGenerate(w http.ResponseWriter, r *http.Request) {
	var req vllmGenerateRequest
	if !s.decode(w, r, &req) {
		return
	}
	if s.loading.Load() {
		s.writeLoading(w)
		return
	}
	if req.SamplingParams == nil {
		s.writeParamError(w, badParam("sampling_params", "sampling_params is required."))
		return
	}
	sp := req.SamplingParams
	if sp.Model == "" {
		sp.Model = req.Model
	}
	sp.Stream = sp.Stream || req.Stream
	// vLLM's SamplingParams: logprobs = k lists the sampled token's logprob
	// and the k most likely tokens at each position (top_logprobs of
	// ChatCompletionLogProbs); prompt_logprobs = k, the prompt's.
	if sp.Logprobs != nil && (*sp.Logprobs < 0 || *sp.Logprobs > maxTopLogprobs) {
		s.writeParamError(w, badParam("sampling_params.logprobs", "logprobs must be in [0, %d], got %d.", maxTopLogprobs, *sp.Logprobs))
		return
	}
	if sp.PromptLogprobs != nil && (*sp.PromptLogprobs < 0 || *sp.PromptLogprobs > maxTopLogprobs) {
		s.writeParamError(w, badParam("sampling_params.prompt_logprobs", "prompt_logprobs must be in [0, %d], got %d (-1, the whole vocabulary, is not supported).", maxTopLogprobs, *sp.PromptLogprobs))
		return
	}
	p, err := s.validate(&sp.sampling, defaultMaxTokens, false)
	if err == nil {
		err = s.withLogprobs(&p, deref(sp.Logprobs), "sampling_params.logprobs", sp.PromptLogprobs)
	}
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	prompts, err := checkPrompts([][]int32{req.TokenIDs}, s.vocabSize())
	if err != nil {
		s.writeParamError(w, badParam("token_ids", "%v", err))
		return
	}
	cs, promptLPs, v, err := s.sample(r, prompts, p)
	if err != nil {
		s.writeGenError(w, v, err)
		return
	}
	out := make([]vllmChoice, len(cs))
	for i, c := range cs {
		ch := vllmChoice{Index: i, FinishReason: c.finish, TokenIDs: nonNil(c.tokens)}
		if sp.Logprobs != nil {
			// The chat route's entries: token, logprob, bytes and the
			// alternatives (annotate fills c.top when logprobs > 0).
			content := make([]chatTokenLogprob, len(c.tokens))
			for k := range c.tokens {
				content[k] = s.chatLogprob(c, k, p)
			}
			ch.Logprobs = &chatLogprobs{Content: content}
		}
		out[i] = ch
	}
	var plp any
	if promptLPs != nil {
		plp = s.promptLogprobsJSON(prompts[0], promptLPs[0], p.asIDs)
	}
	writeJSON(w, v, http.StatusOK, map[string]any{"request_id": req.RequestID, "choices": out,
		"prompt_logprobs": plp, "kv_transfer_params": nil, "weight_version": v})
}

// ---- POST /generate (SGLang GenerateReqInput, token ids in) ----

type sglangSamplingParams struct {
	MaxNewTokens *int            `json:"max_new_tokens"`
	Temperature  *float64        `json:"temperature"`
	TopP         *float64        `json:"top_p"`
	TopK         *int            `json:"top_k"`
	N            *int            `json:"n"`
	Stop         json.RawMessage `json:"stop"`
	StopTokenIDs []int32         `json:"stop_token_ids"`
	IgnoreEOS    bool            `json:"ignore_eos"`
	SamplingSeed *int64          `json:"sampling_seed"`
}

type sglangGenerateRequest struct {
	InputIDs       []int32               `json:"input_ids"`
	Text           *string               `json:"text"`
	SamplingParams *sglangSamplingParams `json:"sampling_params"`
	ReturnLogprob  bool                  `json:"return_logprob"`
	Stream         bool                  `json:"stream"`
	RID            *string               `json:"rid"`
}

func (s *Server) handleSGLangGenerate(w http.ResponseWriter, r *http.Request) {
	var req sglangGenerateRequest
	if !s.decode(w, r, &req) {
		return
	}
	if s.loading.Load() {
		s.writeLoading(w)
		return
	}
	if req.Text != nil {
		s.writeParamError(w, badParam("text", "text prompts are not supported here: send input_ids."))
		return
	}
	sp := req.SamplingParams
	if sp == nil {
		sp = &sglangSamplingParams{}
	}
	if sp.MaxNewTokens == nil {
		n := 128 // SGLang's default max_new_tokens
		sp.MaxNewTokens = &n
	}
	p, err := s.validate(&sampling{MaxTokens: sp.MaxNewTokens, Temperature: sp.Temperature, TopP: sp.TopP, TopK: sp.TopK,
		N: sp.N, Seed: sp.SamplingSeed, Stop: sp.Stop, StopTokenIDs: sp.StopTokenIDs, IgnoreEOS: sp.IgnoreEOS, Stream: req.Stream}, 0, false)
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	prompts, err := checkPrompts([][]int32{req.InputIDs}, s.vocabSize())
	if err != nil {
		s.writeParamError(w, badParam("input_ids", "%v", err))
		return
	}
	cs, _, v, err := s.sample(r, prompts, p)
	if err != nil {
		s.writeGenError(w, v, err)
		return
	}
	outs := make([]map[string]any, len(cs))
	for i, c := range cs {
		mi := map[string]any{
			"id": s.newID("sgl"), "finish_reason": map[string]any{"type": c.finish},
			"prompt_tokens": len(prompts[0]), "completion_tokens": len(c.tokens), "cached_tokens": 0,
			"weight_version": strconv.FormatInt(v, 10),
		}
		if req.ReturnLogprob {
			lps := make([][]any, len(c.tokens))
			for k, t := range c.tokens {
				lps[k] = []any{c.logprobs[k], t, nil}
			}
			mi["output_token_logprobs"] = lps
		}
		outs[i] = map[string]any{"text": c.text, "output_ids": nonNil(c.tokens), "meta_info": mi}
	}
	if len(outs) == 1 {
		writeJSON(w, v, http.StatusOK, outs[0])
		return
	}
	writeJSON(w, v, http.StatusOK, outs)
}
