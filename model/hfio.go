package model

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// Hugging Face model directories: config.json, then model.safetensors or
// model.safetensors.index.json ({"weight_map": {tensor: shard file}}) with
// its shards. Safetensors (https://huggingface.co/docs/safetensors): an
// 8-byte little-endian header length N, N bytes of JSON {name: {dtype,
// shape, data_offsets [begin, end)}}, then the raw little-endian data.

const (
	configFile = "config.json"
	genFile    = "generation_config.json"
	weightFile = "model.safetensors"
	indexFile  = "model.safetensors.index.json"
	maxHeader  = 100 << 20
)

// TokenizerFiles are copied beside saved weights when present.
var TokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
	"special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "tokenizer.model"}

type stTensor struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

var dtypeSize = map[string]int{"F32": 4, "BF16": 2, "F16": 2}

// f16ToF32 widens an IEEE half (exact).
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, nan
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value frac·2^-24
		v := float32(frac) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
}

// SaveOptions controls SaveDir.
type SaveOptions struct {
	DType         string // "F32" (default) or "BF16"
	TokenizerDir  string // copy TokenizerFiles from here ("" = the directory the model was loaded from, if any)
	MaxShardBytes int64  // > 0: shard the weights (model-0000i-of-0000n.safetensors + index)
	// Create, when set, opens every file SaveDir writes, written in place:
	// the caller makes the directory durable and publishes it (a checkpoint
	// writer does, through the run's storage seam). Unset: each file is
	// written to a temporary, fsync'd and renamed.
	Create func(path string) (io.WriteCloser, error)
}

// SaveDir writes the model as an HF directory: config.json,
// generation_config.json, the weights in HF names and [out, in] layout,
// and the tokenizer files. dir is created if needed; files are written to
// temporaries and renamed.
func (m *Model) SaveDir(dir string, o SaveOptions) error {
	if o.DType == "" {
		o.DType = "F32"
	}
	if o.DType != "F32" && o.DType != "BF16" {
		return fmt.Errorf("model: save: dtype %q (want F32 or BF16)", o.DType)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: save: %w", err)
	}
	cfg := m.cfg
	cfg.SavedDType = map[string]string{"F32": "float32", "BF16": "bfloat16"}[o.DType]
	cb, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("model: save: %w", err)
	}
	if err := o.write(filepath.Join(dir, configFile), func(w io.Writer) error { _, err := w.Write(append(cb, '\n')); return err }); err != nil {
		return err
	}
	src := o.TokenizerDir
	if src == "" {
		src = m.srcDir
	}
	for _, name := range append(slices.Clone(TokenizerFiles), genFile) {
		if src == "" || filepath.Clean(src) == filepath.Clean(dir) {
			break
		}
		b, err := os.ReadFile(filepath.Join(src, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("model: save: %w", err)
		}
		if err := o.write(filepath.Join(dir, name), func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, genFile)); errors.Is(err, os.ErrNotExist) {
		gen := map[string]any{"_from_model_config": true}
		if cfg.BOS != nil {
			gen["bos_token_id"] = *cfg.BOS
		}
		if cfg.EOS != nil {
			gen["eos_token_id"] = *cfg.EOS
		}
		gb, _ := json.MarshalIndent(gen, "", "  ")
		if err := o.write(filepath.Join(dir, genFile), func(w io.Writer) error { _, err := w.Write(append(gb, '\n')); return err }); err != nil {
			return err
		}
	}
	return m.saveWeights(dir, o)
}

func (m *Model) saveWeights(dir string, o SaveOptions) error {
	es := int64(4)
	if o.DType == "BF16" {
		es = 2
	}
	// group tensors into shards in slab order
	var shards [][]tensorSpec
	var cur []tensorSpec
	var curBytes, total int64
	for _, s := range m.specs {
		b := es * int64(s.size)
		total += b
		if o.MaxShardBytes > 0 && len(cur) > 0 && curBytes+b > o.MaxShardBytes {
			shards, cur, curBytes = append(shards, cur), nil, 0
		}
		cur, curBytes = append(cur, s), curBytes+b
	}
	shards = append(shards, cur)
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := weightFile
		if o.MaxShardBytes > 0 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		for _, s := range sh {
			weightMap[s.name] = name
		}
		if err := o.write(filepath.Join(dir, name), func(w io.Writer) error { return m.encodeShard(w, sh, o.DType) }); err != nil {
			return err
		}
	}
	idx := filepath.Join(dir, indexFile)
	if o.MaxShardBytes <= 0 {
		if err := os.Remove(idx); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("model: save: %w", err)
		}
		return nil
	}
	ib, _ := json.MarshalIndent(map[string]any{"metadata": map[string]int64{"total_size": total}, "weight_map": weightMap}, "", "  ")
	return o.write(idx, func(w io.Writer) error { _, err := w.Write(append(ib, '\n')); return err })
}

// encodeShard streams one safetensors file: tensors in slab order.
func (m *Model) encodeShard(w io.Writer, specs []tensorSpec, dtype string) error {
	es := 4
	if dtype == "BF16" {
		es = 2
	}
	var h strings.Builder
	h.WriteString(`{"__metadata__":{"format":"pt"}`)
	off := 0
	for _, s := range specs {
		shape, _ := json.Marshal(s.shape)
		fmt.Fprintf(&h, `,%q:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, s.name, dtype, shape, off, off+es*s.size)
		off += es * s.size
	}
	h.WriteString("}")
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var hl [8]byte
	binary.LittleEndian.PutUint64(hl[:], uint64(h.Len()))
	bw.Write(hl[:])
	bw.WriteString(h.String())
	buf := make([]byte, 0, 1<<16)
	for _, s := range specs {
		var err error
		m.tensorValues(m.specIndex(s.name), func(vs []float32) {
			for _, v := range vs {
				if es == 2 {
					buf = binary.LittleEndian.AppendUint16(buf, kern.ToBF16(v))
				} else {
					buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
				}
				if len(buf) >= cap(buf)-4 {
					if _, werr := bw.Write(buf); werr != nil && err == nil {
						err = werr
					}
					buf = buf[:0]
				}
			}
		})
		if err != nil {
			return err
		}
	}
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	return bw.Flush()
}

// write writes one file of SaveDir: through o.Create when set, else
// atomically.
func (o SaveOptions) write(path string, write func(io.Writer) error) error {
	if o.Create == nil {
		return writeAtomic(path, write)
	}
	f, err := o.Create(path)
	if err != nil {
		return fmt.Errorf("model: write %s: %w", path, err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("model: write %s: %w", path, err)
	}
	return nil
}

func writeAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("model: write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(0o644)
	if err == nil {
		err = write(f)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("model: write %s: %w", path, err)
	}
	return nil
}
