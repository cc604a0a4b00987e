package tb

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The reader below is written from the TFRecord and protobuf wire format
// specs, sharing no code with the writer: records are
// uint64 len | uint32 masked_crc32c(len) | data | uint32 masked_crc32c(data),
// masked = ((crc>>15)|(crc<<17)) + 0xa282ead8, crc over the Castagnoli
// polynomial.

type event struct {
	wall    float64
	step    int64
	version string
	scalars map[string]float32
}

func specCRC(b []byte) uint32 {
	c := crc32.Checksum(b, crc32.MakeTable(0x82f63b78))
	return (c>>15 | c<<17) + 0xa282ead8
}

func readEvents(t *testing.T, b []byte) []event {
	t.Helper()
	var out []event
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("%d stray bytes at the end", len(b))
		}
		if got, want := binary.LittleEndian.Uint32(b[8:12]), specCRC(b[:8]); got != want {
			t.Fatalf("length crc %08x, want %08x", got, want)
		}
		n := int(binary.LittleEndian.Uint64(b))
		data := b[12 : 12+n]
		if got, want := binary.LittleEndian.Uint32(b[12+n:]), specCRC(data); got != want {
			t.Fatalf("data crc %08x, want %08x", got, want)
		}
		out = append(out, parseEvent(t, data))
		b = b[16+n:]
	}
	return out
}

// wire walks protobuf fields: fn gets the field number, wire type, the
// varint or fixed value, and the bytes of a length-delimited field.
func wire(t *testing.T, b []byte, fn func(num int, typ int, v uint64, raw []byte)) {
	t.Helper()
	varint := func() uint64 {
		var v uint64
		for s := 0; ; s += 7 {
			c := b[0]
			b = b[1:]
			v |= uint64(c&0x7f) << s
			if c < 0x80 {
				return v
			}
		}
	}
	for len(b) > 0 {
		key := varint()
		num, typ := int(key>>3), int(key&7)
		switch typ {
		case 0:
			fn(num, typ, varint(), nil)
		case 1:
			fn(num, typ, binary.LittleEndian.Uint64(b), nil)
			b = b[8:]
		case 2:
			n := varint()
			fn(num, typ, 0, b[:n])
			b = b[n:]
		case 5:
			fn(num, typ, uint64(binary.LittleEndian.Uint32(b)), nil)
			b = b[4:]
		default:
			t.Fatalf("wire type %d", typ)
		}
	}
}

func parseEvent(t *testing.T, b []byte) event {
	e := event{scalars: map[string]float32{}}
	wire(t, b, func(num, typ int, v uint64, raw []byte) {
		switch num {
		case 1:
			e.wall = math.Float64frombits(v)
		case 2:
			e.step = int64(v)
		case 3:
			e.version = string(raw)
		case 5: // Summary
			wire(t, raw, func(num, _ int, _ uint64, val []byte) {
				if num != 1 {
					return
				}
				var tag string
				var x float32
				wire(t, val, func(num, _ int, v uint64, raw []byte) {
					switch num {
					case 1:
						tag = string(raw)
					case 2:
						x = math.Float32frombits(uint32(v))
					}
				})
				e.scalars[tag] = x
			})
		}
	})
	return e
}

var clock = func() time.Time { return time.Unix(1700000000, 500000000) }

// TestGoldenBytes: the file equals bytes assembled by hand from the specs.
func TestGoldenBytes(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, clock)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(3, []Scalar{{"a", 1.5}, {"b", -2}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, _ := os.ReadFile(filepath.Join(dir, FileName))

	record := func(data []byte) []byte {
		var r []byte
		r = binary.LittleEndian.AppendUint64(r, uint64(len(data)))
		r = binary.LittleEndian.AppendUint32(r, specCRC(r[:8]))
		r = append(r, data...)
		return binary.LittleEndian.AppendUint32(r, specCRC(data))
	}
	wall := binary.LittleEndian.AppendUint64(nil, math.Float64bits(1700000000.5))
	ev1 := append(append([]byte{0x09}, wall...), append([]byte{0x1a, 13}, "brain.Event:2"...)...)
	value := func(tag string, v float32) []byte {
		b := append([]byte{0x0a, byte(len(tag))}, tag...)
		b = append(b, 0x15)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		return append([]byte{0x0a, byte(len(b))}, b...)
	}
	summary := append(value("a", 1.5), value("b", -2)...)
	ev2 := append(append([]byte{0x09}, wall...), 0x10, 3, 0x2a, byte(len(summary)))
	ev2 = append(ev2, summary...)
	want := append(record(ev1), record(ev2)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("event file\n got %x\nwant %x", got, want)
	}
}

// TestRewindAndTornTail: reopened after a torn write, the file is cut to
// its whole records; a rewound step replaces its event and later ones.
func TestRewindAndTornTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	w, err := Open(dir, clock)
	if err != nil {
		t.Fatal(err)
	}
	for s := int64(1); s <= 5; s++ {
		w.Write(s, []Scalar{{"loss", float32(s)}})
	}
	w.Close()
	b, _ := os.ReadFile(path)
	os.WriteFile(path, append(b, b[len(b)-20:len(b)-3]...), 0o644) // a torn record
	w, err = Open(dir, clock)
	if err != nil {
		t.Fatal(err)
	}
	if w.Repaired != 17 {
		t.Fatalf("Repaired = %d, want 17", w.Repaired)
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(len(b)) {
		t.Fatalf("file is %d bytes after the repair, want %d", fi.Size(), len(b))
	}
	w.Write(4, []Scalar{{"loss", 40}}) // resumed from step 3
	w.Write(5, []Scalar{{"loss", 50}})
	w.Write(6, []Scalar{{"loss", 60}})
	w.Close()
	b, _ = os.ReadFile(path)
	evs := readEvents(t, b)
	if evs[0].version != "brain.Event:2" {
		t.Fatalf("first event %+v, want the file version", evs[0])
	}
	var got []string
	for _, e := range evs[1:] {
		got = append(got, fmt.Sprintf("%d:%g", e.step, e.scalars["loss"]))
	}
	if fmt.Sprint(got) != "[1:1 2:2 3:3 4:40 5:50 6:60]" {
		t.Fatalf("steps %v", got)
	}
}
