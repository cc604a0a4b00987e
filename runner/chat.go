package runner

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/store"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/remote"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// TokenizerDir is the directory tokenizer.path (default model.path) names
// (a tokenizer.json file names its directory); empty for the byte tokenizer.
func TokenizerDir(cfg *config.Config) string {
	p := cfg.Tokenizer.Path
	if p == "" {
		p = cfg.Model.Path // an HF model directory carries its tokenizer
	}
	if p == "" {
		return ""
	}
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return filepath.Dir(p)
	}
	return p
}

// BuildChat is the Chat the tokenizer section names, with its tool-call
// parser: nil for the byte template (tokenizer.path empty and source
// local), a Go-rendered Hugging Face template (source local), or the
// first generation server's /tokenize (source server).
func BuildChat(cfg *config.Config) (lhtok.Chat, toolcall.Parser, error) {
	t := cfg.Tokenizer
	parser, err := toolcall.New(t.ToolParser)
	if err != nil {
		return nil, nil, err
	}
	dir := TokenizerDir(cfg)
	var tok *hf.Tokenizer
	if dir != "" {
		if tok, err = hf.Load(dir); err != nil {
			return nil, nil, fmt.Errorf("tokenizer.path: %w", err)
		}
	}
	switch t.Source {
	case "", "local":
		if tok == nil {
			return nil, parser, nil
		}
		if tok.Config.ChatTemplate == "" {
			return nil, nil, fmt.Errorf("tokenizer.path: %s has no chat template (tokenizer_config.json chat_template or chat_template.jinja)", dir)
		}
		tm, err := chat.Compile(tok.Config.ChatTemplateFile, tok.Config.ChatTemplate, tok.Config.BOS, tok.Config.EOS)
		if err != nil {
			return nil, nil, fmt.Errorf("tokenizer.path: %w", err)
		}
		return chat.Chat{Template: tm, Tok: tok}, parser, nil
	case "server":
		if tok == nil {
			return nil, nil, fmt.Errorf("tokenizer.source: server needs tokenizer.path for decoding and stop tokens")
		}
		if len(cfg.Generator.URLs) == 0 {
			return nil, nil, fmt.Errorf("tokenizer.source: server needs generator.urls")
		}
		base := strings.TrimSuffix(strings.TrimSuffix(cfg.Generator.URLs[0], "/"), "/v1")
		return &remote.Chat{BaseURL: base, Model: cfg.Generator.Model, Tok: tok,
			Client: &http.Client{Timeout: 60 * time.Second}}, parser, nil
	}
	return nil, nil, fmt.Errorf("tokenizer.source %q: want local or server", t.Source)
}

// RunTokenizer is the tokenizer of the run in dir whose logged config has
// digest: the Hugging Face one its tokenizer.path (else model.path)
// names, or the byte tokenizer of the embedded default.
func RunTokenizer(dir string, digest [32]byte) (lhtok.Tokenizer, error) {
	cfg, err := loggedConfig(store.OS, dir, digest)
	if err != nil {
		return nil, err
	}
	td := TokenizerDir(cfg)
	if td == "" {
		return rollout.DefaultChat.Tokenizer(), nil
	}
	tok, err := hf.Load(td)
	if err != nil {
		return nil, fmt.Errorf("tokenizer of the run's config: %w", err)
	}
	return tok, nil
}
