package rollout

import (
	"github.com/longhaul-rl/longhaul/compaction"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
)

// The byte path's context lives in one growing array (the arena) instead
// of an array per call: a turn appends the generation prompt, the sampled
// tokens and the next observation in place, and the slices handed out
// (prompts, prev, message tokens) are views of it. That is safe because
// the arena is write-once: a position is written only at the arena's end,
// so a view never changes under its holder (a generator still reading a
// prompt, a logged message). Every in-place append goes through reserve
// and commit; the views they return are capacity-limited, so a plain
// append to one copies instead of writing past the arena's end.

// ctxRoom is the extra room of a new arena, in tokens (1 KiB), on top of
// a turn's (the call's tokens and an observation of that size): enough
// for a short episode's turns and compactions in one arena.
const ctxRoom = 256

// The current context starts at l.base in the arena: a compaction renders
// the new context after the old one when there is room (render), so the
// arena is not reallocated at every compaction.

// tail reports whether dst is the current context up to the arena's end.
func (l *loop) tail(dst []int32) bool {
	return len(dst) > 0 && len(dst) == len(l.arena)-l.base && &dst[0] == &l.arena[l.base]
}

// reserve returns dst ready for an in-place append of n tokens: dst
// itself (with the arena's room) when it is the tail and there is room,
// else a copy of dst in a new arena with room for a few turns.
func (l *loop) reserve(dst []int32, n int) []int32 {
	if l.tail(dst) && cap(l.arena)-len(l.arena) >= n {
		return l.arena[l.base:]
	}
	room := max(len(dst), n+2*(l.s.Limits.MaxTokensPerCall+len(l.genPrompt)+1)+ctxRoom)
	a := make([]int32, len(dst), len(dst)+room)
	copy(a, dst)
	l.arena, l.base = a, 0
	return a
}

// commit makes ext (an append to reserve's result) the arena's written
// part and returns it as a view.
func (l *loop) commit(ext []int32) []int32 {
	l.arena = l.arena[:l.base+len(ext)]
	return ext[:len(ext):len(ext)]
}

// inArena reports whether v is a view of the current context in the
// arena's written part (its values never change).
func (l *loop) inArena(v []int32) bool {
	return len(v) > 0 && len(v) <= len(l.arena)-l.base && &v[0] == &l.arena[l.base]
}

// follows reports whether the arena's written part ends with exactly
// prompt followed by sampled (a reply the call wrote after its prompt).
func (l *loop) follows(prompt, sampled []int32) bool {
	n := len(prompt)
	return l.inArena(prompt) && len(sampled) > 0 && len(l.arena)-l.base == n+len(sampled) && &l.arena[l.base+n] == &sampled[0]
}

// keep returns the call's tokens for its event, which the log keeps: the
// prompt suffix as a view of the prompt and the sampled tokens appended
// after it, when the prompt is the arena's tail (the byte path), else one
// copy of both.
func (l *loop) keep(prompt, suffix, sampled []int32) ([]int32, []int32) {
	if l.tail(prompt) {
		buf := l.commit(append(l.reserve(prompt, len(sampled)), sampled...))
		return suffix[:len(suffix):len(suffix)], buf[len(prompt):]
	}
	toks := make([]int32, len(suffix)+len(sampled))
	copy(toks, suffix)
	copy(toks[len(suffix):], sampled)
	return toks[:len(suffix):len(suffix)], toks[len(suffix):]
}

// extend returns dst + toks, in place when it can.
func (l *loop) extend(dst, toks []int32) []int32 {
	return l.commit(append(l.reserve(dst, len(toks)), toks...))
}

// appendMsg adds a message to the context: its tokens are rendered
// straight into the arena, and the message keeps a view of them.
func (l *loop) appendMsg(role string, content string) error {
	start := len(l.ctx)
	buf, err := l.app.AppendMessage(l.reserve(l.ctx, len(content)+2), lhtok.Message{Role: role, Content: content})
	if err != nil {
		return err
	}
	l.ctx = l.commit(buf)
	l.msgs = append(l.msgs, compaction.Message{Role: role, Content: content, Tokens: l.ctx[start:]})
	return nil
}

// render returns the context of msgs (after a compaction): the
// template's start and every message's tokens (a message a policy wrote
// is rendered here, with the run's template), written after the old
// context when the arena has room, else into a new arena.
func (l *loop) render(msgs []compaction.Message) ([]int32, error) {
	n := len(l.open)
	for i := range msgs {
		if msgs[i].Tokens == nil {
			toks, err := l.app.AppendMessage(nil, lhtok.Message{Role: msgs[i].Role, Content: msgs[i].Content})
			if err != nil {
				return nil, err
			}
			msgs[i].Tokens = toks
		}
		n += len(msgs[i].Tokens)
	}
	var buf []int32
	if len(l.arena) > 0 && cap(l.arena)-len(l.arena) >= n {
		l.base = len(l.arena)
		buf = l.arena[l.base:]
	} else {
		l.arena = nil
		buf = l.reserve(nil, n)
	}
	buf = append(buf, l.open...)
	for _, m := range msgs {
		buf = append(buf, m.Tokens...)
	}
	return l.commit(buf), nil
}
