// Package bridge builds each turn's prompt of a multi-turn rollout from an
// append-only token record: the next prompt is the previous prompt + the
// tokens the model sampled + the template's rendering of the new messages
// only. Sampled text is never re-tokenized.
//
// The new messages' tokens come from rendering the conversation with and
// without them and taking the suffix after their longest common token
// prefix. A template that renders history differently once new messages
// arrive (Qwen3 drops earlier <think> blocks; some templates reformat
// earlier tool calls), or whose canonical rendering of the assistant turn
// differs from what was sampled, is noticed on every turn: History Append
// keeps the exact tokens the model saw (training data = what was seen);
// History Rerender switches to the fresh render and reports a Boundary with
// the minimal token diff, which the caller declares as a segment boundary.
package bridge

import (
	"context"
	"fmt"
	"slices"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// History is the tokenizer.history config value.
type History string

// History modes.
const (
	Append   History = "append"
	Rerender History = "rerender"
)

// ParseHistory checks a config value.
func ParseHistory(s string) (History, error) {
	switch History(s) {
	case Append, Rerender:
		return History(s), nil
	case "":
		return Append, nil
	}
	return "", fmt.Errorf("bridge: tokenizer.history %q: want append or rerender", s)
}

// Diff is a single-hunk token diff: old[:Prefix] + Removed + old[Prefix+len(Removed):]
// becomes old[:Prefix] + Inserted + (same tail). Removed and Inserted are
// read-only: they share memory with the prompts.
type Diff struct {
	Prefix   int     `json:"prefix"`
	Removed  []int32 `json:"removed"`
	Inserted []int32 `json:"inserted"`
}

// Bridge is one rollout's token record. Not safe for concurrent use.
type Bridge struct {
	chat   tokenizer.Chat
	opt    tokenizer.RenderOptions
	mode   History
	stops  []int32
	msgs   []tokenizer.Message
	record []int32
	// last is the latest full render's encoding, reused by an
	// IncrementalChat so a turn re-encodes only the changed tail.
	last *tokenizer.Encoding
	// full disables reuse: every render converts and encodes the whole
	// conversation (the reference path the fast one is tested and
	// benchmarked against); idsOnly reuses ids but not template values
	// (the path before values were kept, for the benchmark's ratio).
	full, idsOnly bool
}

// render renders msgs, reusing prev when the chat is incremental.
func (b *Bridge) render(ctx context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions, prev *tokenizer.Encoding) ([]int32, *tokenizer.Encoding, error) {
	if ic, ok := b.chat.(tokenizer.IncrementalChat); ok && !b.full {
		if b.idsOnly && prev != nil {
			p := *prev
			p.State = nil
			prev = &p
		}
		e, err := ic.RenderEncoding(ctx, msgs, opt, prev)
		if err != nil {
			return nil, nil, err
		}
		return e.IDs, e, nil
	}
	ids, err := b.chat.RenderTokens(ctx, msgs, opt)
	return ids, nil, err
}

// New renders the opening messages with the generation prompt.
func New(ctx context.Context, chat tokenizer.Chat, mode History, opt tokenizer.RenderOptions, msgs []tokenizer.Message) (*Bridge, error) {
	opt.AddGenerationPrompt = true
	rec, err := chat.RenderTokens(ctx, msgs, opt)
	if err != nil {
		return nil, fmt.Errorf("bridge: first prompt: %w", err)
	}
	return &Bridge{chat: chat, opt: opt, mode: mode, stops: chat.Tokenizer().StopTokens(), msgs: slices.Clone(msgs), record: rec}, nil
}

// Prompt returns the current prompt (the record); the caller must not
// modify it.
func (b *Bridge) Prompt() []int32 { return b.record }

// Messages returns the conversation so far.
func (b *Bridge) Messages() []tokenizer.Message { return b.msgs }

// Turn is the outcome of one Next.
type Turn struct {
	// Prompt is the next prompt.
	Prompt []int32
	// Diverged is set when the fresh render of the conversation differs
	// from the append-only record (+ new messages): the diff from the
	// record to the fresh render.
	Diverged *Diff
	// Boundary is set in Rerender mode when the prompt switched to the
	// fresh render: declare a segment boundary with this diff.
	Boundary *Diff
}

// Next appends the assistant turn (its sampled tokens, and msg, the parsed
// message the template would render for it) and the new messages (tool
// results, the next user message), and returns the next prompt.
func (b *Bridge) Next(ctx context.Context, sampled []int32, msg tokenizer.Message, next []tokenizer.Message) (Turn, error) {
	// one allocation for both message lists: hist is all's prefix
	all := append(append(append(make([]tokenizer.Message, 0, len(b.msgs)+1+len(next)), b.msgs...), msg), next...)
	hist := all[: len(b.msgs)+1 : len(b.msgs)+1]
	closed := b.opt
	closed.AddGenerationPrompt = false
	h, hEnc, err := b.render(ctx, hist, closed, b.last)
	if err != nil {
		return Turn{}, fmt.Errorf("bridge: render without new messages: %w", err)
	}
	f, fEnc, err := b.render(ctx, all, b.opt, hEnc)
	if err != nil {
		return Turn{}, fmt.Errorf("bridge: render with new messages: %w", err)
	}
	// What closes the assistant turn after the stop token in the
	// template (Qwen: "<|im_end|>" "\n"); the stop token is written only if
	// the model did not sample it (a length-truncated reply).
	var closing []int32
	if k := lastStop(h, b.stops); k >= 0 {
		closing = h[k:]
		if len(sampled) > 0 && sampled[len(sampled)-1] == h[k] {
			closing = h[k+1:]
		}
	}
	rec := make([]int32, 0, len(b.record)+len(sampled)+len(closing)+len(f)-len(h)+8)
	rec = append(append(append(rec, b.record...), sampled...), closing...)

	start, ok := newStart(h, f, b.stops)
	var t Turn
	switch {
	case ok:
		appended := append(rec, f[start:]...)
		if !slices.Equal(appended, f) {
			d := diff(appended, f)
			t.Diverged = &d
		}
		if b.mode == Rerender && t.Diverged != nil {
			t.Prompt, t.Boundary = f, t.Diverged
		} else {
			t.Prompt = appended
		}
	case b.mode == Rerender:
		d := diff(rec, f)
		t.Prompt, t.Diverged, t.Boundary = f, &d, &d
	default:
		return Turn{}, fmt.Errorf("bridge: the template re-renders history in a way the new messages cannot be separated from; set tokenizer.history: rerender")
	}
	b.msgs, b.record, b.last = all, t.Prompt, fEnc
	return t, nil
}

// Add appends messages that follow the current prompt without an
// assistant reply (a compaction's summary request after the pending
// observations): the prompt's trailing generation prompt is replaced by
// the rendered new messages and a new generation prompt. Divergence from
// the fresh render is handled as in Next.
func (b *Bridge) Add(ctx context.Context, next []tokenizer.Message) (Turn, error) {
	closed := b.opt
	closed.AddGenerationPrompt = false
	h, hEnc, err := b.render(ctx, b.msgs, closed, b.last)
	if err != nil {
		return Turn{}, fmt.Errorf("bridge: render without the generation prompt: %w", err)
	}
	g, _, err := b.render(ctx, b.msgs, b.opt, hEnc)
	if err != nil {
		return Turn{}, fmt.Errorf("bridge: render with the generation prompt: %w", err)
	}
	all := append(slices.Clone(b.msgs), next...)
	f, fEnc, err := b.render(ctx, all, b.opt, hEnc)
	if err != nil {
		return Turn{}, fmt.Errorf("bridge: render with new messages: %w", err)
	}
	var t Turn
	gen := g[min(len(g), len(h)):]
	// As in Next: the new messages begin after the history's render in f,
	// found by suffix when the template changed the history (Qwen3 drops
	// earlier <think> blocks once a new user message follows them).
	start, ok := newStart(h, f, b.stops)
	switch {
	case ok && hasPrefix(g, h) && hasSuffix(b.record, gen):
		appended := append(slices.Clone(b.record[:len(b.record)-len(gen)]), f[start:]...)
		t.Prompt = appended
		if !slices.Equal(appended, f) {
			d := diff(appended, f)
			t.Diverged = &d
			if b.mode == Rerender {
				t.Prompt, t.Boundary = f, &d
			}
		}
	case b.mode == Rerender:
		d := diff(b.record, f)
		t.Prompt, t.Diverged, t.Boundary = f, &d, &d
	default:
		return Turn{}, fmt.Errorf("bridge: the template does not render the new messages after the history's generation prompt; set tokenizer.history: rerender")
	}
	b.msgs, b.record, b.last = all, t.Prompt, fEnc
	return t, nil
}

func hasSuffix(s, p []int32) bool { return len(s) >= len(p) && slices.Equal(s[len(s)-len(p):], p) }

func lastStop(toks, stops []int32) int {
	for i := len(toks) - 1; i >= 0; i-- {
		if slices.Contains(stops, toks[i]) {
			return i
		}
	}
	return -1
}

// newStart returns where the new messages begin in f, given h, the render
// without them. Normally h is a prefix of f. If the template changed the
// history when the new messages were added (Qwen3 drops the <think> blocks
// of earlier turns), the new part begins after the position in f whose
// preceding tokens share the longest suffix with h: the end of the
// assistant turn, rendered the same on both sides. That suffix must reach
// back past the assistant's stop token into its content, or the new part
// is not trusted.
func newStart(h, f, stops []int32) (int, bool) {
	p := lcp(h, f)
	if p == len(h) {
		return p, true
	}
	if len(h) == 0 {
		return 0, false
	}
	need := len(h) - lastStop(h, stops) + 1
	best, bestLen := -1, 0
	end := h[len(h)-1]
	for j := p + 1; j <= len(f); j++ {
		if f[j-1] != end {
			continue
		}
		n := 0
		for n < len(h) && n < j && h[len(h)-1-n] == f[j-1-n] {
			n++
		}
		if n > bestLen {
			best, bestLen = j, n
		}
	}
	if best < 0 || bestLen < need {
		return 0, false
	}
	return best, true
}

func hasPrefix(s, p []int32) bool { return len(s) >= len(p) && slices.Equal(s[:len(p)], p) }

func lcp(a, b []int32) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// diff is the minimal single-hunk diff from a to b (common prefix and
// common suffix kept). Removed and Inserted share memory with a and b
// (capped: appending to them copies): token slices the bridge hands out
// are never modified, and a divergence that spans the history (Qwen3's
// dropped <think> blocks, in append mode, on every later turn) costs no
// copy.
func diff(a, b []int32) Diff {
	p := lcp(a, b)
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	return Diff{Prefix: p, Removed: a[p : len(a)-s : len(a)-s], Inserted: b[p : len(b)-s : len(b)-s]}
}
