// Package bytetok adapts longhaul's 264-token byte tokenizer and its chat
// template (model/tokenizer) to the tokenizer.Tokenizer and tokenizer.Chat
// interfaces, so the embedded default runs through the same code paths as a
// Hugging Face model and renders exactly the tokens it always has.
package bytetok

import (
	"context"

	bt "github.com/longhaul-rl/longhaul/model/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer"
)

// Tok is the byte tokenizer. Its zero value is ready.
type Tok struct{}

var _ tokenizer.Tokenizer = Tok{}
var _ tokenizer.Chat = Chat{}

// Encode returns the byte tokens of text: special tokens never come from
// text in this tokenizer (they are produced only by the template).
func (Tok) Encode(text string) []int32 { return bt.Encode(text) }

// Decode writes special tokens by name.
func (Tok) Decode(ids []int32) string { return bt.Decode(ids) }

// VocabSize is 264.
func (Tok) VocabSize() int { return bt.VocabSize }

// Special lists the role and control tokens.
func (Tok) Special() []tokenizer.AddedToken {
	out := make([]tokenizer.AddedToken, 0, bt.VocabSize-bt.BOS)
	for id := bt.BOS; id < bt.VocabSize; id++ {
		out = append(out, tokenizer.AddedToken{ID: id, Content: bt.Decode([]int32{id}), Special: true})
	}
	return out
}

// StopTokens is END, the end of every message.
func (Tok) StopTokens() []int32 { return []int32{bt.End} }

// Chat is the byte template: BOS {ROLE content END}* [ASSISTANT].
type Chat struct{}

// Tokenizer returns Tok.
func (Chat) Tokenizer() tokenizer.Tokenizer { return Tok{} }

// RenderTokens renders msgs with model/tokenizer.Render. Tools, tool calls
// and kwargs have no place in this template and are ignored.
func (Chat) RenderTokens(_ context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions) ([]int32, error) {
	ms := make([]bt.Message, len(msgs))
	for i, m := range msgs {
		ms[i] = bt.Message{Role: bt.Role(m.Role), Content: m.Content}
	}
	return bt.Render(ms, opt.AddGenerationPrompt)
}
