package runlog

// This file is the event schema: the contract between the run log and every
// package that records facts (controller, rollout, train). Field meanings are
// documented here; each kind's encoding is its row in kinds.go (adding a
// kind: its struct here, its row and codec there, its case in apply.go).

import "strconv"

// Kind names an event type. Values are part of the on-disk format: append
// new kinds at the end, never renumber.
type Kind uint8

// Event kinds.
const (
	KindRunStarted Kind = 1 + iota
	KindPromptAdmitted
	KindAttemptStarted
	KindCallFinished
	KindEnvStep
	KindCompaction
	KindRolloutSealed
	KindRolloutFailed
	KindGroupCommitted
	KindStepTrained
	KindCheckpointDurable
	KindSnapshotWritten
	KindRewound
	KindGroupDropped
	KindGroupRequeued
	KindRolloutRegenerated
	KindConfigChanged
	KindLogDamaged
)

// GroupID names a prompt group. It is derived from (run seed, epoch, cursor)
// by NewGroupID, never from the clock or a random source.
type GroupID uint64

// RolloutID names one member of a group.
type RolloutID struct {
	Group  GroupID
	Member uint16
}

// Event is one fact appended to the run log.
type Event interface{ Kind() Kind }

// RunStarted is the first event of a run.
type RunStarted struct {
	ConfigDigest [32]byte // SHA-256 of the canonical config
	Seed         uint64
	Mode         string // "deterministic" or "throughput"
}

// ConfigChanged records a resume with a config that differs from the run's
// in keys the user allowed (--allow-config-change). From here on Digest is
// the run's config digest; Changes lists "key: old -> new", sorted by key.
type ConfigChanged struct {
	Digest  [32]byte
	Changes []string
}

// PromptAdmitted records that the data cursor handed out one prompt; the
// group of its rollouts starts to exist here.
type PromptAdmitted struct {
	Epoch    uint32
	Cursor   uint64 // position in the epoch's shuffled order, 0-based
	PromptID string
	Group    GroupID
	Size     uint16 // rollouts in the group (G)
	Step     int64  // the training step the schedule assigned this group to
	// Replaces is the dropped group this spare prompt stands in for
	// (rollout_failure.on_dropped_prompt: replace); 0 for none.
	Replaces GroupID
}

// AttemptStarted opens a try at a rollout. Attempt numbers start at 1 and
// only grow: an attempt fences every older one.
type AttemptStarted struct {
	Rollout RolloutID
	Attempt uint32
	Seed    uint64 // the attempt's sampling seed
	Version int64  // policy version that will generate its calls
	// Restart starts the episode over (a fresh environment and context)
	// instead of continuing from the last logged call: the environment
	// could not be restored or replayed. The calls before it stay in the
	// log for analysis and are never trained; call indices keep counting.
	Restart bool
}

// Finish reasons of a call.
const (
	FinishStop   = "stop"   // a stop token was sampled
	FinishLength = "length" // max new tokens reached
)

// CallFinished is the evidence of one model call.
//
// The prompt is stored as a delta on the rollout's previous context (the
// previous call's prompt followed by its sampled tokens): the first
// PromptPrefix tokens of this prompt equal that context's first PromptPrefix
// tokens, and PromptSuffix follows them. A call whose prompt extends the
// previous context has PromptPrefix == len(previous context); a rewrite
// (first call, or after a compaction) has PromptPrefix == 0.
type CallFinished struct {
	Rollout      RolloutID
	Attempt      uint32
	Call         uint32 // index of the call within the rollout, from 0, over all attempts
	PromptPrefix uint32
	PromptSuffix []int32
	Sampled      []int32
	Logprobs     []float32 // one per sampled token
	Finish       string
	Version      int64
	// Selected is false for a sample the agent's validator rejected; such a
	// call is kept for analysis and never trained, and the previous context
	// for the next call stays what it was before it.
	Selected bool
	Reject   string // why it was rejected, when !Selected
}

// EnvStep records one environment transition, after the agent's action.
type EnvStep struct {
	Rollout     RolloutID
	Attempt     uint32
	Turn        uint32
	Action      string
	Observation string
	Reward      float64
	Done        bool
	// State is the environment's snapshot after the step, when it supports
	// snapshot/restore; empty otherwise.
	State []byte
}

// LineageOp says what a compaction did to one message.
type LineageOp uint8

// Lineage operations.
const (
	OpKept LineageOp = 1 + iota
	OpDropped
	OpReplaced   // e.g. an old tool output replaced by a marker
	OpSummarized // folded into a summary message
)

// Lineage is the fate of one message of the pre-compaction context.
type Lineage struct {
	Message uint32 // index in the pre-compaction message list
	Op      LineageOp
}

// Compaction declares a boundary: the rollout's context was rewritten by a
// policy, so the next call's prompt may break the token prefix.
type Compaction struct {
	Rollout      RolloutID
	Attempt      uint32
	Boundary     uint32 // 0-based count of compactions in the rollout
	AfterCall    uint32 // the boundary lies between call AfterCall and AfterCall+1
	Policy       string
	Lineage      []Lineage
	TokensBefore uint32
	TokensAfter  uint32
}

// Outcomes of a sealed rollout.
const (
	OutcomeCompleted = "completed"
	OutcomeMaxTurns  = "max_turns"
	OutcomeMaxTokens = "max_tokens"
)

// RolloutSealed ends a rollout with its reward.
type RolloutSealed struct {
	Rollout RolloutID
	Attempt uint32
	Outcome string
	Reward  float64
	Success bool
}

// RolloutFailed ends an attempt with a typed failure: its class
// (failure.Infra or failure.Data), the cause where the controller acts on
// more than the class, and the error's text for people.
type RolloutFailed struct {
	Rollout RolloutID
	Attempt uint32
	Class   string
	Reason  string
	Cause   FailureCause // added in encoding version 3
}

// FailureCause is the typed fact a RolloutFailed carries beyond its class,
// so that no decision reads the reason's text.
type FailureCause uint8

// Failure causes. Values are part of the on-disk format.
const (
	// CauseOther: nothing beyond the class.
	CauseOther FailureCause = iota
	// CauseDiverged: the environment could neither restore its snapshot nor
	// replay the logged actions identically (rollout.ErrDiverged); the next
	// attempt starts the episode over.
	CauseDiverged
	// CauseCallTimeout: a model call ran past rollout_failure.call_timeout_s.
	CauseCallTimeout
	// CauseRolloutTimeout: the attempt ran past rollout_failure.rollout_timeout_s.
	CauseRolloutTimeout
)

var causeNames = [...]string{CauseOther: "other", CauseDiverged: "diverged", CauseCallTimeout: "call_timeout",
	CauseRolloutTimeout: "rollout_timeout"}

func (c FailureCause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "cause(" + strconv.Itoa(int(c)) + ")"
}

// GroupCommitted says every member of the group is sealed (or failed for
// good) and the group may be trained.
type GroupCommitted struct {
	Group GroupID
}

// StepTrained records one optimizer step over committed groups.
type StepTrained struct {
	Step    int64 // 1-based
	Groups  []GroupID
	Version int64 // the version this step published
}

// CheckpointDurable records a trainer checkpoint that is complete on disk.
type CheckpointDurable struct {
	Step           int64
	Version        int64
	Path           string // relative to the run directory
	ManifestDigest [32]byte
}

// SnapshotWritten records a run-state snapshot covering the log up to
// Offset (exclusive).
type SnapshotWritten struct {
	Offset uint64
	Path   string
}

// GroupDropped records that a group will not be trained: a member used up
// its attempt budget. Its step shrinks, or a spare prompt replaces it.
type GroupDropped struct {
	Group  GroupID
	Class  string // the failure class of the exhausted member's last failure
	Reason string
}

// GroupRequeued records that a group whose member used up its attempts is
// retried later instead of dropped (rollout_failure.on_dropped_prompt:
// retry): the group stays open and moves to step Step; its sealed members
// keep their calls, and its failed members get a fresh attempt budget and
// resume from their last good call.
type GroupRequeued struct {
	Group  GroupID
	Step   int64 // the step the group is scheduled for now; later than its current one
	Class  string
	Reason string
}

// RolloutRegenerated records that a sealed (or failed) member of an open group is
// generated again from the start as a new attempt (throughput mode: its
// calls are older than run.max_lag allows for the step it now trains in).
// Its next attempt must be a Restart; its old calls are never trained.
type RolloutRegenerated struct {
	Rollout RolloutID
	Reason  string
}

// LogDamaged records damage found in a sealed chunk of the log or in its
// pack, where no replay reads (docs/runlog.md, "Sealed chunks"): the run
// goes on from its snapshot, and the fact stays in the log for inspect.
type LogDamaged struct {
	File   string // relative to the run directory, e.g. runlog/00000000000000000000.seg
	Offset uint64 // log offset of the first bad record (chunk file) or byte of the bad blob (pack)
	Reason string // what was found, and what the run still needs of the damaged bytes
}

// Rewound records a resume from a checkpoint older than the log's last
// trained step: steps after Step are undone, their groups go back to
// committed-not-trained, and the trainer stands at Step and Version again.
type Rewound struct {
	Step    int64
	Version int64
}

func (Rewound) Kind() Kind       { return KindRewound }
func (GroupDropped) Kind() Kind  { return KindGroupDropped }
func (GroupRequeued) Kind() Kind { return KindGroupRequeued }
func (RolloutRegenerated) Kind() Kind {
	return KindRolloutRegenerated
}
func (ConfigChanged) Kind() Kind     { return KindConfigChanged }
func (LogDamaged) Kind() Kind        { return KindLogDamaged }
func (RunStarted) Kind() Kind        { return KindRunStarted }
func (PromptAdmitted) Kind() Kind    { return KindPromptAdmitted }
func (AttemptStarted) Kind() Kind    { return KindAttemptStarted }
func (CallFinished) Kind() Kind      { return KindCallFinished }
func (EnvStep) Kind() Kind           { return KindEnvStep }
func (Compaction) Kind() Kind        { return KindCompaction }
func (RolloutSealed) Kind() Kind     { return KindRolloutSealed }
func (RolloutFailed) Kind() Kind     { return KindRolloutFailed }
func (GroupCommitted) Kind() Kind    { return KindGroupCommitted }
func (StepTrained) Kind() Kind       { return KindStepTrained }
func (CheckpointDurable) Kind() Kind { return KindCheckpointDurable }
func (SnapshotWritten) Kind() Kind   { return KindSnapshotWritten }
