package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Config is what longhaul reads from tokenizer_config.json and
// generation_config.json.
type Config struct {
	BOS, EOS, PAD string
	// ChatTemplate is the default template; Templates holds named ones
	// (tokenizer_config.json may list several, e.g. "tool_use").
	ChatTemplate string
	Templates    map[string]string
	// ChatTemplateFile is the file ChatTemplate came from
	// (tokenizer_config.json or chat_template.jinja), for errors that
	// name the template's line.
	ChatTemplateFile string
	// GenerationEOS is generation_config.json's eos_token_id.
	GenerationEOS []int32
}

// LoadConfig reads tokenizer_config.json and generation_config.json from dir;
// a missing file leaves its fields empty. A separate chat_template.jinja
// (newer transformers) takes precedence over the config's field.
func LoadConfig(dir string) (Config, error) {
	var c Config
	name := filepath.Join(dir, "tokenizer_config.json")
	if data, err := os.ReadFile(name); err == nil {
		if err := c.parseTokenizerConfig(data); err != nil {
			return c, fmt.Errorf("hf: %s: %w", name, err)
		}
		if c.ChatTemplate != "" {
			c.ChatTemplateFile = name
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("hf: %w", err)
	}
	name = filepath.Join(dir, "chat_template.jinja")
	if data, err := os.ReadFile(name); err == nil {
		c.ChatTemplate, c.ChatTemplateFile = string(data), name
	}
	name = filepath.Join(dir, "generation_config.json")
	if data, err := os.ReadFile(name); err == nil {
		var g struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(data, &g); err != nil {
			return c, fmt.Errorf("hf: %s: %w", name, err)
		}
		if c.GenerationEOS, err = intOrList(g.EOS); err != nil {
			return c, fmt.Errorf("hf: %s: eos_token_id: %w", name, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("hf: %w", err)
	}
	return c, nil
}

func (c *Config) parseTokenizerConfig(data []byte) error {
	var f struct {
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		PAD          json.RawMessage `json:"pad_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	var err error
	if c.BOS, err = tokenString(f.BOS); err != nil {
		return fmt.Errorf("bos_token: %w", err)
	}
	if c.EOS, err = tokenString(f.EOS); err != nil {
		return fmt.Errorf("eos_token: %w", err)
	}
	if c.PAD, err = tokenString(f.PAD); err != nil {
		return fmt.Errorf("pad_token: %w", err)
	}
	if len(f.ChatTemplate) == 0 || string(f.ChatTemplate) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(f.ChatTemplate, &one) == nil {
		c.ChatTemplate = one
		return nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(f.ChatTemplate, &named); err != nil {
		return fmt.Errorf("chat_template: neither a string nor a list of {name, template}")
	}
	c.Templates = map[string]string{}
	for i, n := range named {
		if n.Name == "" {
			return fmt.Errorf("chat_template[%d].name: empty", i)
		}
		c.Templates[n.Name] = n.Template
		if n.Name == "default" {
			c.ChatTemplate = n.Template
		}
	}
	return nil
}

// tokenString reads a token written as a string or as an AddedToken object.
func tokenString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Content == nil {
		return "", fmt.Errorf("neither a string nor an object with content")
	}
	return *o.Content, nil
}

func intOrList(raw json.RawMessage) ([]int32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int32
	if json.Unmarshal(raw, &one) == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("neither an integer nor a list of integers")
	}
	return many, nil
}
