package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
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
	userStops   []int32  // stop_token_ids as sent: vLLM's stop_reason names these, not EOS
	asIDs       bool
	topN        int // alternatives listed per sampled token (top_logprobs; 0: none)
	promptN     int // prompt_logprobs alternatives; -1: no prompt_logprobs
}

func (s *Server) validate(sp *sampling, defMax int, extraStops ...int32) (params, error) {
	p := params{maxTokens: defMax, temperature: 1, topP: 1, n: 1, seed: sp.Seed, asIDs: sp.ReturnTokensAsTokenIDs, promptN: -1}
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
	p.userStops = sp.StopTokenIDs
	p.stopIDs = append(p.stopIDs, extraStops...)
	if !sp.IgnoreEOS { // vLLM stops at EOS unless ignore_eos
		if ti := s.be.TokenIDs; ti != nil {
			p.stopIDs = append(p.stopIDs, ti.Stop...)
		} else {
			p.stopIDs = append(p.stopIDs, bytetok.EOS)
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
			out = append(out, bytetok.BOS)
		}
		return bytetok.AppendEncode(out, s)
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
	return bytetok.VocabSize
}

// choice is one sampled completion after stop-string cutting.
type choice struct {
	prompt   int // index of its prompt
	tokens   []int32
	logprobs []float32
	text     string
	finish   string
	// stopReason is vLLM's stop_reason: the stop string or the
	// stop_token_ids entry that ended the sample; nil for EOS, the end of
	// a chat turn, or length.
	stopReason any
	top        []position // per token, when top_logprobs were asked
}

// withLogprobs sets the alternatives asked per sampled token (topN) and
// prompt_logprobs (promptN, nil when not asked), refusing what the
// backend cannot score; field names the request field of topN.
func (s *Server) withLogprobs(p *params, topN int, field string, promptN *int) error {
	if topN < 0 || topN > maxTopLogprobs {
		return badParam(field, "%s must be in [0, %d], got %d.", field, maxTopLogprobs, topN)
	}
	if topN > 0 && s.be.Scorer == nil {
		return badParam(field, "%s > 0 needs the model's full distribution, which this backend does not give; use 0.", field)
	}
	p.topN = topN
	if promptN == nil {
		return nil
	}
	if *promptN < 0 || *promptN > maxTopLogprobs {
		return badParam("prompt_logprobs", "prompt_logprobs must be in [0, %d], got %d (-1, the whole vocabulary, is not supported).", maxTopLogprobs, *promptN)
	}
	if s.be.Scorer == nil {
		return badParam("prompt_logprobs", "prompt_logprobs needs the model's full distribution, which this backend does not give.")
	}
	p.promptN = *promptN
	return nil
}

// stopReason names what ended a generator-stopped sample: a
// stop_token_ids entry (vLLM reports the id), else nil (EOS, end of turn).
func stopReason(c choice, p params) any {
	if c.finish != "stop" || c.stopReason != nil || len(c.tokens) == 0 {
		return c.stopReason
	}
	last := c.tokens[len(c.tokens)-1]
	if slices.Contains(p.userStops, last) {
		return last
	}
	return nil
}

// sample builds one request per (prompt, choice) and runs them as one
// batched generator call, so the n members of a group share their prefix.
//
// With top_logprobs or prompt_logprobs asked it also scores the samples
// (annotate) under the same lock, and returns the prompts' logprobs.
func (s *Server) sample(r *http.Request, prompts [][]int32, p params) ([]choice, [][]position, int64, error) {
	var total int
	for _, pr := range prompts {
		total += len(pr)
	}
	if len(prompts)*p.n > s.opts.MaxN {
		return nil, nil, s.version(), badParam("n", "prompts × n must be at most %d, got %d.", s.opts.MaxN, len(prompts)*p.n)
	}
	if ml := s.be.MaxModelLen; ml > 0 {
		for _, pr := range prompts {
			// Compared without adding: max_tokens near 2^63 would overflow
			// the sum and pass.
			if p.maxTokens > ml-len(pr) {
				return nil, nil, s.version(), badParam("max_tokens",
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
	var out []choice
	var promptLPs [][]position
	v, err := s.generate(r.Context(), reqs, func(res []gen.Result) error {
		out = make([]choice, len(res))
		for i, rs := range res {
			if len(rs.Logprobs) != len(rs.Tokens) {
				return fmt.Errorf("generate: result %d has %d tokens and %d logprobs", i, len(rs.Tokens), len(rs.Logprobs))
			}
			out[i] = cutStops(rs, p.stopStrings)
			out[i].stopReason = stopReason(out[i], p)
			if s.be.TokenIDs != nil {
				out[i].text = "" // no tokenizer to write text with
			}
			out[i].prompt = i / p.n
		}
		var err error
		promptLPs, err = s.annotate(r.Context(), prompts, out, p)
		return err
	})
	if err != nil {
		return nil, nil, v, err
	}
	s.metrics.promptTokens.Add(float64(total))
	for _, c := range out {
		s.metrics.genTokens.Add(float64(len(c.tokens)))
	}
	return out, promptLPs, v, nil
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
				c.text, c.finish, c.stopReason = string(buf[:len(buf)-len(st)]), "stop", st
				return c
			}
		}
	}
	c.text = string(buf)
	return c
}

// tokenString names one token the way logprobs report it: by id for a
// model served without its tokenizer.
func (s *Server) tokenString(t int32, asIDs bool) string {
	return tokenString(t, asIDs || s.be.TokenIDs != nil)
}

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
	return bytetok.Decode([]int32{t})
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
