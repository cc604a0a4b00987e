package server

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// Text is the served model's text side: its tokenizer, its chat template
// and the parser of its tool calls. The built-in byte model (ByteText)
// and a Hugging Face directory (runner.HFBackend) are both a Text, and
// every handler goes through it: text prompts, stop strings, chat,
// tools, /tokenize, /detokenize and the token strings of logprobs.
type Text struct {
	Tok  tokenizer.Tokenizer
	Chat tokenizer.Chat
	// Parser reads tool calls out of a reply (ParserName names it in
	// errors); nil: requests that offer tools are refused.
	Parser     toolcall.Parser
	ParserName string
	// Tools: the chat template renders tools and tool calls; without it
	// both are refused (the byte template has no tool syntax).
	Tools bool
	// Kwargs: the template takes extra variables (chat_template_kwargs).
	Kwargs bool
	// ArgumentsText: the template writes tool-call arguments as text it
	// is given (DeepSeek-V3's concatenates them): a string argument goes
	// to it as its text, JSON or not (chat.Template.StringArguments).
	ArgumentsText bool
	// Prefix and Suffix are what add_special_tokens puts around an encoded
	// text prompt (the tokenizer's post-processor: BOS for Llama 3.1 and
	// DeepSeek-V3, nothing for Qwen3, BOS for the byte model).
	Prefix, Suffix []int32
	// EOS end a sample unless ignore_eos (the tokenizer's stop tokens).
	EOS []int32
	// TurnEnd end a chat reply even with ignore_eos: the byte template's
	// End, which closes every message.
	TurnEnd []int32
}

// ByteText is the byte model's Text: longhaul's byte tokenizer and
// template (tokenizer/bytetok), no tools.
func ByteText() Text {
	return Text{Tok: bytetok.Tok{}, Chat: byteChat{}, Prefix: []int32{bytetok.BOS}, EOS: []int32{bytetok.EOS}, TurnEnd: []int32{bytetok.End}}
}

// byteEnd is the byte template's end of a message (Fake's stop token).
const byteEnd = bytetok.End

// byteChat is bytetok.Chat with the checks a server needs: a role the
// template lacks is an error naming the message, and OpenAI's "developer"
// is the system role.
type byteChat struct{}

func (byteChat) Tokenizer() tokenizer.Tokenizer { return bytetok.Tok{} }

func (byteChat) RenderTokens(ctx context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions) ([]int32, error) {
	ms := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		if m.Role == "developer" {
			m.Role = tokenizer.RoleSystem
		}
		if _, err := bytetok.RoleToken(m.Role); err != nil {
			return nil, badParam(fmt.Sprintf("messages[%d].role", i), "unknown role %q: this template has system, user, assistant, tool and summary.", m.Role)
		}
		ms[i] = m
	}
	return bytetok.Chat{}.RenderTokens(ctx, ms, opt)
}

// vocab is a Text prepared for serving: every token's bytes and whether
// it is special, looked up per sampled token.
type vocab struct {
	Text
	raw     []string // id -> the token's bytes (a special token: its content)
	special []bool   // id -> special: left out of text, no bytes in logprobs
	// oneByte: every other token is exactly one byte, so a one-byte stop
	// string is a stop token (the byte model).
	oneByte bool
	piece   func(int32) (string, bool) // the vocabulary's spelling (token_strs)
}

// tokenBytes is the optional raw-bytes lookup of a tokenizer (tokenizer/hf).
type tokenBytes interface {
	TokenBytes(id int32) (string, bool)
}

// tokenPiece is the optional vocabulary spelling of a token (tokenizer/hf:
// what Hugging Face's convert_ids_to_tokens returns, e.g. "Ġthe").
type tokenPiece interface {
	TokenPiece(id int32) (string, bool)
}

func newVocab(t Text) (*vocab, error) {
	if t.Tok == nil || t.Chat == nil {
		return nil, fmt.Errorf("server: backend text has no tokenizer or chat template")
	}
	n := t.Tok.VocabSize()
	v := &vocab{Text: t, raw: make([]string, n), special: make([]bool, n), oneByte: true}
	tb, hasBytes := t.Tok.(tokenBytes)
	for id := range n {
		if hasBytes {
			v.raw[id], _ = tb.TokenBytes(int32(id))
		} else {
			v.raw[id] = t.Tok.Decode([]int32{int32(id)})
		}
	}
	for _, a := range t.Tok.Special() {
		if a.Special && a.ID >= 0 && int(a.ID) < n {
			v.special[a.ID] = true
		}
	}
	for id := range n {
		if !v.special[id] && len(v.raw[id]) != 1 {
			v.oneByte = false
			break
		}
	}
	if p, ok := t.Tok.(tokenPiece); ok {
		v.piece = p.TokenPiece
	}
	return v, nil
}

func (v *vocab) size() int { return len(v.raw) }

// encode is a text prompt's ids, with the post-processor's special tokens
// when addSpecial (vLLM's add_special_tokens).
func (v *vocab) encode(s string, addSpecial bool) []int32 {
	ids := v.Tok.Encode(s)
	if !addSpecial || len(v.Prefix)+len(v.Suffix) == 0 {
		return ids
	}
	out := make([]int32, 0, len(v.Prefix)+len(ids)+len(v.Suffix))
	return append(append(append(out, v.Prefix...), ids...), v.Suffix...)
}

// bytesOf is the bytes a token adds to a text: none for a special token
// when specials are skipped, none for an id outside the vocabulary.
func (v *vocab) bytesOf(t int32, skipSpecial bool) string {
	if t < 0 || int(t) >= len(v.raw) || (skipSpecial && v.special[t]) {
		return ""
	}
	return v.raw[t]
}

// text is the text of ids as a reply carries it: byte sequences that are
// not UTF-8 become U+FFFD, as Hugging Face's decode writes them.
func (v *vocab) text(ids []int32, skipSpecial bool) string {
	var b strings.Builder
	for _, t := range ids {
		b.WriteString(v.bytesOf(t, skipSpecial))
	}
	return validUTF8(b.String())
}

func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// tokenString names one token the way logprobs report it: its text when
// that is UTF-8, else its bytes spelled "bytes:\xNN..." as OpenAI spells
// part of a character; "token_id:N" with return_tokens_as_token_ids.
func (v *vocab) tokenString(t int32, asIDs bool) string {
	if asIDs || t < 0 || int(t) >= len(v.raw) {
		return fmt.Sprintf("token_id:%d", t)
	}
	s := v.raw[t]
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.WriteString("bytes:")
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "\\x%02x", s[i])
	}
	return b.String()
}

// tokenBytes is a logprobs entry's bytes: the token's own bytes (so the
// entries of a character split across tokens join to it), null for a
// special token.
func (v *vocab) tokenBytes(t int32) []int {
	if t < 0 || int(t) >= len(v.raw) || v.special[t] {
		return nil
	}
	s := v.raw[t]
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out
}

// tokenPiece is /tokenize's token_strs entry: the vocabulary's spelling
// where the tokenizer has one (vLLM's convert_ids_to_tokens), else the
// token string.
func (v *vocab) tokenPiece(t int32) string {
	if v.piece != nil {
		if p, ok := v.piece(t); ok {
			return p
		}
	}
	return v.tokenString(t, false)
}

// spread splits s, which starts at byte at of a text whose token k ends at
// byte ends[k], into one piece per token: token k gets the part of s its
// bytes hold, cut at character boundaries (a character split across
// tokens goes with the token that completes it), and the last token takes
// whatever is left, so the pieces join to s exactly and each is valid
// UTF-8 when s is.
func spread(s string, at int, ends []int) []string {
	out := make([]string, len(ends))
	sent := 0
	for k, e := range ends {
		end := min(max(e-at, sent), len(s))
		if k == len(ends)-1 {
			end = len(s)
		}
		for end > sent && end < len(s) && !utf8.RuneStart(s[end]) {
			end-- // hold back a character whose bytes are not all here yet
		}
		out[k], sent = s[sent:end], end
	}
	return out
}
