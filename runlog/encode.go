package runlog

import (
	"errors"
	"fmt"
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
// oldestVersion and every version after it (dec.ver says which). 2 added
// PromptAdmitted.Replaces, AttemptStarted.Restart and GroupDropped; 3
// added RolloutFailed.Cause.
const (
	encodingVersion = 3
	oldestVersion   = 2
)

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
	v, ok := ev.(body)
	if !ok || !ev.Kind().known() {
		return dst, fmt.Errorf("%w: %T", ErrUnknownKind, ev)
	}
	e := enc{b: dst, put: put}
	e.u8(encodingVersion)
	e.u8(uint8(ev.Kind()))
	if err := v.encode(&e); err != nil {
		return dst, err
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
	d.ver = ver
	if !kind.known() {
		return nil, fmt.Errorf("%w: %d", ErrUnknownKind, kind)
	}
	ev := kinds[kind].decode(&d)
	if d.err != nil {
		return nil, fmt.Errorf("decode %v: %w", kind, d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("decode %v: %w: %d bytes left over", kind, ErrDecode, len(d.b))
	}
	return ev, nil
}

// encode writes a call's fields, then its token arrays: inline when the
// encoder has no blob store (EncodeEvent), else as blob references.
func (v CallFinished) encode(e *enc) error {
	e.rollout(v.Rollout)
	e.uv(uint64(v.Attempt))
	e.uv(uint64(v.Call))
	e.uv(uint64(v.PromptPrefix))
	e.str(v.Finish)
	e.sv(v.Version)
	e.bool(v.Selected)
	e.str(v.Reject)
	if e.put == nil {
		e.u8(tokensInline)
		e.uv(uint64(len(v.PromptSuffix)))
		e.b = putTokens(e.b, v.PromptSuffix)
		e.uv(uint64(len(v.Sampled)))
		e.b = putTokens(e.b, v.Sampled)
		e.uv(uint64(len(v.Logprobs)))
		e.b = putFloats(e.b, v.Logprobs)
		return nil
	}
	// Sampled tokens and their logprobs share one blob: they are
	// always read together and always have equal lengths.
	e.u8(tokensBlobs)
	// The blobs are built in e.b's spare capacity and cut off again:
	// put copies them, so no buffer is allocated per event.
	n := len(e.b)
	tmp := putTokens(e.b, v.PromptSuffix)
	sr, err := e.put(tmp[n:])
	if err != nil {
		return err
	}
	tmp = putFloats(putTokens(tmp[:n], v.Sampled), v.Logprobs)
	mr, err := e.put(tmp[n:])
	if err != nil {
		return err
	}
	e.b = tmp[:n]
	e.uv(uint64(len(v.PromptSuffix)))
	e.uv(uint64(len(v.Sampled)))
	e.uv(uint64(len(v.Logprobs)))
	e.ref(sr)
	e.ref(mr)
	return nil
}

// decodeCall reads a call as a callRecord, its tokens inline or still in
// the blob store.
func decodeCall(d *dec) Event {
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
	return cr
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
