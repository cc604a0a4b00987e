package remote

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Target rules: a trainer writes only where its operator allowed
// (--allow-path), never over something it did not write itself.

func (h *handler) allowed(p string) error {
	if h.opts.AllowPaths == nil {
		return nil
	}
	_, err := h.opts.AllowPaths.Check(p)
	return err
}

// emptyDir admits a checkpoint target: allowed, and absent in a directory
// that exists, or an empty directory (the checkpoint writer hands over a
// fresh one).
func (h *handler) emptyDir(p string) error {
	if err := h.allowed(p); err != nil {
		return err
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return parentExists(p)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", p)
	}
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	defer d.Close()
	if _, err := d.Readdirnames(1); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s is not empty", p)
	}
	return nil
}

// checkpointSource admits a checkpoint to load: allowed, and a directory.
func (h *handler) checkpointSource(p string) error {
	if err := h.allowed(p); err != nil {
		return err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("no checkpoint directory %s: %w", p, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a checkpoint directory", p)
	}
	return nil
}

// parentExists says whether the directory p would be created in exists.
func parentExists(p string) error {
	dir := filepath.Dir(filepath.Clean(p))
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s: the directory %s does not exist", p, dir)
	}
	return nil
}

// weightsTarget admits an export target: allowed, named *.safetensors, in
// a directory that exists, and absent or a regular file (an earlier export
// it replaces).
func (h *handler) weightsTarget(p string) error {
	if err := h.allowed(p); err != nil {
		return err
	}
	if !strings.HasSuffix(p, ".safetensors") {
		return fmt.Errorf("%s: an export target must be named *.safetensors", p)
	}
	if err := parentExists(p); err != nil {
		return err
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is not a regular file (%s)", p, fi.Mode().Type())
	}
	return nil
}
