package model

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

// Trainer state file: magic, version, step, parameter count, layout hash,
// both moments as little-endian float64, then SHA-256 of all of it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	stateMagic   = "LHADAMW\x00"
	stateVersion = 3 // 3: the HF tensor names and layout; 2: CRC32C trailer (1 had SHA-256)
)

func (t *Trainer) layoutHash() [32]byte {
	h := sha256.New()
	for _, s := range t.m.specs {
		fmt.Fprintf(h, "%s%v;", s.name, s.shape)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// SaveState writes the optimizer state (step and AdamW moments) exactly.
// With the weights (SaveSafetensors) it is everything needed to resume.
func (t *Trainer) SaveState(w io.Writer) error {
	// One buffer, one write: the state is a few MB of float64s, and
	// writing them 8 bytes at a time made checkpoints CPU-bound.
	lh := t.layoutHash()
	buf := make([]byte, 0, len(stateMagic)+4+8+8+len(lh)+16*len(t.mom)+4)
	buf = append(buf, stateMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(stateVersion))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(t.step))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(t.mom)))
	buf = append(buf, lh[:]...)
	for _, sl := range [][]float64{t.mom, t.vel} {
		for _, v := range sl {
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(v))
		}
	}
	// A CRC32C catches corruption as well as a hash here (checkpoints add
	// a SHA-256 per file in their manifest) at several times the speed.
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("model: save trainer state: %w", err)
	}
	return nil
}

// LoadState restores what SaveState wrote, for a trainer of the same
// architecture; the checksum must match.
func (t *Trainer) LoadState(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("model: load trainer state: %w", err)
	}
	n := len(t.mom)
	hdrLen := 8 + 4 + 8 + 8 + 32
	want := hdrLen + 16*n + 4
	if len(data) < hdrLen || string(data[:8]) != stateMagic {
		return errors.New("model: load trainer state: not a longhaul trainer state file (bad magic)")
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != stateVersion {
		return fmt.Errorf("model: load trainer state: version %d, want %d", v, stateVersion)
	}
	if got := binary.LittleEndian.Uint64(data[20:]); got != uint64(n) {
		return fmt.Errorf("model: load trainer state: %d parameters, model has %d", got, n)
	}
	lh := t.layoutHash()
	if !bytes.Equal(data[28:60], lh[:]) {
		return errors.New("model: load trainer state: saved for a different architecture")
	}
	if len(data) != want {
		return fmt.Errorf("model: load trainer state: %d bytes, want %d (truncated?)", len(data), want)
	}
	if crc32.Checksum(data[:want-4], castagnoli) != binary.LittleEndian.Uint32(data[want-4:]) {
		return errors.New("model: load trainer state: checksum mismatch (corrupt file)")
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
