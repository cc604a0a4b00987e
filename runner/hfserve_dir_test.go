package runner

import (
	"cmp"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/server"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
)

// A model directory's generation_config.json gives the server's sampling
// defaults (temperature, top_p, top_k, max_new_tokens); a directory
// without one has none; a value out of range is an error naming the file.
func TestGenerationDefaultsFile(t *testing.T) {
	dir := t.TempDir()
	d, err := GenerationDefaults(dir, slog.New(slog.DiscardHandler))
	if err != nil || d != (server.Defaults{}) {
		t.Fatalf("no file: %+v %v", d, err)
	}
	name := filepath.Join(dir, "generation_config.json")
	if err := os.WriteFile(name, []byte(`{"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_new_tokens": 9, "eos_token_id": [1, 2]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err = GenerationDefaults(dir, slog.New(slog.DiscardHandler))
	if err != nil || d.Temperature == nil || *d.Temperature != 0.6 || d.TopP == nil || *d.TopP != 0.95 ||
		d.TopK == nil || *d.TopK != 20 || d.MaxTokens == nil || *d.MaxTokens != 9 {
		t.Fatalf("defaults %+v, %v", d, err)
	}
	if err := os.WriteFile(name, []byte(`{"top_p": 1.5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := GenerationDefaults(dir, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("top_p 1.5: %v, want an error naming %s", err, name)
	}
}

// tokenizer.tool_parser (serve --tool-parser) replaces the parser the
// template's syntax names: a Qwen3 model whose replies are Llama 3.1
// JSON calls gets them as tool_calls with llama3_json and as plain
// content with the default hermes.
func TestHFServeToolParserOverride(t *testing.T) {
	dir := realTokenizer(t, "qwen3")
	reply := `{"name": "guess", "parameters": {"n": 5}}`
	for _, tc := range []struct {
		parser string
		calls  int
	}{{"", 0}, {"llama3_json", 1}} {
		txt, err := HFText(dir, model.FamilyQwen3, tc.parser)
		if err != nil {
			t.Fatal(err)
		}
		if want := cmp.Or(tc.parser, "hermes"); txt.ParserName != want {
			t.Fatalf("parser %q, want %q", txt.ParserName, want)
		}
		tok := txt.Tok.(*hf.Tokenizer)
		end, _ := tok.TokenID("<|im_end|>")
		ts := serveScript(t, txt, append(tok.Encode(reply), end))
		var resp struct {
			Choices []struct {
				Message      toolMessage `json:"message"`
				FinishReason string      `json:"finish_reason"`
			} `json:"choices"`
		}
		post(t, ts, "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "guess"}},
			"tools": []json.RawMessage{guessTool}}, &resp)
		c := resp.Choices[0]
		if len(c.Message.ToolCalls) != tc.calls {
			t.Fatalf("parser %q: %d calls, want %d: %+v", txt.ParserName, len(c.Message.ToolCalls), tc.calls, c)
		}
		if tc.calls == 1 && (c.FinishReason != "tool_calls" || c.Message.ToolCalls[0].Function.Arguments != `{"n": 5}`) {
			t.Fatalf("llama3_json: %+v", c)
		}
		if tc.calls == 0 && (c.Message.Content == nil || *c.Message.Content != reply) {
			t.Fatalf("hermes: the reply should stay content: %+v", c)
		}
	}
	if _, err := HFText(dir, model.FamilyQwen3, "no_such_parser"); err == nil {
		t.Fatal("an unknown tool parser was accepted")
	}
}

// Chat logprobs with the real Qwen3 tokenizer carry each sampled token's
// string and bytes as OpenAI reports them: the string is the token's text
// ("bytes:\xNN..." for part of a character), the bytes its own, a special
// token has none; the bytes of the reply's tokens join to its text.
func TestHFChatLogprobTokens(t *testing.T) {
	tc := toolCases[0] // multi-byte characters split across tokens
	txt := cachedText(t, tc.tokenizer)
	tok := txt.Tok.(*hf.Tokenizer)
	end, _ := tok.TokenID(tc.end)
	reply := "é 🌍 héllo"
	ts := serveScript(t, txt, append(tok.Encode(reply), end))
	var resp struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				Content []struct {
					Token       string  `json:"token"`
					Logprob     float32 `json:"logprob"`
					Bytes       []int   `json:"bytes"`
					TopLogprobs []struct {
						Token string `json:"token"`
					} `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	post(t, ts, "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}},
		"logprobs": true, "return_token_ids": true}, &resp)
	ch := resp.Choices[0]
	if len(ch.Logprobs.Content) != len(ch.TokenIDs) || len(ch.TokenIDs) < 4 {
		t.Fatalf("%d logprobs for %d tokens", len(ch.Logprobs.Content), len(ch.TokenIDs))
	}
	var joined []byte
	split := 0
	for i, id := range ch.TokenIDs {
		e := ch.Logprobs.Content[i]
		raw, _ := tok.TokenBytes(id)
		if special(tok, id) {
			if e.Bytes != nil || e.Token != tc.end {
				t.Fatalf("special token %d: %+v", id, e)
			}
			continue
		}
		got := make([]byte, len(e.Bytes))
		for k, b := range e.Bytes {
			got[k] = byte(b)
		}
		if string(got) != raw || e.Logprob != -0.25 {
			t.Fatalf("token %d (%d): bytes %v logprob %v, want %q -0.25", i, id, e.Bytes, e.Logprob, raw)
		}
		if strings.HasPrefix(e.Token, "bytes:") {
			split++
		} else if e.Token != raw {
			t.Fatalf("token %d (%d): %q, want %q", i, id, e.Token, raw)
		}
		joined = append(joined, got...)
	}
	if string(joined) != reply || split == 0 {
		t.Fatalf("bytes join to %q (want %q); %d tokens spelled as bytes (want some: 🌍 is split)", joined, reply, split)
	}
}

// serveScript serves txt with a generator that writes toks.
func serveScript(t *testing.T, txt server.Text, toks []int32) string {
	t.Helper()
	s, err := server.New(server.Backend{Gen: scriptGen{toks}, Model: "m", Text: &txt, MaxModelLen: 8192}, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.URL
}

// skip_special_tokens: a special token in a reply (here Qwen3's
// <|im_start|>) is left out of its text by default and written into it
// with skip_special_tokens false, in completions and chat, as vLLM does;
// the stop token that ended it is in neither.
func TestHFSkipSpecialTokens(t *testing.T) {
	txt := cachedText(t, "qwen3")
	tok := txt.Tok.(*hf.Tokenizer)
	start, _ := tok.TokenID("<|im_start|>")
	end, _ := tok.TokenID("<|im_end|>")
	toks := append(append(append(tok.Encode("before "), start), tok.Encode(" after")...), end)
	ts := serveScript(t, txt, toks)
	for _, skip := range []bool{true, false} {
		want := "before  after"
		if !skip {
			want = "before <|im_start|> after"
		}
		var c completionAnswer
		post(t, ts, "/v1/completions", map[string]any{"prompt": "x", "skip_special_tokens": skip}, &c)
		var ch struct {
			Choices []struct {
				Message toolMessage `json:"message"`
			} `json:"choices"`
		}
		post(t, ts, "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}},
			"skip_special_tokens": skip}, &ch)
		if len(c.Choices) != 1 || c.Choices[0].Text != want || len(ch.Choices) != 1 || ch.Choices[0].Message.Content == nil ||
			*ch.Choices[0].Message.Content != want {
			t.Fatalf("skip_special_tokens %v: completion %+v, chat %+v; want %q", skip, c.Choices, ch.Choices, want)
		}
	}
}
