package embedded

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The optimizer state and version files of a checkpoint, the same for
// both trainers (Trainer, HFTrainer); only the weights' format differs.

type meta struct {
	Version int64 `json:"version"`
}

// writeState writes the optimizer state (save) to StateFile and the
// version to MetaFile in dir.
func writeState(dir string, version int64, save func(io.Writer) error) error {
	f, err := os.Create(filepath.Join(dir, StateFile))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := save(w); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return err
	}
	b, _ := json.Marshal(meta{Version: version})
	return os.WriteFile(filepath.Join(dir, MetaFile), b, 0o644)
}

// readState reads dir's StateFile into load and returns MetaFile's version.
func readState(dir string, load func(io.Reader) error) (int64, error) {
	f, err := os.Open(filepath.Join(dir, StateFile))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := load(bufio.NewReader(f)); err != nil {
		return 0, fmt.Errorf("embedded trainer: %s: %w", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return 0, err
	}
	var md meta
	if err := json.Unmarshal(b, &md); err != nil {
		return 0, fmt.Errorf("embedded trainer: %s: %w", MetaFile, err)
	}
	return md.Version, nil
}
