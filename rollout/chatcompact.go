package rollout

import (
	"context"
	"fmt"
	"slices"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/runlog"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bridge"
)

// Compaction of a bridged rollout. The policies work on compaction
// messages (role and content); a bridged conversation is converted to
// them, each tagged with its index (Tokens = [-1-i], a value no rendered
// token has), compacted, and converted back: kept messages are the
// conversation's own (tool calls, reasoning and all), an elided one keeps
// its fields with the marker as content, and a summary becomes a user
// message holding the summary text (templates have no summary role, and
// some move system messages to the front). The compacted conversation is
// rendered fresh by the template and the bridge restarts from it; the
// boundary is declared (runlog.Compaction, with the policy's lineage)
// before the next prompt uses it, exactly as in the byte loop.

// SummaryRole is the role the summary message takes in a chat template.
const SummaryRole = "user"

// maybeCompactChat is maybeCompact for a bridged rollout; it runs after
// the last reply and observations are in the record.
func (l *loop) maybeCompactChat(ctx context.Context) error {
	br := l.cb.br
	if l.policy == nil || l.thresh <= 0 || !l.hasCall || l.compactedAt == l.turns || len(br.Prompt()) < l.thresh {
		return nil
	}
	old := slices.Clone(br.Messages())
	cm := make([]compaction.Message, len(old))
	for i, m := range old {
		cm[i] = compaction.Message{Role: m.Role, Content: m.Content, Tokens: []int32{int32(-1 - i)}}
	}
	before, afterCall := len(br.Prompt()), l.lastSelected
	var res compaction.Result
	var err error
	if sp, ok := l.policy.(compaction.Summarizer); ok {
		if dry, err := sp.Fold(cm, ""); err != nil || !folds(dry) {
			return err
		}
		t, err := br.Add(ctx, []lhtok.Message{{Role: "user", Content: sp.SummaryRequest()}})
		if err != nil {
			return failure.NewData("chat", err)
		}
		if err := l.declareRerender(ctx, t); err != nil {
			return err
		}
		prompt := slices.Clone(br.Prompt())
		if l.overBudget(len(prompt)) {
			return errOverBudget
		}
		call, err := l.selectCall(ctx, prompt, nil)
		if err != nil {
			return err
		}
		before, afterCall = len(l.prev), call.Call
		if res, err = sp.Fold(cm, l.parse(call.Sampled)); err != nil {
			return failure.NewData("compaction", err)
		}
	} else {
		if res, err = l.policy.Compact(cm); err != nil {
			return failure.NewData("compaction", err)
		}
		if !res.Changed {
			return nil
		}
	}
	msgs, err := fromCompaction(res, old)
	if err != nil {
		return failure.NewData("compaction", err)
	}
	mode := l.s.History
	if mode == "" {
		mode = bridge.Append
	}
	nb, err := bridge.New(ctx, l.s.Chat, mode, l.s.Render, msgs)
	if err != nil {
		return failure.NewData("compaction", fmt.Errorf("rendering the compacted conversation: %w", err))
	}
	ev := runlog.Compaction{Rollout: l.s.Rollout, Attempt: l.s.Attempt, Boundary: l.compactions, AfterCall: afterCall,
		Policy: l.policy.Name(), Lineage: res.Lineage, TokensBefore: uint32(before), TokensAfter: uint32(len(nb.Prompt()))}
	if err := l.declareCompaction(ctx, ev); err != nil {
		return err
	}
	// The summary reply (if any) is not part of the new conversation.
	l.cb.br, l.cb.turn, l.cb.sampled, l.cb.next = nb, false, nil, nil
	l.prev = nil
	l.compactions++
	l.compactedAt = l.turns
	return nil
}

// fromCompaction converts a policy's result back to chat messages.
func fromCompaction(res compaction.Result, old []lhtok.Message) ([]lhtok.Message, error) {
	var replaced []int
	for _, ln := range res.Lineage {
		if ln.Op == runlog.OpReplaced && int(ln.Message) < len(old) {
			replaced = append(replaced, int(ln.Message))
		}
	}
	out := make([]lhtok.Message, 0, len(res.Messages))
	for _, m := range res.Messages {
		if len(m.Tokens) == 1 && m.Tokens[0] < 0 {
			i := int(-1 - m.Tokens[0])
			if i >= len(old) {
				return nil, fmt.Errorf("policy %q returned message tag %d of %d", "compaction", i, len(old))
			}
			out = append(out, old[i])
			continue
		}
		switch {
		case m.Role == lhtok.RoleSummary:
			out = append(out, lhtok.Message{Role: SummaryRole, Content: m.Content})
		case len(replaced) > 0:
			r := old[replaced[0]]
			replaced = replaced[1:]
			r.Content, r.ReasoningContent, r.ToolCalls = m.Content, "", nil
			out = append(out, r)
		default:
			out = append(out, lhtok.Message{Role: string(m.Role), Content: m.Content})
		}
	}
	return out, nil
}
