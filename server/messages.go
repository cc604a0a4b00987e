package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// What /v1/chat/completions and /tokenize (its messages form) render: the
// messages in OpenAI's shape, function tools and the template's options,
// through the served Text's chat template, as vLLM renders them.

// chatInput is the rendering part of a chat request.
type chatInput struct {
	Messages            []json.RawMessage `json:"messages"`
	Tools               json.RawMessage   `json:"tools"`
	ChatTemplateKwargs  json.RawMessage   `json:"chat_template_kwargs"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
	// AddSpecialTokens (vLLM, default false) puts the post-processor's
	// special tokens around the render, on top of what the template writes.
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

// wireMessage is one message as OpenAI clients send it. Content is a
// string, null or an array of text parts; tool-call arguments are a JSON
// string (OpenAI) or an object (what vLLM also takes).
type wireMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCalls        []wireCall      `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"` // vLLM's newer name for reasoning_content
}

type wireCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// Keys of a message and of a tool call: the rendered ones, and those an
// SDK sends back with a previous reply (accepted only empty: a template
// never sees them).
var (
	messageKeys      = []string{"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "reasoning"}
	messageEmptyKeys = map[string]noop{"refusal": nullOrEmpty, "annotations": nullOrEmpty, "audio": nullOrEmpty, "function_call": nullOrEmpty}
	toolCallKeys     = []string{"id", "type", "function", "index"}
	functionKeys     = []string{"name", "arguments"}
)

// toMessages converts the wire messages, naming the field of any error;
// none is an error unless allowEmpty (/tokenize renders an empty
// conversation: the template's preamble, e.g. the tool list).
func (s *Server) toMessages(in []json.RawMessage, allowEmpty bool) ([]tokenizer.Message, error) {
	if len(in) == 0 && !allowEmpty {
		return nil, badParam("messages", "messages must not be empty.")
	}
	out := make([]tokenizer.Message, len(in))
	for i, raw := range in {
		where := fmt.Sprintf("messages[%d]", i)
		if err := checkKeys(raw, where, messageKeys, messageEmptyKeys); err != nil {
			return nil, err
		}
		var w wireMessage
		if err := json.Unmarshal(raw, &w); err != nil {
			return nil, badParam(where, "%v", err)
		}
		if w.Role == "" {
			return nil, badParam(where+".role", "role is required.")
		}
		text, err := contentText(w.Content)
		if err != nil {
			return nil, badParam(where+".content", "%s", err.Error())
		}
		m := tokenizer.Message{Role: w.Role, Content: text, Name: w.Name, ToolCallID: w.ToolCallID}
		// reasoning_content "" is there (templates tell it from a missing
		// one); null is missing.
		switch {
		case w.ReasoningContent != nil:
			m.ReasoningContent, m.ReasoningSet = *w.ReasoningContent, *w.ReasoningContent == ""
		case w.Reasoning != nil:
			m.ReasoningContent, m.ReasoningSet = *w.Reasoning, *w.Reasoning == ""
		}
		if len(w.ToolCalls) > 0 && !s.txt.Tools {
			return nil, badParam(where+".tool_calls", "this model's chat template has no tool calls.")
		}
		for j, c := range w.ToolCalls {
			tc, err := toolCall(c, fmt.Sprintf("%s.tool_calls[%d]", where, j), s.txt.ArgumentsText)
			if err != nil {
				return nil, err
			}
			m.ToolCalls = append(m.ToolCalls, tc)
		}
		if err := checkToolCallKeys(raw, where); err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

func toolCall(c wireCall, where string, asText bool) (tokenizer.ToolCall, error) {
	if c.Type != "" && c.Type != "function" {
		return tokenizer.ToolCall{}, badParam(where+".type", "only function tool calls are supported, got %q.", c.Type)
	}
	if c.Function.Name == "" {
		return tokenizer.ToolCall{}, badParam(where+".function.name", "a tool call needs a function name.")
	}
	// As chat.Unwire reads them (and vLLM): a JSON string holding JSON is
	// that JSON, as written; any other value goes to the template as it
	// is (a string that is not JSON stays a string), but for a template
	// that writes arguments as text, which gets a string's text.
	args := bytes.TrimSpace(c.Function.Arguments)
	var str string
	if json.Unmarshal(args, &str) == nil && (asText || json.Valid([]byte(str))) {
		args = []byte(str)
	}
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	return tokenizer.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: json.RawMessage(args)}, nil
}

// checkToolCallKeys refuses unknown keys inside a message's tool calls.
func checkToolCallKeys(raw json.RawMessage, where string) error {
	var m struct {
		ToolCalls []json.RawMessage `json:"tool_calls"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return nil // the message itself decoded; a non-list was refused there
	}
	for j, c := range m.ToolCalls {
		w := fmt.Sprintf("%s.tool_calls[%d]", where, j)
		if err := checkKeys(c, w, toolCallKeys, nil); err != nil {
			return err
		}
		var f struct {
			Function json.RawMessage `json:"function"`
		}
		if json.Unmarshal(c, &f) == nil && len(f.Function) > 0 && !isNull(f.Function) {
			if err := checkKeys(f.Function, w+".function", functionKeys, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkKeys refuses a JSON object with a key outside known, or in empty
// at a value that is not empty; where prefixes the param.
func checkKeys(raw json.RawMessage, where string, known []string, empty map[string]noop) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return badParam(where, "must be a JSON object.")
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if slices.Contains(known, k) {
			continue
		}
		if rule, ok := empty[k]; ok && rule.ok(bytes.TrimSpace(fields[k])) {
			continue
		}
		return badParam(where+"."+k, "%s.%s is not supported by this server.", where, k)
	}
	return nil
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
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content must be a string, null or an array of text parts")
	}
	var b strings.Builder
	for _, raw := range parts {
		var p struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if json.Unmarshal(raw, &p) != nil || p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("only text content parts ({\"type\": \"text\", \"text\": ...}) are supported, got %s", raw)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// parseTools checks the request's function tools and returns them as
// the template takes them (as sent, key order kept).
func (s *Server) parseTools(raw json.RawMessage) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, badParam("tools", "tools must be an array of {\"type\": \"function\", \"function\": {...}}.")
	}
	if len(tools) == 0 {
		return nil, nil
	}
	if !s.txt.Tools {
		return nil, badParam("tools", "this model's chat template does not render tools.")
	}
	for i, t := range tools {
		var tool struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(t, &tool) != nil || tool.Type != "function" || tool.Function == nil || tool.Function.Name == "" {
			return nil, badParam(fmt.Sprintf("tools[%d]", i), "a tool must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}.")
		}
	}
	return tools, nil
}

// render renders a chat input to the prompt's token ids (allowEmpty: see
// toMessages).
func (s *Server) render(ctx context.Context, in chatInput, tools []json.RawMessage, allowEmpty bool) (prompt []int32, err error) {
	msgs, err := s.toMessages(in.Messages, allowEmpty)
	if err != nil {
		return nil, err
	}
	opt := tokenizer.RenderOptions{Tools: tools, AddGenerationPrompt: in.AddGenerationPrompt == nil || *in.AddGenerationPrompt}
	if kw := bytes.TrimSpace(in.ChatTemplateKwargs); len(kw) > 0 && !isNull(kw) {
		if err := json.Unmarshal(kw, &opt.Kwargs); err != nil {
			return nil, badParam("chat_template_kwargs", "chat_template_kwargs must be an object.")
		}
		if len(opt.Kwargs) > 0 && !s.txt.Kwargs {
			return nil, badParam("chat_template_kwargs", "this model's chat template takes no extra variables.")
		}
	}
	defer func() {
		// A template the engine cannot run on some input is a bad input
		// for this template, not a server fault; the log keeps the panic.
		if r := recover(); r != nil {
			s.log.Error("chat template panicked", "panic", r)
			prompt, err = nil, badParam("messages", "the chat template failed on these messages: %v", r)
		}
	}()
	prompt, err = s.txt.Chat.RenderTokens(ctx, msgs, opt)
	if err != nil {
		var pe *paramError
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, badParam("messages", "%s", err.Error())
	}
	if in.AddSpecialTokens != nil && *in.AddSpecialTokens {
		prompt = append(append(slices.Clone(s.txt.Prefix), prompt...), s.txt.Suffix...)
	}
	return prompt, nil
}
