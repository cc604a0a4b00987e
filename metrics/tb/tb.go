// Package tb writes TensorBoard event files natively: TFRecord framing
// (length, masked CRC32C of the length, data, masked CRC32C of the data)
// around Event protobufs carrying scalar summaries.
//
// A run directory has one event file, tb/events.out.tfevents.longhaul. Like
// metrics.jsonl it follows the run across crashes and resumes: on open, a
// torn or corrupt tail is cut back to the last whole record, and an event
// for a step at or before the last one written (a rewound step) first cuts
// that step's events and every later one, so TensorBoard shows one point
// per step.
package tb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/longhaul-rl/longhaul/store"
)

// FileName is the event file's name inside the tb directory (TensorBoard
// picks up any file whose name contains "tfevents").
const FileName = "events.out.tfevents.longhaul"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC32C.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// frame wraps data as one TFRecord.
func frame(data []byte) []byte {
	out := make([]byte, 12, 16+len(data))
	binary.LittleEndian.PutUint64(out, uint64(len(data)))
	binary.LittleEndian.PutUint32(out[8:], maskedCRC(out[:8]))
	out = append(out, data...)
	return binary.LittleEndian.AppendUint32(out, maskedCRC(data))
}

// Writer appends scalar events to a run's event file.
type Writer struct {
	d    descriptors
	fs   store.FS
	path string
	f    store.File // opened for appending
	end  int64
	recs []recPos // summary records in the file, in order
	now  func() time.Time
	// Repaired is how many bytes of torn or corrupt tail Open cut.
	Repaired int64
}

type recPos struct {
	step int64
	off  int64
}

// Open opens (or creates) dir/FileName. now is the wall clock written into
// events (nil: time.Now).
func Open(dir string, now func() time.Time) (*Writer, error) { return OpenFS(store.OS, dir, now) }

// OpenFS is Open through the storage seam fs.
func OpenFS(fs store.FS, dir string, now func() time.Time) (*Writer, error) {
	if now == nil {
		now = time.Now
	}
	d, err := buildDescriptors()
	if err != nil {
		return nil, err
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tb: %w", err)
	}
	path := filepath.Join(dir, FileName)
	w := &Writer{d: d, fs: fs, path: path, now: now}
	if err := w.scan(); err != nil {
		return nil, fmt.Errorf("tb: %s: %w", path, err)
	}
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tb: %w", err)
	}
	w.f = f
	if w.end == 0 {
		b, err := d.fileVersion(w.wall())
		if err == nil {
			err = w.append(b)
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return w, nil
}

func (w *Writer) wall() float64 { return float64(w.now().UnixMicro()) / 1e6 }

// scan walks the records, remembering where each step's summary starts,
// and cuts the file after the last whole, checksummed, decodable record.
func (w *Writer) scan() error {
	b, err := store.ReadFile(w.fs, w.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	off := w.walk(b)
	w.end = off
	if cut := int64(len(b)) - off; cut > 0 {
		w.Repaired = cut
		return w.fs.Truncate(w.path, off)
	}
	return nil
}

// walk records the summary records of b and returns the end of the last
// whole one.
func (w *Writer) walk(b []byte) int64 {
	var off int64
	for {
		rest := b[off:]
		if len(rest) < 12 || binary.LittleEndian.Uint32(rest[8:]) != maskedCRC(rest[:8]) {
			break
		}
		n := binary.LittleEndian.Uint64(rest)
		if n > uint64(len(rest)) || uint64(len(rest))-n < 16 {
			break
		}
		data := rest[12 : 12+n]
		if binary.LittleEndian.Uint32(rest[12+n:]) != maskedCRC(data) {
			break
		}
		step, isSummary, err := w.d.step(data)
		if err != nil {
			break
		}
		if isSummary {
			w.recs = append(w.recs, recPos{step, off})
		}
		off += int64(16 + n)
	}
	return off
}

func (w *Writer) append(data []byte) error {
	rec := frame(data)
	if _, err := w.f.Write(rec); err != nil { // O_APPEND: at w.end
		return fmt.Errorf("tb: %w", err)
	}
	w.end += int64(len(rec))
	return nil
}

// Write appends one event with vals at step, replacing the events of this
// step and later ones if there are any.
func (w *Writer) Write(step int64, vals []Scalar) error {
	cut := len(w.recs)
	for cut > 0 && w.recs[cut-1].step >= step {
		cut--
	}
	if cut < len(w.recs) {
		w.end = w.recs[cut].off
		w.recs = w.recs[:cut]
		if err := w.fs.Truncate(w.path, w.end); err != nil {
			return fmt.Errorf("tb: rewinding to step %d: %w", step, err)
		}
	}
	b, err := w.d.scalars(w.wall(), step, vals)
	if err != nil {
		return err
	}
	off := w.end
	if err := w.append(b); err != nil {
		return err
	}
	w.recs = append(w.recs, recPos{step, off})
	return nil
}

// Close flushes and closes the file. The event file is a view of
// metrics.jsonl, so it is synced on close, not per event.
func (w *Writer) Close() error {
	return errors.Join(w.f.Sync(), w.f.Close())
}

// Steps returns the step of every scalar event in dir's event file, in
// file order (for checks and `longhaul inspect`); it never writes.
func Steps(dir string) ([]int64, error) {
	d, err := buildDescriptors()
	if err != nil {
		return nil, err
	}
	// Raw: read-only, for checks and inspect of a local directory.
	f, err := os.Open(filepath.Join(dir, FileName))
	if err != nil {
		return nil, fmt.Errorf("tb: %w", err)
	}
	defer f.Close()
	w := &Writer{d: d, f: f}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("tb: %w", err)
	}
	w.end = w.walk(b)
	out := make([]int64, len(w.recs))
	for i, r := range w.recs {
		out[i] = r.step
	}
	return out, nil
}
