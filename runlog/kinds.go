package runlog

import (
	"fmt"
	"strings"
)

// This file is the one table of event kinds. Adding an event kind is:
//
//  1. its struct and Kind method in events.go (a new Kind constant at the end),
//  2. its row in kinds below, with its encode and decode methods here
//     (fields in declaration order),
//  3. its case in apply (apply.go).
//
// TestEveryKindRoundTripsAndApplies names the kinds that miss any of them.

// body is what every event is to the codec: it writes its own fields.
type body interface {
	Event
	encode(e *enc) error
}

// decodable is a pointer to an event type that reads its own fields.
type decodable[T any] interface {
	*T
	decode(d *dec)
}

// kindRow is one row of the table.
type kindRow struct {
	name   string
	decode func(d *dec) Event
}

// row builds the row of an event type whose decoded value is the struct.
func row[T Event, P decodable[T]](name string) kindRow {
	return kindRow{name: name, decode: func(d *dec) Event {
		var v T
		P(&v).decode(d)
		return v
	}}
}

// kinds is indexed by Kind; the zero Kind is not an event.
var kinds = [...]kindRow{
	KindRunStarted:         row[RunStarted]("RunStarted"),
	KindPromptAdmitted:     row[PromptAdmitted]("PromptAdmitted"),
	KindAttemptStarted:     row[AttemptStarted]("AttemptStarted"),
	KindCallFinished:       {name: "CallFinished", decode: decodeCall},
	KindEnvStep:            row[EnvStep]("EnvStep"),
	KindCompaction:         row[Compaction]("Compaction"),
	KindRolloutSealed:      row[RolloutSealed]("RolloutSealed"),
	KindRolloutFailed:      row[RolloutFailed]("RolloutFailed"),
	KindGroupCommitted:     row[GroupCommitted]("GroupCommitted"),
	KindStepTrained:        row[StepTrained]("StepTrained"),
	KindCheckpointDurable:  row[CheckpointDurable]("CheckpointDurable"),
	KindSnapshotWritten:    row[SnapshotWritten]("SnapshotWritten"),
	KindRewound:            row[Rewound]("Rewound"),
	KindGroupDropped:       row[GroupDropped]("GroupDropped"),
	KindGroupRequeued:      row[GroupRequeued]("GroupRequeued"),
	KindRolloutRegenerated: row[RolloutRegenerated]("RolloutRegenerated"),
	KindConfigChanged:      row[ConfigChanged]("ConfigChanged"),
	KindLogDamaged:         row[LogDamaged]("LogDamaged"),
}

// numKinds bounds the kind values this build knows (exclusive).
const numKinds = len(kinds)

// known reports whether k has a row.
func (k Kind) known() bool { return int(k) < numKinds && kinds[k].decode != nil }

// String returns the kind's type name, e.g. "CallFinished".
func (k Kind) String() string {
	if k.known() {
		return kinds[k].name
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

func (v RunStarted) encode(e *enc) error {
	e.b = append(e.b, v.ConfigDigest[:]...)
	e.uv(v.Seed)
	e.str(v.Mode)
	return nil
}

func (v *RunStarted) decode(d *dec) {
	d.fixed(v.ConfigDigest[:])
	v.Seed = d.uv()
	v.Mode = d.str()
}

func (v ConfigChanged) encode(e *enc) error {
	e.b = append(e.b, v.Digest[:]...)
	e.uv(uint64(len(v.Changes)))
	for _, c := range v.Changes {
		e.str(c)
	}
	return nil
}

func (v *ConfigChanged) decode(d *dec) {
	d.fixed(v.Digest[:])
	for n := d.count(); n > 0 && d.err == nil; n-- {
		v.Changes = append(v.Changes, d.str())
	}
}

func (v PromptAdmitted) encode(e *enc) error {
	e.uv(uint64(v.Epoch))
	e.uv(v.Cursor)
	e.str(v.PromptID)
	e.uv(uint64(v.Group))
	e.uv(uint64(v.Size))
	e.sv(v.Step)
	e.uv(uint64(v.Replaces))
	return nil
}

func (v *PromptAdmitted) decode(d *dec) {
	v.Epoch = d.u32()
	v.Cursor = d.uv()
	v.PromptID = d.str()
	v.Group = GroupID(d.uv())
	v.Size = d.u16()
	v.Step = d.sv()
	v.Replaces = GroupID(d.uv())
}

func (v AttemptStarted) encode(e *enc) error {
	e.rollout(v.Rollout)
	e.uv(uint64(v.Attempt))
	e.uv(v.Seed)
	e.sv(v.Version)
	e.bool(v.Restart)
	return nil
}

func (v *AttemptStarted) decode(d *dec) {
	v.Rollout = d.rollout()
	v.Attempt = d.u32()
	v.Seed = d.uv()
	v.Version = d.sv()
	v.Restart = d.bool()
}

func (v EnvStep) encode(e *enc) error {
	e.rollout(v.Rollout)
	e.uv(uint64(v.Attempt))
	e.uv(uint64(v.Turn))
	e.str(v.Action)
	e.str(v.Observation)
	e.f64(v.Reward)
	e.bool(v.Done)
	e.raw(v.State)
	return nil
}

func (v *EnvStep) decode(d *dec) {
	v.Rollout = d.rollout()
	v.Attempt = d.u32()
	v.Turn = d.u32()
	v.Action = d.str()
	v.Observation = d.str()
	v.Reward = d.f64()
	v.Done = d.bool()
	v.State = d.bytes()
}

func (v Compaction) encode(e *enc) error {
	e.rollout(v.Rollout)
	e.uv(uint64(v.Attempt))
	e.uv(uint64(v.Boundary))
	e.uv(uint64(v.AfterCall))
	e.str(v.Policy)
	e.uv(uint64(len(v.Lineage)))
	for _, l := range v.Lineage {
		e.uv(uint64(l.Message))
		e.u8(uint8(l.Op))
	}
	e.uv(uint64(v.TokensBefore))
	e.uv(uint64(v.TokensAfter))
	return nil
}

func (v *Compaction) decode(d *dec) {
	v.Rollout = d.rollout()
	v.Attempt = d.u32()
	v.Boundary = d.u32()
	v.AfterCall = d.u32()
	v.Policy = d.str()
	for n := d.count(); n > 0 && d.err == nil; n-- {
		v.Lineage = append(v.Lineage, Lineage{Message: d.u32(), Op: LineageOp(d.u8())})
	}
	v.TokensBefore = d.u32()
	v.TokensAfter = d.u32()
}

func (v RolloutSealed) encode(e *enc) error {
	e.rollout(v.Rollout)
	e.uv(uint64(v.Attempt))
	e.str(v.Outcome)
	e.f64(v.Reward)
	e.bool(v.Success)
	return nil
}

func (v *RolloutSealed) decode(d *dec) {
	v.Rollout = d.rollout()
	v.Attempt = d.u32()
	v.Outcome = d.str()
	v.Reward = d.f64()
	v.Success = d.bool()
}

func (v RolloutFailed) encode(e *enc) error {
	e.rollout(v.Rollout)
	e.uv(uint64(v.Attempt))
	e.str(v.Class)
	e.str(v.Reason)
	e.u8(uint8(v.Cause))
	return nil
}

// legacyDiverged is the text rollout.ErrDiverged had when failures carried
// no cause (version 2): a version 2 RolloutFailed whose reason holds it is
// read with CauseDiverged, so a run logged before version 3 resumes as it
// would have (its next attempt restarts the episode).
const legacyDiverged = "rollout: resume diverged from the log"

func (v *RolloutFailed) decode(d *dec) {
	v.Rollout = d.rollout()
	v.Attempt = d.u32()
	v.Class = d.str()
	v.Reason = d.str()
	switch {
	case d.ver >= 3:
		v.Cause = FailureCause(d.u8())
	case strings.Contains(v.Reason, legacyDiverged):
		v.Cause = CauseDiverged
	}
}

func (v GroupCommitted) encode(e *enc) error {
	e.uv(uint64(v.Group))
	return nil
}

func (v *GroupCommitted) decode(d *dec) { v.Group = GroupID(d.uv()) }

func (v StepTrained) encode(e *enc) error {
	e.sv(v.Step)
	e.uv(uint64(len(v.Groups)))
	for _, g := range v.Groups {
		e.uv(uint64(g))
	}
	e.sv(v.Version)
	return nil
}

func (v *StepTrained) decode(d *dec) {
	v.Step = d.sv()
	for n := d.count(); n > 0 && d.err == nil; n-- {
		v.Groups = append(v.Groups, GroupID(d.uv()))
	}
	v.Version = d.sv()
}

func (v CheckpointDurable) encode(e *enc) error {
	e.sv(v.Step)
	e.sv(v.Version)
	e.str(v.Path)
	e.b = append(e.b, v.ManifestDigest[:]...)
	return nil
}

func (v *CheckpointDurable) decode(d *dec) {
	v.Step = d.sv()
	v.Version = d.sv()
	v.Path = d.str()
	d.fixed(v.ManifestDigest[:])
}

func (v SnapshotWritten) encode(e *enc) error {
	e.uv(v.Offset)
	e.str(v.Path)
	return nil
}

func (v *SnapshotWritten) decode(d *dec) {
	v.Offset = d.uv()
	v.Path = d.str()
}

func (v Rewound) encode(e *enc) error {
	e.sv(v.Step)
	e.sv(v.Version)
	return nil
}

func (v *Rewound) decode(d *dec) {
	v.Step = d.sv()
	v.Version = d.sv()
}

func (v GroupDropped) encode(e *enc) error {
	e.uv(uint64(v.Group))
	e.str(v.Class)
	e.str(v.Reason)
	return nil
}

func (v *GroupDropped) decode(d *dec) {
	v.Group = GroupID(d.uv())
	v.Class = d.str()
	v.Reason = d.str()
}

func (v GroupRequeued) encode(e *enc) error {
	e.uv(uint64(v.Group))
	e.sv(v.Step)
	e.str(v.Class)
	e.str(v.Reason)
	return nil
}

func (v *GroupRequeued) decode(d *dec) {
	v.Group = GroupID(d.uv())
	v.Step = d.sv()
	v.Class = d.str()
	v.Reason = d.str()
}

func (v RolloutRegenerated) encode(e *enc) error {
	e.rollout(v.Rollout)
	e.str(v.Reason)
	return nil
}

func (v *RolloutRegenerated) decode(d *dec) {
	v.Rollout = d.rollout()
	v.Reason = d.str()
}

func (v LogDamaged) encode(e *enc) error {
	e.str(v.File)
	e.uv(v.Offset)
	e.str(v.Reason)
	return nil
}

func (v *LogDamaged) decode(d *dec) {
	v.File = d.str()
	v.Offset = d.uv()
	v.Reason = d.str()
}
