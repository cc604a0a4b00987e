package llama

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

// Trainer state file: magic, version, step, parameter count, layout hash
// (tensor names and shapes), both AdamW moments as little-endian float64,
// then a CRC32C of all of it. With the weights (SaveDir) it is the whole
// training state: the trainer draws no random numbers.
const (
	stateMagic   = "LHLLAMA\x00"
	stateVersion = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (t *Trainer) layoutHash() [32]byte {
	h := sha256.New()
	for _, s := range t.m.specs {
		fmt.Fprintf(h, "%s%v;", s.name, s.shape)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// SaveState writes the step and the AdamW moments exactly.
func (t *Trainer) SaveState(w io.Writer) error {
	lh := t.layoutHash()
	buf := make([]byte, 0, len(stateMagic)+4+8+8+len(lh)+16*len(t.mom)+4)
	buf = append(buf, stateMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, stateVersion)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(t.step))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(t.mom)))
	buf = append(buf, lh[:]...)
	for _, sl := range [][]float64{t.mom, t.vel} {
		for _, v := range sl {
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(v))
		}
	}
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("llama: save trainer state: %w", err)
	}
	return nil
}

// LoadState restores what SaveState wrote for the same architecture.
func (t *Trainer) LoadState(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("llama: load trainer state: %w", err)
	}
	n := len(t.mom)
	hdrLen := 8 + 4 + 8 + 8 + 32
	want := hdrLen + 16*n + 4
	switch {
	case len(data) < hdrLen || string(data[:8]) != stateMagic:
		return errors.New("llama: load trainer state: not a llama trainer state file (bad magic)")
	case binary.LittleEndian.Uint32(data[8:]) != stateVersion:
		return fmt.Errorf("llama: load trainer state: version %d, want %d", binary.LittleEndian.Uint32(data[8:]), stateVersion)
	case binary.LittleEndian.Uint64(data[20:]) != uint64(n):
		return fmt.Errorf("llama: load trainer state: %d parameters, model has %d", binary.LittleEndian.Uint64(data[20:]), n)
	}
	lh := t.layoutHash()
	if !bytes.Equal(data[28:60], lh[:]) {
		return errors.New("llama: load trainer state: saved for a different architecture")
	}
	if len(data) != want {
		return fmt.Errorf("llama: load trainer state: %d bytes, want %d (truncated?)", len(data), want)
	}
	if crc32.Checksum(data[:want-4], castagnoli) != binary.LittleEndian.Uint32(data[want-4:]) {
		return errors.New("llama: load trainer state: checksum mismatch (corrupt file)")
	}
	t.step = int64(binary.LittleEndian.Uint64(data[12:]))
	off := hdrLen
	for _, sl := range [][]float64{t.mom, t.vel} {
		for i := range sl {
			sl[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[off:]))
			off += 8
		}
	}
	return nil
}
