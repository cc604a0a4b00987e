// Package tokenizer defines how the rollout stack speaks to a model: a
// Tokenizer (text <-> token ids, special tokens, stop tokens) and a Chat that
// renders a conversation to the exact token ids the model was trained on.
//
// Implementations: the byte tokenizer of the embedded default
// (tokenizer/bytetok), Hugging Face tokenizer.json + Jinja chat templates
// (tokenizer/hf, tokenizer/chat) and the inference server's own rendering
// (tokenizer/remote). The bridge (tokenizer/bridge) builds each turn's prompt
// from these without ever re-tokenizing sampled text.
//
// This interface is shared with the model packages (#14): keep it small and
// stable; add optional behaviour through new interfaces, not new methods.
package tokenizer

import (
	"bytes"
	"context"
	"encoding/json"
)

// Tokenizer maps text to token ids and back.
type Tokenizer interface {
	// Encode returns the ids of text. Added/special tokens written in the
	// text (e.g. "<|im_end|>") are matched as their ids, as a chat template's
	// output requires; no BOS/EOS is added (Hugging Face
	// add_special_tokens=False, which is how apply_chat_template tokenizes).
	Encode(text string) []int32
	// Decode returns the text of ids, special tokens included by content.
	Decode(ids []int32) string
	// VocabSize is one past the largest id.
	VocabSize() int
	// Special returns the added tokens (special or not) by content.
	Special() []AddedToken
	// StopTokens are the ids that end an assistant turn (eos, <|im_end|>,
	// <|eot_id|>, generation_config.json's eos_token_id...).
	StopTokens() []int32
}

// AddedToken is one token matched before the model's own splitting.
type AddedToken struct {
	ID      int32  `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
}

// Roles of the messages longhaul itself writes: the environment's
// observations (user, tool), the agent's replies (assistant), a system
// prompt, and a compaction's summary (summary; a template without that
// role renders it as its closest one).
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
	RoleSummary   = "summary"
)

// Message is one chat message in the OpenAI/Hugging Face shape templates
// expect. Content is text; tool calls and reasoning are structured.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is the reasoning_content field. An empty one is
	// absent unless ReasoningSet: a template can tell the field given
	// as "" from a message without it (Qwen3's then keeps a <think>
	// block written in Content as it is, instead of taking the
	// reasoning out of it).
	ReasoningContent string `json:"reasoning_content,omitempty"`
	// ReasoningSet marks reasoning_content as present though empty
	// (decoding JSON sets it for "reasoning_content": "", not for null;
	// a non-empty ReasoningContent is present whatever it says).
	ReasoningSet bool       `json:"-"`
	ToolCalls    []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID   string     `json:"tool_call_id,omitempty"`
	Name         string     `json:"name,omitempty"`
}

// HasReasoning reports whether the message has a reasoning_content field
// (a template's `message.reasoning_content is defined`).
func (m Message) HasReasoning() bool { return m.ReasoningContent != "" || m.ReasoningSet }

// message is Message without its JSON methods.
type message Message

// MarshalJSON writes reasoning_content when HasReasoning, "" included.
// HTML characters are left to the caller's encoder to escape or not.
func (m Message) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		message
		Reasoning *string `json:"reasoning_content,omitempty"`
	}{message(m), m.reasoning()})
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
}

func (m Message) reasoning() *string {
	if !m.HasReasoning() {
		return nil
	}
	return &m.ReasoningContent
}

// UnmarshalJSON sets ReasoningSet when reasoning_content is "" (null is
// a missing field, as templates see None).
func (m *Message) UnmarshalJSON(data []byte) error {
	var w struct {
		message
		Reasoning *string `json:"reasoning_content"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*m = Message(w.message)
	if w.Reasoning != nil {
		m.ReasoningContent, m.ReasoningSet = *w.Reasoning, *w.Reasoning == ""
	}
	return nil
}

// ToolCall is a function call written by the assistant. Arguments is the
// JSON object of arguments (templates see it as a mapping, key order kept).
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// RenderOptions are the inputs of a chat template besides the messages.
type RenderOptions struct {
	// Tools are JSON tool definitions ({"type":"function","function":{...}}).
	Tools []json.RawMessage
	// AddGenerationPrompt ends the render with the assistant header.
	AddGenerationPrompt bool
	// Kwargs are extra template variables (e.g. enable_thinking).
	Kwargs map[string]any
}

// Chat renders conversations to token ids: a template and its tokenizer.
type Chat interface {
	Tokenizer() Tokenizer
	// RenderTokens renders msgs to the token ids the model sees.
	RenderTokens(ctx context.Context, msgs []Message, opt RenderOptions) ([]int32, error)
}

// TextTemplate is a chat template that renders to text (Jinja); a Chat
// built from it encodes the text with its Tokenizer.
type TextTemplate interface {
	Render(msgs []Message, opt RenderOptions) (string, error)
}

// Encoding is a text with its ids and the points where encoding restarts
// (after each added token), so a text sharing a long prefix with it is
// re-encoded only from the last safe point: the bridge's per-turn cost.
type Encoding struct {
	Text string
	IDs  []int32
	Cuts []Cut
	// State is what the renderer that made this encoding can reuse when
	// it is passed back as prev (tokenizer/chat keeps the template values
	// of the messages already converted); opaque to everyone else, never
	// modified once returned.
	State any
	// Reused is how many leading IDs were taken from the prev encoding
	// this one was made from (IDs[:Reused] equal prev.IDs[:Reused]): a
	// caller comparing the two token sequences starts there.
	Reused int
	// TextAt: Text holds the text from this byte on (0: all of it). Only a
	// RecyclingChat's RenderEncodingInto returns a partial text, whose
	// start is still the bytes its prev had: the bridge's next render
	// compares and re-encodes only the tail.
	TextAt int
}

// Cut is a restart point: Text is a byte offset in Encoding.Text, ID the
// number of ids that encode Text[:Text].
type Cut struct{ Text, ID int }

// IncrementalChat is a Chat that can re-render reusing a previous
// encoding (optional; tokenizer/chat implements it for tokenizer/hf).
type IncrementalChat interface {
	Chat
	RenderEncoding(ctx context.Context, msgs []Message, opt RenderOptions, prev *Encoding) (*Encoding, error)
}

// RecyclingChat is an IncrementalChat that can also write the new
// encoding into the memory of a spare encoding the caller will never use
// again (optional): the bridge's two renders per turn then neither
// allocate the ids anew nor copy the part of the history the spare
// already holds, and the text of the unchanged history is not written
// again (Encoding.TextAt).
type RecyclingChat interface {
	IncrementalChat
	RenderEncodingInto(ctx context.Context, msgs []Message, opt RenderOptions, r Reuse) (*Encoding, error)
}

// Reuse is what a RecyclingChat's caller knows about the encodings it
// passes. The promises are the caller's (a broken one gives a wrong
// encoding): what lets a turn cost what its new messages cost, not what
// the history does.
type Reuse struct {
	// Prev is the previous render (nil: none).
	Prev *Encoding
	// Spare is a dead encoding (never Prev) whose memory may be
	// overwritten; nil: allocate.
	Spare *Encoding
	// Keep: msgs[:Keep] are the first messages Prev was rendered from,
	// unchanged; the renderer takes their rendering from Prev without
	// comparing them.
	Keep int
	// SpareSame: Spare.IDs[:SpareSame] equal Prev.IDs[:SpareSame] (and so
	// do their restart points): those ids are not copied again.
	SpareSame int
}

// Appender is a Chat whose render of a conversation is a start, each
// message rendered on its own, and (for generation) a prompt: a rollout
// builds such a context by appending and never re-renders it, and a
// message's tokens do not depend on its neighbours. longhaul's byte
// template is one (tokenizer/bytetok).
type Appender interface {
	Chat
	// AppendStart appends what opens a conversation.
	AppendStart(dst []int32) []int32
	// AppendMessage appends one rendered message.
	AppendMessage(dst []int32, m Message) ([]int32, error)
	// AppendGenerationPrompt appends what opens the assistant's turn.
	AppendGenerationPrompt(dst []int32) []int32
	// Text is the text content of sampled ids (special tokens dropped).
	Text(ids []int32) string
	// Messages parses a rendered conversation back into its messages.
	Messages(ids []int32) []Message
}
