package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// The safetensors format (https://huggingface.co/docs/safetensors): an
// 8-byte little-endian header length N, N bytes of JSON mapping each tensor
// name to {dtype, shape, data_offsets [begin, end)} relative to the data
// section (plus an optional "__metadata__" of strings), then the raw
// little-endian data. Tensors are written in slab order with F32 dtype,
// linear weights as [in, out] (y = x·W).

// hfConfig is config.json: the Config plus the HF keys tools look for.
type hfConfig struct {
	Architectures     []string `json:"architectures"`
	ModelType         string   `json:"model_type"`
	HiddenAct         string   `json:"hidden_act"`
	TieWordEmbeddings bool     `json:"tie_word_embeddings"`
	TorchDtype        string   `json:"torch_dtype"`
	WeightLayout      string   `json:"longhaul_weight_layout"`
	Config
}

func (c Config) hfJSON() ([]byte, error) {
	b, err := json.MarshalIndent(hfConfig{
		Architectures: []string{"LonghaulForCausalLM"}, ModelType: "longhaul", HiddenAct: "silu",
		TieWordEmbeddings: true, TorchDtype: "float32", WeightLayout: "in_out", Config: c,
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("model: encode config: %w", err)
	}
	return append(b, '\n'), nil
}

// ConfigPath is the config.json beside a weights file.
func ConfigPath(weights string) string { return filepath.Join(filepath.Dir(weights), "config.json") }

// EncodeSafetensors returns the weights in safetensors form.
func (m *Model) EncodeSafetensors() ([]byte, error) {
	cfgJSON, err := json.Marshal(m.cfg)
	if err != nil {
		return nil, fmt.Errorf("model: encode config: %w", err)
	}
	// the header is written by hand to keep tensors in slab order
	var h bytes.Buffer
	h.WriteString(`{"__metadata__":{"format":"pt","longhaul_config":`)
	h.WriteString(strconv.Quote(string(cfgJSON)))
	h.WriteString(`}`)
	for _, s := range m.specs {
		shape, _ := json.Marshal(s.shape)
		fmt.Fprintf(&h, `,%q:{"dtype":"F32","shape":%s,"data_offsets":[%d,%d]}`, s.name, shape, 4*s.off, 4*(s.off+s.size))
	}
	h.WriteString(`}`)
	for h.Len()%8 != 0 { // align the data section, as the reference writer does
		h.WriteByte(' ')
	}
	out := make([]byte, 8, 8+h.Len()+4*len(m.w))
	binary.LittleEndian.PutUint64(out, uint64(h.Len()))
	out = append(out, h.Bytes()...)
	for _, v := range m.w {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out, nil
}

// SaveSafetensors writes the weights to path and config.json beside it,
// each through a temporary file and a rename.
func (m *Model) SaveSafetensors(path string) error { return m.writeFiles(path, writeFileAtomic) }

// WriteFiles writes the weights to path and config.json beside it with
// plain writes, for a caller that makes them durable itself (a checkpoint
// directory is fsync'd and renamed as a whole, so a second fsync and rename
// per file would only slow it down).
func (m *Model) WriteFiles(path string) error {
	return m.writeFiles(path, func(p string, b []byte) error {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("model: write %s: %w", p, err)
		}
		return nil
	})
}

// WriteFilesWith is WriteFiles with each file (the safetensors, then
// config.json beside it) written by write: a caller's storage seam.
func (m *Model) WriteFilesWith(path string, write func(path string, b []byte) error) error {
	return m.writeFiles(path, write)
}

func (m *Model) writeFiles(path string, write func(string, []byte) error) error {
	st, err := m.EncodeSafetensors()
	if err != nil {
		return err
	}
	cfg, err := m.cfg.hfJSON()
	if err != nil {
		return err
	}
	if err := write(path, st); err != nil {
		return err
	}
	return write(ConfigPath(path), cfg)
}

func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("model: write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(0o644) // CreateTemp makes 0600; weights are meant to be shared
	if err == nil {
		_, err = f.Write(data)
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

// Load reads a model written by SaveSafetensors: the config from the
// config.json beside path (or, failing that, the file's metadata), the
// weights from path.
func Load(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	var cfg *Config
	if b, err := os.ReadFile(ConfigPath(path)); err == nil {
		var c Config
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("model: load %s: %w", ConfigPath(path), err)
		}
		cfg = &c
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	m, err := DecodeSafetensors(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", path, err)
	}
	return m, nil
}

type stTensor struct {
	DType       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// DecodeSafetensors builds a model from safetensors bytes. With cfg nil the
// config comes from the header's "longhaul_config" metadata.
func DecodeSafetensors(data []byte, cfg *Config) (*Model, error) {
	if len(data) < 8 {
		return nil, errors.New("safetensors: file shorter than its 8-byte header length")
	}
	hl := binary.LittleEndian.Uint64(data)
	if hl > uint64(len(data)-8) || hl > 100<<20 {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the file (%d bytes)", hl, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+hl], &raw); err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	body := data[8+hl:]
	if cfg == nil {
		var meta map[string]string
		if err := json.Unmarshal(raw["__metadata__"], &meta); err != nil || meta["longhaul_config"] == "" {
			return nil, errors.New("safetensors: no config.json and no longhaul_config metadata")
		}
		cfg = new(Config)
		if err := json.Unmarshal([]byte(meta["longhaul_config"]), cfg); err != nil {
			return nil, fmt.Errorf("safetensors: longhaul_config: %w", err)
		}
	}
	m, err := newEmpty(*cfg)
	if err != nil {
		return nil, err
	}
	for _, s := range m.specs {
		r, ok := raw[s.name]
		if !ok {
			return nil, fmt.Errorf("safetensors: tensor %q missing", s.name)
		}
		var t stTensor
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", s.name, err)
		}
		if t.DType != "F32" {
			return nil, fmt.Errorf("safetensors: tensor %q has dtype %s, want F32", s.name, t.DType)
		}
		if !slices.Equal(t.Shape, s.shape) {
			return nil, fmt.Errorf("safetensors: tensor %q has shape %v, config wants %v", s.name, t.Shape, s.shape)
		}
		b, e := t.DataOffsets[0], t.DataOffsets[1]
		if b < 0 || e < b || e > len(body) || e-b != 4*s.size {
			return nil, fmt.Errorf("safetensors: tensor %q has bad data offsets [%d,%d) (data is %d bytes)", s.name, b, e, len(body))
		}
		dst := m.w[s.off : s.off+s.size]
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[b+4*i:]))
		}
	}
	if extra := len(raw) - len(m.specs); extra != 0 {
		if _, ok := raw["__metadata__"]; ok {
			extra--
		}
		if extra != 0 {
			return nil, fmt.Errorf("safetensors: %d tensors the config does not describe", extra)
		}
	}
	return m, nil
}
