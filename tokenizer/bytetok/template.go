// The byte-level tokenizer and its chat template.
//
// Ids 0..255 are raw bytes; the ids above them are special tokens that never
// appear in encoded text, so any byte string round-trips exactly and a special
// token can only be produced by the template or sampled by the model.
//
// Chat template (the whole of it):
//
//	BOS  { ROLE content END }*  [ASSISTANT]
//
// where ROLE is one of SYSTEM, USER, ASSISTANT, TOOL, SUMMARY and content is
// the message's UTF-8 bytes. A generation prompt ends with the ASSISTANT role
// token; the model writes the content and ends its turn by sampling END, which
// is the stop token. A summary written by the model during compaction is
// carried forward as a SUMMARY message.
package bytetok

import (
	"fmt"
	"strings"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// Special token ids.
const (
	BOS       int32 = 256 + iota // start of a conversation
	EOS                          // end of a conversation (never emitted by the template)
	System                       // role marker: system
	User                         // role marker: user
	Assistant                    // role marker: assistant
	Tool                         // role marker: tool output
	Summary                      // role marker: a compaction summary
	End                          // end of a message; the stop token for generation

	// VocabSize is the number of token ids.
	VocabSize = 264
)

var specialNames = [...]string{"<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|summary|>", "<|end|>"}

// RoleToken returns the marker token of a role.
func RoleToken(r string) (int32, error) {
	switch r {
	case tokenizer.RoleSystem:
		return System, nil
	case tokenizer.RoleUser:
		return User, nil
	case tokenizer.RoleAssistant:
		return Assistant, nil
	case tokenizer.RoleTool:
		return Tool, nil
	case tokenizer.RoleSummary:
		return Summary, nil
	}
	return 0, fmt.Errorf("bytetok: unknown role %q", r)
}

// Encode returns the byte tokens of s (no special tokens).
func Encode(s string) []int32 { return AppendEncode(nil, s) }

// AppendEncode appends the byte tokens of s to dst.
func AppendEncode(dst []int32, s string) []int32 {
	for i := 0; i < len(s); i++ {
		dst = append(dst, int32(s[i]))
	}
	return dst
}

// Decode renders tokens as text; special tokens are written by name
// (e.g. "<|end|>") so a decoded sequence is readable in diagnostics.
func Decode(toks []int32) string {
	var b strings.Builder
	for _, t := range toks {
		switch {
		case t >= 0 && t < 256:
			b.WriteByte(byte(t))
		case t >= BOS && t < VocabSize:
			b.WriteString(specialNames[t-BOS])
		default:
			fmt.Fprintf(&b, "<|%d|>", t)
		}
	}
	return b.String()
}

// DecodeText returns only the byte tokens of toks as a string, dropping
// special tokens: the text content of a sampled message.
func DecodeText(toks []int32) string {
	// One allocation: the builder's buffer becomes the string (a []byte
	// and string(b) cost two on every sampled reply).
	var b strings.Builder
	b.Grow(len(toks))
	for _, t := range toks {
		if t >= 0 && t < 256 {
			b.WriteByte(byte(t))
		}
	}
	return b.String()
}

// IsSpecial reports whether t is a special token.
func IsSpecial(t int32) bool { return t >= BOS && t < VocabSize }

// AppendMessage appends one rendered message (ROLE content END).
func AppendMessage(dst []int32, m tokenizer.Message) ([]int32, error) {
	rt, err := RoleToken(m.Role)
	if err != nil {
		return dst, err
	}
	dst = append(dst, rt)
	dst = AppendEncode(dst, m.Content)
	return append(dst, End), nil
}

// Render renders a conversation. With generate set it ends with the
// ASSISTANT marker so the model continues as the assistant.
func Render(msgs []tokenizer.Message, generate bool) ([]int32, error) {
	n := 2
	for _, m := range msgs {
		n += len(m.Content) + 2
	}
	out := make([]int32, 0, n)
	out = append(out, BOS)
	var err error
	for _, m := range msgs {
		if out, err = AppendMessage(out, m); err != nil {
			return nil, err
		}
	}
	if generate {
		out = append(out, Assistant)
	}
	return out, nil
}

// Parse splits rendered tokens back into messages by their role markers
// (the inverse of Render for text content). A trailing role marker with no
// END yields a message with the text so far, e.g. the empty assistant turn
// of a generation prompt.
func Parse(toks []int32) []tokenizer.Message {
	var out []tokenizer.Message
	open := false
	var content []byte
	flush := func() {
		if open {
			out[len(out)-1].Content = string(content)
		}
	}
	for _, t := range toks {
		var role string
		switch t {
		case System:
			role = tokenizer.RoleSystem
		case User:
			role = tokenizer.RoleUser
		case Assistant:
			role = tokenizer.RoleAssistant
		case Tool:
			role = tokenizer.RoleTool
		case Summary:
			role = tokenizer.RoleSummary
		case End, BOS, EOS:
			flush()
			open = false
			continue
		default:
			if open && t >= 0 && t < 256 {
				content = append(content, byte(t))
			}
			continue
		}
		flush()
		out = append(out, tokenizer.Message{Role: role})
		open, content = true, content[:0]
	}
	flush()
	return out
}
