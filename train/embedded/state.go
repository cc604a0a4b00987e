package embedded

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train"
)

// The optimizer state and version files of a checkpoint.

type meta struct {
	Version int64 `json:"version"`
}

// saveState writes the optimizer state and the version into dir through fs.
func saveState(fs store.FS, dir string, save func(io.Writer) error, version int64) error {
	f, err := fs.OpenFile(filepath.Join(dir, StateFile), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("embedded trainer: %w", err)
	}
	w := bufio.NewWriter(f)
	if err := save(w); err != nil {
		f.Close()
		return fmt.Errorf("embedded trainer: %w", err)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return fmt.Errorf("embedded trainer: %w", err)
	}
	b, _ := json.Marshal(meta{Version: version})
	if err := store.PutFile(fs, filepath.Join(dir, MetaFile), b); err != nil {
		return fmt.Errorf("embedded trainer: %w", err)
	}
	return nil
}

// readState reads dir's StateFile into load and returns MetaFile's version.
func readState(fs store.FS, dir string, load func(io.Reader) error) (int64, error) {
	f, err := fs.Open(filepath.Join(dir, StateFile))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := load(bufio.NewReader(f)); err != nil {
		return 0, fmt.Errorf("embedded trainer: %s: %w", dir, err)
	}
	b, err := store.ReadFile(fs, filepath.Join(dir, MetaFile))
	if err != nil {
		return 0, err
	}
	var md meta
	if err := json.Unmarshal(b, &md); err != nil {
		return 0, fmt.Errorf("embedded trainer: %s: %w", MetaFile, err)
	}
	return md.Version, nil
}

// notACheckpoint marks a load that failed on what dir holds (a missing or
// unreadable file, another model's weights): the caller's input.
func notACheckpoint(dir string, err error) error {
	return fmt.Errorf("%w: embedded trainer: %s does not hold a checkpoint it loads: %w", train.ErrInvalidInput, dir, err)
}
