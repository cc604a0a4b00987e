package runlog

import (
	"fmt"
	"math/rand/v2"

	"github.com/longhaul-rl/longhaul/failure"
	"pgregory.net/rapid"
)

// chooser abstracts the source of choices so the same model of a valid run
// drives rapid properties and seeded benchmarks.
type chooser interface{ intn(n int) int }

type rapidChooser struct{ t *rapid.T }

func (c rapidChooser) intn(n int) int { return rapid.IntRange(0, n-1).Draw(c.t, "choice") }

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.IntN(n) }

const testSeed = 42

// nextEvent proposes a valid next event for the run in state s: a small
// model of what a controller does (admit, attempt, call, env step,
// compaction, seal, fail, commit, train, checkpoint).
func nextEvent(s *State, c chooser) Event {
	if !s.Started {
		return RunStarted{Seed: testSeed, Mode: "deterministic", ConfigDigest: [32]byte{1, 2, 3}}
	}
	if com := s.Committed(); len(com) > 0 && c.intn(3) == 0 {
		n := 1 + c.intn(len(com))
		return StepTrained{Step: s.Step + 1, Groups: com[:n], Version: s.Version + 1}
	}
	if s.Step > 0 && c.intn(40) == 0 {
		to := s.Step - 1 - int64(c.intn(int(min(s.Step, 3))))
		return Rewound{Step: to, Version: to}
	}
	if s.Step > 0 && c.intn(20) == 0 {
		return CheckpointDurable{Step: s.Step, Version: s.Version, Path: "ckpt/x", ManifestDigest: [32]byte{9}}
	}
	open := s.Uncommitted()
	if len(open) == 0 || (len(open) < 4 && c.intn(4) == 0) {
		epoch, cur := s.Epoch, s.NextCursor
		if cur > 0 && c.intn(10) == 0 {
			epoch, cur = epoch+1, 0
		}
		return PromptAdmitted{Epoch: epoch, Cursor: cur, PromptID: "p", Group: NewGroupID(s.Seed, epoch, cur), Size: uint16(1 + c.intn(3)), Step: int64(c.intn(5))}
	}
	g := s.Groups[open[c.intn(len(open))]]
	r := g.Members[c.intn(len(g.Members))]
	switch r.Status {
	case StatusPending, StatusFailed:
		if r.Status == StatusFailed && c.intn(3) == 0 {
			break // leave it failed for good
		}
		return AttemptStarted{Rollout: r.ID, Attempt: r.Attempt + 1 + uint32(c.intn(2)), Seed: uint64(c.intn(1000)), Version: s.Version,
			Restart: r.Regenerate || c.intn(8) == 0}
	case StatusRunning:
		switch k := c.intn(10); {
		case k < 5:
			return modelCall(r, c, s.Version)
		case k < 7:
			return EnvStep{Rollout: r.ID, Attempt: r.Attempt, Turn: r.EnvSteps, Action: "a", Observation: "obs", Reward: float64(c.intn(3)), Done: c.intn(2) == 0, State: []byte{byte(c.intn(256))}}
		case k == 7 && len(r.Calls) > 0 && !r.CompactionPending:
			return Compaction{Rollout: r.ID, Attempt: r.Attempt, Boundary: r.Compactions, AfterCall: uint32(len(r.Calls) - 1), Policy: "recency",
				Lineage: []Lineage{{Message: 0, Op: OpKept}, {Message: 1, Op: OpDropped}}, TokensBefore: r.CtxLen, TokensAfter: r.CtxLen / 2}
		case k == 8:
			class := failure.Infra
			if c.intn(3) == 0 {
				class = failure.Data
			}
			return RolloutFailed{Rollout: r.ID, Attempt: r.Attempt, Class: class, Reason: "timeout", Cause: FailureCause(c.intn(4))}
		default:
			return RolloutSealed{Rollout: r.ID, Attempt: r.Attempt, Outcome: OutcomeCompleted, Reward: float64(c.intn(2)), Success: c.intn(2) == 0}
		}
	}
	running := false
	for _, m := range g.Members {
		running = running || m.Status == StatusRunning
	}
	if !running && c.intn(6) == 0 {
		// A retry of the group (on_dropped_prompt: retry), or a stale
		// member generated again (throughput mode).
		for _, m := range g.Members {
			switch m.Status {
			case StatusFailed:
				return GroupRequeued{Group: g.ID, Step: max(g.ForStep, s.Step) + 1 + int64(c.intn(2)), Class: m.LastFailure.Class, Reason: "exhausted"}
			case StatusSealed:
				return RolloutRegenerated{Rollout: m.ID, Reason: "stale"}
			}
		}
	}
	for _, m := range g.Members {
		if m.Status != StatusSealed && m.Status != StatusFailed {
			// Not ready to commit: start or advance another member.
			if m.Status == StatusRunning {
				return RolloutSealed{Rollout: m.ID, Attempt: m.Attempt, Outcome: OutcomeMaxTurns}
			}
			return AttemptStarted{Rollout: m.ID, Attempt: m.Attempt + 1, Version: s.Version, Restart: m.Regenerate}
		}
	}
	return GroupCommitted{Group: g.ID}
}

func modelCall(r *Rollout, c chooser, version int64) CallFinished {
	prefix := r.CtxLen
	if r.CompactionPending && c.intn(2) == 0 {
		prefix = 0
	} else if r.CtxLen > 0 && c.intn(8) == 0 {
		prefix = uint32(c.intn(int(r.CtxLen)))
	}
	ns, nm := 1+c.intn(6), 1+c.intn(6)
	suf, samp, lp := make([]int32, ns), make([]int32, nm), make([]float32, nm)
	for i := range suf {
		suf[i] = int32(c.intn(264))
	}
	for i := range samp {
		samp[i] = int32(c.intn(264))
		lp[i] = -float32(c.intn(100)) / 10
	}
	fin := FinishStop
	if c.intn(4) == 0 {
		fin = FinishLength
	}
	sel := c.intn(6) != 0
	rej := ""
	if !sel {
		rej = "bad tool call"
	}
	return CallFinished{Rollout: r.ID, Attempt: r.Attempt, Call: uint32(len(r.Calls)), PromptPrefix: prefix, PromptSuffix: suf,
		Sampled: samp, Logprobs: lp, Finish: fin, Version: version, Selected: sel, Reject: rej}
}

// genRun returns n valid events, checking each against a fold.
func genRun(s *State, c chooser, n int, fail func(string, ...any)) []Event {
	evs := make([]Event, 0, n)
	for len(evs) < n {
		ev := nextEvent(s, c)
		if err := Apply(s, ev); err != nil {
			fail("model proposed an invalid event %#v: %v", ev, err)
			return evs
		}
		if err := settledOK(s); err != nil {
			fail("after %#v: %v", ev, err)
			return evs
		}
		evs = append(evs, ev)
	}
	return evs
}

// settledOK checks State.settled: every group in the settled head is done
// with (trained or dropped, scheduled and admitted for a trained step), so
// no query about a later step can need it.
func settledOK(s *State) error {
	if s.settled < 0 || s.settled > len(s.Order) {
		return fmt.Errorf("settled %d of %d groups", s.settled, len(s.Order))
	}
	for _, id := range s.Order[:s.settled] {
		g := s.Groups[id]
		if (g.Status != GroupStatusTrained && g.Status != GroupStatusDropped) || g.ForStep > s.Step || g.AdmittedFor > s.Step {
			return fmt.Errorf("group %s (%v, for step %d, admitted for %d) is in the settled head at step %d", id, g.Status, g.ForStep, g.AdmittedFor, s.Step)
		}
	}
	return nil
}
