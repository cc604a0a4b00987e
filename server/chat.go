package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// ---- /v1/chat/completions ----

// chatMessage accepts content as a string or as an array of text parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatRequest struct {
	sampling
	Messages            []chatMessage   `json:"messages"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	PromptLogprobs      *int            `json:"prompt_logprobs"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	StreamOptions       json.RawMessage `json:"stream_options"`
}

func toMessages(in []chatMessage) ([]lhtok.Message, error) {
	if len(in) == 0 {
		return nil, badParam("messages", "messages must not be empty.")
	}
	out := make([]lhtok.Message, len(in))
	for i, m := range in {
		role := m.Role
		if m.Role == "developer" {
			role = lhtok.RoleSystem // OpenAI's newer name for the system role
		}
		if _, err := bytetok.RoleToken(role); err != nil {
			return nil, badParam(fmt.Sprintf("messages[%d].role", i), "unknown role %q.", m.Role)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, badParam(fmt.Sprintf("messages[%d].content", i), "%s", err.Error())
		}
		out[i] = lhtok.Message{Role: role, Content: text}
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

// chatAlt is one entry of a token's top_logprobs.
type chatAlt struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatTokenLogprob struct {
	chatAlt
	TopLogprobs []chatAlt `json:"top_logprobs"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatMessageOut struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	Logprobs     *chatLogprobs  `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
	StopReason   any            `json:"stop_reason"`
	TokenIDs     []int32        `json:"token_ids,omitempty"`
}

type chatResponse struct {
	ID             string                        `json:"id"`
	Object         string                        `json:"object"`
	Created        int64                         `json:"created"`
	Model          string                        `json:"model"`
	Choices        []chatChoice                  `json:"choices"`
	Usage          usage                         `json:"usage"`
	PromptTokenIDs []int32                       `json:"prompt_token_ids,omitempty"`
	PromptLogprobs []map[string]vllmLogprobEntry `json:"prompt_logprobs,omitempty"`
	WeightVersion  int64                         `json:"weight_version"`
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !s.decodeStrict(w, r, &req, chatFields) {
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
	prompt, err := bytetok.Render(msgs, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
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
	stream := req.Stream
	req.Stream = false                                    // validate refuses it for the engine routes
	p, err := s.validate(&req.sampling, def, bytetok.End) // the assistant's turn ends at End
	if err == nil && deref(req.TopLogprobs) > 0 && !req.Logprobs {
		err = badParam("top_logprobs", "top_logprobs needs logprobs: true.")
	}
	if err == nil {
		err = s.withLogprobs(&p, deref(req.TopLogprobs), "top_logprobs", req.PromptLogprobs)
	}
	var so streamOptions
	if err == nil {
		so, err = parseStreaming(req.StreamOptions, stream, req.PromptLogprobs)
	}
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	prompts := [][]int32{prompt}
	cs, promptLPs, v, err := s.sample(r, prompts, p)
	if err != nil {
		s.writeGenError(w, v, err)
		return
	}
	resp := chatResponse{ID: s.newID("chatcmpl"), Object: "chat.completion", Created: s.opts.Now().Unix(),
		Model: s.be.Model, Usage: makeUsage(prompts, cs), WeightVersion: v}
	if req.ReturnTokenIDs {
		resp.PromptTokenIDs = prompt
	}
	if stream {
		s.streamChat(w, resp, req, p, cs, so)
		return
	}
	if promptLPs != nil {
		resp.PromptLogprobs = s.promptLogprobsJSON(prompt, promptLPs[0], p.asIDs)
	}
	resp.Choices = make([]chatChoice, len(cs))
	for i, c := range cs {
		ch := chatChoice{Index: i, FinishReason: c.finish, StopReason: c.stopReason,
			Message: chatMessageOut{Role: "assistant", Content: c.text}}
		if req.ReturnTokenIDs {
			ch.TokenIDs = nonNil(c.tokens)
		}
		if req.Logprobs {
			ch.Logprobs = &chatLogprobs{Content: make([]chatTokenLogprob, len(c.tokens))}
			for k := range c.tokens {
				ch.Logprobs.Content[k] = s.chatLogprob(c, k, p)
			}
		}
		resp.Choices[i] = ch
	}
	writeJSON(w, v, http.StatusOK, resp)
}

func (s *Server) chatAlt(t int32, lp float32, asIDs bool) chatAlt {
	a := chatAlt{Token: s.tokenString(t, asIDs), Logprob: lp}
	if t >= 0 && t < 256 {
		a.Bytes = []int{int(t)}
	}
	return a
}

// chatLogprob is the logprobs entry of token k of c, with its
// alternatives when top_logprobs asked for them.
func (s *Server) chatLogprob(c choice, k int, p params) chatTokenLogprob {
	e := chatTokenLogprob{chatAlt: s.chatAlt(c.tokens[k], c.logprobs[k], p.asIDs), TopLogprobs: []chatAlt{}}
	if c.top != nil {
		for _, a := range c.top[k].top {
			e.TopLogprobs = append(e.TopLogprobs, s.chatAlt(a.id, a.lp, p.asIDs))
		}
	}
	return e
}

// chatDelta is a chunk's delta: role on a choice's first chunk only.
type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatStreamChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	StopReason   any           `json:"stop_reason"`
	TokenIDs     []int32       `json:"token_ids,omitempty"`
}

type chatChunk struct {
	ID             string             `json:"id"`
	Object         string             `json:"object"`
	Created        int64              `json:"created"`
	Model          string             `json:"model"`
	Choices        []chatStreamChoice `json:"choices"`
	Usage          any                `json:"usage,omitempty"`
	PromptTokenIDs []int32            `json:"prompt_token_ids,omitempty"`
	WeightVersion  int64              `json:"weight_version"`
}

// streamChat writes cs as chat.completion.chunk events as vLLM does: a
// first chunk per choice with the role and empty content, one chunk per
// token with its content delta, the finish on the last, then the usage
// chunk when include_usage asked for it.
func (s *Server) streamChat(w http.ResponseWriter, resp chatResponse, req chatRequest, p params, cs []choice, so streamOptions) {
	e := startSSE(w, resp.WeightVersion)
	chunk := chatChunk{ID: resp.ID, Object: "chat.completion.chunk", Created: resp.Created, Model: resp.Model,
		Usage: streamUsage(so.IncludeUsage), PromptTokenIDs: resp.PromptTokenIDs, WeightVersion: resp.WeightVersion}
	empty := ""
	for i := range cs {
		chunk.Choices = []chatStreamChoice{{Index: i, Delta: chatDelta{Role: "assistant", Content: &empty}}}
		e.send(chunk)
		chunk.PromptTokenIDs = nil // vLLM: the first chunk only
	}
	deltas := make([][]string, len(cs))
	for i, c := range cs {
		deltas[i] = textDeltas(c.tokens, c.text)
	}
	interleave(cs, func(i, k int, last bool) {
		c := cs[i]
		ch := chatStreamChoice{Index: i}
		if k >= 0 {
			ch.Delta.Content = &deltas[i][k]
			if req.ReturnTokenIDs {
				ch.TokenIDs = []int32{c.tokens[k]}
			}
			if req.Logprobs {
				ch.Logprobs = &chatLogprobs{Content: []chatTokenLogprob{s.chatLogprob(c, k, p)}}
			}
		}
		if last {
			ch.FinishReason, ch.StopReason = &cs[i].finish, c.stopReason
		}
		chunk.Choices = []chatStreamChoice{ch}
		e.send(chunk)
	})
	if so.IncludeUsage {
		chunk.Choices, chunk.Usage = []chatStreamChoice{}, resp.Usage
		e.send(chunk)
	}
	e.done()
}
