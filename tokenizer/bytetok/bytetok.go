// Package bytetok is longhaul's byte tokenizer and chat template, the
// embedded default's (template.go has the ids and the template), as a
// tokenizer.Tokenizer and a tokenizer.Chat that renders by appending
// (tokenizer.Appender): the rollout stack reaches it only through those
// interfaces.
package bytetok

import (
	"context"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// Tok is the byte tokenizer. Its zero value is ready.
type Tok struct{}

var (
	_ tokenizer.Tokenizer = Tok{}
	_ tokenizer.Appender  = Chat{}
)

// Encode returns the byte tokens of text: special tokens never come from
// text in this tokenizer (they are produced only by the template).
func (Tok) Encode(text string) []int32 { return Encode(text) }

// Decode writes special tokens by name.
func (Tok) Decode(ids []int32) string { return Decode(ids) }

// VocabSize is 264.
func (Tok) VocabSize() int { return VocabSize }

// Special lists the role and control tokens.
func (Tok) Special() []tokenizer.AddedToken {
	out := make([]tokenizer.AddedToken, 0, VocabSize-BOS)
	for id := BOS; id < VocabSize; id++ {
		out = append(out, tokenizer.AddedToken{ID: id, Content: Decode([]int32{id}), Special: true})
	}
	return out
}

// StopTokens is END, the end of every message.
func (Tok) StopTokens() []int32 { return []int32{End} }

// Chat is the byte template: BOS {ROLE content END}* [ASSISTANT].
type Chat struct{}

// Tokenizer returns Tok.
func (Chat) Tokenizer() tokenizer.Tokenizer { return Tok{} }

// RenderTokens renders msgs with Render. Tools, tool calls and kwargs have
// no place in this template and are ignored.
func (Chat) RenderTokens(_ context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions) ([]int32, error) {
	return Render(msgs, opt.AddGenerationPrompt)
}

// AppendStart appends BOS.
func (Chat) AppendStart(dst []int32) []int32 { return append(dst, BOS) }

// AppendMessage appends ROLE content END.
func (Chat) AppendMessage(dst []int32, m tokenizer.Message) ([]int32, error) {
	return AppendMessage(dst, m)
}

// AppendGenerationPrompt appends the ASSISTANT marker.
func (Chat) AppendGenerationPrompt(dst []int32) []int32 { return append(dst, Assistant) }

// Text is the text of sampled ids: bytes kept, special tokens dropped.
func (Chat) Text(ids []int32) string { return DecodeText(ids) }

// Messages parses rendered ids back into messages (Parse).
func (Chat) Messages(ids []int32) []tokenizer.Message { return Parse(ids) }
