package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// ---- /v1/chat/completions ----

type chatRequest struct {
	sampling
	chatInput
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	PromptLogprobs      *int            `json:"prompt_logprobs"`
	StreamOptions       json.RawMessage `json:"stream_options"`
}

// parseToolChoice reads tool_choice: whether the reply is parsed for tool
// calls. "required" and a named function need constrained decoding,
// which this server does not have.
func parseToolChoice(raw json.RawMessage, tools bool) (bool, error) {
	raw = bytes.TrimSpace(raw)
	var s string
	switch {
	case len(raw) == 0 || isNull(raw):
		return tools, nil
	case json.Unmarshal(raw, &s) == nil && s == "auto":
		return tools, nil
	case s == "none":
		return false, nil
	}
	return false, badParam("tool_choice", `only "auto" and "none" are supported ("required" and a named function need constrained decoding, which this server does not do).`)
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

// toolCallOut is one tool call of a reply, in OpenAI's shape: arguments
// are the JSON text the model wrote.
type toolCallOut struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatMessageOut struct {
	Role             string        `json:"role"`
	Content          *string       `json:"content"`
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallOut `json:"tool_calls,omitempty"`
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

// chatOptions is what shapes a reply besides its tokens.
type chatOptions struct {
	parse    bool // read tool calls (tools given, tool_choice auto)
	parallel bool // keep every call (parallel_tool_calls)
	idPrefix string
}

// answer is a choice read as an assistant message.
type answer struct {
	msg    chatMessageOut
	finish string
	// args[i] is the text tool call i's arguments came from (for
	// streaming), reasoning and content likewise.
	reasoning, content string
	calls              []toolcallText
}

type toolcallText struct{ name, args string }

// answer reads c as the assistant's message: its text, or with tools the
// parser's reading of it (reasoning, content without the calls, calls).
func (s *Server) answer(c choice, i int, o chatOptions) answer {
	r := answer{finish: c.finish, content: c.text}
	r.msg.Role = "assistant"
	if !o.parse {
		r.msg.Content = &r.content
		return r
	}
	p := s.txt.Parser.Parse(c.raw)
	calls := p.Message.ToolCalls
	if !o.parallel && len(calls) > 1 {
		calls = calls[:1]
	}
	r.content, r.reasoning = p.Message.Content, p.Message.ReasoningContent
	if r.reasoning != "" {
		r.msg.ReasoningContent = &r.reasoning
	}
	if r.content != "" || len(calls) == 0 {
		r.msg.Content = &r.content
	}
	for j, tc := range calls {
		out := toolCallOut{ID: fmt.Sprintf("%s-%d-%d", o.idPrefix, i, j), Type: "function"}
		out.Function.Name, out.Function.Arguments = tc.Name, string(tc.Arguments)
		r.msg.ToolCalls = append(r.msg.ToolCalls, out)
		r.calls = append(r.calls, toolcallText{name: tc.Name, args: string(tc.Arguments)})
	}
	if len(calls) > 0 && r.finish == "stop" {
		r.finish = "tool_calls"
	}
	return r
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
	if s.txt == nil {
		s.writeParamError(w, errNoTokenizer("messages"))
		return
	}
	tools, err := s.parseTools(req.Tools)
	var o chatOptions
	if err == nil {
		o.parse, err = parseToolChoice(req.ToolChoice, tools != nil)
	}
	if err == nil && o.parse && s.txt.Parser == nil {
		err = badParam("tools", "this model is served without a tool-call parser, so its tool calls cannot be read (longhaul serve --tool-parser NAME).")
	}
	o.parallel = req.ParallelToolCalls == nil || *req.ParallelToolCalls
	var prompt []int32
	if err == nil {
		prompt, err = s.render(r.Context(), req.chatInput, tools, false)
	}
	if err != nil {
		s.writeParamError(w, err)
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
	req.Stream = false // validate refuses it for the engine routes
	p, err := s.validate(&req.sampling, def, true)
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
	o.idPrefix = "call-" + resp.ID[len("chatcmpl-"):]
	if req.ReturnTokenIDs {
		resp.PromptTokenIDs = prompt
	}
	replies := make([]answer, len(cs))
	for i, c := range cs {
		replies[i] = s.answer(c, i, o)
	}
	if stream {
		s.streamChat(w, resp, req, p, cs, replies, so)
		return
	}
	if promptLPs != nil {
		resp.PromptLogprobs = s.promptLogprobsJSON(prompt, promptLPs[0], p.asIDs)
	}
	resp.Choices = make([]chatChoice, len(cs))
	for i, c := range cs {
		ch := chatChoice{Index: i, FinishReason: replies[i].finish, StopReason: c.stopReason, Message: replies[i].msg}
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
	return chatAlt{Token: s.tokenString(t, asIDs), Logprob: lp, Bytes: s.tokenBytes(t)}
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
