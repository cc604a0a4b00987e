package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Streaming (stream: true) is server-sent events as OpenAI and vLLM send
// them: one `data: {json}` event per chunk, `data: [DONE]` last. The
// generator answers a batch whole (gen.Generator has no per-token
// callback), so a stream is written once the batch is done: chunks, their
// order and their fields are those of a live stream, but the first one
// arrives when the whole completion would have. docs/serving.md says so.

// sse writes one response's events.
type sse struct {
	w   http.ResponseWriter
	err error // the first write error (the client went away); later sends do nothing
}

func startSSE(w http.ResponseWriter, version int64) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set(VersionHeader, strconv.FormatInt(version, 10))
	w.WriteHeader(http.StatusOK)
	return &sse{w: w}
}

// send writes v as one event.
func (e *sse) send(v any) {
	if e.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own chunk types reach here; a failure is a bug, and the
		// stream ends with an error event rather than a half chunk.
		b = []byte(`{"error":{"message":"chunk encoding failed","type":"server_error","param":null,"code":null}}`)
	}
	e.write("data: " + string(b) + "\n\n")
}

// done ends the stream.
func (e *sse) done() { e.write("data: [DONE]\n\n") }

func (e *sse) write(s string) {
	if e.err != nil {
		return
	}
	if _, err := fmt.Fprint(e.w, s); err != nil {
		e.err = err
		return
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

// streamUsage is the usage field of a chunk: absent without
// include_usage, null on every chunk but the last with it (OpenAI's
// contract), the totals on the last.
func streamUsage(includeUsage bool) any {
	if includeUsage {
		return json.RawMessage("null")
	}
	return nil
}

// interleave visits the choices' tokens step by step, as a live stream of
// n samples would emit them: fn(i, k) for token k of choice i, with last
// set on a choice's final token; a choice without tokens gets fn(i, -1,
// true) first, so that every choice gets its finish.
func interleave(cs []choice, fn func(i, k int, last bool)) {
	longest := 0
	for i, c := range cs {
		longest = max(longest, len(c.tokens))
		if len(c.tokens) == 0 {
			fn(i, -1, true)
		}
	}
	for k := range longest {
		for i, c := range cs {
			if k < len(c.tokens) {
				fn(i, k, k == len(c.tokens)-1)
			}
		}
	}
}
