package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Message-level environments (protocol version 2, docs/protocols.md):
// the environment speaks chat messages with OpenAI-style tool calls rather
// than one action string. The types mirror the OpenAI chat completions
// shapes so an environment written against that API needs no translation.

// Message is one chat message.
type Message struct {
	Role       string     `json:"role"` // system | user | assistant | tool
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`   // assistant messages
	ToolCallID string     `json:"tool_call_id,omitempty"` // tool messages: the call answered
	Name       string     `json:"name,omitempty"`         // tool messages: the tool's name
	// ReasoningContent is an assistant message's reasoning, as an agent
	// sends its history back; nil when the field is missing (or null). A
	// template tells "" from a missing field (Qwen3's keeps a <think>
	// block written in Content when the field is there), so "" is kept.
	ReasoningContent *string `json:"reasoning_content,omitempty"`
	// ToolCallErrors (a longhaul extension of the OpenAI shape) lists the
	// tool calls of an assistant message that the tool parser could not
	// read; their raw text stays in Content. The environment decides what
	// a malformed call means (typically a tool or user message saying
	// what was wrong): it is data the episode goes on with, not a failure.
	ToolCallErrors []string `json:"tool_call_errors,omitempty"`
}

// ToolCall is one parsed tool call of an assistant message.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // always "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall names a tool and carries its arguments as a JSON object
// encoded in a string (the OpenAI shape).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is an OpenAI function tool schema.
type Tool struct {
	Type     string       `json:"type"` // "function"
	Function FunctionSpec `json:"function"`
}

// FunctionSpec describes one function tool; Parameters is a JSON Schema
// object.
type FunctionSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// MessageResult is the outcome of one assistant turn: the tool and user
// messages that answer it, and the step's reward.
type MessageResult struct {
	Messages []Message         `json:"messages"`
	Reward   float64           `json:"reward"`
	Done     bool              `json:"done"`
	Success  bool              `json:"success"`
	Info     map[string]string `json:"info,omitempty"`
}

// MessageEnvironment is the optional message-level capability of an
// environment. A rollout loop that renders chat templates and parses tool
// calls itself (the tokenizer's tool-call parser) drives it directly;
// until then httpenv.Client exposes it through the text methods of
// Environment, parsing actions with ParseToolCall.
type MessageEnvironment interface {
	ResetMessages(ctx context.Context, task Task, seed uint64) ([]Message, []Tool, error)
	StepMessage(ctx context.Context, msg Message) (MessageResult, error)
}

// ErrUnknownTool is matched by errors naming a tool that is not among an
// episode's tools.
var ErrUnknownTool = errors.New("env: unknown tool")

// ParseToolCall turns an agent's text into an assistant message for a
// message-level environment. It is the stand-in for a model-specific
// tool-call parser: a byte-level model writes "name" or "name args", where
// args is a JSON object, or, for a tool with exactly one parameter, that
// parameter's value (JSON when it parses as JSON of a non-string schema
// type, else the raw text). Text whose first word is not a tool's name is
// an assistant message without tool calls: the environment decides what a
// turn without a call means. id names the call (the idempotency key's
// step, so a replayed call has the same id).
func ParseToolCall(text string, tools []Tool, id string) Message {
	msg := Message{Role: "assistant", Content: text}
	name, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
	rest = strings.TrimSpace(rest)
	var spec *FunctionSpec
	for i := range tools {
		if tools[i].Function.Name == name {
			spec = &tools[i].Function
			break
		}
	}
	if spec == nil || name == "" {
		return msg
	}
	args := "{}"
	switch {
	case rest == "":
	case strings.HasPrefix(rest, "{") && json.Valid([]byte(rest)):
		args = rest
	default:
		if p, typ, ok := soleParam(spec.Parameters); ok {
			var v any = rest
			if typ != "string" && json.Valid([]byte(rest)) {
				v = json.RawMessage(rest)
			}
			b, _ := json.Marshal(map[string]any{p: v})
			args = string(b)
		} else {
			b, _ := json.Marshal(map[string]string{"input": rest})
			args = string(b)
		}
	}
	msg.Content = ""
	msg.ToolCalls = []ToolCall{{ID: id, Type: "function", Function: FunctionCall{Name: name, Arguments: args}}}
	return msg
}

// soleParam returns the name and type of a schema's only property.
func soleParam(schema json.RawMessage) (name, typ string, ok bool) {
	var s struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil || len(s.Properties) != 1 {
		return "", "", false
	}
	for n, p := range s.Properties {
		return n, p.Type, true
	}
	return "", "", false
}

// RenderTools is the one-line tool list a byte-level agent sees before its
// first message: "tools: read(page) note(text) answer(value)".
func RenderTools(tools []Tool) string {
	if len(tools) == 0 {
		return ""
	}
	parts := make([]string, 0, len(tools))
	for _, t := range tools {
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		_ = json.Unmarshal(t.Function.Parameters, &s)
		params := s.Required
		if len(params) == 0 {
			for n := range s.Properties {
				params = append(params, n)
			}
		}
		parts = append(parts, t.Function.Name+"("+strings.Join(params, ",")+")")
	}
	return "tools: " + strings.Join(parts, " ")
}

// RenderMessages joins the contents of messages into one observation for
// a text agent: one line per message.
func RenderMessages(msgs []Message) string {
	lines := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if m.Content != "" {
			lines = append(lines, m.Content)
		}
	}
	return strings.Join(lines, "\n")
}

// CheckReply checks an environment's answer to an assistant message: every
// tool message answers a call of req, by id and name, and names a tool of
// the episode. A violation is the environment's fault, not the agent's.
func CheckReply(req Message, tools []Tool, res MessageResult) error {
	calls := map[string]string{}
	for _, c := range req.ToolCalls {
		calls[c.ID] = c.Function.Name
	}
	known := map[string]bool{}
	for _, t := range tools {
		known[t.Function.Name] = true
	}
	for i, m := range res.Messages {
		switch m.Role {
		case "user", "system":
		case "tool":
			name, ok := calls[m.ToolCallID]
			if !ok {
				return fmt.Errorf("env: reply message %d answers tool call %q, which the step did not make", i, m.ToolCallID)
			}
			// A call the model made to a tool the episode lacks is answered
			// under that name (the environment tells the model so); any
			// other name is the environment's own mistake.
			if m.Name != "" && m.Name != name {
				if !known[m.Name] {
					return fmt.Errorf("%w: reply message %d names tool %q (the call was to %q)", ErrUnknownTool, i, m.Name, name)
				}
				return fmt.Errorf("env: reply message %d names tool %q, but the call %q was to %q", i, m.Name, m.ToolCallID, name)
			}
		default:
			return fmt.Errorf("env: reply message %d has role %q; want tool, user or system", i, m.Role)
		}
	}
	return nil
}
