package server

import (
	"encoding/json"
	"errors"
	"net/http"
)

// ---- /v1/completions ----

type completionRequest struct {
	sampling
	Prompt           json.RawMessage `json:"prompt"`
	Logprobs         *int            `json:"logprobs"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
	PromptLogprobs   *int            `json:"prompt_logprobs"`
	StreamOptions    json.RawMessage `json:"stream_options"`
}

type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TextOffset    []int                `json:"text_offset"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
}

type completionChoice struct {
	Index          int                           `json:"index"`
	Text           string                        `json:"text"`
	Logprobs       *completionLogprobs           `json:"logprobs"`
	FinishReason   *string                       `json:"finish_reason"`
	StopReason     any                           `json:"stop_reason"`
	TokenIDs       []int32                       `json:"token_ids,omitempty"`
	PromptTokenID  []int32                       `json:"prompt_token_ids,omitempty"`
	PromptLogprobs []map[string]vllmLogprobEntry `json:"prompt_logprobs,omitempty"`
}

type completionResponse struct {
	ID             string             `json:"id"`
	Object         string             `json:"object"`
	Created        int64              `json:"created"`
	Model          string             `json:"model"`
	Choices        []completionChoice `json:"choices"`
	Usage          any                `json:"usage,omitempty"`
	PromptTokenIDs []int32            `json:"prompt_token_ids,omitempty"`
	WeightVersion  int64              `json:"weight_version"`
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !s.decodeStrict(w, r, &req, completionFields) {
		return
	}
	if s.loading.Load() {
		s.writeLoading(w)
		return
	}
	stream := req.Stream
	req.Stream = false // validate refuses it for the engine routes
	p, err := s.validate(&req.sampling, defaultMaxTokens, false)
	if err == nil {
		err = s.withLogprobs(&p, deref(req.Logprobs), "logprobs", req.PromptLogprobs)
	}
	var so streamOptions
	if err == nil {
		so, err = parseStreaming(req.StreamOptions, stream, req.PromptLogprobs)
	}
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	prompts, err := s.parsePrompt(req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	cs, promptLPs, v, err := s.sample(r, prompts, p)
	if err != nil {
		s.writeGenError(w, v, err)
		return
	}
	resp := completionResponse{ID: s.newID("cmpl"), Object: "text_completion", Created: s.opts.Now().Unix(),
		Model: s.be.Model, Usage: makeUsage(prompts, cs), WeightVersion: v}
	if req.ReturnTokenIDs && len(prompts) == 1 {
		resp.PromptTokenIDs = prompts[0]
	}
	if stream {
		s.streamCompletions(w, resp, req, p, prompts, cs, so)
		return
	}
	resp.Choices = make([]completionChoice, len(cs))
	for i, c := range cs {
		ch := completionChoice{Index: i, Text: c.text, FinishReason: &cs[i].finish, StopReason: c.stopReason}
		if req.ReturnTokenIDs {
			ch.TokenIDs, ch.PromptTokenID = nonNil(c.tokens), prompts[c.prompt]
		}
		if req.Logprobs != nil {
			ch.Logprobs = s.completionLogprobs(c, spread(c.text, 0, c.ends), 0, len(c.tokens), p, 0)
		}
		if promptLPs != nil {
			ch.PromptLogprobs = s.promptLogprobsJSON(prompts[c.prompt], promptLPs[c.prompt], p.asIDs)
		}
		resp.Choices[i] = ch
	}
	writeJSON(w, v, http.StatusOK, resp)
}

// completionLogprobs is the legacy logprobs object of tokens [lo, hi) of
// c, whose text pieces are pieces; text offsets count from base (the
// length of the text before lo).
func (s *Server) completionLogprobs(c choice, pieces []string, lo, hi int, p params, base int) *completionLogprobs {
	lp := &completionLogprobs{Tokens: make([]string, 0, hi-lo), TokenLogprobs: nonNilF(c.logprobs[lo:hi]),
		TextOffset: make([]int, 0, hi-lo), TopLogprobs: make([]map[string]float32, 0, hi-lo)}
	off := base
	for k := lo; k < hi; k++ {
		t := c.tokens[k]
		lp.Tokens = append(lp.Tokens, s.tokenString(t, p.asIDs))
		lp.TextOffset = append(lp.TextOffset, off)
		off += len(pieces[k])
		// vLLM's dict: the sampled token and the logprobs most likely,
		// keyed by token string.
		top := map[string]float32{lp.Tokens[len(lp.Tokens)-1]: c.logprobs[k]}
		if c.top != nil {
			for _, e := range c.top[k].top {
				top[s.tokenString(e.id, p.asIDs)] = e.lp
			}
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
	}
	return lp
}

// streamCompletions writes cs as text_completion chunks: one per token
// and choice, the finish on a choice's last token, then the usage chunk
// when include_usage asked for it.
func (s *Server) streamCompletions(w http.ResponseWriter, resp completionResponse, req completionRequest, p params,
	prompts [][]int32, cs []choice, so streamOptions) {
	e := startSSE(w, resp.WeightVersion)
	total := resp.Usage
	resp.Usage = streamUsage(so.IncludeUsage)
	deltas := make([][]string, len(cs))
	offsets := make([]int, len(cs))
	for i, c := range cs {
		deltas[i] = spread(c.text, 0, c.ends)
	}
	first := true
	interleave(cs, func(i, k int, last bool) {
		c := cs[i]
		ch := completionChoice{Index: i}
		if k >= 0 {
			ch.Text = deltas[i][k]
			if req.ReturnTokenIDs {
				ch.TokenIDs = []int32{c.tokens[k]}
			}
			if req.Logprobs != nil {
				ch.Logprobs = s.completionLogprobs(c, deltas[i], k, k+1, p, offsets[i])
			}
			offsets[i] += len(deltas[i][k])
		}
		if req.ReturnTokenIDs && k <= 0 {
			// vLLM sends a choice's prompt ids with its first chunk.
			ch.PromptTokenID = prompts[c.prompt]
		}
		if last {
			ch.FinishReason, ch.StopReason = &cs[i].finish, c.stopReason
		}
		chunk := resp
		if !first {
			chunk.PromptTokenIDs = nil
		}
		first = false
		chunk.Choices = []completionChoice{ch}
		e.send(chunk)
	})
	if so.IncludeUsage {
		resp.Choices, resp.Usage, resp.PromptTokenIDs = []completionChoice{}, total, nil
		e.send(resp)
	}
	e.done()
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func nonNil(t []int32) []int32 {
	if t == nil {
		return []int32{}
	}
	return t
}

func nonNilF(t []float32) []float32 {
	if t == nil {
		return []float32{}
	}
	return t
}

func (s *Server) writeLoading(w http.ResponseWriter) {
	writeError(w, s.version(), http.StatusServiceUnavailable, "service_unavailable", "", "model_loading", "The model is loading; retry later.")
}

func (s *Server) writeGenError(w http.ResponseWriter, v int64, err error) {
	var pe *paramError
	if errors.As(err, &pe) {
		s.writeParamError(w, err)
		return
	}
	s.log.Error("generation failed", "err", err)
	writeError(w, v, http.StatusInternalServerError, "server_error", "", "generation_failed", err.Error())
}
