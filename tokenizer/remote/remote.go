// Package remote is tokenizer.source: server: the inference server renders
// the chat template and tokenizes (vLLM's POST /tokenize with messages,
// add_generation_prompt and return_token_strs; `longhaul serve` implements
// the same route). The bridge applies the same append/rerender rules to
// what comes back, so models whose template Go cannot render still get
// token-exact multi-turn prompts.
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
)

// Chat renders through a server. Tok supplies Encode/Decode/stop tokens
// (the local tokenizer.json where present, else a minimal one the caller
// provides); only rendering goes to the server.
type Chat struct {
	BaseURL string // e.g. http://127.0.0.1:8000
	Model   string
	Client  *http.Client
	Tok     tokenizer.Tokenizer
	// Wire converts messages to the server's JSON (default: OpenAI shape
	// with string content and mapping arguments).
	Wire func([]tokenizer.Message) []chat.WireMessage
}

var _ tokenizer.Chat = (*Chat)(nil)

// Tokenizer returns Tok.
func (c *Chat) Tokenizer() tokenizer.Tokenizer { return c.Tok }

type tokenizeRequest struct {
	Model               string             `json:"model,omitempty"`
	Messages            []chat.WireMessage `json:"messages"`
	Tools               []json.RawMessage  `json:"tools,omitempty"`
	AddGenerationPrompt bool               `json:"add_generation_prompt"`
	AddSpecialTokens    bool               `json:"add_special_tokens"`
	ChatTemplateKwargs  map[string]any     `json:"chat_template_kwargs,omitempty"`
	ReturnTokenStrs     bool               `json:"return_token_strs"`
}

// RenderTokens asks the server to render and tokenize msgs.
func (c *Chat) RenderTokens(ctx context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions) ([]int32, error) {
	wire := c.Wire
	if wire == nil {
		wire = (&chat.Template{}).Wire
	}
	body, err := json.Marshal(tokenizeRequest{Model: c.Model, Messages: wire(msgs), Tools: opt.Tools,
		AddGenerationPrompt: opt.AddGenerationPrompt, ChatTemplateKwargs: opt.Kwargs})
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	url := strings.TrimRight(c.BaseURL, "/") + "/tokenize"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("remote: POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("remote: POST %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("remote: POST %s: %s: %s", url, resp.Status, bytes.TrimSpace(data))
	}
	var out struct {
		Count  int     `json:"count"`
		Tokens []int32 `json:"tokens"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("remote: POST %s: response: %w", url, err)
	}
	if out.Count != len(out.Tokens) {
		return nil, fmt.Errorf("remote: POST %s: count %d but %d tokens", url, out.Count, len(out.Tokens))
	}
	return out.Tokens, nil
}
