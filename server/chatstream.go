package server

import (
	"net/http"
	"strings"
)

// chatDelta is a chunk's delta: role on a choice's first chunk only; tool
// calls as OpenAI streams them (index, then id, type and name on a call's
// first delta, then pieces of its arguments).
type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int            `json:"index"`
	ID       string         `json:"id,omitempty"`
	Type     string         `json:"type,omitempty"`
	Function *functionDelta `json:"function,omitempty"`
}

type functionDelta struct {
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
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

// deltas cuts an answer into one delta per sampled token: each part of
// the message (reasoning, content, each call's name and arguments) goes
// to the tokens whose text holds it, so the deltas of a choice join to
// its message exactly.
func deltas(c choice, a answer) []chatDelta {
	out := make([]chatDelta, len(c.tokens))
	if len(out) == 0 {
		return out
	}
	if a.msg.ReasoningContent == nil && len(a.msg.ToolCalls) == 0 {
		// Plain text: every token's chunk carries its piece (maybe "").
		for k, piece := range spread(a.content, 0, c.ends) {
			out[k].Content = &piece
		}
		return out
	}
	// The parser's reading of the raw text: find each part in it, in
	// order, and spread it over the tokens from there; a part the parser
	// rewrote (not found as written) is spread from where the last one
	// ended.
	raw, ends, at := c.raw, c.rawEnds, 0
	locate := func(s string) int {
		if i := strings.Index(raw[min(at, len(raw)):], s); s != "" && i >= 0 {
			at += i
		}
		pos := at
		at += len(s)
		return pos
	}
	if a.msg.ReasoningContent != nil {
		for k, piece := range spread(a.reasoning, locate(a.reasoning), ends) {
			if piece != "" {
				out[k].ReasoningContent = &piece
			}
		}
	}
	if a.msg.Content != nil {
		for k, piece := range spread(a.content, locate(a.content), ends) {
			if piece != "" {
				out[k].Content = &piece
			}
		}
	}
	for i, call := range a.calls {
		head := locate(call.name)
		first := len(ends) - 1 // the token that starts the call
		for k, e := range ends {
			if e > head {
				first = k
				break
			}
		}
		pending := ""
		for k, piece := range spread(call.args, locate(call.args), ends) {
			switch {
			case k < first:
				pending += piece // cannot come before the call's name; held
			case k == first:
				args := pending + piece
				tc := a.msg.ToolCalls[i]
				out[k].ToolCalls = append(out[k].ToolCalls, toolCallDelta{Index: i, ID: tc.ID, Type: "function",
					Function: &functionDelta{Name: tc.Function.Name, Arguments: &args}})
			case piece != "":
				out[k].ToolCalls = append(out[k].ToolCalls, toolCallDelta{Index: i, Function: &functionDelta{Arguments: &piece}})
			}
		}
	}
	for k := range out {
		if out[k].Content == nil && out[k].ReasoningContent == nil && len(out[k].ToolCalls) == 0 {
			empty := ""
			out[k].Content = &empty // a chunk always says something
		}
	}
	return out
}

// streamChat writes cs as chat.completion.chunk events as vLLM does: a
// first chunk per choice with the role and empty content, one chunk per
// token with its delta, the finish on the last, then the usage chunk when
// include_usage asked for it.
func (s *Server) streamChat(w http.ResponseWriter, resp chatResponse, req chatRequest, p params, cs []choice, as []answer, so streamOptions) {
	e := startSSE(w, resp.WeightVersion)
	chunk := chatChunk{ID: resp.ID, Object: "chat.completion.chunk", Created: resp.Created, Model: resp.Model,
		Usage: streamUsage(so.IncludeUsage), PromptTokenIDs: resp.PromptTokenIDs, WeightVersion: resp.WeightVersion}
	empty := ""
	for i := range cs {
		chunk.Choices = []chatStreamChoice{{Index: i, Delta: chatDelta{Role: "assistant", Content: &empty}}}
		e.send(chunk)
		chunk.PromptTokenIDs = nil // vLLM: the first chunk only
	}
	ds := make([][]chatDelta, len(cs))
	for i, c := range cs {
		ds[i] = deltas(c, as[i])
	}
	interleave(cs, func(i, k int, last bool) {
		c := cs[i]
		ch := chatStreamChoice{Index: i}
		if k >= 0 {
			ch.Delta = ds[i][k]
			if req.ReturnTokenIDs {
				ch.TokenIDs = []int32{c.tokens[k]}
			}
			if req.Logprobs {
				ch.Logprobs = &chatLogprobs{Content: []chatTokenLogprob{s.chatLogprob(c, k, p)}}
			}
		}
		if last {
			ch.FinishReason, ch.StopReason = &as[i].finish, c.stopReason
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
