package config

import (
	"encoding/json"

	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// Tokenizer configures how conversations become tokens (tokenizer/...).
// Kept in its own file: the rest of the config is typed elsewhere.
type Tokenizer struct {
	Path           string         `yaml:"path" doc:"a Hugging Face model directory (tokenizer.json, tokenizer_config.json, generation_config.json) or a tokenizer.json; empty: longhaul's byte tokenizer and template (the embedded model's)"`
	Source         string         `yaml:"source" enum:"local|server" doc:"local: render and encode in Go; server: the inference server renders (vLLM-style POST /tokenize with messages)"`
	History        string         `yaml:"history" enum:"append|rerender" doc:"when the template re-renders history differently: append keeps the exact sampled tokens; rerender switches to the fresh render and declares a segment boundary"`
	ToolParser     string         `yaml:"tool_parser" enum:"none|hermes|qwen|llama3_json|deepseek_v3" doc:"how tool calls are read from the model's output"`
	TemplateKwargs map[string]any `yaml:"template_kwargs" doc:"extra chat-template variables, e.g. enable_thinking: false; any key"`
}

func defaultTokenizer() Tokenizer {
	return Tokenizer{Source: "local", History: "append", ToolParser: "none", TemplateKwargs: map[string]any{}}
}

func (c *Config) validateTokenizer(v *validator) {
	t := c.Tokenizer
	if _, err := toolcall.New(t.ToolParser); err != nil {
		v.failf("tokenizer.tool_parser", "%w", err)
	}
	if _, err := json.Marshal(t.TemplateKwargs); err != nil {
		v.failf("tokenizer.template_kwargs", "must have string keys at every level: %w", err)
	}
	if t.Path != "" && c.Generator.Kind == "embedded" && c.Model.Path == "" {
		v.failf("tokenizer.path", "must be empty with generator.kind embedded and no model.path: the built-in model speaks the byte tokenizer (have %q)", t.Path)
	}
	if c.Model.Path != "" && c.Model.Weights != "" {
		v.failf("model.weights", "must be empty with model.path (the directory holds the weights)")
	}
	if t.Source == "server" && c.Generator.Kind != "openai" {
		v.failf("tokenizer.source", "server needs generator.kind openai (a server to render)")
	}
}
