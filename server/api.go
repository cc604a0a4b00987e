package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"

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
	SkipSpecialTokens      *bool           `json:"skip_special_tokens"`
}

// Defaults are a model's sampling defaults (generation_config.json), used
// where a request leaves the field out, as vLLM uses them.
type Defaults struct {
	Temperature *float64
	TopP        *float64
	TopK        *int
	MaxTokens   *int // max_new_tokens
}

// params is a validated sampling.
type params struct {
	maxTokens   int
	temperature float32
	topP        float32
	topK        int
	n           int
	seed        *int64
	stopStrings []string         // cut from the text after generation
	stopIDs     []int32          // token stops, enforced by the generator
	userStops   []int32          // stop_token_ids as sent: vLLM's stop_reason names these, not EOS
	byteStops   map[int32]string // one-byte stop strings the generator stops on (vocab.oneByte)
	asIDs       bool
	skipSpecial bool // special tokens left out of the text (vLLM's default)
	topN        int  // alternatives listed per sampled token (top_logprobs; 0: none)
	promptN     int  // prompt_logprobs alternatives; -1: no prompt_logprobs
}

// validate checks sp; defMax is the route's default max_tokens (a model
// default from generation_config.json takes its place), chat says whether
// the sample is an assistant turn (the template's TurnEnd stops it).
func (s *Server) validate(sp *sampling, defMax int, chat bool) (params, error) {
	p := params{maxTokens: defMax, temperature: 1, topP: 1, n: 1, seed: sp.Seed, asIDs: sp.ReturnTokensAsTokenIDs, promptN: -1, skipSpecial: true}
	if err := s.checkModel(sp.Model); err != nil {
		return p, err
	}
	if sp.Stream {
		return p, badParam("stream", "Streaming is not supported by this server.")
	}
	d := s.be.Defaults
	if sp.MaxTokens != nil {
		p.maxTokens = *sp.MaxTokens
	} else if d.MaxTokens != nil {
		p.maxTokens = min(*d.MaxTokens, max(defMax, 1))
	}
	if p.maxTokens < 1 {
		return p, badParam("max_tokens", "max_tokens must be at least 1, got %d.", p.maxTokens)
	}
	temp, topP, topK := sp.Temperature, sp.TopP, sp.TopK
	if temp == nil {
		temp = d.Temperature
	}
	if topP == nil {
		topP = d.TopP
	}
	if topK == nil {
		topK = d.TopK
	}
	if temp != nil {
		if *temp < 0 {
			return p, badParam("temperature", "temperature must be non-negative, got %g.", *temp)
		}
		p.temperature = float32(*temp)
	}
	if topP != nil {
		if *topP <= 0 || *topP > 1 {
			return p, badParam("top_p", "top_p must be in (0, 1], got %g.", *topP)
		}
		p.topP = float32(*topP)
	}
	if topK != nil {
		if *topK < -1 {
			return p, badParam("top_k", "top_k must be -1, 0 or positive, got %d.", *topK)
		}
		p.topK = max(*topK, 0) // vLLM's -1 and our 0 both mean off
	}
	if sp.N != nil {
		p.n = *sp.N
	}
	if p.n < 1 || p.n > s.opts.MaxN {
		return p, badParam("n", "n must be in [1, %d], got %d.", s.opts.MaxN, p.n)
	}
	if sp.SkipSpecialTokens != nil {
		p.skipSpecial = *sp.SkipSpecialTokens
	}
	if err := s.stops(sp, &p, chat); err != nil {
		return p, err
	}
	return p, nil
}

// stops sets p's stop strings and stop tokens.
func (s *Server) stops(sp *sampling, p *params, chat bool) error {
	stops, err := parseStop(sp.Stop)
	if err != nil {
		return err
	}
	if len(stops) > 0 && s.txt == nil {
		return badParam("stop", "stop strings need a tokenizer, which this model is served without; use stop_token_ids.")
	}
	for _, st := range stops {
		// Where every token is one byte, a one-byte stop is one token:
		// the generator stops on it instead of overrunning and being cut.
		if ids := s.txt.Tok.Encode(st); len(st) == 1 && s.txt.oneByte && len(ids) == 1 {
			p.stopIDs = append(p.stopIDs, ids[0])
			if p.byteStops == nil {
				p.byteStops = map[int32]string{}
			}
			p.byteStops[ids[0]] = st
		}
		p.stopStrings = append(p.stopStrings, st)
	}
	vocab := s.vocabSize()
	for _, id := range sp.StopTokenIDs {
		if id < 0 || id >= int32(vocab) {
			return badParam("stop_token_ids", "token id %d is out of range [0, %d).", id, vocab)
		}
	}
	p.stopIDs = append(p.stopIDs, sp.StopTokenIDs...)
	p.userStops = sp.StopTokenIDs
	switch {
	case s.txt == nil:
		if !sp.IgnoreEOS {
			p.stopIDs = append(p.stopIDs, s.be.TokenIDs.Stop...)
		}
	default:
		if chat {
			p.stopIDs = append(p.stopIDs, s.txt.TurnEnd...)
		}
		if !sp.IgnoreEOS { // vLLM stops at EOS unless ignore_eos
			p.stopIDs = append(p.stopIDs, s.txt.EOS...)
		}
	}
	return nil
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
// below the vocabulary; text needs a tokenizer and is encoded with the
// post-processor's special tokens when addSpecial.
func (s *Server) parsePrompt(raw json.RawMessage, addSpecial bool) ([][]int32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badParam("prompt", "prompt is required.")
	}
	var one string
	var strs []string
	switch {
	case json.Unmarshal(raw, &one) == nil:
		strs = []string{one}
	case json.Unmarshal(raw, &strs) == nil && len(strs) > 0:
	default:
		strs = nil
	}
	if strs != nil {
		if s.txt == nil {
			return nil, errNoTokenizer("prompt")
		}
		out := make([][]int32, len(strs))
		for i, str := range strs {
			out[i] = s.txt.encode(str, addSpecial)
		}
		return checkPrompts(out, s.vocabSize())
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		return checkPrompts([][]int32{ids}, s.vocabSize())
	}
	var batch [][]int32
	if json.Unmarshal(raw, &batch) == nil {
		return checkPrompts(batch, s.vocabSize())
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
	return badParam(field, "this model is served without a tokenizer (its directory has no tokenizer.json): only token-id prompts are accepted (text, chat and /tokenize need one).")
}

// vocabSize is the served model's vocabulary.
func (s *Server) vocabSize() int {
	if s.txt == nil {
		return s.be.TokenIDs.Vocab
	}
	return s.txt.size()
}

// choice is one sampled completion after stop handling.
type choice struct {
	prompt   int // index of its prompt
	tokens   []int32
	logprobs []float32
	// text is the reply's text: special tokens left out when
	// skip_special_tokens, without the stop string or stop token that
	// ended it; ends[k] is the length of the text token k reaches (its
	// bytes, before the text is made valid UTF-8), for streaming.
	text string
	ends []int
	// raw is the text with special tokens, without the stop token or
	// string that ended it: what a tool parser reads; rawEnds as ends.
	raw     string
	rawEnds []int
	finish  string
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
			out[i] = s.finish(rs, p)
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

// finish ends a sample as vLLM does: at the first stop string completed in
// its text (the tokens keep the one that completed it: they are what was
// sampled, which RL must see; the text drops the stop string), and
// without the text of the stop token that ended it.
func (s *Server) finish(rs gen.Result, p params) choice {
	c := choice{tokens: rs.Tokens, logprobs: rs.Logprobs, finish: rs.Finish}
	if c.finish == "" {
		c.finish = "length"
	}
	if s.txt == nil {
		// No tokenizer to write text with.
		c.ends, c.rawEnds = make([]int, len(c.tokens)), make([]int, len(c.tokens))
		c.stopReason = stopReason(c, p)
		return c
	}
	var text, raw strings.Builder
	c.ends, c.rawEnds = make([]int, len(rs.Tokens)), make([]int, len(rs.Tokens))
	for k, t := range rs.Tokens {
		stopTok := k == len(rs.Tokens)-1 && c.finish == "stop"
		if !stopTok {
			text.WriteString(s.txt.bytesOf(t, p.skipSpecial))
			raw.WriteString(s.txt.bytesOf(t, false))
		}
		c.ends[k], c.rawEnds[k] = text.Len(), raw.Len()
		if len(p.stopStrings) == 0 {
			continue
		}
		// The stop may end anywhere in this token's bytes: look from where
		// a stop ending in them could start.
		from := 0
		if k > 0 {
			from = c.ends[k-1]
		}
		if at, st, ok := firstStop(text.String(), from, p.stopStrings); ok {
			c.tokens, c.logprobs = rs.Tokens[:k+1], rs.Logprobs[:k+1]
			c.text, c.finish, c.stopReason = validUTF8(text.String()[:at]), "stop", st
			c.ends = clampEnds(c.ends[:k+1], at)
			// The raw text drops the same bytes (a special token inside the
			// stop string itself, skipped from the text, would stay).
			rawAt := raw.Len() - (text.Len() - at)
			c.raw, c.rawEnds = validUTF8(raw.String()[:max(rawAt, 0)]), clampEnds(c.rawEnds[:k+1], max(rawAt, 0))
			return c
		}
	}
	c.text, c.raw = validUTF8(text.String()), validUTF8(raw.String())
	c.stopReason = stopReason(c, p)
	return c
}

// firstStop finds the stop string that ends earliest in text among those
// that end after byte from.
func firstStop(text string, from int, stops []string) (at int, stop string, ok bool) {
	best := -1
	for _, st := range stops {
		lo := max(from-len(st)+1, 0)
		if i := strings.Index(text[lo:], st); i >= 0 {
			if end := lo + i + len(st); best < 0 || end < best {
				best, at, stop, ok = end, lo+i, st, true
			}
		}
	}
	return at, stop, ok
}

func clampEnds(ends []int, n int) []int {
	for i := range ends {
		ends[i] = min(ends[i], n)
	}
	return ends
}

// stopReason names what ended a generator-stopped sample: a
// stop_token_ids entry (vLLM reports the id), else nil (EOS, end of turn).
func stopReason(c choice, p params) any {
	if c.finish != "stop" || len(c.tokens) == 0 {
		return nil
	}
	last := c.tokens[len(c.tokens)-1]
	if slices.Contains(p.userStops, last) {
		return last
	}
	if st, ok := p.byteStops[last]; ok {
		return st
	}
	return nil
}

// tokenString names one token the way logprobs report it: by id for a
// model served without its tokenizer.
func (s *Server) tokenString(t int32, asIDs bool) string {
	if s.txt == nil {
		return fmt.Sprintf("token_id:%d", t)
	}
	return s.txt.tokenString(t, asIDs)
}

// tokenBytes is a logprobs entry's bytes (null without a tokenizer).
func (s *Server) tokenBytes(t int32) []int {
	if s.txt == nil {
		return nil
	}
	return s.txt.tokenBytes(t)
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
