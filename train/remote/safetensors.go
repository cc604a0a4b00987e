package remote

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/longhaul-rl/longhaul/train"
)

// A minimal safetensors codec for the train_step payload: an 8-byte
// little-endian header length, a JSON header (dtype, shape, data_offsets
// per tensor, plus "__metadata__" of string values) padded with spaces to a
// multiple of 8, then the tensors' bytes back to back. Only the three dtypes
// the batch uses are known.

func dtypeSize(dtype string) (int, bool) {
	switch dtype {
	case "I32", "F32":
		return 4, true
	case "U8":
		return 1, true
	}
	return 0, false
}

// maxHeader bounds the JSON header a decoder will read.
const maxHeader = 64 << 20

type tensor struct {
	dtype string
	shape []int
	data  []byte
}

type headerEntry struct {
	Dtype       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// encodeSafetensors writes the tensors in the order of names.
func encodeSafetensors(meta map[string]string, names []string, ts map[string]tensor) ([]byte, error) {
	hdr := make(map[string]any, len(ts)+1)
	if len(meta) > 0 {
		hdr["__metadata__"] = meta
	}
	off := 0
	for _, n := range names {
		t := ts[n]
		hdr[n] = headerEntry{Dtype: t.dtype, Shape: t.shape, DataOffsets: [2]int{off, off + len(t.data)}}
		off += len(t.data)
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return nil, fmt.Errorf("safetensors header: %w", err)
	}
	pad := (8 - len(js)%8) % 8
	out := make([]byte, 8, 8+len(js)+pad+off)
	binary.LittleEndian.PutUint64(out, uint64(len(js)+pad))
	out = append(out, js...)
	for range pad {
		out = append(out, ' ')
	}
	for _, n := range names {
		out = append(out, ts[n].data...)
	}
	return out, nil
}

// decodeSafetensors checks the layout strictly: known dtypes, sizes that
// match shapes, and offsets that tile the data section with no gap.
func decodeSafetensors(b []byte) (map[string]string, map[string]tensor, error) {
	if len(b) < 8 {
		return nil, nil, errors.New("safetensors: shorter than its 8-byte header length")
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("safetensors: header length %d does not fit %d bytes", n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, nil, fmt.Errorf("safetensors header: %w", err)
	}
	data := b[8+n:]
	var meta map[string]string
	type span struct{ start, end int }
	var spans []span
	ts := make(map[string]tensor, len(raw))
	for name, js := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(js, &meta); err != nil {
				return nil, nil, fmt.Errorf("safetensors __metadata__: %w", err)
			}
			continue
		}
		var e headerEntry
		if err := json.Unmarshal(js, &e); err != nil {
			return nil, nil, fmt.Errorf("safetensors tensor %q: %w", name, err)
		}
		size, ok := dtypeSize(e.Dtype)
		if !ok {
			return nil, nil, fmt.Errorf("safetensors tensor %q: dtype %q not supported", name, e.Dtype)
		}
		elems := 1
		for _, d := range e.Shape {
			// Each dimension is bounded too: with a 0 beside it the
			// product alone would pass [0, 2^60].
			if d < 0 || d > math.MaxInt32 || (d > 0 && elems > math.MaxInt32/d) {
				return nil, nil, fmt.Errorf("safetensors tensor %q: bad shape %v", name, e.Shape)
			}
			elems *= d
		}
		s, en := e.DataOffsets[0], e.DataOffsets[1]
		if s < 0 || en < s || en > len(data) || en-s != elems*size {
			return nil, nil, fmt.Errorf("safetensors tensor %q: offsets %v do not hold %v %s in %d bytes", name, e.DataOffsets, e.Shape, e.Dtype, len(data))
		}
		spans = append(spans, span{s, en})
		ts[name] = tensor{dtype: e.Dtype, shape: e.Shape, data: data[s:en]}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	at := 0
	for _, sp := range spans {
		if sp.start != at {
			return nil, nil, fmt.Errorf("safetensors: data section has a gap or overlap at byte %d", at)
		}
		at = sp.end
	}
	if at != len(data) {
		return nil, nil, fmt.Errorf("safetensors: %d trailing data bytes", len(data)-at)
	}
	return meta, ts, nil
}

// encodeBatch pads rows to the longest one.
func encodeBatch(b train.Batch, expectStep int64) ([]byte, error) {
	meta := map[string]string{}
	if expectStep >= 0 {
		meta["expect_step"] = strconv.FormatInt(expectStep, 10)
	}
	return encodeBatchMeta(b, meta)
}

// encodeBatchMeta is encodeBatch with more __metadata__ (loss and
// microbatches are added to meta).
func encodeBatchMeta(b train.Batch, meta map[string]string) ([]byte, error) {
	r, t := len(b.Rows), 0
	for i, row := range b.Rows {
		if len(row.Mask) != len(row.Tokens) || len(row.Advantages) != len(row.Tokens) || len(row.OldLogprobs) != len(row.Tokens) {
			return nil, fmt.Errorf("row %d: tokens %d, mask %d, advantages %d, old_logprobs %d differ in length",
				i, len(row.Tokens), len(row.Mask), len(row.Advantages), len(row.OldLogprobs))
		}
		t = max(t, len(row.Tokens))
	}
	tok, mask := make([]byte, 4*r*t), make([]byte, r*t)
	adv, old, lens := make([]byte, 4*r*t), make([]byte, 4*r*t), make([]byte, 4*r)
	le := binary.LittleEndian
	for i, row := range b.Rows {
		le.PutUint32(lens[4*i:], uint32(len(row.Tokens)))
		for j := range row.Tokens {
			k := i*t + j
			le.PutUint32(tok[4*k:], uint32(row.Tokens[j]))
			mask[k] = row.Mask[j]
			le.PutUint32(adv[4*k:], math.Float32bits(row.Advantages[j]))
			le.PutUint32(old[4*k:], math.Float32bits(row.OldLogprobs[j]))
		}
	}
	mb, err := json.Marshal(b.Microbatches)
	if err != nil {
		return nil, fmt.Errorf("microbatches: %w", err)
	}
	meta["loss"], meta["microbatches"] = b.Loss, string(mb)
	// Tensor names and layout: docs/serving.md, "Trainer protocol".
	return encodeSafetensors(meta, []string{"tokens", "mask", "advantages", "old_logprobs", "lengths"}, map[string]tensor{
		"tokens":       {"I32", []int{r, t}, tok},
		"mask":         {"U8", []int{r, t}, mask},
		"advantages":   {"F32", []int{r, t}, adv},
		"old_logprobs": {"F32", []int{r, t}, old},
		"lengths":      {"I32", []int{r}, lens},
	})
}

// decodeBatch returns the batch and the expected step (-1 when not given).
func decodeBatch(p []byte) (train.Batch, int64, error) {
	b, expect, _, err := decodeBatchMeta(p)
	return b, expect, err
}

// decodeBatchMeta is decodeBatch that also returns the __metadata__.
func decodeBatchMeta(p []byte) (train.Batch, int64, map[string]string, error) {
	meta, ts, err := decodeSafetensors(p)
	if err != nil {
		return train.Batch{}, -1, nil, err
	}
	b, expect, err := batchOf(meta, ts)
	return b, expect, meta, err
}

func batchOf(meta map[string]string, ts map[string]tensor) (train.Batch, int64, error) {
	want := map[string]string{"tokens": "I32", "mask": "U8", "advantages": "F32", "old_logprobs": "F32", "lengths": "I32"}
	for name, dt := range want {
		got, ok := ts[name]
		if !ok {
			return train.Batch{}, -1, fmt.Errorf("batch lacks tensor %q", name)
		}
		if got.dtype != dt {
			return train.Batch{}, -1, fmt.Errorf("batch tensor %q is %s, want %s", name, got.dtype, dt)
		}
	}
	lensT := ts["lengths"]
	if len(lensT.shape) != 1 {
		return train.Batch{}, -1, fmt.Errorf("lengths has shape %v, want [R]", lensT.shape)
	}
	r := lensT.shape[0]
	shape := ts["tokens"].shape
	if len(shape) != 2 || shape[0] != r {
		return train.Batch{}, -1, fmt.Errorf("tokens has shape %v, want [%d, T]", shape, r)
	}
	t := shape[1]
	for _, name := range []string{"mask", "advantages", "old_logprobs"} {
		if !slices.Equal(ts[name].shape, shape) {
			return train.Batch{}, -1, fmt.Errorf("%s has shape %v, want %v", name, ts[name].shape, shape)
		}
	}
	b := train.Batch{Loss: meta["loss"], Rows: make([]train.Row, r)}
	if b.Loss != train.LossPG && b.Loss != train.LossSFT {
		return train.Batch{}, -1, fmt.Errorf("loss %q: want %q or %q", b.Loss, train.LossPG, train.LossSFT)
	}
	if mb := meta["microbatches"]; mb != "" {
		if err := json.Unmarshal([]byte(mb), &b.Microbatches); err != nil {
			return train.Batch{}, -1, fmt.Errorf("microbatches: %w", err)
		}
		for _, m := range b.Microbatches {
			for _, i := range m {
				if i < 0 || i >= r {
					return train.Batch{}, -1, fmt.Errorf("microbatch row %d out of range [0, %d)", i, r)
				}
			}
		}
	}
	expect := int64(-1)
	if s, ok := meta["expect_step"]; ok {
		var err error
		if expect, err = strconv.ParseInt(s, 10, 64); err != nil || expect < 0 {
			return train.Batch{}, -1, fmt.Errorf("expect_step %q: want a non-negative integer", s)
		}
	}
	le := binary.LittleEndian
	tok, mask, adv, old := ts["tokens"].data, ts["mask"].data, ts["advantages"].data, ts["old_logprobs"].data
	for i := range r {
		n := int(int32(le.Uint32(lensT.data[4*i:])))
		if n < 0 || n > t {
			return train.Batch{}, -1, fmt.Errorf("row %d: length %d outside [0, %d]", i, n, t)
		}
		row := train.Row{Tokens: make([]int32, n), Mask: make([]uint8, n), Advantages: make([]float32, n), OldLogprobs: make([]float32, n)}
		for j := range n {
			k := i*t + j
			row.Tokens[j] = int32(le.Uint32(tok[4*k:]))
			row.Mask[j] = mask[k]
			row.Advantages[j] = math.Float32frombits(le.Uint32(adv[4*k:]))
			row.OldLogprobs[j] = math.Float32frombits(le.Uint32(old[4*k:]))
		}
		b.Rows[i] = row
	}
	return b, expect, nil
}
