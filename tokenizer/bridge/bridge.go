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
	"math"
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
	// spare are dead encodings (the previous turn's render without the
	// new messages, the one before last) whose memory the next renders
	// may overwrite (tokenizer.RecyclingChat); never last.
	spare []spareEnc
	// eq: record[:eq] equals last.IDs[:eq] (the parts of a new render
	// reused from last need no comparison with the record).
	eq int
	// ins holds append mode's Inserted tokens across turns (see kept).
	ins kept
	// full disables reuse: every render converts and encodes the whole
	// conversation (the reference path the fast one is tested and
	// benchmarked against); idsOnly reuses ids but not template values
	// (the path before values were kept, for the benchmark's ratio).
	full, idsOnly bool
}

// spareEnc is a dead encoding whose first same ids equal last's: the ids
// a render into it need not copy again (each render's ids are mostly the
// history's, reused from the render before).
type spareEnc struct {
	e    *tokenizer.Encoding
	same int
}

// render renders msgs, reusing prev when the chat is incremental, and
// writing into a spare encoding when it recycles. msgs[:keep] are the
// messages prev was rendered from (the bridge's own history, which it
// never changes: see tokenizer.RecyclingChat); prev's first asLast ids
// equal last's.
func (b *Bridge) render(ctx context.Context, msgs []tokenizer.Message, opt tokenizer.RenderOptions, prev *tokenizer.Encoding, keep, asLast int) ([]int32, *tokenizer.Encoding, error) {
	if ic, ok := b.chat.(tokenizer.IncrementalChat); ok && !b.full {
		if b.idsOnly && prev != nil {
			p := *prev
			p.State = nil
			prev = &p
		}
		var e *tokenizer.Encoding
		var err error
		if rc, ok := ic.(tokenizer.RecyclingChat); ok && !b.idsOnly {
			r := tokenizer.Reuse{Prev: prev, Keep: keep}
			if n := len(b.spare); n > 0 {
				r.Spare, r.SpareSame = b.spare[n-1].e, min(b.spare[n-1].same, asLast)
				b.spare = b.spare[:n-1]
			}
			e, err = rc.RenderEncodingInto(ctx, msgs, opt, r)
		} else {
			e, err = ic.RenderEncoding(ctx, msgs, opt, prev)
		}
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
func (b *Bridge) Prompt() []int32 { return slices.Clip(b.record) }

// Messages returns the conversation so far; the caller must not modify
// it (the renders take the history's rendering on trust:
// tokenizer.Reuse.Keep).
func (b *Bridge) Messages() []tokenizer.Message { return slices.Clip(b.msgs) }

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
//
// Next keeps msg and next (and what their slices hold): the caller must
// not modify them afterwards.
//
// The per-turn cost does not grow with the history where the chat is a
// tokenizer.RecyclingChat: the message list and the record grow in place
// (the slices handed out are capped, so a caller's append copies); the two
// renders take the history's messages from the previous render unseen
// (Reuse.Keep), reuse its text and ids, and write into recycled memory
// that already holds most of the history's ids (Reuse.SpareSame); the
// record is compared with the fresh render only past the prefix known to
// be equal (eq, the renders' Reused); and a divergence that spans the
// history (Qwen3's dropped <think> blocks, in append mode) hands out
// Inserted tokens kept from the turn before (kept). What remains is
// proportional to the tokens since the last user query (the diff's
// common suffix, Qwen3's re-rendered turns when a query arrives).
func (b *Bridge) Next(ctx context.Context, sampled []int32, msg tokenizer.Message, next []tokenizer.Message) (Turn, error) {
	// b.msgs's spare capacity is the bridge's own: hist is all's prefix
	all := append(append(b.msgs, msg), next...)
	hist := all[: len(b.msgs)+1 : len(b.msgs)+1]
	closed := b.opt
	closed.AddGenerationPrompt = false
	prevLast := b.last
	h, hEnc, err := b.render(ctx, hist, closed, b.last, len(b.msgs), math.MaxInt)
	if err != nil {
		return Turn{}, fmt.Errorf("bridge: render without new messages: %w", err)
	}
	f, fEnc, err := b.render(ctx, all, b.opt, hEnc, len(hist), reused(hEnc))
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
	// The record grows in place: earlier prompts handed out are capped
	// at their length, so nobody sees these writes.
	rec := append(append(b.record, sampled...), closing...)
	// f[:known] equals the record: f reused h's ids, h reused last's, and
	// the record equals last for its first eq tokens.
	known := min(b.eq, reused(hEnc), reused(fEnc))

	start, ok := newStart(h, f, b.stops, reused(fEnc))
	var t Turn
	switch {
	case !ok && known+lcp(rec[known:], f[known:]) == len(rec):
		// The render of the history alone does not line up with f (Qwen3
		// renders an empty last reply with an empty <think> block only
		// while it is last), but f continues the record exactly: no
		// divergence, so no boundary in either mode.
		t.Prompt = append(rec, f[len(rec):]...)
	case ok:
		appended := append(rec, f[start:]...)
		if p := known + lcp(appended[known:], f[known:]); p != len(appended) || p != len(f) {
			d := diffFrom(appended, f, p)
			t.Diverged = &d
		}
		if b.mode == Rerender && t.Diverged != nil {
			t.Prompt = slices.Clone(f)
			d := diffFrom(appended, t.Prompt, t.Diverged.Prefix)
			t.Diverged, t.Boundary = &d, &d
		} else {
			t.Prompt = appended
		}
	case b.mode == Rerender:
		t.Prompt = slices.Clone(f)
		d := diffFrom(rec, t.Prompt, known+lcp(rec[known:], f[known:]))
		t.Diverged, t.Boundary = &d, &d
	default:
		return Turn{}, fmt.Errorf("bridge: the template re-renders history in a way the new messages cannot be separated from; set tokenizer.history: rerender")
	}
	b.eq = len(t.Prompt)
	// f[:stable] equals the previous turn's f (f reused h's ids, h
	// reused last's).
	b.ins.advance(min(reused(hEnc), reused(fEnc)))
	if t.Diverged != nil && t.Boundary == nil {
		b.eq = t.Diverged.Prefix
		// Inserted would share memory with f, which a later render
		// overwrites: the tokens are kept in the bridge's own memory
		// (the reference path copies them each time).
		if b.full {
			t.Diverged.Inserted = slices.Clip(slices.Clone(t.Diverged.Inserted))
		} else {
			t.Diverged.Inserted = b.ins.take(f, t.Diverged.Prefix, t.Diverged.Prefix+len(t.Diverged.Inserted))
		}
	}
	b.msgs, b.record, b.last = all, t.Prompt, fEnc
	t.Prompt = slices.Clip(t.Prompt)
	// what the dead encodings share with the new last: f[:rf] is h's,
	// h[:rh] the old last's
	rh, rf := reused(hEnc), reused(fEnc)
	b.recycle(min(rh, rf), spareEnc{prevLast, min(rh, rf)}, spareEnc{hEnc, rf})
	return t, nil
}

// kept is a copy of a stretch of the latest full render, f[from:from+ok],
// from which append mode's Inserted tokens are handed out. Once the
// record has diverged (Qwen3 drops the <think> blocks before the last
// user query: the hunk spans the history) every turn's Inserted is the
// same stretch of the render, or it extends it: the copy is then
// extended in place (amortised) instead of copying the whole hunk each
// turn. Memory handed out is never written again: buf only grows past
// its length (the most ever handed out), or is replaced.
type kept struct {
	buf      []int32
	from, ok int
}

// advance is called once per render of the conversation: its first
// stable ids equal the previous render's.
func (k *kept) advance(stable int) { k.ok = max(0, min(k.ok, stable-k.from)) }

// take returns f[p:e] in memory no render writes.
func (k *kept) take(f []int32, p, e int) []int32 {
	n := e - p
	if n == 0 {
		return f[p:p:p] // empty, not nil, as the diff's other slices
	}
	if p != k.from {
		*k = kept{from: p}
	}
	switch {
	case n <= k.ok:
	case k.ok == len(k.buf):
		k.buf = append(k.buf, f[p+k.ok:e]...)
		k.ok = n
	default:
		// the known stretch ends before what was handed out: writing
		// there would change an earlier turn's Inserted
		k.buf = append(make([]int32, 0, n+n/4), f[p:e]...)
		k.ok = n
	}
	return k.buf[:n:n]
}

func reused(e *tokenizer.Encoding) int {
	if e == nil {
		return 0
	}
	return e.Reused
}

// recycle keeps dead encodings for the next renders to write into, once
// a new last was made whose first stable ids equal the old last's.
func (b *Bridge) recycle(stable int, dead ...spareEnc) {
	for i := range b.spare {
		b.spare[i].same = min(b.spare[i].same, stable)
	}
	for _, d := range dead {
		if d.e != nil && d.e != b.last && len(b.spare) < 4 {
			b.spare = append(b.spare, d)
		}
	}
}

// Add appends messages that follow the current prompt without an
// assistant reply (a compaction's summary request after the pending
// observations): the prompt's trailing generation prompt is replaced by
// the rendered new messages and a new generation prompt. Divergence from
// the fresh render is handled as in Next.
func (b *Bridge) Add(ctx context.Context, next []tokenizer.Message) (Turn, error) {
	closed := b.opt
	closed.AddGenerationPrompt = false
	prevLast := b.last
	h, hEnc, err := b.render(ctx, b.msgs, closed, b.last, len(b.msgs), math.MaxInt)
	if err != nil {
		return Turn{}, fmt.Errorf("bridge: render without the generation prompt: %w", err)
	}
	g, gEnc, err := b.render(ctx, b.msgs, b.opt, hEnc, len(b.msgs), reused(hEnc))
	if err != nil {
		return Turn{}, fmt.Errorf("bridge: render with the generation prompt: %w", err)
	}
	all := append(slices.Clone(b.msgs), next...)
	f, fEnc, err := b.render(ctx, all, b.opt, hEnc, len(b.msgs), 0)
	if err != nil {
		return Turn{}, fmt.Errorf("bridge: render with new messages: %w", err)
	}
	// f's memory is recycled by a later render: what is handed out is a
	// copy (Add runs once per compaction, not per turn).
	f = slices.Clone(f)
	var t Turn
	gen := g[min(len(g), len(h)):]
	// As in Next: the new messages begin after the history's render in f,
	// found by suffix when the template changed the history (Qwen3 drops
	// earlier <think> blocks once a new user message follows them).
	start, ok := newStart(h, f, b.stops, 0)
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
	b.eq = lcp(t.Prompt, f)
	b.ins.advance(min(reused(hEnc), reused(fEnc)))
	b.msgs, b.record, b.last = all, t.Prompt, fEnc
	t.Prompt = slices.Clip(t.Prompt)
	// once per compaction: what the dead encodings share with the new
	// last is not worked out
	b.recycle(0, spareEnc{e: prevLast}, spareEnc{e: hEnc}, spareEnc{e: gEnc})
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
func newStart(h, f, stops []int32, known int) (int, bool) {
	known = min(known, len(h), len(f))
	p := known + lcp(h[known:], f[known:])
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
func diff(a, b []int32) Diff { return diffFrom(a, b, lcp(a, b)) }

// diffFrom is diff given p = lcp(a, b).
func diffFrom(a, b []int32, p int) Diff {
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	return Diff{Prefix: p, Removed: a[p : len(a)-s : len(a)-s], Inserted: b[p : len(b)-s : len(b)-s]}
}
