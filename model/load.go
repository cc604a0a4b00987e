package model

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unsafe"
)

// Loading. A checkpoint's F32 and BF16 matrices are used where they lie in
// the file: the file is mapped read-only and the tensors are views of the
// mapping, so loading is a page-cache question, not a copy, and a BF16
// checkpoint stays BF16 in memory (generation widens each weight where a
// product reads it). Norm gains and biases (small) and F16 tensors are
// converted into float32 copies. A trainer gets a float32 slab of its own
// (ensureF32): the master weights. A mapped file must not be rewritten in
// place while a model uses it (longhaul writes weights to a temporary and
// renames it).

// LoadOptions tune LoadDirWith.
type LoadOptions struct {
	// Copy reads every tensor into a float32 slab instead of mapping the
	// file (what a trainer needs anyway).
	Copy bool
	// HugePages asks for transparent huge pages for the float32 slab of
	// Copy (MADV_HUGEPAGE). Off by default: measured several times slower
	// than 4 KiB pages on the build machine (docs/hf-models.md, "Loading").
	HugePages bool
}

// LoadDir reads an HF model directory (config.json, model.safetensors or
// model.safetensors.index.json and its shards), mapping the weights.
func LoadDir(dir string) (*Model, error) { return LoadDirWith(dir, LoadOptions{}) }

// LoadDirWith is LoadDir with options.
func LoadDirWith(dir string, o LoadOptions) (*Model, error) {
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", dir, err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", filepath.Join(dir, configFile), err)
	}
	files := map[string][]string{} // shard file -> tensors it must hold
	if ib, err := os.ReadFile(filepath.Join(dir, indexFile)); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(ib, &idx); err != nil {
			return nil, fmt.Errorf("model: load %s: %w", filepath.Join(dir, indexFile), err)
		}
		for name, f := range idx.WeightMap {
			if f != filepath.Base(f) || strings.HasPrefix(f, ".") {
				return nil, fmt.Errorf("model: load %s: tensor %q maps to file %q outside the directory", indexFile, name, f)
			}
			files[f] = append(files[f], name)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		files[weightFile] = nil
	} else {
		return nil, fmt.Errorf("model: load %s: %w", dir, err)
	}
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	paths := make([]string, len(names))
	for i, f := range names {
		paths[i] = filepath.Join(dir, f)
	}
	m, err := loadFiles(cfg, paths, func(i int, got []string) error {
		if want := files[names[i]]; want != nil {
			slices.Sort(want)
			if !slices.Equal(want, got) {
				return fmt.Errorf("holds tensors %v, the index says %v", got, want)
			}
		}
		return nil
	}, o)
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", dir, err)
	}
	m.srcDir = dir
	return m, nil
}

// Load reads a weights file and the config.json beside it (as
// SaveSafetensors writes them), mapping the weights.
func Load(path string) (*Model, error) {
	b, err := os.ReadFile(ConfigPath(path))
	if err != nil {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", ConfigPath(path), err)
	}
	m, err := loadFiles(cfg, []string{path}, nil, LoadOptions{})
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", path, err)
	}
	return m, nil
}

// ConfigPath is the config.json beside a weights file.
func ConfigPath(weights string) string { return filepath.Join(filepath.Dir(weights), configFile) }

// stEntry is one tensor of a safetensors file: its spec, dtype and the
// offset of its data in the file.
type stEntry struct {
	spec  int
	dtype string
	off   int64
}

// parseHeader reads a safetensors file's header (the file is size bytes,
// r reads it) and checks every tensor against the config's specs; seen
// collects the names across files. It returns the entries and the sorted
// tensor names.
func parseHeader(r io.ReaderAt, size int64, m *Model, seen map[string]bool) ([]stEntry, []string, error) {
	var hl [8]byte
	if _, err := r.ReadAt(hl[:], 0); err != nil {
		return nil, nil, fmt.Errorf("safetensors: reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(hl[:])
	if n > maxHeader || int64(n) > size-8 {
		return nil, nil, fmt.Errorf("safetensors: header length %d exceeds the file (%d bytes)", n, size)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, nil, fmt.Errorf("safetensors: header: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, nil, fmt.Errorf("safetensors: header: %w", err)
	}
	spec := make(map[string]int, len(m.specs))
	for i, s := range m.specs {
		spec[s.name] = i
	}
	base, dataLen := int64(8+n), size-int64(8+n)
	var names []string
	var ents []stEntry
	for name, r := range raw {
		if name == "__metadata__" || strings.HasSuffix(name, "rotary_emb.inv_freq") {
			continue // inv_freq: a buffer older Llama checkpoints saved; recomputed from the config
		}
		i, ok := spec[name]
		if !ok {
			return nil, nil, fmt.Errorf("safetensors: tensor %q is not part of a %s model with this config", name, m.cfg.Family)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("safetensors: tensor %q appears twice", name)
		}
		s := m.specs[i]
		var t stTensor
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: %w", name, err)
		}
		es, ok := dtypeSize[t.DType]
		if !ok {
			return nil, nil, fmt.Errorf("safetensors: tensor %q has dtype %s (supported: F32, BF16, F16)", name, t.DType)
		}
		if !slices.Equal(t.Shape, s.shape) {
			return nil, nil, fmt.Errorf("safetensors: tensor %q has shape %v, config.json implies %v", name, t.Shape, s.shape)
		}
		b, e := t.DataOffsets[0], t.DataOffsets[1]
		if b < 0 || e < b || e > dataLen || e-b != int64(es*s.size) {
			return nil, nil, fmt.Errorf("safetensors: tensor %q has bad data offsets [%d,%d) (%d bytes of data, %s×%d)", name, b, e, dataLen, t.DType, s.size)
		}
		ents = append(ents, stEntry{spec: i, dtype: t.DType, off: base + b})
		seen[name] = true
		names = append(names, name)
	}
	sort.Strings(names)
	return ents, names, nil
}

// loadFiles builds a model of cfg from safetensors files (check, when set,
// vets each file's tensor names).
func loadFiles(cfg Config, paths []string, check func(i int, names []string) error, o LoadOptions) (*Model, error) {
	m := newShell(cfg)
	if err := m.SetContext(min(cfg.MaxPos, DefaultContext)); err != nil {
		return nil, err
	}
	m.tf, m.th = make([][]float32, len(m.specs)), make([][]uint16, len(m.specs))
	if o.Copy {
		m.w = make([]float32, numParams(m.specs))
		if o.HugePages {
			hugePages(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(m.w))), 4*len(m.w)))
		}
		m.tf = slabViews(m.w, m.specs)
	}
	seen := map[string]bool{}
	bufs := new(readBufs)
	for i, path := range paths {
		names, err := m.loadFile(path, seen, bufs, o.Copy)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
		if check != nil {
			if err := check(i, names); err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
			}
		}
	}
	for _, s := range m.specs {
		if !seen[s.name] {
			return nil, fmt.Errorf("tensor %q missing", s.name)
		}
	}
	if m.w != nil {
		m.th = nil
	}
	m.p = bind(m.cfg, m.specs, m.tf, m.th)
	return m, nil
}

// loadFile loads one safetensors file: read into the slab (copy), or
// mapped with the matrices viewed in place.
func (m *Model) loadFile(path string, seen map[string]bool, bufs *readBufs, copyAll bool) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	ents, names, err := parseHeader(f, st.Size(), m, seen)
	if err != nil {
		return nil, err
	}
	if !copyAll {
		data, err := mapFile(f, st.Size())
		if err == nil {
			m.viewMapped(data, ents)
			return names, nil
		}
		if !errors.Is(err, errNoMmap) {
			return nil, err
		}
		m.w = make([]float32, numParams(m.specs)) // no mmap here: read into a slab
		m.tf = slabViews(m.w, m.specs)
	}
	jobs := make([]readJob, len(ents))
	for j, e := range ents {
		jobs[j] = readJob{name: m.specs[e.spec].name, off: e.off, dtype: e.dtype, dst: m.tf[e.spec]}
	}
	return names, readTensors(f, jobs, bufs)
}

// viewMapped points the tensors of ents into the mapped file data: F32
// and BF16 matrices in place (aligned, as the format's 8-byte header
// padding makes them), everything else converted into small copies.
func (m *Model) viewMapped(data []byte, ents []stEntry) {
	if m.res == nil {
		m.res = new(mapping)
	}
	m.res.add(data)
	for _, e := range ents {
		s := m.specs[e.spec]
		p := unsafe.Pointer(&data[e.off])
		matrix := len(s.shape) == 2
		switch {
		case matrix && e.dtype == "F32" && e.off%4 == 0:
			m.tf[e.spec] = unsafe.Slice((*float32)(p), s.size)
		case matrix && e.dtype == "BF16" && e.off%2 == 0:
			m.th[e.spec] = unsafe.Slice((*uint16)(p), s.size)
		default:
			dst := make([]float32, s.size)
			raw := data[e.off : e.off+int64(dtypeSize[e.dtype]*s.size)]
			convert(dst, raw, e.dtype)
			m.tf[e.spec] = dst
		}
	}
}

// convert widens little-endian raw data of dtype into dst.
func convert(dst []float32, raw []byte, dtype string) {
	switch dtype {
	case "F32":
		for i := range dst {
			dst[i] = mathFloat32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case "BF16":
		for i := range dst {
			dst[i] = fromBF16(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	default:
		for i := range dst {
			dst[i] = f16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	}
}
