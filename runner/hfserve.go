package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/server"
	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// HFServeOptions configure HFBackend.
type HFServeOptions struct {
	// ToolParser is a tokenizer.tool_parser value; "" picks the model's
	// (ToolParserFor).
	ToolParser string
	Logger     *slog.Logger
}

// HFBackend serves a Hugging Face model directory (package model) with its
// tokenizer, chat template and generation_config.json: text and token-id
// prompts, chat with tools, /tokenize and /detokenize, the same handlers
// as the byte model (server.Text). A directory without tokenizer.json is
// served by token ids only (server.TokenIDs), its default stop ids
// config.json's eos_token_id. Weight reloads take an HF directory (or its
// model.safetensors).
func HFBackend(ctx context.Context, dir string, o HFServeOptions) (server.Backend, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := model.LoadDir(dir)
	if err != nil {
		return server.Backend{}, fmt.Errorf("serve: %w", err)
	}
	eg := gembedded.New(m, max(versionBeside(filepath.Join(dir, llamaWeights)), 0))
	be := server.Backend{
		Gen:         gen.NewBatcher(ctx, eg, 64, 2*time.Millisecond),
		Loader:      &hfReloader{g: eg},
		Scorer:      eg,
		Model:       filepath.Base(filepath.Clean(dir)),
		Version:     func() int64 { _, v := eg.Model(); return v },
		MaxModelLen: m.Context(),
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); errors.Is(err, fs.ErrNotExist) {
		if o.ToolParser != "" {
			return server.Backend{}, fmt.Errorf("serve: --tool-parser: %s has no tokenizer.json to read replies with", dir)
		}
		var stop []int32
		if eos := m.Config().EOS; eos != nil {
			stop = append(stop, int32(*eos))
		}
		be.TokenIDs = &server.TokenIDs{Vocab: m.Config().Vocab, Stop: stop}
		log.Warn("no tokenizer.json: serving by token ids only", "dir", dir)
		return be, nil
	}
	txt, err := HFText(dir, m.Config().Family, o.ToolParser)
	if err != nil {
		return server.Backend{}, fmt.Errorf("serve: %w", err)
	}
	if v := txt.Tok.VocabSize(); v > m.Config().Vocab {
		return server.Backend{}, fmt.Errorf("serve: %s: the tokenizer has %d ids, more than the model's vocab_size %d", dir, v, m.Config().Vocab)
	}
	be.Text = &txt
	if be.Defaults, err = GenerationDefaults(dir, log); err != nil {
		return server.Backend{}, fmt.Errorf("serve: %w", err)
	}
	log.Info("serving with the model's tokenizer", "dir", dir, "vocab", txt.Tok.VocabSize(),
		"tools", txt.Tools, "tool_parser", txt.ParserName, "stop", txt.EOS)
	return be, nil
}

// HFText is the server.Text of an HF directory: its tokenizer.json, its
// chat template (tokenizer_config.json or chat_template.jinja; without
// one, chat is refused) and a tool-call parser (parser, or the family's:
// ToolParserFor).
func HFText(dir, family, parser string) (server.Text, error) {
	tok, err := hf.Load(dir)
	if err != nil {
		return server.Text{}, err
	}
	txt := server.Text{Tok: tok, EOS: tok.StopTokens()}
	if txt.Prefix, txt.Suffix, err = tok.SpecialTokens(dir); err != nil {
		return server.Text{}, err
	}
	src := tok.Config.ChatTemplate
	if src == "" {
		txt.Chat = noTemplate{tok: tok, dir: dir}
	} else {
		tm, err := chat.Compile(tok.Config.ChatTemplateFile, src, tok.Config.BOS, tok.Config.EOS)
		if err != nil {
			return server.Text{}, err
		}
		// A Jinja template takes tools and tool calls, as vLLM passes them;
		// what it writes of them is its own (DeepSeek-V3's writes no tool
		// list, the packaged Llama 3.1 one neither, as under vLLM).
		txt.Chat, txt.Kwargs, txt.Tools = chat.Chat{Template: tm, Tok: tok}, true, true
		txt.ArgumentsText = tm.StringArguments
	}
	if parser == "" && txt.Tools {
		parser = ToolParserFor(src, family)
	}
	if parser != "" && parser != "none" {
		if !txt.Tools {
			return server.Text{}, fmt.Errorf("tool parser %q: %s has no chat template to render tools with", parser, dir)
		}
		if txt.Parser, err = toolcall.New(parser); err != nil {
			return server.Text{}, err
		}
		txt.ParserName = parser
	}
	return txt, nil
}

// ToolParserFor is the tool-call parser of a chat template: read from the
// tool-call syntax it writes, else from the model family; "" when neither
// says.
func ToolParserFor(template, family string) string {
	switch {
	case strings.Contains(template, "<tool_call>"):
		return "hermes"
	case strings.Contains(template, "tool▁calls▁begin"):
		return "deepseek_v3"
	case strings.Contains(template, "<|python_tag|>"), strings.Contains(template, `"parameters"`):
		return "llama3_json"
	}
	switch family {
	case model.FamilyQwen2, model.FamilyQwen3:
		return "hermes"
	case model.FamilyLlama:
		return "llama3_json"
	}
	return ""
}

// noTemplate is the chat of a tokenizer without a chat template: text
// completions work, chat is a 400 saying why.
type noTemplate struct {
	tok tokenizer.Tokenizer
	dir string
}

func (n noTemplate) Tokenizer() tokenizer.Tokenizer { return n.tok }

func (n noTemplate) RenderTokens(context.Context, []tokenizer.Message, tokenizer.RenderOptions) ([]int32, error) {
	return nil, fmt.Errorf("%s has no chat template (tokenizer_config.json chat_template or chat_template.jinja): use /v1/completions", n.dir)
}

// GenerationDefaults reads generation_config.json's sampling defaults
// (absent file: none), as vLLM applies them to requests that leave the
// field out. Defaults longhaul cannot apply (repetition_penalty, min_p)
// are logged, not applied.
func GenerationDefaults(dir string, log *slog.Logger) (server.Defaults, error) {
	name := filepath.Join(dir, "generation_config.json")
	data, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return server.Defaults{}, nil
	}
	if err != nil {
		return server.Defaults{}, err
	}
	var g struct {
		Temperature       *float64 `json:"temperature"`
		TopP              *float64 `json:"top_p"`
		TopK              *int     `json:"top_k"`
		MaxNewTokens      *int     `json:"max_new_tokens"`
		RepetitionPenalty *float64 `json:"repetition_penalty"`
		MinP              *float64 `json:"min_p"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		return server.Defaults{}, fmt.Errorf("%s: %w", name, err)
	}
	if g.RepetitionPenalty != nil && *g.RepetitionPenalty != 1 {
		log.Warn("generation_config.json sets repetition_penalty, which this server does not implement: requests sample without it", "file", name, "repetition_penalty", *g.RepetitionPenalty)
	}
	if g.MinP != nil && *g.MinP != 0 {
		log.Warn("generation_config.json sets min_p, which this server does not implement: requests sample without it", "file", name, "min_p", *g.MinP)
	}
	d := server.Defaults{Temperature: g.Temperature, TopP: g.TopP, TopK: g.TopK, MaxTokens: g.MaxNewTokens}
	if d.Temperature != nil && *d.Temperature < 0 || d.TopP != nil && (*d.TopP <= 0 || *d.TopP > 1) || d.TopK != nil && *d.TopK < -1 ||
		d.MaxTokens != nil && *d.MaxTokens < 1 {
		return server.Defaults{}, fmt.Errorf("%s: a sampling default is out of range (temperature ≥ 0, top_p in (0, 1], top_k ≥ -1, max_new_tokens ≥ 1)", name)
	}
	return d, nil
}

const llamaWeights = "model.safetensors"

type hfReloader struct {
	mu sync.Mutex
	g  *gembedded.Generator
}

// Reload loads an HF directory; its version is the one recorded beside the
// weights (trainer.json), else the served version plus one.
func (r *hfReloader) Reload(_ context.Context, path string) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		path = filepath.Dir(path)
	}
	m, err := model.LoadDir(path)
	if err != nil {
		return 0, err
	}
	v := versionBeside(filepath.Join(path, llamaWeights))
	if v < 0 {
		_, cur := r.g.Model()
		v = cur + 1
	}
	r.g.SetWeights(m, v)
	return v, nil
}
