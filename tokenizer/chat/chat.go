// Package chat renders Hugging Face chat templates (Jinja, as written in
// tokenizer_config.json) with github.com/ardanlabs/jinja, and pairs a
// template with its tokenizer as a tokenizer.Chat.
//
// Messages, tools and tool-call arguments are handed to the template as
// ordered mappings in the key order of their JSON, as Python and the
// JavaScript reference see them, so `tojson` writes the same bytes.
// Parity with @huggingface/jinja is tested on real templates
// (template_parity_test.go).
package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"
	"github.com/longhaul-rl/longhaul/tokenizer"
)

// Template is a compiled chat template; safe for concurrent use.
type Template struct {
	name string
	t    *jinja.Template
	// BOS and EOS are the bos_token/eos_token variables templates use.
	BOS, EOS string
	// NullToolCallContent gives an assistant message that only calls tools
	// content None (OpenAI's null) instead of "". Templates disagree:
	// DeepSeek-V3 renders tool calls only when `content is none`, Qwen3
	// calls content.lstrip() and fails on None. Compile sets it when the
	// template tests content for none.
	NullToolCallContent bool
	// StringArguments gives tool-call arguments as a JSON string (the
	// OpenAI wire form) instead of a mapping. DeepSeek-V3 concatenates
	// arguments into the prompt and needs the string; Llama 3.1 and Qwen3
	// pipe them through tojson and need the mapping. Compile sets it when
	// the template never applies tojson to arguments.
	StringArguments bool
	// reusable: the template calls no method that mutates a list or dict
	// (see mutating), so message values can be kept between renders.
	reusable bool
	// qwen3: the source is Qwen3's template, rendered in Go (qwen3.go)
	// unless engineOnly.
	qwen3, engineOnly bool
	// seq: the source is Llama 3.1's or DeepSeek-V3's template, rendered
	// in Go (seq.go) unless engineOnly; src is the source (seqApplies).
	seq seqDialect
	src string
	// located is the template with line markers (lines.go), run only to
	// find the line of a failed render; nil if it did not compile.
	located *jinja.Template
}

// EngineOnly returns a copy of t that always renders with the Jinja
// engine, never a Go rendering of a known template: the reference the
// fast paths are tested and benchmarked against.
func (t *Template) EngineOnly() *Template {
	c := *t
	c.engineOnly = true
	return &c
}

var _ tokenizer.TextTemplate = (*Template)(nil)

// Compile compiles a chat template; name (e.g. the config file) is used in
// errors.
//
// Errors name the template's line: a syntax error (the engine's line) and
// a raise_exception while rendering (see lines.go).
func Compile(name, src, bos, eos string) (*Template, error) {
	code, _ := withRaiseLines(src)
	code = withPythonFilters(code)
	t, err := jinja.Compile(code)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: chat_template: %w", name, err)
	}
	reusable := !mutating.MatchString(src)
	null := strings.Contains(src, "['content'] is none") || strings.Contains(src, "content is none")
	str := strings.Contains(src, "arguments") && !strings.Contains(src, "arguments | tojson") && !strings.Contains(src, "arguments|tojson")
	located, _ := jinja.Compile(withLineMarks(code))
	return &Template{name: name, t: t, BOS: bos, EOS: eos, NullToolCallContent: null, StringArguments: str, reusable: reusable, qwen3: isQwen3(src), seq: seqDialectOf(src), src: src, located: located}, nil
}

// Render renders msgs. A raise_exception in the template comes back as an
// error carrying its message.
func (t *Template) Render(msgs []tokenizer.Message, opt tokenizer.RenderOptions) (string, error) {
	s, _, err := t.render(msgs, opt, nil)
	return s, err
}

// values are the template values of a conversation, kept so that the
// next render of the same conversation plus new messages converts only the
// new ones (the bridge renders a growing conversation twice a turn).
// Immutable once built: a render that extends it copies the slices.
type values struct {
	msgs     []tokenizer.Message // what vals were built from
	vals     []jinja.Value
	toolsRaw []json.RawMessage
	tools    []jinja.Value
	qwen     *qwenState // the Go rendering's state (qwen3.go)
	seq      *seqState  // or seq.go's
	// same is how many leading bytes of this render are known equal to
	// the render prev was (reused header and messages); 0 when unknown.
	// textAt: the text was written from this byte on (partial renders).
	same, textAt int
}

// render renders msgs reusing prev's values for the messages it shares
// with msgs (compared field by field), and returns the values it used.
func (t *Template) render(msgs []tokenizer.Message, opt tokenizer.RenderOptions, prev *values) (string, *values, error) {
	return t.renderOn(t.t, nil, false, msgs, opt, prev, 0, nil)
}

// renderOn renders with tmpl; line, when not nil, is the line tracker of
// a located render (tmpl is then t.located). partial allows a Go rendering
// to return the text from values.textAt on only. keep and into are
// renderQwen3's: msgs[:keep] are prev's first messages, unchanged; into is
// a dead state whose memory may be reused.
func (t *Template) renderOn(tmpl *jinja.Template, line *int, partial bool, msgs []tokenizer.Message, opt tokenizer.RenderOptions, prev *values, keep int, into *values) (string, *values, error) {
	if !t.reusable {
		prev = nil
	}
	if t.qwen3 && !t.engineOnly && qwen3Applies(msgs, opt) {
		var pq, iq *qwenState
		if prev != nil {
			pq = prev.qwen
		}
		if into != nil && into != prev {
			iq = into.qwen
		}
		s, at, q, same, err := t.renderQwen3(msgs, opt, pq, partial, keep, iq)
		if err != nil {
			return "", nil, err
		}
		return s, &values{qwen: q, same: same, textAt: at}, nil
	}
	if t.seq != seqNone && !t.engineOnly && t.seqApplies(msgs, opt) {
		var ps, is *seqState
		if prev != nil {
			ps = prev.seq
		}
		if into != nil && into != prev {
			is = into.seq
		}
		s, at, q, same, err := t.renderSeq(msgs, opt, ps, partial, keep, is)
		if err != nil {
			return "", nil, err
		}
		return s, &values{seq: q, same: same, textAt: at}, nil
	}
	data := make(map[string]jinja.Value, 8+len(opt.Kwargs))
	for k, v := range opt.Kwargs {
		data[k] = jinja.FromGoValue(v)
	}
	cur := &values{}
	k := 0
	if prev != nil {
		for k < len(msgs) && k < len(prev.msgs) && sameMessage(msgs[k], prev.msgs[k]) {
			k++
		}
		cur.vals = prev.vals[:k:k]
	}
	cur.vals = slices.Grow(cur.vals, len(msgs)-k)
	for i := k; i < len(msgs); i++ {
		v, err := t.messageValue(msgs[i])
		if err != nil {
			return "", nil, fmt.Errorf("chat: messages[%d]: %w", i, err)
		}
		cur.vals = append(cur.vals, v)
	}
	cur.msgs = slices.Clone(msgs)
	data["messages"] = jinja.NewList(cur.vals)
	if len(opt.Tools) > 0 {
		if prev != nil && slices.EqualFunc(prev.toolsRaw, opt.Tools, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			cur.toolsRaw, cur.tools = prev.toolsRaw, prev.tools
		} else {
			cur.toolsRaw = slices.Clone(opt.Tools)
			cur.tools = make([]jinja.Value, len(opt.Tools))
			for i, raw := range opt.Tools {
				v, err := jsonValue(raw)
				if err != nil {
					return "", nil, fmt.Errorf("chat: tools[%d]: %w", i, err)
				}
				cur.tools[i] = v
			}
		}
		data["tools"] = jinja.NewList(cur.tools)
	}
	data["add_generation_prompt"] = jinja.NewBool(opt.AddGenerationPrompt)
	data[raiseFn] = raiseAt
	data[pyJSONFn], data[pyTrimFn] = pyJSON, pyTrim
	if t.BOS != "" {
		data["bos_token"] = jinja.NewString(t.BOS)
	}
	if t.EOS != "" {
		data["eos_token"] = jinja.NewString(t.EOS)
	}
	if line != nil {
		data[atFn] = lineTracker(line)
	}
	out, err := tmpl.RenderValues(data)
	if err != nil {
		if _, ok := errors.AsType[*LineError](err); ok {
			return "", nil, fmt.Errorf("chat: %s: chat_template %w", t.name, err)
		}
		if line == nil && t.located != nil {
			// Run again with line markers (fresh values: a template may
			// have changed them before failing) to name the line.
			var at int
			_, _, lerr := t.renderOn(t.located, &at, false, msgs, opt, nil, 0, nil)
			if lerr != nil && at > 0 {
				err = &LineError{Line: at, Err: err}
				return "", nil, fmt.Errorf("chat: %s: chat_template %w", t.name, err)
			}
		}
		if line != nil {
			return "", nil, err
		}
		return "", nil, fmt.Errorf("chat: %s: rendering chat_template: %w", t.name, err)
	}
	return out, cur, nil
}

// sameMessage compares two messages field by field (strings that share
// memory compare in constant time: the bridge passes the same history).
func sameMessage(a, b tokenizer.Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.ReasoningContent == b.ReasoningContent && a.HasReasoning() == b.HasReasoning() &&
		a.ToolCallID == b.ToolCallID && a.Name == b.Name &&
		slices.EqualFunc(a.ToolCalls, b.ToolCalls, func(x, y tokenizer.ToolCall) bool {
			return x.ID == y.ID && x.Name == y.Name && bytes.Equal(x.Arguments, y.Arguments)
		})
}

// mutating are the engine's methods that change a list or dict in place;
// a template calling any of them could change a message's values, so its
// values are never reused across renders.
var mutating = regexp.MustCompile(`\.\s*(append|pop|insert|update|extend|clear|setdefault|remove)\s*\(`)

// messageValue builds the mapping a template sees for one message, in the
// OpenAI shape: tool_calls[i] = {id, type: "function", function: {name,
// arguments}}.
func (t *Template) messageValue(m tokenizer.Message) (jinja.Value, error) {
	d := jinja.NewDict()
	dd := d.AsDict()
	dd.Set("role", jinja.NewString(m.Role))
	if t.NullToolCallContent && contentIsNull(m) {
		dd.Set("content", jinja.None())
	} else {
		dd.Set("content", jinja.NewString(m.Content))
	}
	if m.HasReasoning() {
		dd.Set("reasoning_content", jinja.NewString(m.ReasoningContent))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			args := jinja.NewDict()
			if t.StringArguments {
				args = jinja.NewString(compactJSON(c.Arguments))
			} else if len(c.Arguments) > 0 {
				var err error
				if args, err = jsonValue(c.Arguments); err != nil {
					return jinja.Value{}, fmt.Errorf("tool_calls[%d].arguments: %w", i, err)
				}
			}
			fn := jinja.NewDict()
			fn.AsDict().Set("name", jinja.NewString(c.Name))
			fn.AsDict().Set("arguments", args)
			call := jinja.NewDict()
			if c.ID != "" {
				call.AsDict().Set("id", jinja.NewString(c.ID))
			}
			call.AsDict().Set("type", jinja.NewString("function"))
			call.AsDict().Set("function", fn)
			calls[i] = call
		}
		dd.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		dd.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if m.Name != "" {
		dd.Set("name", jinja.NewString(m.Name))
	}
	return d, nil
}

// jsonValue decodes JSON into jinja values keeping object key order.
func jsonValue(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if dec.More() {
		return jinja.Value{}, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
	case string:
		return jinja.NewString(x), nil
	case json.Number:
		if !strings.ContainsAny(x.String(), ".eE") {
			if n, err := x.Int64(); err == nil {
				return jinja.NewInt(n), nil
			}
		}
		f, err := x.Float64()
		return jinja.NewFloat(f), err
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// Chat pairs a text template with its tokenizer.
type Chat struct {
	Template tokenizer.TextTemplate
	Tok      tokenizer.Tokenizer
}

var _ tokenizer.IncrementalChat = Chat{}

// incremental is a tokenizer that can re-encode from a previous encoding
// (tokenizer/hf).
type incremental interface {
	EncodeFrom(prev *tokenizer.Encoding, text string) *tokenizer.Encoding
}

// recycling is an incremental tokenizer that takes the renderer's
// known-equal prefix and a spare encoding (tokenizer/hf).
type recycling interface {
	EncodeFromInto(prev *tokenizer.Encoding, text string, textAt, same int, spare *tokenizer.Encoding, spareSame int) (*tokenizer.Encoding, bool)
}

// RenderEncoding renders msgs and encodes the text reusing prev: the
// template values of the messages prev was rendered from (when the
// template is a *Template) and the ids up to the last safe restart point
// (when the tokenizer is incremental). The result equals RenderTokens'
// (TestFastPathEqualsFullRender, TestRenderEncodingReuse).
func (c Chat) RenderEncoding(ctx context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions, prev *tokenizer.Encoding) (*tokenizer.Encoding, error) {
	return c.RenderEncodingInto(ctx, msgs, opt, tokenizer.Reuse{Prev: prev})
}

// RenderEncodingInto is RenderEncoding writing into r.Spare (see
// tokenizer.RecyclingChat) when the tokenizer supports it; the encoding's
// text may then start at TextAt. Qwen3's Go rendering takes the messages
// before r.Keep from prev without comparing them; so do those of Llama
// 3.1 and DeepSeek-V3 (seq.go).
func (c Chat) RenderEncodingInto(_ context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions, r tokenizer.Reuse) (*tokenizer.Encoding, error) {
	prev, spare, keep := r.Prev, r.Spare, r.Keep
	rc, recycles := c.Tok.(recycling)
	tm, _ := c.Template.(*Template)
	var pv, into *values
	if prev != nil {
		pv, _ = prev.State.(*values)
	}
	if recycles && spare != nil && spare != prev {
		// read before the tokenizer clears spare
		into, _ = spare.State.(*values)
	}
	render := func(partial bool) (string, *values, error) {
		if tm == nil {
			s, err := c.Template.Render(msgs, opt)
			return s, &values{}, err
		}
		s, v, err := tm.renderOn(tm.t, nil, partial, msgs, opt, pv, keep, into)
		if err == nil && pv == nil {
			v.same = 0
		}
		return s, v, err
	}
	s, v, err := render(recycles && spare != nil)
	if err != nil {
		return nil, err
	}
	var e *tokenizer.Encoding
	switch inc := c.Tok.(type) {
	case recycling:
		var ok bool
		if e, ok = rc.EncodeFromInto(prev, s, v.textAt, v.same, spare, r.SpareSame); !ok {
			// prev's text does not reach back to where the restart
			// point is: render the whole text
			if s, v, err = render(false); err != nil {
				return nil, err
			}
			e, _ = rc.EncodeFromInto(prev, s, 0, v.same, spare, r.SpareSame)
		}
	case incremental:
		e = inc.EncodeFrom(prev, s)
	default:
		e = &tokenizer.Encoding{Text: s, IDs: c.Tok.Encode(s)}
	}
	if tm != nil {
		if v.qwen != nil {
			// the next partial render needs to know where this
			// encoding's text starts (the state is not yet shared)
			v.qwen.textAt = e.TextAt
		}
		if v.seq != nil {
			v.seq.textAt = e.TextAt
		}
		e.State = v
	}
	return e, nil
}

// Tokenizer returns the tokenizer.
func (c Chat) Tokenizer() tokenizer.Tokenizer { return c.Tok }

// RenderTokens renders to text and encodes it (special tokens in the text
// become their ids, no BOS is added: the template writes it).
func (c Chat) RenderTokens(_ context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions) ([]int32, error) {
	s, err := c.Template.Render(msgs, opt)
	if err != nil {
		return nil, err
	}
	return c.Tok.Encode(s), nil
}

// contentIsNull: an assistant message that only calls tools has content
// null in the OpenAI format.
func contentIsNull(m tokenizer.Message) bool {
	return m.Role == "assistant" && m.Content == "" && len(m.ToolCalls) > 0
}

// WireMessage is the OpenAI JSON shape of a message that templates, vLLM's
// /tokenize and the JavaScript reference take: the mapping Render builds,
// in the same key order.
type WireMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"` // nil: no such field
	ToolCalls        []WireCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	Name             string     `json:"name,omitempty"`
}

// WireCall is one tool call in the OpenAI shape.
type WireCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function WireFunction `json:"function"`
}

// WireFunction is a tool call's function.
type WireFunction struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Wire converts messages to the OpenAI JSON shape this template takes
// (see NullToolCallContent and StringArguments).
func (t *Template) Wire(msgs []tokenizer.Message) []WireMessage {
	out := make([]WireMessage, len(msgs))
	for i, m := range msgs {
		w := WireMessage{Role: m.Role, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.HasReasoning() {
			r := m.ReasoningContent
			w.ReasoningContent = &r
		}
		if !t.NullToolCallContent || !contentIsNull(m) {
			c := m.Content
			w.Content = &c
		}
		for _, c := range m.ToolCalls {
			args := c.Arguments
			if len(args) == 0 {
				args = json.RawMessage(`{}`)
			}
			if t.StringArguments {
				args, _ = json.Marshal(compactJSON(args))
			}
			w.ToolCalls = append(w.ToolCalls, WireCall{ID: c.ID, Type: "function", Function: WireFunction{Name: c.Name, Arguments: args}})
		}
		out[i] = w
	}
	return out
}

// compactJSON is the arguments object as a string, as written (whitespace
// kept: it is what the model wrote or the caller gave).
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	return string(raw)
}

// Unwire converts OpenAI-shaped messages back. A tool call's arguments
// given as a JSON string (the OpenAI wire form) holding JSON become that
// JSON; any other value is kept as it is (a string that is not JSON stays
// a string: templates see it as one). Template.FromWire inverts Wire
// exactly.
func Unwire(ws []WireMessage) []tokenizer.Message {
	return unwire(ws, func(args json.RawMessage) json.RawMessage {
		var s string
		if json.Unmarshal(args, &s) == nil && json.Valid([]byte(s)) {
			return json.RawMessage(s)
		}
		return args
	})
}

// FromWire converts messages in the shape this template takes (Wire's)
// back: Wire(FromWire(ws)) is ws, but for a missing content or a null
// reasoning_content, which are "" and missing. Under StringArguments the
// arguments must be JSON strings, and their text is the arguments as
// written.
func (t *Template) FromWire(ws []WireMessage) ([]tokenizer.Message, error) {
	var bad error
	msgs := unwire(ws, func(args json.RawMessage) json.RawMessage {
		if !t.StringArguments {
			return args
		}
		var s string
		if err := json.Unmarshal(args, &s); err != nil {
			bad = fmt.Errorf("chat: %s: tool-call arguments must be a string for this template: %s", t.name, args)
		}
		return json.RawMessage(s)
	})
	return msgs, bad
}

func unwire(ws []WireMessage, args func(json.RawMessage) json.RawMessage) []tokenizer.Message {
	out := make([]tokenizer.Message, len(ws))
	for i, w := range ws {
		m := tokenizer.Message{Role: w.Role, ToolCallID: w.ToolCallID, Name: w.Name}
		if w.Content != nil {
			m.Content = *w.Content
		}
		if w.ReasoningContent != nil {
			m.ReasoningContent, m.ReasoningSet = *w.ReasoningContent, *w.ReasoningContent == ""
		}
		for _, c := range w.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, tokenizer.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args(c.Function.Arguments)})
		}
		out[i] = m
	}
	return out
}
