package server

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// sseEvents splits an SSE body into its data payloads, checking the
// framing: every event is one `data: ` line and a blank line, and the
// last is [DONE].
func sseEvents(t *testing.T, r reply) []json.RawMessage {
	t.Helper()
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d type %q: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	if !bytes.HasSuffix(r.body, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream does not end with [DONE]: %q", r.body)
	}
	var out []json.RawMessage
	for _, ev := range strings.Split(strings.TrimSuffix(string(r.body), "data: [DONE]\n\n"), "\n\n") {
		if ev == "" {
			continue
		}
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("bad event %q", ev)
		}
		out = append(out, json.RawMessage(data))
	}
	return out
}

type streamChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Model   string          `json:"model"`
	Usage   json.RawMessage `json:"usage"`
	Choices []struct {
		Index int    `json:"index"`
		Text  string `json:"text"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Logprobs *struct {
			TokenLogprobs []float32 `json:"token_logprobs"`
			Content       []struct {
				Logprob float32 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
		TokenIDs     []int32         `json:"token_ids"`
	} `json:"choices"`
}

// A stream carries exactly the non-streamed response, cut into chunks.
func TestStreamEqualsNonStream(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	for _, tc := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/completions", map[string]any{"prompt": "Hello", "max_tokens": 12, "n": 3, "seed": 4, "logprobs": 0,
			"return_token_ids": true, "stop": []string{"q"}, "stop_token_ids": []int{'x'}}},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}},
			"max_tokens": 40, "n": 3, "seed": 2, "logprobs": true, "return_token_ids": true}},
	} {
		for _, usage := range []bool{false, true} {
			plain := do(t, ts, "POST", tc.path, tc.body)
			if plain.status != 200 {
				t.Fatalf("%s: %d %s", tc.path, plain.status, plain.body)
			}
			var want struct {
				Choices []struct {
					Text    string `json:"text"`
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
					Logprobs struct {
						TokenLogprobs []float32 `json:"token_logprobs"`
						Content       []struct {
							Logprob float32 `json:"logprob"`
						} `json:"content"`
					} `json:"logprobs"`
					FinishReason string          `json:"finish_reason"`
					StopReason   json.RawMessage `json:"stop_reason"`
					TokenIDs     []int32         `json:"token_ids"`
				} `json:"choices"`
				Usage json.RawMessage `json:"usage"`
			}
			if err := json.Unmarshal(plain.body, &want); err != nil {
				t.Fatal(err)
			}
			sb := map[string]any{"stream": true}
			for k, v := range tc.body {
				sb[k] = v
			}
			if usage {
				sb["stream_options"] = map[string]bool{"include_usage": true}
			}
			events := sseEvents(t, do(t, ts, "POST", tc.path, sb))
			n := len(want.Choices)
			text := make([]string, n)
			ids := make([][]int32, n)
			lps := make([][]float32, n)
			finishes := make([]int, n)
			var id string
			for e, raw := range events {
				var c streamChunk
				if err := json.Unmarshal(raw, &c); err != nil {
					t.Fatalf("chunk %s: %v", raw, err)
				}
				if id == "" {
					id = c.ID
				}
				wantObj := "text_completion"
				if tc.path == "/v1/chat/completions" {
					wantObj = "chat.completion.chunk"
				}
				if c.ID != id || c.Object != wantObj || c.Model != testModel {
					t.Fatalf("chunk envelope %s", raw)
				}
				var m map[string]json.RawMessage
				_ = json.Unmarshal(raw, &m)
				_, hasUsage := m["usage"]
				lastEvent := e == len(events)-1
				switch {
				case !usage && hasUsage:
					t.Fatalf("usage without include_usage: %s", raw)
				case usage && !hasUsage:
					t.Fatalf("include_usage: chunk without usage: %s", raw)
				case usage && lastEvent:
					if len(c.Choices) != 0 || !bytes.Equal(c.Usage, want.Usage) {
						t.Fatalf("usage chunk %s, want usage %s", raw, want.Usage)
					}
					continue
				case usage && string(c.Usage) != "null":
					t.Fatalf("usage before the last chunk: %s", raw)
				}
				if len(c.Choices) != 1 {
					t.Fatalf("chunk with %d choices: %s", len(c.Choices), raw)
				}
				ch := c.Choices[0]
				if finishes[ch.Index] > 0 {
					t.Fatalf("chunk after choice %d finished: %s", ch.Index, raw)
				}
				if ch.Delta != nil {
					if ch.Delta.Role != nil && (*ch.Delta.Role != "assistant" || len(text[ch.Index]) > 0 || len(ids[ch.Index]) > 0) {
						t.Fatalf("role not on the first chunk: %s", raw)
					}
					if ch.Delta.Content != nil {
						if !utf8.ValidString(*ch.Delta.Content) {
							t.Fatalf("invalid UTF-8 delta %q", *ch.Delta.Content)
						}
						text[ch.Index] += *ch.Delta.Content
					}
				} else {
					text[ch.Index] += ch.Text
				}
				ids[ch.Index] = append(ids[ch.Index], ch.TokenIDs...)
				if ch.Logprobs != nil {
					lps[ch.Index] = append(lps[ch.Index], ch.Logprobs.TokenLogprobs...)
					for _, e := range ch.Logprobs.Content {
						lps[ch.Index] = append(lps[ch.Index], e.Logprob)
					}
				}
				if ch.FinishReason != nil {
					finishes[ch.Index]++
					w := want.Choices[ch.Index]
					if *ch.FinishReason != w.FinishReason || !bytes.Equal(ch.StopReason, w.StopReason) {
						t.Fatalf("choice %d finish %q/%s, want %q/%s", ch.Index, *ch.FinishReason, ch.StopReason, w.FinishReason, w.StopReason)
					}
				}
			}
			for i, w := range want.Choices {
				wantText := w.Text + w.Message.Content
				wantLPs := append(slices.Clone(w.Logprobs.TokenLogprobs), func() (o []float32) {
					for _, e := range w.Logprobs.Content {
						o = append(o, e.Logprob)
					}
					return o
				}()...)
				if finishes[i] != 1 || text[i] != wantText || !slices.Equal(ids[i], w.TokenIDs) || !slices.Equal(lps[i], wantLPs) {
					t.Fatalf("%s usage=%v choice %d: streamed %q %v %v (finishes %d), want %q %v %v",
						tc.path, usage, i, text[i], ids[i], lps[i], finishes[i], wantText, w.TokenIDs, wantLPs)
				}
			}
		}
	}
}

// Which stop ended a sample is named as vLLM names it.
func TestStopReason(t *testing.T) {
	ts, _, _ := newTest(t, Options{})
	type resp struct {
		Choices []struct {
			Text         string          `json:"text"`
			FinishReason string          `json:"finish_reason"`
			StopReason   json.RawMessage `json:"stop_reason"`
			TokenIDs     []int32         `json:"token_ids"`
		} `json:"choices"`
	}
	get := func(body map[string]any) resp {
		body["prompt"], body["seed"], body["return_token_ids"] = "Hi", 9, true
		r := do(t, ts, "POST", "/v1/completions", body)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		return decodeAs[resp](t, r)
	}
	full := get(map[string]any{"max_tokens": 20, "ignore_eos": true})
	c := full.Choices[0]
	if c.FinishReason != "length" || string(c.StopReason) != "null" {
		t.Fatalf("length: %+v", c)
	}
	// A stop token taken from the middle of the unstopped sample.
	tok := c.TokenIDs[5]
	byTok := get(map[string]any{"max_tokens": 20, "ignore_eos": true, "stop_token_ids": []int32{tok}}).Choices[0]
	if byTok.FinishReason != "stop" || string(byTok.StopReason) != itoa(tok) {
		t.Fatalf("stop_token_ids: stop_reason %s, want %d", byTok.StopReason, tok)
	}
	stop := c.Text[3:5]
	byStr := get(map[string]any{"max_tokens": 20, "ignore_eos": true, "stop": []string{"zzzz", stop}}).Choices[0]
	if byStr.FinishReason != "stop" || string(byStr.StopReason) != string(mustJSON(stop)) || byStr.Text != c.Text[:strings.Index(c.Text, stop)] {
		t.Fatalf("stop string %q: %+v", stop, byStr)
	}
	// The end of a chat turn is the model's EOS: finish "stop", no stop_reason.
	r := do(t, ts, "POST", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}},
		"max_tokens": 100, "n": 8, "seed": 1, "return_token_ids": true})
	var chat struct {
		Choices []struct {
			FinishReason string          `json:"finish_reason"`
			StopReason   json.RawMessage `json:"stop_reason"`
			TokenIDs     []int32         `json:"token_ids"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(r.body, &chat); err != nil {
		t.Fatal(err)
	}
	ended := 0
	for _, ch := range chat.Choices {
		if ch.FinishReason == "stop" {
			ended++
			if ch.TokenIDs[len(ch.TokenIDs)-1] != bytetok.End || string(ch.StopReason) != "null" {
				t.Fatalf("end of turn: %+v", ch)
			}
		}
	}
	if ended == 0 {
		t.Fatal("no chat choice ended its turn")
	}
}

func itoa(t int32) string { b, _ := json.Marshal(t); return string(b) }

// spread gives each token the part of the text its bytes hold, holding
// back a character split across tokens until it is whole; the pieces
// join to the text exactly, also when a stop string cut its tail.
func TestSpread(t *testing.T) {
	// "é" is two bytes; the last token is special (no bytes).
	ends := []int{1, 2, 3, 4, 5, 5}
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"aébc", []string{"a", "", "é", "b", "c", ""}},
		{"aé", []string{"a", "", "é", "", "", ""}}, // cut after é
		{"a", []string{"a", "", "", "", "", ""}},
	} {
		got := spread(tc.text, 0, clampEnds(slices.Clone(ends), len(tc.text)))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.text, got, tc.want)
		}
	}
	// A part found at byte 3 of the text: tokens before hold none of it.
	if got := spread("bc", 3, ends); !slices.Equal(got, []string{"", "", "", "b", "c", ""}) {
		t.Errorf("at 3: %q", got)
	}
}

// tokenString is the byte model's token string (test helper).
func tokenString(tok int32, asIDs bool) string {
	v, err := newVocab(ByteText())
	if err != nil {
		panic(err)
	}
	return v.tokenString(tok, asIDs)
}
