package agentenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/longhaul-rl/longhaul/env"
)

// handler is the per-rollout OpenAI-compatible endpoint.
type handler struct {
	call env.AgentCallFunc
	ctx  context.Context
	fail context.CancelCauseFunc

	mu     sync.Mutex
	n      int
	res    env.AgentResult
	posted bool
	limit  bool
}

func (h *handler) result() (env.AgentResult, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.res, h.posted
}

func (h *handler) limited() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.limit
}

type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Tools    []env.Tool    `json:"tools"`
	// ToolChoice is accepted and not enforced: the model decides ("auto").
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// Compaction declares a compaction boundary, as CompactionHeader does
	// (for clients that add body fields more easily than headers).
	Compaction bool `json:"longhaul_compaction"`
}

// CompactionHeader, set to any value on a chat request, declares that the
// agent rewrote its context since its previous call.
const CompactionHeader = "X-Longhaul-Compaction"

// chatMessage accepts content as a string or as a list of text parts (the
// OpenAI SDKs send both).
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []env.ToolCall  `json:"tool_calls"`   // assistant messages
	ToolCallID string          `json:"tool_call_id"` // tool messages
	Name       string          `json:"name"`
	// ReasoningContent: nil when missing or null; "" is present.
	ReasoningContent *string `json:"reasoning_content"`
}

func (m chatMessage) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor a list of text parts")
	}
	out := ""
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part of type %q (only text is supported)", p.Type)
		}
		out += p.Text
	}
	return out, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": code}})
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_body", "unreadable body")
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{"id": "longhaul", "object": "model"}}})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		h.chat(w, body, r.Header.Get(CompactionHeader) != "")
	case r.Method == http.MethodPost && r.URL.Path == "/v1/longhaul/reward":
		var rw struct {
			Reward  *float64 `json:"reward"`
			Success bool     `json:"success"`
		}
		if err := json.Unmarshal(body, &rw); err != nil || rw.Reward == nil {
			apiError(w, http.StatusBadRequest, "bad_reward", `want {"reward": number, "success": bool}`)
			return
		}
		h.mu.Lock()
		h.res, h.posted = env.AgentResult{Reward: *rw.Reward, Success: rw.Success}, true
		h.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{})
	default:
		apiError(w, http.StatusNotFound, "not_found", "no endpoint "+r.Method+" "+r.URL.Path)
	}
}

func (h *handler) chat(w http.ResponseWriter, body []byte, declared bool) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		apiError(w, http.StatusBadRequest, "bad_body", "bad request body: "+err.Error())
		return
	}
	c := env.AgentCall{Messages: make([]env.Message, len(req.Messages)), Compacted: req.Compaction || declared}
	for i, m := range req.Messages {
		text, err := m.text()
		if err != nil {
			apiError(w, http.StatusBadRequest, "bad_message", fmt.Sprintf("messages[%d]: %v", i, err))
			return
		}
		for j, tc := range m.ToolCalls {
			if tc.Function.Name == "" {
				apiError(w, http.StatusBadRequest, "bad_message", fmt.Sprintf("messages[%d].tool_calls[%d]: no function name", i, j))
				return
			}
		}
		c.Messages[i] = env.Message{Role: m.Role, Content: text, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name, ReasoningContent: m.ReasoningContent}
	}
	for i, t := range req.Tools {
		if t.Function.Name == "" || (t.Type != "" && t.Type != "function") {
			apiError(w, http.StatusBadRequest, "bad_tool", fmt.Sprintf("tools[%d]: want {\"type\": \"function\", \"function\": {\"name\": ...}}", i))
			return
		}
	}
	c.Tools = req.Tools
	rep, err := h.call(h.ctx, c)
	switch {
	case errors.Is(err, env.ErrAgentLimit):
		h.mu.Lock()
		h.limit = true
		h.mu.Unlock()
		apiError(w, http.StatusBadRequest, "context_length_exceeded", err.Error())
		return
	case err != nil:
		// Not the agent's to handle (the log diverged, the generator is
		// down): end the attempt with this error.
		h.fail(err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{"message": err.Error(), "type": "server_error"}})
		return
	}
	h.mu.Lock()
	h.n++
	id := fmt.Sprintf("chatcmpl-%d", h.n)
	h.mu.Unlock()
	model := req.Model
	if model == "" {
		model = "longhaul"
	}
	if req.Stream {
		writeStream(w, id, model, rep, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	msg := map[string]any{"role": "assistant", "content": rep.Text}
	if len(rep.ToolCalls) > 0 {
		msg["tool_calls"] = rep.ToolCalls
		if rep.Text == "" {
			msg["content"] = nil // the OpenAI shape of a reply that only calls tools
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": id, "object": "chat.completion", "created": 0, "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": rep.Finish, "message": msg}},
		"usage":   usage(rep),
	})
}

func usage(rep env.AgentReply) map[string]any {
	return map[string]any{"prompt_tokens": rep.PromptTokens, "completion_tokens": rep.CompletionTokens,
		"total_tokens": rep.PromptTokens + rep.CompletionTokens}
}
