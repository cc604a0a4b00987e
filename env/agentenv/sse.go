package agentenv

import (
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/longhaul-rl/longhaul/env"
)

// streamPiece is the most bytes of content one chunk carries. The reply
// is complete before the first chunk is written (it is sampled, or read
// from the log, as one call), so chunking only follows the wire format:
// clients must reassemble the deltas, and they do.
const streamPiece = 16

// writeStream answers a chat request with stream: true as the OpenAI
// server-sent events: a chunk opening the assistant message, the content
// in pieces, each tool call (id, name, then its arguments), a chunk with
// the finish reason, the usage chunk (choices empty) when the request
// asked for it with stream_options.include_usage, and "data: [DONE]".
func writeStream(w http.ResponseWriter, id, model string, rep env.AgentReply, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	send := func(v any) {
		b, _ := json.Marshal(v) // maps of strings and numbers: cannot fail
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, p := range pieces(rep.Text, streamPiece) {
		send(chunk(map[string]any{"content": p}, nil))
	}
	for i, tc := range rep.ToolCalls {
		send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Function.Name, "arguments": ""}}}}, nil))
		for _, p := range pieces(tc.Function.Arguments, streamPiece) {
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}, nil))
		}
	}
	send(chunk(map[string]any{}, rep.Finish))
	if includeUsage {
		send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
			"choices": []any{}, "usage": usage(rep)})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// pieces splits s into parts of at most n bytes, never inside a UTF-8
// sequence (a part may be longer when one rune is).
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		k := min(n, len(s))
		for k < len(s) && k > 0 && !utf8.RuneStart(s[k]) {
			k--
		}
		if k == 0 {
			_, k = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}
