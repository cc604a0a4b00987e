package config

import (
	"strings"
	"testing"
)

func TestTokenizerSection(t *testing.T) {
	c, err := Parse("f.yaml", []byte("generator:\n  kind: openai\n  urls: [\"http://127.0.0.1:1\"]\n  model: m\ntokenizer:\n  path: /models/qwen3\n  history: rerender\n  tool_parser: hermes\n  template_kwargs:\n    enable_thinking: false\ncompaction:\n  enabled: false\n"))
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	if c.Tokenizer.Path != "/models/qwen3" || c.Tokenizer.History != "rerender" || c.Tokenizer.TemplateKwargs["enable_thinking"] != false {
		t.Fatalf("%+v", c.Tokenizer)
	}
	// model.path brings its tokenizer to the embedded generator.
	c, err = Parse("f.yaml", []byte("model:\n  path: /m\ncompaction:\n  enabled: false\n"))
	if err == nil {
		err = c.Validate()
	}
	if err != nil || c.Model.Path != "/m" {
		t.Fatalf("model.path: %v %+v", err, c.Model)
	}
	// Compaction works with a chat template (rollout/chatcompact.go).
	c, err = Parse("f.yaml", []byte("model:\n  path: /m\ncompaction:\n  enabled: true\n"))
	if err == nil {
		err = c.Validate()
	}
	if err != nil || !c.Compaction.Enabled {
		t.Fatalf("compaction with model.path: %v", err)
	}
	for _, tc := range []struct{ src, key string }{
		{"tokenizer:\n  histroy: append\n", "tokenizer.histroy"},
		{"tokenizer:\n  history: prepend\n", "tokenizer.history"},
		{"tokenizer:\n  tool_parser: mistral\n", "tokenizer.tool_parser"},
		{"tokenizer:\n  path: /m\n", "tokenizer.path"},
		{"tokenizer:\n  source: server\n", "tokenizer.source"},
		{"model:\n  path: /m\n  weights: /w.safetensors\ncompaction:\n  enabled: false\n", "model.weights"},
		{"model:\n  pth: /m\n", "model.pth"},
	} {
		c, err := Parse("f.yaml", []byte(tc.src))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: want an error naming %s, got %v", tc.src, tc.key, err)
		}
	}
}
