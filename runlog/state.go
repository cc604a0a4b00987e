package runlog

import (
	"errors"
	"fmt"
	"slices"
)

// Offset is a position in the run log: the byte offset of a record from the
// start of the first chunk. Offsets only grow and are never reused.
type Offset uint64

// Errors returned by Apply, each wrapped with the details of the event.
var (
	// ErrInvalidEvent is the parent of every Apply rejection.
	ErrInvalidEvent = errors.New("runlog: invalid event")
	// ErrStaleAttempt: the event names an attempt older than the
	// rollout's current one (the fence), so it is a late result.
	ErrStaleAttempt = fmt.Errorf("%w: stale attempt", ErrInvalidEvent)
	// ErrUnknownGroup / ErrUnknownRollout: the event names an id the log
	// never admitted.
	ErrUnknownGroup   = fmt.Errorf("%w: unknown group", ErrInvalidEvent)
	ErrUnknownRollout = fmt.Errorf("%w: unknown rollout", ErrInvalidEvent)
	// ErrCallOrder: a call index that is not the rollout's next one.
	ErrCallOrder = fmt.Errorf("%w: call out of order", ErrInvalidEvent)
	// ErrSealed: the rollout is already sealed.
	ErrSealed = fmt.Errorf("%w: rollout sealed", ErrInvalidEvent)
	// ErrGroupState: a group is not in the state the event requires
	// (committing one with unfinished members, training an uncommitted or
	// already trained one, ...).
	ErrGroupState = fmt.Errorf("%w: group state", ErrInvalidEvent)
)

// RolloutStatus is where a rollout stands.
type RolloutStatus uint8

// Rollout statuses.
const (
	StatusPending RolloutStatus = iota // admitted, no attempt yet
	StatusRunning                      // its current attempt is live
	StatusFailed                       // its current attempt failed; a retry may follow
	StatusSealed                       // finished with a reward
)

func (s RolloutStatus) String() string {
	switch s {
	case StatusPending:
		return "pending"
	case StatusRunning:
		return "running"
	case StatusFailed:
		return "failed"
	case StatusSealed:
		return "sealed"
	}
	return fmt.Sprintf("RolloutStatus(%d)", uint8(s))
}

// GroupStatus is where a group stands.
type GroupStatus uint8

// Group statuses.
const (
	GroupStatusOpen      GroupStatus = iota // members still running
	GroupStatusCommitted                    // may be trained
	GroupStatusTrained                      // a step trained on it
	GroupStatusDropped                      // a member used up its attempts: never trained
)

func (s GroupStatus) String() string {
	switch s {
	case GroupStatusOpen:
		return "open"
	case GroupStatusCommitted:
		return "committed"
	case GroupStatusTrained:
		return "trained"
	case GroupStatusDropped:
		return "dropped"
	}
	return fmt.Sprintf("GroupStatus(%d)", uint8(s))
}

// Call is what the state keeps of one CallFinished: lengths and positions,
// never the tokens (those stay in the blob store, reachable through the
// record at Offset).
type Call struct {
	Offset   Offset // the CallFinished record
	Attempt  uint32
	Prefix   uint32 // PromptPrefix
	Suffix   uint32 // len(PromptSuffix)
	Sampled  uint32 // len(Sampled)
	Version  int64
	Segment  uint32 // index of the segment (training row) the call belongs to
	Stop     bool   // Finish == FinishStop (else FinishLength)
	Selected bool
}

// Failure is the last failure of a rollout.
type Failure struct {
	Attempt uint32
	Class   string
	Reason  string
	Cause   FailureCause
}

// Rollout is one group member.
type Rollout struct {
	ID             RolloutID
	Status         RolloutStatus
	Attempt        uint32 // current attempt (0: none yet); older ones are fenced
	AttemptSeed    uint64
	AttemptVersion int64
	Calls          []Call
	// CtxLen is the length of the context the next call's prompt extends:
	// the prompt plus sample of the last selected call.
	CtxLen      uint32
	Segment     uint32 // segment index of the latest call
	Compactions uint32 // declared boundaries so far
	// CompactionPending is set by a Compaction and cleared by the next
	// call, which starts a new segment.
	CompactionPending bool
	EnvSteps          uint32
	EnvReward         float64 // sum of EnvStep rewards
	EnvDone           bool
	Failures          uint32 // failed attempts, over the run
	// InfraFailures and DataFailures are the failed attempts of the
	// current budget round, by class: what rollout_failure's attempt
	// budgets are checked against. They are folded from the log, so a
	// restart never hands a rollout a fresh budget; only a GroupRequeued
	// (a logged retry of the whole group) starts a new round.
	InfraFailures uint32
	DataFailures  uint32
	// Regenerate is set by RolloutRegenerated: the next attempt must
	// start the episode over.
	Regenerate bool
	// EpisodeStart is the index of the first call of the current episode:
	// calls before it belong to episodes a Restart abandoned (kept for
	// analysis, never trained).
	EpisodeStart uint32
	LastFailure  Failure
	Outcome      string
	Reward       float64
	Success      bool
	// Events are the offsets of every event of this rollout, in log
	// order: what a resumed rollout replays (Log.RolloutEvents).
	Events []Offset
}

// Group is the rollouts of one prompt.
type Group struct {
	ID       GroupID
	Seq      uint64 // admission order, from 0
	Epoch    uint32
	Cursor   uint64
	PromptID string
	Status   GroupStatus
	Step     int64 // the step that trained it, when Status == GroupStatusTrained
	ForStep  int64 // the step the group is scheduled to train in: PromptAdmitted.Step, moved by GroupRequeued
	// AdmittedFor is PromptAdmitted.Step: the step whose prompts this
	// group counts against, wherever a retry moved it.
	AdmittedFor int64
	Retries     uint32  // GroupRequeued events so far
	Replaces    GroupID // the dropped group it stands in for, or 0
	Members     []*Rollout
}

// TrainedStep is one StepTrained.
type TrainedStep struct {
	Step    int64
	Version int64
	Groups  []GroupID
}

// State is the run state folded from the log. Read it through Log.View;
// mutate it only with Apply.
type State struct {
	Started      bool
	Seed         uint64
	Mode         string
	ConfigDigest [32]byte
	Epoch        uint32 // data cursor: the epoch of the last admitted prompt
	NextCursor   uint64 // data cursor: the next position to admit in Epoch
	Step         int64
	Version      int64
	Groups       map[GroupID]*Group
	Order        []GroupID // admission order
	Trained      []TrainedStep
	Checkpoints  []CheckpointDurable
	LastSnapshot SnapshotWritten
	Applied      uint64           // events applied
	Counts       [numKinds]uint64 // events applied, by kind
	Damage       []LogDamaged     // damage found in sealed chunks, in log order

	// settled counts the leading groups of Order that are done with: each
	// trained or dropped, scheduled and admitted for a step already
	// trained. Nothing that happens to a step after Step involves them,
	// so the planner's per-step scans skip them (Unsettled) and stay
	// O(groups in flight) however long the run; only a rewind brings them
	// back. Derived, not encoded: Apply and snapshot loading keep it.
	settled int
}

// NewState returns the state of an empty log.
func NewState() *State { return &State{Groups: map[GroupID]*Group{}} }

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := *s
	c.Groups = make(map[GroupID]*Group, len(s.Groups))
	for id, g := range s.Groups {
		c.Groups[id] = g.clone()
	}
	c.Order = slices.Clone(s.Order)
	c.Trained = make([]TrainedStep, len(s.Trained))
	for i, t := range s.Trained {
		c.Trained[i] = TrainedStep{Step: t.Step, Version: t.Version, Groups: slices.Clone(t.Groups)}
	}
	c.Checkpoints = slices.Clone(s.Checkpoints)
	c.Damage = slices.Clone(s.Damage)
	return &c
}

func (g *Group) clone() *Group {
	c := *g
	c.Members = make([]*Rollout, len(g.Members))
	for i, r := range g.Members {
		rc := *r
		rc.Calls = slices.Clone(r.Calls)
		rc.Events = slices.Clone(r.Events)
		c.Members[i] = &rc
	}
	return &c
}

// Uncommitted returns the open groups in admission order.
func (s *State) Uncommitted() []GroupID { return s.groupsWith(GroupStatusOpen) }

// Committed returns the committed, not yet trained groups in admission order.
func (s *State) Committed() []GroupID { return s.groupsWith(GroupStatusCommitted) }

// TrainedGroups returns the trained groups in admission order.
func (s *State) TrainedGroups() []GroupID { return s.groupsWith(GroupStatusTrained) }

// Unsettled returns Order without its settled head: every group a step
// after Step, or a group open or committed, can involve, in admission
// order. The caller must not change it.
func (s *State) Unsettled() []GroupID { return s.Order[s.settled:] }

// settle advances settled over the groups now done with.
func (s *State) settle() {
	for s.settled < len(s.Order) {
		g := s.Groups[s.Order[s.settled]]
		if (g.Status != GroupStatusTrained && g.Status != GroupStatusDropped) || g.ForStep > s.Step || g.AdmittedFor > s.Step {
			return
		}
		s.settled++
	}
}

func (s *State) groupsWith(st GroupStatus) []GroupID {
	var out []GroupID
	order := s.Order
	if st == GroupStatusOpen || st == GroupStatusCommitted {
		order = s.Unsettled()
	}
	for _, id := range order {
		if s.Groups[id].Status == st {
			out = append(out, id)
		}
	}
	return out
}

// Rewards returns the rewards of a group's members (0 for members that are
// not sealed) and whether each is sealed.
func (s *State) Rewards(id GroupID) (rewards []float64, sealed []bool, err error) {
	g := s.Groups[id]
	if g == nil {
		return nil, nil, fmt.Errorf("%w %s", ErrUnknownGroup, id)
	}
	for _, r := range g.Members {
		rewards = append(rewards, r.Reward)
		sealed = append(sealed, r.Status == StatusSealed)
	}
	return rewards, sealed, nil
}

// Sealed reports whether the rollout exists and is sealed.
func (s *State) Sealed(id RolloutID) bool {
	r := s.Rollout(id)
	return r != nil && r.Status == StatusSealed
}

// TrainedAfter returns the groups trained by steps after step, in
// admission order: on resume from a checkpoint at step, these go back to
// "committed, not trained" (their data is kept until a checkpoint covers
// them).
func (s *State) TrainedAfter(step int64) []GroupID {
	var out []GroupID
	for _, id := range s.Order {
		if g := s.Groups[id]; g.Status == GroupStatusTrained && g.Step > step {
			out = append(out, id)
		}
	}
	return out
}
