package runlog

import (
	"errors"
	"fmt"
	"strings"
)

// Event encoding (one record payload):
//
//	[version u8 = 1][kind u8][fields in declaration order]
//
// Integers are varints (zig-zag for signed), float64 are 8 bytes LE, strings
// and byte slices are a uvarint length then the bytes, fixed arrays are raw.
// The encoding is a pure function of the event, so equal events encode to
// equal bytes. A new encoding of a kind gets a new version number; a decoder
// refuses versions it does not know rather than guessing.
//
// Token arrays of CallFinished are written in one of two modes, named by a
// byte: inline (4 bytes LE per token / logprob), used by EncodeEvent, or as
// references into the blob store, used by the log.

// encodingVersion is the event encoding this package writes; it reads
// oldestVersion and every version after it. 2 added
// PromptAdmitted.Replaces, AttemptStarted.Restart and GroupDropped; 3 added
// RolloutFailed.Cause.
const (
	encodingVersion = 3
	oldestVersion   = 2
)

// legacyDiverged is the text rollout.ErrDiverged had when failures carried
// no cause (version 2): a version 2 RolloutFailed whose reason holds it is
// read with CauseDiverged, so a run logged before version 3 resumes as it
// would have (its next attempt restarts the episode).
const legacyDiverged = "rollout: resume diverged from the log"

// Token modes of a CallFinished payload.
const (
	tokensInline = 0
	tokensBlobs  = 1
)

// ErrUnknownVersion is returned when a payload's encoding version is not one
// this build knows.
var ErrUnknownVersion = errors.New("runlog: unknown event encoding version")

// ErrUnknownKind is returned for an event kind this build does not know.
var ErrUnknownKind = errors.New("runlog: unknown event kind")

// ErrDecode wraps every malformed-payload error.
var ErrDecode = errors.New("runlog: malformed event")

// EncodeEvent appends the self-contained encoding of ev (tokens inline) to
// dst. It fails only for an event type this package does not know.
func EncodeEvent(dst []byte, ev Event) ([]byte, error) {
	return encodeEvent(dst, ev, nil)
}

// DecodeEvent decodes a payload written by EncodeEvent.
func DecodeEvent(b []byte) (Event, error) {
	ev, err := decodeEvent(b)
	if err != nil {
		return nil, err
	}
	if cr, ok := ev.(*callRecord); ok {
		if cr.mode != tokensInline {
			return nil, fmt.Errorf("%w: call tokens are blob references; read it through a Log", ErrDecode)
		}
		return cr.CallFinished, nil
	}
	return ev, nil
}

// callRecord is a decoded CallFinished whose token arrays may still be in
// the blob store. Apply needs only their lengths, so replay never reads
// blobs.
type callRecord struct {
	CallFinished
	mode              uint8
	suffix, sampled   blobRef // mode == tokensBlobs
	nSuffix, nSampled uint32
	nLogprobs         uint32
}

func (*callRecord) Kind() Kind { return KindCallFinished }

// putBlob stores data in the blob store and returns its reference.
type putBlob func(data []byte) (blobRef, error)

func encodeEvent(dst []byte, ev Event, put putBlob) ([]byte, error) {
	e := enc{b: dst}
	e.u8(encodingVersion)
	e.u8(uint8(ev.Kind()))
	switch v := ev.(type) {
	case RunStarted:
		e.b = append(e.b, v.ConfigDigest[:]...)
		e.uv(v.Seed)
		e.str(v.Mode)
	case ConfigChanged:
		e.b = append(e.b, v.Digest[:]...)
		e.uv(uint64(len(v.Changes)))
		for _, c := range v.Changes {
			e.str(c)
		}
	case PromptAdmitted:
		e.uv(uint64(v.Epoch))
		e.uv(v.Cursor)
		e.str(v.PromptID)
		e.uv(uint64(v.Group))
		e.uv(uint64(v.Size))
		e.sv(v.Step)
		e.uv(uint64(v.Replaces))
	case AttemptStarted:
		e.rollout(v.Rollout)
		e.uv(uint64(v.Attempt))
		e.uv(v.Seed)
		e.sv(v.Version)
		e.bool(v.Restart)
	case CallFinished:
		e.rollout(v.Rollout)
		e.uv(uint64(v.Attempt))
		e.uv(uint64(v.Call))
		e.uv(uint64(v.PromptPrefix))
		e.str(v.Finish)
		e.sv(v.Version)
		e.bool(v.Selected)
		e.str(v.Reject)
		if put == nil {
			e.u8(tokensInline)
			e.uv(uint64(len(v.PromptSuffix)))
			e.b = putTokens(e.b, v.PromptSuffix)
			e.uv(uint64(len(v.Sampled)))
			e.b = putTokens(e.b, v.Sampled)
			e.uv(uint64(len(v.Logprobs)))
			e.b = putFloats(e.b, v.Logprobs)
			break
		}
		// Sampled tokens and their logprobs share one blob: they are
		// always read together and always have equal lengths.
		e.u8(tokensBlobs)
		// The blobs are built in e.b's spare capacity and cut off again:
		// put copies them, so no buffer is allocated per event.
		n := len(e.b)
		tmp := putTokens(e.b, v.PromptSuffix)
		sr, err := put(tmp[n:])
		if err != nil {
			return dst, err
		}
		tmp = putFloats(putTokens(tmp[:n], v.Sampled), v.Logprobs)
		mr, err := put(tmp[n:])
		if err != nil {
			return dst, err
		}
		e.b = tmp[:n]
		e.uv(uint64(len(v.PromptSuffix)))
		e.uv(uint64(len(v.Sampled)))
		e.uv(uint64(len(v.Logprobs)))
		e.ref(sr)
		e.ref(mr)
	case EnvStep:
		e.rollout(v.Rollout)
		e.uv(uint64(v.Attempt))
		e.uv(uint64(v.Turn))
		e.str(v.Action)
		e.str(v.Observation)
		e.f64(v.Reward)
		e.bool(v.Done)
		e.raw(v.State)
	case Compaction:
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
	case RolloutSealed:
		e.rollout(v.Rollout)
		e.uv(uint64(v.Attempt))
		e.str(v.Outcome)
		e.f64(v.Reward)
		e.bool(v.Success)
	case RolloutFailed:
		e.rollout(v.Rollout)
		e.uv(uint64(v.Attempt))
		e.str(v.Class)
		e.str(v.Reason)
		e.u8(uint8(v.Cause))
	case GroupCommitted:
		e.uv(uint64(v.Group))
	case StepTrained:
		e.sv(v.Step)
		e.uv(uint64(len(v.Groups)))
		for _, g := range v.Groups {
			e.uv(uint64(g))
		}
		e.sv(v.Version)
	case CheckpointDurable:
		e.sv(v.Step)
		e.sv(v.Version)
		e.str(v.Path)
		e.b = append(e.b, v.ManifestDigest[:]...)
	case SnapshotWritten:
		e.uv(v.Offset)
		e.str(v.Path)
	case Rewound:
		e.sv(v.Step)
		e.sv(v.Version)
	case GroupDropped:
		e.uv(uint64(v.Group))
		e.str(v.Class)
		e.str(v.Reason)
	case GroupRequeued:
		e.uv(uint64(v.Group))
		e.sv(v.Step)
		e.str(v.Class)
		e.str(v.Reason)
	case RolloutRegenerated:
		e.rollout(v.Rollout)
		e.str(v.Reason)
	default:
		return dst, fmt.Errorf("%w: %T", ErrUnknownKind, ev)
	}
	return e.b, nil
}

func decodeEvent(b []byte) (Event, error) {
	d := dec{b: b}
	ver := d.u8()
	kind := Kind(d.u8())
	if d.err != nil {
		return nil, d.err
	}
	if ver < oldestVersion || ver > encodingVersion {
		return nil, fmt.Errorf("%w: %d", ErrUnknownVersion, ver)
	}
	var ev Event
	switch kind {
	case KindRunStarted:
		var v RunStarted
		d.fixed(v.ConfigDigest[:])
		v.Seed = d.uv()
		v.Mode = d.str()
		ev = v
	case KindPromptAdmitted:
		var v PromptAdmitted
		v.Epoch = d.u32()
		v.Cursor = d.uv()
		v.PromptID = d.str()
		v.Group = GroupID(d.uv())
		v.Size = d.u16()
		v.Step = d.sv()
		v.Replaces = GroupID(d.uv())
		ev = v
	case KindAttemptStarted:
		var v AttemptStarted
		v.Rollout = d.rollout()
		v.Attempt = d.u32()
		v.Seed = d.uv()
		v.Version = d.sv()
		v.Restart = d.bool()
		ev = v
	case KindCallFinished:
		cr := &callRecord{}
		v := &cr.CallFinished
		v.Rollout = d.rollout()
		v.Attempt = d.u32()
		v.Call = d.u32()
		v.PromptPrefix = d.u32()
		v.Finish = d.str()
		v.Version = d.sv()
		v.Selected = d.bool()
		v.Reject = d.str()
		cr.mode = d.u8()
		switch cr.mode {
		case tokensInline:
			v.PromptSuffix = getTokens(d.words())
			v.Sampled = getTokens(d.words())
			v.Logprobs = getFloats(d.words())
			cr.nSuffix, cr.nSampled, cr.nLogprobs = uint32(len(v.PromptSuffix)), uint32(len(v.Sampled)), uint32(len(v.Logprobs))
		case tokensBlobs:
			cr.nSuffix, cr.nSampled, cr.nLogprobs = d.u32(), d.u32(), d.u32()
			cr.suffix = d.ref()
			cr.sampled = d.ref()
			if d.err == nil && (uint64(cr.suffix.Len) != 4*uint64(cr.nSuffix) || uint64(cr.sampled.Len) != 4*(uint64(cr.nSampled)+uint64(cr.nLogprobs))) {
				d.fail("blob lengths disagree with token counts")
			}
		default:
			d.fail("unknown token mode %d", cr.mode)
		}
		ev = cr
	case KindEnvStep:
		var v EnvStep
		v.Rollout = d.rollout()
		v.Attempt = d.u32()
		v.Turn = d.u32()
		v.Action = d.str()
		v.Observation = d.str()
		v.Reward = d.f64()
		v.Done = d.bool()
		v.State = d.bytes()
		ev = v
	case KindCompaction:
		var v Compaction
		v.Rollout = d.rollout()
		v.Attempt = d.u32()
		v.Boundary = d.u32()
		v.AfterCall = d.u32()
		v.Policy = d.str()
		n := d.uv()
		if n > uint64(len(d.b)) {
			d.fail("lineage count %d beyond payload", n)
			n = 0
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			v.Lineage = append(v.Lineage, Lineage{Message: d.u32(), Op: LineageOp(d.u8())})
		}
		v.TokensBefore = d.u32()
		v.TokensAfter = d.u32()
		ev = v
	case KindRolloutSealed:
		var v RolloutSealed
		v.Rollout = d.rollout()
		v.Attempt = d.u32()
		v.Outcome = d.str()
		v.Reward = d.f64()
		v.Success = d.bool()
		ev = v
	case KindRolloutFailed:
		var v RolloutFailed
		v.Rollout = d.rollout()
		v.Attempt = d.u32()
		v.Class = d.str()
		v.Reason = d.str()
		if ver >= 3 {
			v.Cause = FailureCause(d.u8())
		} else if strings.Contains(v.Reason, legacyDiverged) {
			v.Cause = CauseDiverged
		}
		ev = v
	case KindGroupCommitted:
		ev = GroupCommitted{Group: GroupID(d.uv())}
	case KindStepTrained:
		var v StepTrained
		v.Step = d.sv()
		n := d.uv()
		if n > uint64(len(d.b)) {
			d.fail("group count %d beyond payload", n)
			n = 0
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			v.Groups = append(v.Groups, GroupID(d.uv()))
		}
		v.Version = d.sv()
		ev = v
	case KindCheckpointDurable:
		var v CheckpointDurable
		v.Step = d.sv()
		v.Version = d.sv()
		v.Path = d.str()
		d.fixed(v.ManifestDigest[:])
		ev = v
	case KindSnapshotWritten:
		var v SnapshotWritten
		v.Offset = d.uv()
		v.Path = d.str()
		ev = v
	case KindRewound:
		ev = Rewound{Step: d.sv(), Version: d.sv()}
	case KindGroupDropped:
		ev = GroupDropped{Group: GroupID(d.uv()), Class: d.str(), Reason: d.str()}
	case KindGroupRequeued:
		ev = GroupRequeued{Group: GroupID(d.uv()), Step: d.sv(), Class: d.str(), Reason: d.str()}
	case KindRolloutRegenerated:
		ev = RolloutRegenerated{Rollout: d.rollout(), Reason: d.str()}
	case KindConfigChanged:
		var v ConfigChanged
		d.fixed(v.Digest[:])
		n := d.uv()
		if n > uint64(len(d.b)) {
			d.fail("change count %d beyond payload", n)
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			v.Changes = append(v.Changes, d.str())
		}
		ev = v
	default:
		return nil, fmt.Errorf("%w: %d", ErrUnknownKind, kind)
	}
	if d.err != nil {
		return nil, fmt.Errorf("decode %v: %w", kind, d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("decode %v: %w: %d bytes left over", kind, ErrDecode, len(d.b))
	}
	return ev, nil
}

// words reads a uvarint count then that many 4-byte words.
func (d *dec) words() []byte {
	n := d.uv()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b))/4 {
		d.fail("word count %d beyond payload", n)
		return nil
	}
	p := d.b[:4*n]
	d.b = d.b[4*n:]
	return p
}

func (e *enc) ref(r blobRef) {
	e.b = append(e.b, r.Sum[:]...)
	e.uv(r.Pack)
	e.uv(r.Off)
	e.uv(uint64(r.Len))
}

func (d *dec) ref() blobRef {
	var r blobRef
	d.fixed(r.Sum[:])
	r.Pack = d.uv()
	r.Off = d.uv()
	r.Len = d.u32()
	return r
}

var kindNames = [...]string{
	KindRunStarted:         "RunStarted",
	KindPromptAdmitted:     "PromptAdmitted",
	KindAttemptStarted:     "AttemptStarted",
	KindCallFinished:       "CallFinished",
	KindEnvStep:            "EnvStep",
	KindCompaction:         "Compaction",
	KindRolloutSealed:      "RolloutSealed",
	KindRolloutFailed:      "RolloutFailed",
	KindGroupCommitted:     "GroupCommitted",
	KindStepTrained:        "StepTrained",
	KindCheckpointDurable:  "CheckpointDurable",
	KindSnapshotWritten:    "SnapshotWritten",
	KindRewound:            "Rewound",
	KindGroupDropped:       "GroupDropped",
	KindGroupRequeued:      "GroupRequeued",
	KindRolloutRegenerated: "RolloutRegenerated",
	KindConfigChanged:      "ConfigChanged",
}

// String returns the kind's type name, e.g. "CallFinished".
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// numKinds bounds the kind values this build knows (exclusive).
const numKinds = int(KindConfigChanged) + 1
