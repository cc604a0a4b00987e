package runlog

// This file holds Apply: the pure fold of one event into the State, with
// the checks that make an event invalid.

import (
	"fmt"
	"slices"

	"github.com/longhaul-rl/longhaul/failure"
)

// Apply folds ev into s. It is pure in the sense that matters for replay:
// no I/O, no clock, no randomness, so the same events give the same state.
// It mutates s in place for speed, but only after the whole event has been
// validated, so a rejected event leaves s exactly as it was.
//
// Events applied with Apply are indexed by their ordinal; a Log uses ApplyAt
// with record offsets.
func Apply(s *State, ev Event) error { return ApplyAt(s, ev, Offset(s.Applied)) }

// ApplyAt is Apply for an event stored at off.
func ApplyAt(s *State, ev Event, off Offset) error {
	if err := apply(s, ev, off); err != nil {
		return fmt.Errorf("apply %v: %w", ev.Kind(), err)
	}
	k := ev.Kind()
	s.Applied++
	if int(k) < numKinds {
		s.Counts[k]++
	}
	return nil
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidEvent}, a...)...)
}

// Rollout returns the rollout with this id, or nil.
func (s *State) Rollout(id RolloutID) *Rollout {
	g := s.Groups[id.Group]
	if g == nil || int(id.Member) >= len(g.Members) {
		return nil
	}
	return g.Members[id.Member]
}

func (s *State) rollout(id RolloutID) (*Rollout, error) {
	g := s.Groups[id.Group]
	if g == nil {
		return nil, fmt.Errorf("%w %s (rollout %s)", ErrUnknownGroup, id.Group, id)
	}
	if int(id.Member) >= len(g.Members) {
		return nil, fmt.Errorf("%w %s: group has %d members", ErrUnknownRollout, id, len(g.Members))
	}
	return g.Members[id.Member], nil
}

// live checks that the event's attempt is the rollout's current one and
// that the rollout can still change.
func (s *State) live(id RolloutID, attempt uint32) (*Rollout, error) {
	r, err := s.rollout(id)
	if err != nil {
		return nil, err
	}
	if s.Groups[id.Group].Status != GroupStatusOpen {
		return nil, fmt.Errorf("%w: rollout %s: group is %v", ErrGroupState, id, s.Groups[id.Group].Status)
	}
	switch {
	case attempt < r.Attempt:
		return nil, fmt.Errorf("%w: rollout %s attempt %d, current is %d", ErrStaleAttempt, id, attempt, r.Attempt)
	case attempt > r.Attempt:
		return nil, invalid("rollout %s attempt %d was never started (current %d)", id, attempt, r.Attempt)
	case r.Status == StatusPending && r.Regenerate:
		// The attempt was fenced by RolloutRegenerated: a late result.
		return nil, fmt.Errorf("%w: rollout %s attempt %d was regenerated", ErrStaleAttempt, id, attempt)
	case r.Status == StatusPending:
		return nil, invalid("rollout %s has no attempt started", id)
	case r.Status == StatusSealed:
		return nil, fmt.Errorf("%w: %s", ErrSealed, id)
	case r.Status == StatusFailed:
		return nil, invalid("rollout %s attempt %d already failed", id, attempt)
	}
	return r, nil
}

func apply(s *State, ev Event, off Offset) error {
	if s.Groups == nil {
		s.Groups = map[GroupID]*Group{}
	}
	if _, ok := ev.(RunStarted); !ok && !s.Started {
		return invalid("%v before RunStarted", ev.Kind())
	}
	switch v := ev.(type) {
	case RunStarted:
		if s.Started {
			return invalid("run already started")
		}
		if v.Mode != "deterministic" && v.Mode != "throughput" {
			return invalid("mode %q is neither deterministic nor throughput", v.Mode)
		}
		s.Started, s.Seed, s.Mode, s.ConfigDigest = true, v.Seed, v.Mode, v.ConfigDigest
	case LogDamaged:
		s.Damage = append(s.Damage, v)
	case ConfigChanged:
		s.ConfigDigest = v.Digest
	case PromptAdmitted:
		return applyAdmit(s, v)
	case AttemptStarted:
		r, err := s.rollout(v.Rollout)
		if err != nil {
			return err
		}
		if g := s.Groups[v.Rollout.Group]; g.Status != GroupStatusOpen {
			return fmt.Errorf("%w: attempt on %s of %v group", ErrGroupState, v.Rollout, g.Status)
		}
		if r.Status == StatusSealed {
			return fmt.Errorf("%w: attempt %d on %s", ErrSealed, v.Attempt, v.Rollout)
		}
		if v.Attempt <= r.Attempt {
			return fmt.Errorf("%w: rollout %s attempt %d, current is %d", ErrStaleAttempt, v.Rollout, v.Attempt, r.Attempt)
		}
		if r.Regenerate && !v.Restart {
			return invalid("rollout %s is being regenerated: attempt %d must restart the episode", v.Rollout, v.Attempt)
		}
		r.Regenerate = false
		r.Attempt, r.AttemptSeed, r.AttemptVersion, r.Status = v.Attempt, v.Seed, v.Version, StatusRunning
		if v.Restart {
			// The episode starts over: a fresh context (the next call
			// stores its prompt whole) in a new segment, and no progress.
			r.CtxLen, r.CompactionPending, r.Compactions = 0, false, 0
			r.EnvSteps, r.EnvReward, r.EnvDone = 0, 0, false
			if len(r.Calls) > 0 {
				r.Segment++
			}
			r.EpisodeStart = uint32(len(r.Calls))
		}
		r.Events = appendEvent(r.Events, off)
	case CallFinished:
		return applyCall(s, v.Rollout, v.Attempt, v.Call, v.PromptPrefix, uint32(len(v.PromptSuffix)), uint32(len(v.Sampled)), uint32(len(v.Logprobs)), v.Finish, v.Version, v.Selected, off)
	case *callRecord:
		return applyCall(s, v.Rollout, v.Attempt, v.Call, v.PromptPrefix, v.nSuffix, v.nSampled, v.nLogprobs, v.Finish, v.Version, v.Selected, off)
	case EnvStep:
		r, err := s.live(v.Rollout, v.Attempt)
		if err != nil {
			return err
		}
		r.EnvSteps++
		r.EnvReward += v.Reward
		r.EnvDone = v.Done
		r.Events = appendEvent(r.Events, off)
	case Compaction:
		r, err := s.live(v.Rollout, v.Attempt)
		if err != nil {
			return err
		}
		if len(r.Calls) == 0 || v.AfterCall != uint32(len(r.Calls)-1) {
			return invalid("compaction of %s after call %d, but the rollout has %d calls", v.Rollout, v.AfterCall, len(r.Calls))
		}
		if v.Boundary != r.Compactions {
			return invalid("compaction of %s has boundary %d, want %d", v.Rollout, v.Boundary, r.Compactions)
		}
		if r.CompactionPending {
			return invalid("compaction of %s: the previous one has no call after it yet", v.Rollout)
		}
		r.Compactions++
		r.CompactionPending = true
		r.Events = appendEvent(r.Events, off)
	case RolloutSealed:
		r, err := s.live(v.Rollout, v.Attempt)
		if err != nil {
			return err
		}
		r.Status, r.Outcome, r.Reward, r.Success = StatusSealed, v.Outcome, v.Reward, v.Success
		r.Events = appendEvent(r.Events, off)
	case RolloutFailed:
		if v.Class != failure.Infra && v.Class != failure.Data {
			return invalid("failure class %q of %s", v.Class, v.Rollout)
		}
		if v.Cause > CauseRolloutTimeout {
			return invalid("failure cause %d of %s", v.Cause, v.Rollout)
		}
		r, err := s.live(v.Rollout, v.Attempt)
		if err != nil {
			return err
		}
		r.Status = StatusFailed
		r.Failures++
		if v.Class == failure.Infra {
			r.InfraFailures++
		} else {
			r.DataFailures++
		}
		r.LastFailure = Failure{Attempt: v.Attempt, Class: v.Class, Reason: v.Reason, Cause: v.Cause}
		r.Events = appendEvent(r.Events, off)
	case GroupDropped:
		g := s.Groups[v.Group]
		if g == nil {
			return fmt.Errorf("%w %s", ErrUnknownGroup, v.Group)
		}
		if g.Status != GroupStatusOpen {
			return fmt.Errorf("%w: drop of %s, which is %v", ErrGroupState, v.Group, g.Status)
		}
		for _, r := range g.Members {
			if r.Status == StatusRunning {
				return fmt.Errorf("%w: drop of %s: member %s is still running", ErrGroupState, v.Group, r.ID)
			}
		}
		g.Status = GroupStatusDropped
	case GroupRequeued:
		g := s.Groups[v.Group]
		if g == nil {
			return fmt.Errorf("%w %s", ErrUnknownGroup, v.Group)
		}
		if g.Status != GroupStatusOpen {
			return fmt.Errorf("%w: requeue of %s, which is %v", ErrGroupState, v.Group, g.Status)
		}
		if v.Step <= g.ForStep || v.Step <= s.Step {
			return invalid("requeue of %s to step %d: it is scheduled for %d and step %d is trained", v.Group, v.Step, g.ForStep, s.Step)
		}
		for _, r := range g.Members {
			if r.Status == StatusRunning {
				return fmt.Errorf("%w: requeue of %s: member %s is still running", ErrGroupState, v.Group, r.ID)
			}
		}
		g.ForStep = v.Step
		g.Retries++
		for _, r := range g.Members {
			if r.Status == StatusFailed {
				r.InfraFailures, r.DataFailures = 0, 0
			}
		}
	case RolloutRegenerated:
		r, err := s.rollout(v.Rollout)
		if err != nil {
			return err
		}
		if g := s.Groups[v.Rollout.Group]; g.Status != GroupStatusOpen {
			return fmt.Errorf("%w: regenerating %s of a %v group", ErrGroupState, v.Rollout, g.Status)
		}
		if r.Status != StatusSealed && r.Status != StatusFailed {
			return invalid("regenerating %s, which is %v, neither sealed nor failed", v.Rollout, r.Status)
		}
		r.Status, r.Regenerate = StatusPending, true
		// Not one of the rollout's replay events: the Restart of its next
		// attempt is what tells a replay to start the episode over.
		r.Outcome, r.Reward, r.Success = "", 0, false
	case GroupCommitted:
		g := s.Groups[v.Group]
		if g == nil {
			return fmt.Errorf("%w %s", ErrUnknownGroup, v.Group)
		}
		if g.Status != GroupStatusOpen {
			return fmt.Errorf("%w: commit of %s, which is %v", ErrGroupState, v.Group, g.Status)
		}
		for _, r := range g.Members {
			if r.Status != StatusSealed && r.Status != StatusFailed {
				return fmt.Errorf("%w: commit of %s: member %s is %v", ErrGroupState, v.Group, r.ID, r.Status)
			}
		}
		g.Status = GroupStatusCommitted
	case StepTrained:
		if v.Step != s.Step+1 {
			return invalid("step %d after step %d", v.Step, s.Step)
		}
		if v.Version < s.Version {
			return invalid("step %d publishes version %d, older than %d", v.Step, v.Version, s.Version)
		}
		if len(v.Groups) == 0 {
			return invalid("step %d trains no group", v.Step)
		}
		for i, id := range v.Groups {
			g := s.Groups[id]
			if g == nil {
				return fmt.Errorf("%w %s in step %d", ErrUnknownGroup, id, v.Step)
			}
			if g.Status != GroupStatusCommitted {
				return fmt.Errorf("%w: step %d trains %s, which is %v", ErrGroupState, v.Step, id, g.Status)
			}
			if slices.Contains(v.Groups[:i], id) {
				return fmt.Errorf("%w: step %d lists %s twice", ErrGroupState, v.Step, id)
			}
		}
		for _, id := range v.Groups {
			g := s.Groups[id]
			g.Status, g.Step = GroupStatusTrained, v.Step
		}
		s.Step, s.Version = v.Step, v.Version
		s.Trained = append(s.Trained, TrainedStep{Step: v.Step, Version: v.Version, Groups: slices.Clone(v.Groups)})
		s.settle()
	case CheckpointDurable:
		if v.Step > s.Step || v.Step < 0 {
			return invalid("checkpoint of step %d, but the run is at step %d", v.Step, s.Step)
		}
		s.Checkpoints = append(s.Checkpoints, v)
	case SnapshotWritten:
		if v.Offset > uint64(off) {
			return invalid("snapshot covers offset %d, beyond its own record at %d", v.Offset, off)
		}
		s.LastSnapshot = v
	case Rewound:
		if v.Step < 0 || v.Step > s.Step {
			return invalid("rewind to step %d, but the run is at step %d", v.Step, s.Step)
		}
		for _, id := range s.Order {
			if g := s.Groups[id]; g.Status == GroupStatusTrained && g.Step > v.Step {
				g.Status, g.Step = GroupStatusCommitted, 0
			}
		}
		// The undone steps leave the training history: Trained is what
		// the current weights were trained on.
		n := len(s.Trained)
		for n > 0 && s.Trained[n-1].Step > v.Step {
			n--
		}
		clear(s.Trained[n:])
		s.Trained = s.Trained[:n]
		s.Step, s.Version = v.Step, v.Version
		s.settled = 0 // the undone steps' groups are committed again
		s.settle()
	default:
		return fmt.Errorf("%w: %T", ErrUnknownKind, ev)
	}
	return nil
}

func applyAdmit(s *State, v PromptAdmitted) error {
	if v.Size == 0 {
		return invalid("prompt %q admitted with an empty group", v.PromptID)
	}
	if want := NewGroupID(s.Seed, v.Epoch, v.Cursor); v.Group != want {
		return invalid("prompt %q at epoch %d cursor %d has group %s, want %s", v.PromptID, v.Epoch, v.Cursor, v.Group, want)
	}
	if _, ok := s.Groups[v.Group]; ok {
		return invalid("group %s admitted twice", v.Group)
	}
	if v.Replaces != 0 {
		// A spare takes the place of a dropped group, or of one requeued to
		// a later step (on_dropped_prompt: retry) in the step it left.
		if r := s.Groups[v.Replaces]; r == nil || (r.Status != GroupStatusDropped && r.ForStep == r.AdmittedFor) {
			return invalid("prompt %q replaces group %s, which is neither dropped nor requeued", v.PromptID, v.Replaces)
		}
	}
	switch {
	case v.Epoch == s.Epoch && v.Cursor == s.NextCursor:
	case v.Epoch == s.Epoch+1 && v.Cursor == 0:
		// The next epoch starts at its first position; an epoch is never
		// skipped. (Whether the previous epoch was used up is the data's
		// business: the log does not know the dataset's size.)
	default:
		return invalid("prompt %q at epoch %d cursor %d, but the cursor is at epoch %d position %d", v.PromptID, v.Epoch, v.Cursor, s.Epoch, s.NextCursor)
	}
	g := &Group{ID: v.Group, Seq: uint64(len(s.Order)), Epoch: v.Epoch, Cursor: v.Cursor, PromptID: v.PromptID, ForStep: v.Step, AdmittedFor: v.Step,
		Replaces: v.Replaces, Members: make([]*Rollout, v.Size)}
	for i := range g.Members {
		g.Members[i] = &Rollout{ID: RolloutID{Group: v.Group, Member: uint16(i)}}
	}
	s.Groups[v.Group] = g
	s.Order = append(s.Order, v.Group)
	s.Epoch, s.NextCursor = v.Epoch, v.Cursor+1
	return nil
}

func applyCall(s *State, id RolloutID, attempt, call, prefix, nSuffix, nSampled, nLogprobs uint32, finish string, version int64, selected bool, off Offset) error {
	r, err := s.live(id, attempt)
	if err != nil {
		return err
	}
	if call != uint32(len(r.Calls)) {
		return fmt.Errorf("%w: rollout %s call %d, want %d", ErrCallOrder, id, call, len(r.Calls))
	}
	if prefix > r.CtxLen {
		return invalid("rollout %s call %d keeps %d prompt tokens of a %d-token context", id, call, prefix, r.CtxLen)
	}
	if nLogprobs != nSampled {
		return invalid("rollout %s call %d has %d logprobs for %d sampled tokens", id, call, nLogprobs, nSampled)
	}
	if finish != FinishStop && finish != FinishLength {
		return invalid("rollout %s call %d finish %q", id, call, finish)
	}
	seg := r.Segment
	if r.CompactionPending {
		// The first call after a declared boundary opens a new segment,
		// whatever prefix of the old context it kept.
		seg++
	}
	if r.Calls == nil {
		r.Calls = make([]Call, 0, firstCalls)
	}
	r.Calls = append(r.Calls, Call{Offset: off, Attempt: attempt, Prefix: prefix, Suffix: nSuffix, Sampled: nSampled,
		Version: version, Segment: seg, Stop: finish == FinishStop, Selected: selected})
	r.Segment = seg
	r.CompactionPending = false
	if selected {
		r.CtxLen = prefix + nSuffix + nSampled
	}
	r.Events = appendEvent(r.Events, off)
	return nil
}

// A rollout's Calls and Events start with room for a typical episode
// (a dozen turns of a call, an env step and now and then a compaction):
// growing them from empty cost one allocation per doubling, twice per
// fold (the log keeps a staged and a durable state), on every model call.
const firstCalls, firstEvents = 16, 32

func appendEvent(evs []Offset, off Offset) []Offset {
	if evs == nil {
		evs = make([]Offset, 0, firstEvents)
	}
	return append(evs, off)
}
