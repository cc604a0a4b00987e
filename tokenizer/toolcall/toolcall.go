// Package toolcall parses a model's sampled text into an assistant message
// with structured tool calls, by model family (config tokenizer.tool_parser).
//
// A malformed tool call is data, not a crash: the call is left out, the raw
// text stays in the message content, and Parsed.Errors says what was wrong
// so the environment can answer the model with an error message.
package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// Parsed is a parsed assistant turn.
type Parsed struct {
	Message tokenizer.Message
	// Errors lists malformed tool calls; the environment sees them.
	Errors []string
}

// Parser parses one assistant turn's text (special tokens included as
// text, the stop token excluded).
type Parser interface {
	Parse(text string) Parsed
}

// Names are the tokenizer.tool_parser values.
var Names = []string{"none", "hermes", "qwen", "llama3_json", "deepseek_v3"}

// New returns the parser for a tokenizer.tool_parser value.
func New(name string) (Parser, error) {
	switch name {
	case "", "none":
		return none{}, nil
	case "hermes", "qwen":
		return hermes{}, nil
	case "llama3_json":
		return llama3{}, nil
	case "deepseek_v3":
		return deepseek{}, nil
	}
	return nil, fmt.Errorf("toolcall: tokenizer.tool_parser %q: want one of %s", name, strings.Join(Names, ", "))
}

type none struct{}

func (none) Parse(text string) Parsed {
	r, c := splitThink(text)
	return Parsed{Message: tokenizer.Message{Role: "assistant", Content: c, ReasoningContent: r}}
}

// splitThink separates a leading <think>...</think> block (Qwen3, DeepSeek
// R1 style) from the content.
func splitThink(text string) (reasoning, content string) {
	i := strings.Index(text, "</think>")
	if i < 0 {
		return "", text
	}
	r := strings.TrimPrefix(strings.TrimSpace(text[:i]), "<think>")
	return strings.Trim(r, "\n"), strings.TrimLeft(text[i+len("</think>"):], "\n")
}

// call is the {"name": ..., "arguments"|"parameters": {...}} object.
type call struct {
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Parameters json.RawMessage `json:"parameters"`
}

// decodeCall checks one JSON tool call: an object with a non-empty string
// name and an object of arguments (a JSON string holding an object is
// accepted, as some models write it).
func decodeCall(src string) (tokenizer.ToolCall, error) {
	dec := json.NewDecoder(strings.NewReader(src))
	var c call
	if err := dec.Decode(&c); err != nil {
		return tokenizer.ToolCall{}, fmt.Errorf("not a JSON object: %v", err)
	}
	if dec.More() {
		return tokenizer.ToolCall{}, fmt.Errorf("text after the JSON object")
	}
	if c.Name == "" {
		return tokenizer.ToolCall{}, fmt.Errorf("no \"name\"")
	}
	args := c.Arguments
	if len(args) == 0 {
		args = c.Parameters
	}
	args = bytes.TrimSpace(args)
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	if args[0] == '"' {
		var s string
		if err := json.Unmarshal(args, &s); err != nil {
			return tokenizer.ToolCall{}, fmt.Errorf("arguments: %v", err)
		}
		args = json.RawMessage(strings.TrimSpace(s))
	}
	if len(args) == 0 || args[0] != '{' || !json.Valid(args) {
		return tokenizer.ToolCall{}, fmt.Errorf("tool %q: arguments are not a JSON object", c.Name)
	}
	return tokenizer.ToolCall{Name: c.Name, Arguments: args}, nil
}

// hermes: <tool_call>\n{json}\n</tool_call>, any number, after the content.
type hermes struct{}

var hermesRE = regexp.MustCompile(`(?s)<tool_call>(.*?)(</tool_call>|$)`)

func (hermes) Parse(text string) Parsed {
	r, content := splitThink(text)
	p := Parsed{Message: tokenizer.Message{Role: "assistant", ReasoningContent: r}}
	locs := hermesRE.FindAllStringSubmatchIndex(content, -1)
	if len(locs) == 0 {
		p.Message.Content = content
		return p
	}
	kept := content[:locs[0][0]]
	for i, l := range locs {
		body := content[l[2]:l[3]]
		if l[4] == l[5] {
			p.Errors = append(p.Errors, fmt.Sprintf("tool call %d: <tool_call> without </tool_call>", i))
			kept += content[l[0]:l[1]]
			continue
		}
		c, err := decodeCall(strings.TrimSpace(body))
		if err != nil {
			p.Errors = append(p.Errors, fmt.Sprintf("tool call %d: %v", i, err))
			kept += content[l[0]:l[1]]
			continue
		}
		c.ID = fmt.Sprintf("call_%d", len(p.Message.ToolCalls))
		p.Message.ToolCalls = append(p.Message.ToolCalls, c)
	}
	p.Message.Content = strings.TrimRight(kept, "\n")
	return p
}

// llama3: the whole reply is one JSON object {"name", "parameters"},
// optionally after <|python_tag|>; several may be separated by ';'.
type llama3 struct{}

func (llama3) Parse(text string) Parsed {
	p := Parsed{Message: tokenizer.Message{Role: "assistant", Content: text}}
	s := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "<|python_tag|>"))
	if !strings.HasPrefix(s, "{") {
		return p
	}
	var calls []tokenizer.ToolCall
	for i, part := range splitTopLevel(s, ';') {
		c, err := decodeCall(strings.TrimSpace(part))
		if err != nil {
			p.Errors = append(p.Errors, fmt.Sprintf("tool call %d: %v", i, err))
			return p
		}
		c.ID = fmt.Sprintf("call_%d", i)
		calls = append(calls, c)
	}
	p.Message.ToolCalls, p.Message.Content = calls, ""
	return p
}

// splitTopLevel splits s at sep outside JSON strings and brackets.
func splitTopLevel(s string, sep byte) []string {
	var out []string
	depth, inStr, esc, start := 0, false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == sep && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// deepseek: <｜tool▁calls▁begin｜>{<｜tool▁call▁begin｜>TYPE<｜tool▁sep｜>NAME
// ```json\nARGS\n```<｜tool▁call▁end｜>}<｜tool▁calls▁end｜>
type deepseek struct{}

const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

func (deepseek) Parse(text string) Parsed {
	r, content := splitThink(text)
	p := Parsed{Message: tokenizer.Message{Role: "assistant", ReasoningContent: r, Content: content}}
	i := strings.Index(content, dsCallsBegin)
	if i < 0 {
		return p
	}
	rest := content[i+len(dsCallsBegin):]
	if j := strings.Index(rest, dsCallsEnd); j >= 0 {
		rest = rest[:j]
	}
	var calls []tokenizer.ToolCall
	for n := 0; ; n++ {
		b := strings.Index(rest, dsCallBegin)
		if b < 0 {
			break
		}
		rest = rest[b+len(dsCallBegin):]
		e := strings.Index(rest, dsCallEnd)
		if e < 0 {
			p.Errors = append(p.Errors, fmt.Sprintf("tool call %d: no %s", n, dsCallEnd))
			return p
		}
		body := rest[:e]
		rest = rest[e+len(dsCallEnd):]
		_, nameArgs, ok := strings.Cut(body, dsSep)
		if !ok {
			p.Errors = append(p.Errors, fmt.Sprintf("tool call %d: no %s", n, dsSep))
			return p
		}
		name, args, ok := strings.Cut(nameArgs, "\n")
		args = strings.TrimSpace(args)
		args = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(args, "```json"), "```"))
		if !ok || strings.TrimSpace(name) == "" {
			p.Errors = append(p.Errors, fmt.Sprintf("tool call %d: no function name", n))
			return p
		}
		if args == "" || args[0] != '{' || !json.Valid([]byte(args)) {
			p.Errors = append(p.Errors, fmt.Sprintf("tool call %d: tool %q: arguments are not a JSON object", n, strings.TrimSpace(name)))
			return p
		}
		calls = append(calls, tokenizer.ToolCall{ID: fmt.Sprintf("call_%d", n), Name: strings.TrimSpace(name), Arguments: json.RawMessage(args)})
	}
	if len(calls) == 0 {
		p.Errors = append(p.Errors, "tool calls block without a tool call")
		return p
	}
	p.Message.ToolCalls, p.Message.Content = calls, strings.TrimRight(content[:i], "\n")
	return p
}
