package rollout

// Context compaction inside the loop: when to compact, and the declared
// boundary every compaction logs.

import (
	"context"
	"fmt"
	"slices"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/runlog"
)

// maybeCompact compacts the context when the next prompt reaches the
// threshold: at most once per turn, never before the first call, and only
// when the policy changes something.
func (l *loop) maybeCompact(ctx context.Context) error {
	if l.policy == nil || l.thresh <= 0 || !l.hasCall || l.compactedAt == l.turns || len(l.ctx)+1 < l.thresh {
		return nil
	}
	before := len(l.ctx)
	var res compaction.Result
	var err error
	afterCall := l.lastSelected
	if sp, ok := l.policy.(compaction.Summarizer); ok {
		if dry, err := sp.Fold(l.msgs, ""); err != nil || !folds(dry) {
			return err
		}
		old := l.msgs
		if err := l.appendMsg(lhtok.RoleUser, sp.SummaryRequest()); err != nil {
			return err
		}
		prompt := l.promptOf(l.ctx)
		if l.overBudget(len(prompt)) {
			return errOverBudget
		}
		call, err := l.selectCall(ctx, prompt, nil)
		if err != nil {
			return err
		}
		before = len(l.ctx)
		afterCall = call.Call
		if res, err = sp.Fold(old, l.parse(call.Sampled)); err != nil {
			return failure.NewData("compaction", err)
		}
	} else {
		if res, err = l.policy.Compact(l.msgs); err != nil {
			return failure.NewData("compaction", err)
		}
		if !res.Changed {
			return nil
		}
	}
	newCtx, err := l.render(res.Messages)
	if err != nil {
		return failure.NewData("compaction", err)
	}
	ev := runlog.Compaction{Rollout: l.s.Rollout, Attempt: l.s.Attempt, Boundary: l.compactions, AfterCall: afterCall,
		Policy: l.policy.Name(), Lineage: res.Lineage, TokensBefore: uint32(before), TokensAfter: uint32(len(newCtx))}
	if err := l.declareCompaction(ctx, ev); err != nil {
		return err
	}
	l.msgs, l.ctx, l.prev = res.Messages, newCtx, nil
	l.compactions++
	l.compactedAt = l.turns
	return nil
}

func folds(r compaction.Result) bool {
	for _, ln := range r.Lineage {
		if ln.Op == runlog.OpSummarized {
			return true
		}
	}
	return false
}

// declareCompaction logs a compaction boundary, or on resume checks it
// against the logged one (the byte and chat-template paths share it).
func (l *loop) declareCompaction(ctx context.Context, ev runlog.Compaction) error {
	if pev := l.peek(); pev != nil {
		c, ok := pev.(runlog.Compaction)
		if !ok {
			return l.diverged("Compaction")
		}
		if c.Boundary != ev.Boundary || c.AfterCall != ev.AfterCall || c.Policy != ev.Policy || !slices.Equal(c.Lineage, ev.Lineage) {
			return failure.NewData("resume", fmt.Errorf("%w: compaction %d differs from the log", ErrDiverged, ev.Boundary))
		}
		l.pos++
		return nil
	}
	// A decision, not an effect: it goes out with the next call's record
	// (hold), like the step before it. The next prompt depends on it, and
	// the call that reads that prompt is logged in the same append.
	l.hold(ev)
	return nil
}
