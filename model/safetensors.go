package model

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// One weights file with its config.json beside it: how a run directory
// and the built-in model's checkpoints keep weights (an HF directory holds
// the same two files). Tensors are F32, in HF names and the [out, in]
// layout, in slab order.

// EncodeSafetensors returns the weights as one F32 safetensors file.
func (m *Model) EncodeSafetensors() ([]byte, error) {
	var b bytes.Buffer
	b.Grow(4*m.NumParams() + 64*len(m.specs) + 64)
	if err := m.encodeShard(&b, m.specs, "F32"); err != nil {
		return nil, fmt.Errorf("model: encode: %w", err)
	}
	return b.Bytes(), nil
}

// configJSON is config.json's bytes.
func (m *Model) configJSON() ([]byte, error) {
	b, err := m.cfg.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("model: encode config: %w", err)
	}
	return append(b, '\n'), nil
}

// SaveSafetensors writes the weights to path and config.json beside it,
// each through a temporary file and a rename.
func (m *Model) SaveSafetensors(path string) error {
	return m.writeFiles(path, func(p string, b []byte) error {
		return writeAtomic(p, func(w io.Writer) error { _, err := w.Write(b); return err })
	})
}

// WriteFiles writes the weights to path and config.json beside it with
// plain writes, for a caller that makes them durable itself (a checkpoint
// directory is fsync'd and renamed as a whole).
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
	cfg, err := m.configJSON()
	if err != nil {
		return err
	}
	if err := write(path, st); err != nil {
		return err
	}
	return write(ConfigPath(path), cfg)
}

// DecodeSafetensors builds a model from the bytes of one safetensors file
// and its config (copied into a float32 slab: for weights read with a
// size limit from an untrusted path).
func DecodeSafetensors(data []byte, cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model: invalid config: %w", err)
	}
	m := newShell(cfg)
	if err := m.SetContext(min(cfg.MaxPos, DefaultContext)); err != nil {
		return nil, err
	}
	m.setSlab(make([]float32, numParams(m.specs)))
	seen := map[string]bool{}
	ents, _, err := parseHeader(bytes.NewReader(data), int64(len(data)), m, seen)
	if err != nil {
		return nil, err
	}
	for _, s := range m.specs {
		if !seen[s.name] {
			return nil, fmt.Errorf("safetensors: tensor %q missing", s.name)
		}
	}
	for _, e := range ents {
		s := m.specs[e.spec]
		convert(m.tf[e.spec], data[e.off:e.off+int64(dtypeSize[e.dtype]*s.size)], e.dtype)
	}
	return m, nil
}

// configFileOf is the config.json of an HF directory.
func configFileOf(dir string) string { return filepath.Join(dir, configFile) }
