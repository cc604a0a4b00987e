package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/model/tokenizer"
)

// Limits of the request fields (OpenAI's, loosened where vLLM is looser).
const (
	maxStopStrings   = 16
	maxLogprobs      = 5
	maxTopLogprobs   = 20
	defaultMaxTokens = 16
	defaultChatMax   = 256
)

// sampling is the part of a request shared by completions and chat.
type sampling struct {
	Model                  string          `json:"model"`
	MaxTokens              *int            `json:"max_tokens"`
	Temperature            *float64        `json:"temperature"`
	TopP                   *float64        `json:"top_p"`
	TopK                   *int            `json:"top_k"`
	N                      *int            `json:"n"`
	Seed                   *int64          `json:"seed"`
	Stop                   json.RawMessage `json:"stop"`
	StopTokenIDs           []int32         `json:"stop_token_ids"`
	IgnoreEOS              bool            `json:"ignore_eos"`
	Stream                 bool            `json:"stream"`
	ReturnTokenIDs         bool            `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool            `json:"return_tokens_as_token_ids"`
}

// params is a validated sampling.
type params struct {
	maxTokens   int
	temperature float32
	topP        float32
	topK        int
	n           int
	seed        *int64
	stopStrings []string // multi-byte stops, cut after generation
	stopIDs     []int32  // token stops, enforced by the generator
	asIDs       bool
}

func (s *Server) validate(sp *sampling, defMax int, extraStops ...int32) (params, error) {
	p := params{maxTokens: defMax, temperature: 1, topP: 1, n: 1, seed: sp.Seed, asIDs: sp.ReturnTokensAsTokenIDs}
	if err := s.checkModel(sp.Model); err != nil {
		return p, err
	}
	if sp.Stream {
		return p, badParam("stream", "Streaming is not supported by this server.")
	}
	if sp.MaxTokens != nil {
		p.maxTokens = *sp.MaxTokens
	}
	if p.maxTokens < 1 {
		return p, badParam("max_tokens", "max_tokens must be at least 1, got %d.", p.maxTokens)
	}
	if sp.Temperature != nil {
		if *sp.Temperature < 0 {
			return p, badParam("temperature", "temperature must be non-negative, got %g.", *sp.Temperature)
		}
		p.temperature = float32(*sp.Temperature)
	}
	if sp.TopP != nil {
		if *sp.TopP <= 0 || *sp.TopP > 1 {
			return p, badParam("top_p", "top_p must be in (0, 1], got %g.", *sp.TopP)
		}
		p.topP = float32(*sp.TopP)
	}
	if sp.TopK != nil {
		if *sp.TopK < -1 {
			return p, badParam("top_k", "top_k must be -1, 0 or positive, got %d.", *sp.TopK)
		}
		p.topK = max(*sp.TopK, 0) // vLLM's -1 and our 0 both mean off
	}
	if sp.N != nil {
		p.n = *sp.N
	}
	if p.n < 1 || p.n > s.opts.MaxN {
		return p, badParam("n", "n must be in [1, %d], got %d.", s.opts.MaxN, p.n)
	}
	stops, err := parseStop(sp.Stop)
	if err != nil {
		return p, err
	}
	for _, st := range stops {
		// A one-byte stop is one token: the generator can stop on it
		// directly instead of overrunning and being cut.
		if len(st) == 1 && s.be.TokenIDs == nil {
			p.stopIDs = append(p.stopIDs, int32(st[0]))
		}
		p.stopStrings = append(p.stopStrings, st)
	}
	if ti := s.be.TokenIDs; ti != nil && len(p.stopStrings) > 0 {
		return p, badParam("stop", "stop strings need a tokenizer, which this model is served without; use stop_token_ids.")
	}
	vocab := s.vocabSize()
	for _, id := range sp.StopTokenIDs {
		if id < 0 || id >= int32(vocab) {
			return p, badParam("stop_token_ids", "token id %d is out of range [0, %d).", id, vocab)
		}
	}
	p.stopIDs = append(p.stopIDs, sp.StopTokenIDs...)
	p.stopIDs = append(p.stopIDs, extraStops...)
	if !sp.IgnoreEOS { // vLLM stops at EOS unless ignore_eos
		if ti := s.be.TokenIDs; ti != nil {
			p.stopIDs = append(p.stopIDs, ti.Stop...)
		} else {
			p.stopIDs = append(p.stopIDs, tokenizer.EOS)
		}
	}
	return p, nil
}

func parseStop(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badParam("stop", "stop must be a string or an array of strings.")
	}
	if len(many) > maxStopStrings {
		return nil, badParam("stop", "at most %d stop strings are allowed, got %d.", maxStopStrings, len(many))
	}
	out := many[:0]
	for _, st := range many {
		if st != "" {
			out = append(out, st)
		}
	}
	return out, nil
}

// parsePrompt accepts the four OpenAI prompt forms: a string, an array of
// strings, an array of token ids, an array of token-id arrays. Ids must be
// below vocab; text needs the byte tokenizer (ti == nil).
func parsePrompt(raw json.RawMessage, bos bool, vocab int, ti *TokenIDs) ([][]int32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badParam("prompt", "prompt is required.")
	}
	text := func(s string) []int32 {
		var out []int32
		if bos {
			out = append(out, tokenizer.BOS)
		}
		return tokenizer.AppendEncode(out, s)
	}
	var one string
	var strs []string
	isText := json.Unmarshal(raw, &one) == nil || (json.Unmarshal(raw, &strs) == nil && len(strs) > 0)
	if isText && ti != nil {
		return nil, errNoTokenizer("prompt")
	}
	if json.Unmarshal(raw, &one) == nil {
		return [][]int32{text(one)}, nil
	}
	if json.Unmarshal(raw, &strs) == nil && len(strs) > 0 {
		out := make([][]int32, len(strs))
		for i, s := range strs {
			out[i] = text(s)
		}
		return out, nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		return checkPrompts([][]int32{ids}, vocab)
	}
	var batch [][]int32
	if json.Unmarshal(raw, &batch) == nil {
		return checkPrompts(batch, vocab)
	}
	return nil, badParam("prompt", "prompt must be a string, an array of strings, an array of token ids or an array of token-id arrays.")
}

func checkPrompts(ps [][]int32, vocab int) ([][]int32, error) {
	if len(ps) == 0 {
		return nil, badParam("prompt", "prompt must not be empty.")
	}
	for _, p := range ps {
		if len(p) == 0 {
			return nil, badParam("prompt", "prompt must not be empty.")
		}
		for _, t := range p {
			if t < 0 || int(t) >= vocab {
				return nil, badParam("prompt", "token id %d is out of range [0, %d).", t, vocab)
			}
		}
	}
	return ps, nil
}

// errNoTokenizer answers a text input to a model served without its
// tokenizer (Backend.TokenIDs).
func errNoTokenizer(field string) error {
	return badParam(field, "this model is served without a tokenizer: only token-id prompts are accepted (text, chat and /tokenize need one).")
}

// vocabSize is the served model's vocabulary: the byte tokenizer's unless
// the backend says otherwise.
func (s *Server) vocabSize() int {
	if s.be.TokenIDs != nil {
		return s.be.TokenIDs.Vocab
	}
	return tokenizer.VocabSize
}

// choice is one sampled completion after stop-string cutting.
type choice struct {
	prompt   int // index of its prompt
	tokens   []int32
	logprobs []float32
	text     string
	finish   string
}

// sample builds one request per (prompt, choice) and runs them as one
// batched generator call, so the n members of a group share their prefix.
func (s *Server) sample(r *http.Request, prompts [][]int32, p params) ([]choice, int64, error) {
	var total int
	for _, pr := range prompts {
		total += len(pr)
	}
	if len(prompts)*p.n > s.opts.MaxN {
		return nil, s.version(), badParam("n", "prompts × n must be at most %d, got %d.", s.opts.MaxN, len(prompts)*p.n)
	}
	if ml := s.be.MaxModelLen; ml > 0 {
		for _, pr := range prompts {
			// Compared without adding: max_tokens near 2^63 would overflow
			// the sum and pass.
			if p.maxTokens > ml-len(pr) {
				return nil, s.version(), badParam("max_tokens",
					"This model's maximum context length is %d tokens; the prompt has %d and max_tokens is %d.", ml, len(pr), p.maxTokens)
			}
		}
	}
	reqs := make([]gen.Request, 0, len(prompts)*p.n)
	base := rand.Uint64() // unseeded requests: a fresh stream per request
	if p.seed != nil {
		base = uint64(*p.seed)
	}
	for i, pr := range prompts {
		for j := range p.n {
			// The first choice samples with the request's seed itself, so a
			// seeded n=1 request draws exactly what the in-process generator
			// draws for that seed (a served run equals an in-process one);
			// further choices derive theirs.
			idx := uint64(i*p.n + j)
			seed := base
			if idx > 0 {
				seed = rng.Derive(base, "openai-choice", idx)
			}
			reqs = append(reqs, gen.Request{
				Prompt: pr, MaxTokens: p.maxTokens, Temperature: p.temperature, TopP: p.topP, TopK: p.topK,
				Stop: p.stopIDs, Seed: seed,
			})
		}
	}
	res, v, err := s.generate(r.Context(), reqs)
	if err != nil {
		return nil, v, err
	}
	out := make([]choice, len(res))
	for i, rs := range res {
		if len(rs.Logprobs) != len(rs.Tokens) {
			return nil, v, fmt.Errorf("generate: result %d has %d tokens and %d logprobs", i, len(rs.Tokens), len(rs.Logprobs))
		}
		out[i] = cutStops(rs, p.stopStrings)
		if s.be.TokenIDs != nil {
			out[i].text = "" // no tokenizer to write text with
		}
		out[i].prompt = i / p.n
	}
	s.metrics.promptTokens.Add(float64(total))
	for _, c := range out {
		s.metrics.genTokens.Add(float64(len(c.tokens)))
	}
	return out, v, nil
}

// cutStops ends a sample at the first completed stop string: the tokens
// keep the one that completed it (they are what was sampled, which RL must
// see), the text drops the stop string (OpenAI's contract).
func cutStops(rs gen.Result, stops []string) choice {
	c := choice{tokens: rs.Tokens, logprobs: rs.Logprobs, finish: rs.Finish}
	if c.finish == "" {
		c.finish = "length"
	}
	var buf []byte
	for i, t := range rs.Tokens {
		if t < 0 || t >= 256 {
			continue
		}
		buf = append(buf, byte(t))
		for _, st := range stops {
			if bytes.HasSuffix(buf, []byte(st)) {
				c.tokens, c.logprobs = rs.Tokens[:i+1], rs.Logprobs[:i+1]
				c.text, c.finish = string(buf[:len(buf)-len(st)]), "stop"
				return c
			}
		}
	}
	c.text = string(buf)
	return c
}

// tokenString names one token the way logprobs report it.
func tokenString(t int32, asIDs bool) string {
	switch {
	case asIDs:
		return fmt.Sprintf("token_id:%d", t)
	case t >= 0 && t < 0x80:
		return string(rune(t))
	case t >= 0x80 && t < 256:
		// A lone high byte is not UTF-8; spell it as OpenAI does.
		return fmt.Sprintf("bytes:\\x%02x", t)
	}
	return tokenizer.Decode([]int32{t})
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func makeUsage(prompts [][]int32, cs []choice) usage {
	var u usage
	for _, p := range prompts {
		u.PromptTokens += len(p)
	}
	for _, c := range cs {
		u.CompletionTokens += len(c.tokens)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// ---- /v1/completions ----

type completionRequest struct {
	sampling
	Prompt           json.RawMessage `json:"prompt"`
	Logprobs         *int            `json:"logprobs"`
	Echo             bool            `json:"echo"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
}

type completionLogprobs struct {
	Tokens        []string  `json:"tokens"`
	TokenLogprobs []float32 `json:"token_logprobs"`
	TextOffset    []int     `json:"text_offset"`
}

type completionChoice struct {
	Index         int                 `json:"index"`
	Text          string              `json:"text"`
	Logprobs      *completionLogprobs `json:"logprobs"`
	FinishReason  string              `json:"finish_reason"`
	TokenIDs      []int32             `json:"token_ids,omitempty"`
	PromptTokenID []int32             `json:"prompt_token_ids,omitempty"`
}

type completionResponse struct {
	ID             string             `json:"id"`
	Object         string             `json:"object"`
	Created        int64              `json:"created"`
	Model          string             `json:"model"`
	Choices        []completionChoice `json:"choices"`
	Usage          usage              `json:"usage"`
	PromptTokenIDs []int32            `json:"prompt_token_ids,omitempty"`
	WeightVersion  int64              `json:"weight_version"`
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !s.decode(w, r, &req) {
		return
	}
	if s.loading.Load() {
		s.writeLoading(w)
		return
	}
	p, err := s.validate(&req.sampling, defaultMaxTokens)
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	if req.Echo {
		s.writeParamError(w, badParam("echo", "echo is not supported by this server."))
		return
	}
	if req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > maxLogprobs) {
		s.writeParamError(w, badParam("logprobs", "logprobs must be in [0, %d], got %d.", maxLogprobs, *req.Logprobs))
		return
	}
	prompts, err := parsePrompt(req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens, s.vocabSize(), s.be.TokenIDs)
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	cs, v, err := s.sample(r, prompts, p)
	if err != nil {
		s.writeGenError(w, v, err)
		return
	}
	resp := completionResponse{ID: s.newID("cmpl"), Object: "text_completion", Created: s.opts.Now().Unix(),
		Model: s.be.Model, Usage: makeUsage(prompts, cs), WeightVersion: v}
	if req.ReturnTokenIDs && len(prompts) == 1 {
		resp.PromptTokenIDs = prompts[0]
	}
	resp.Choices = make([]completionChoice, len(cs))
	for i, c := range cs {
		ch := completionChoice{Index: i, Text: c.text, FinishReason: c.finish}
		if req.ReturnTokenIDs {
			ch.TokenIDs, ch.PromptTokenID = nonNil(c.tokens), prompts[c.prompt]
		}
		if req.Logprobs != nil {
			lp := &completionLogprobs{Tokens: make([]string, len(c.tokens)), TokenLogprobs: nonNilF(c.logprobs),
				TextOffset: make([]int, len(c.tokens))}
			off := 0
			for k, t := range c.tokens {
				lp.Tokens[k] = tokenString(t, p.asIDs || s.be.TokenIDs != nil)
				lp.TextOffset[k] = min(off, len(c.text))
				if t >= 0 && t < 256 {
					off++
				}
			}
			ch.Logprobs = lp
		}
		resp.Choices[i] = ch
	}
	writeJSON(w, v, http.StatusOK, resp)
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

// ---- /v1/chat/completions ----

// chatMessage accepts content as a string or as an array of text parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatRequest struct {
	sampling
	Messages            []chatMessage `json:"messages"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
}

func toMessages(in []chatMessage) ([]tokenizer.Message, error) {
	if len(in) == 0 {
		return nil, badParam("messages", "messages must not be empty.")
	}
	out := make([]tokenizer.Message, len(in))
	for i, m := range in {
		role := tokenizer.Role(m.Role)
		if m.Role == "developer" {
			role = tokenizer.RoleSystem // OpenAI's newer name for the system role
		}
		if _, err := tokenizer.RoleToken(role); err != nil {
			return nil, badParam(fmt.Sprintf("messages[%d].role", i), "unknown role %q.", m.Role)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, badParam(fmt.Sprintf("messages[%d].content", i), "%s", err.Error())
		}
		out[i] = tokenizer.Message{Role: role, Content: text}
	}
	return out, nil
}

func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content must be a string or an array of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part type %q is not supported", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

type chatTokenLogprob struct {
	Token       string             `json:"token"`
	Logprob     float32            `json:"logprob"`
	Bytes       []int              `json:"bytes"`
	TopLogprobs []chatTokenLogprob `json:"top_logprobs"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatChoice struct {
	Index   int `json:"index"`
	Message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
	TokenIDs     []int32       `json:"token_ids,omitempty"`
}

type chatResponse struct {
	ID             string       `json:"id"`
	Object         string       `json:"object"`
	Created        int64        `json:"created"`
	Model          string       `json:"model"`
	Choices        []chatChoice `json:"choices"`
	Usage          usage        `json:"usage"`
	PromptTokenIDs []int32      `json:"prompt_token_ids,omitempty"`
	WeightVersion  int64        `json:"weight_version"`
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !s.decode(w, r, &req) {
		return
	}
	if s.loading.Load() {
		s.writeLoading(w)
		return
	}
	if s.be.TokenIDs != nil {
		s.writeParamError(w, errNoTokenizer("messages"))
		return
	}
	msgs, err := toMessages(req.Messages)
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	prompt, err := tokenizer.Render(msgs, true)
	if err != nil {
		s.writeParamError(w, badParam("messages", "%s", err.Error()))
		return
	}
	if req.MaxTokens == nil {
		req.MaxTokens = req.MaxCompletionTokens
	}
	def := defaultChatMax
	if ml := s.be.MaxModelLen; ml > 0 {
		def = max(ml-len(prompt), 1)
	}
	p, err := s.validate(&req.sampling, def, tokenizer.End) // the assistant's turn ends at End
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	if req.TopLogprobs != nil && (*req.TopLogprobs < 0 || *req.TopLogprobs > maxTopLogprobs) {
		s.writeParamError(w, badParam("top_logprobs", "top_logprobs must be in [0, %d], got %d.", maxTopLogprobs, *req.TopLogprobs))
		return
	}
	prompts := [][]int32{prompt}
	cs, v, err := s.sample(r, prompts, p)
	if err != nil {
		s.writeGenError(w, v, err)
		return
	}
	resp := chatResponse{ID: s.newID("chatcmpl"), Object: "chat.completion", Created: s.opts.Now().Unix(),
		Model: s.be.Model, Usage: makeUsage(prompts, cs), WeightVersion: v}
	if req.ReturnTokenIDs {
		resp.PromptTokenIDs = prompt
	}
	resp.Choices = make([]chatChoice, len(cs))
	for i, c := range cs {
		ch := chatChoice{Index: i, FinishReason: c.finish}
		ch.Message.Role, ch.Message.Content = "assistant", c.text
		if req.ReturnTokenIDs {
			ch.TokenIDs = nonNil(c.tokens)
		}
		if req.Logprobs {
			lp := &chatLogprobs{Content: make([]chatTokenLogprob, len(c.tokens))}
			for k, t := range c.tokens {
				e := chatTokenLogprob{Token: tokenString(t, p.asIDs), Logprob: c.logprobs[k], TopLogprobs: []chatTokenLogprob{}}
				if t >= 0 && t < 256 {
					e.Bytes = []int{int(t)}
				}
				lp.Content[k] = e
			}
			ch.Logprobs = lp
		}
		resp.Choices[i] = ch
	}
	writeJSON(w, v, http.StatusOK, resp)
}

// ---- /tokenize, /detokenize (vLLM shapes) ----

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model               string        `json:"model"`
		Prompt              *string       `json:"prompt"`
		Messages            []chatMessage `json:"messages"`
		AddSpecialTokens    *bool         `json:"add_special_tokens"`
		AddGenerationPrompt *bool         `json:"add_generation_prompt"`
		ReturnTokenStrs     bool          `json:"return_token_strs"`
	}
	if !s.decode(w, r, &req) {
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		s.writeParamError(w, err)
		return
	}
	if s.be.TokenIDs != nil {
		s.writeParamError(w, errNoTokenizer("prompt"))
		return
	}
	var toks []int32
	switch {
	case req.Prompt != nil && req.Messages != nil:
		s.writeParamError(w, badParam("prompt", "give either prompt or messages, not both."))
		return
	case req.Prompt != nil:
		ps, err := parsePrompt(json.RawMessage(mustJSON(*req.Prompt)), req.AddSpecialTokens == nil || *req.AddSpecialTokens, s.vocabSize(), s.be.TokenIDs)
		if err != nil {
			s.writeParamError(w, err)
			return
		}
		toks = ps[0]
	case req.Messages != nil:
		msgs, err := toMessages(req.Messages)
		if err != nil {
			s.writeParamError(w, err)
			return
		}
		if toks, err = tokenizer.Render(msgs, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt); err != nil {
			s.writeParamError(w, badParam("messages", "%s", err.Error()))
			return
		}
	default:
		s.writeParamError(w, badParam("prompt", "prompt or messages is required."))
		return
	}
	resp := struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []int32  `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}{Count: len(toks), MaxModelLen: s.be.MaxModelLen, Tokens: nonNil(toks)}
	if req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(toks))
		for i, t := range toks {
			resp.TokenStrs[i] = tokenString(t, false)
		}
	}
	writeJSON(w, s.version(), http.StatusOK, resp)
}

func mustJSON(s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string  `json:"model"`
		Tokens []int32 `json:"tokens"`
	}
	if !s.decode(w, r, &req) {
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		s.writeParamError(w, err)
		return
	}
	if s.be.TokenIDs != nil {
		s.writeParamError(w, errNoTokenizer("tokens"))
		return
	}
	for _, t := range req.Tokens {
		if t < 0 || t >= tokenizer.VocabSize {
			s.writeParamError(w, badParam("tokens", "token id %d is out of range [0, %d).", t, tokenizer.VocabSize))
			return
		}
	}
	writeJSON(w, s.version(), http.StatusOK, map[string]string{"prompt": tokenizer.Decode(req.Tokens)})
}
