package runlog

// This file holds the encoding's primitives: a varint writer, a
// sticky-error reader, and token and logprob arrays as little-endian words.

import (
	"encoding/binary"
	"fmt"
	"math"
)

// enc appends an event's encoding to b; put, when set, stores a call's
// token arrays in the blob store (the log's encoding).
type enc struct {
	b   []byte
	put putBlob
}

func (e *enc) u8(v uint8)    { e.b = append(e.b, v) }
func (e *enc) uv(v uint64)   { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) sv(v int64)    { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) f64(v float64) { e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v)) }
func (e *enc) str(s string)  { e.uv(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) raw(p []byte)  { e.uv(uint64(len(p))); e.b = append(e.b, p...) }
func (e *enc) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// dec is a sticky-error decoder: check err once at the end.
type dec struct {
	b   []byte
	err error
	ver uint8 // the payload's encoding version (decodeEvent)
}

func (d *dec) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrDecode}, a...)...)
	}
}

func (d *dec) u8() uint8 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("short byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) uv() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) u32() uint32 {
	v := d.uv()
	if v > math.MaxUint32 {
		d.fail("value %d overflows uint32", v)
	}
	return uint32(v)
}

func (d *dec) u16() uint16 {
	v := d.uv()
	if v > math.MaxUint16 {
		d.fail("value %d overflows uint16", v)
	}
	return uint16(v)
}

func (d *dec) sv() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) f64() float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("short float64")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

func (d *dec) bytes() []byte {
	n := d.uv()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length %d beyond payload", n)
		return nil
	}
	if n == 0 {
		return nil
	}
	p := make([]byte, n)
	copy(p, d.b[:n])
	d.b = d.b[n:]
	return p
}

func (d *dec) str() string {
	n := d.uv()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("length %d beyond payload", n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *dec) bool() bool {
	switch d.u8() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad bool")
	return false
}

func (d *dec) fixed(p []byte) {
	if d.err != nil {
		return
	}
	if len(d.b) < len(p) {
		d.fail("short fixed field")
		return
	}
	copy(p, d.b)
	d.b = d.b[len(p):]
}

func (d *dec) rollout() RolloutID {
	return RolloutID{Group: GroupID(d.uv()), Member: d.u16()}
}

func (e *enc) rollout(r RolloutID) { e.uv(uint64(r.Group)); e.uv(uint64(r.Member)) }

// putTokens appends tokens as 4-byte LE words.
func putTokens(b []byte, t []int32) []byte {
	for _, v := range t {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

func putFloats(b []byte, f []float32) []byte {
	for _, v := range f {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func getTokens(b []byte) []int32 {
	if len(b) == 0 {
		return nil
	}
	t := make([]int32, len(b)/4)
	for i := range t {
		t[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return t
}

func getFloats(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}
