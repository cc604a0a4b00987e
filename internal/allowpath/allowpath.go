// Package allowpath confines the file paths a server accepts over HTTP
// (weight reloads, trainer exports and checkpoints) to directories its
// operator named with --allow-path, so a request cannot make a server read
// /dev/zero or write over a file it does not own.
package allowpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutside marks a path outside every allowed directory.
var ErrOutside = errors.New("path outside the allowed directories")

// Set is a list of allowed directories, absolute and with symlinks
// resolved.
type Set struct{ dirs []string }

// New resolves dirs; with none it allows the working directory.
func New(dirs []string) (Set, error) {
	if len(dirs) == 0 {
		wd, err := os.Getwd()
		if err != nil {
			return Set{}, fmt.Errorf("allow-path: %w", err)
		}
		dirs = []string{wd}
	}
	var s Set
	for _, d := range dirs {
		r, err := resolve(d)
		if err != nil {
			return Set{}, fmt.Errorf("--allow-path %s: %w", d, err)
		}
		s.dirs = append(s.dirs, r)
	}
	return s, nil
}

// Dirs returns the allowed directories.
func (s Set) Dirs() []string { return s.dirs }

// Check returns p made absolute with symlinks resolved (as far as it
// exists) when it lies under an allowed directory, else an ErrOutside
// error. A symlink inside an allowed directory that points out of it is
// outside.
func (s Set) Check(p string) (string, error) {
	r, err := resolve(p)
	if err != nil {
		return "", err
	}
	for _, d := range s.dirs {
		if r == d || strings.HasPrefix(r, d+string(filepath.Separator)) {
			return r, nil
		}
	}
	return "", fmt.Errorf("%s: %w (allowed: %s; start the server with --allow-path)", p, ErrOutside, strings.Join(s.dirs, ", "))
}

// resolve makes p absolute and resolves symlinks in its longest existing
// prefix, so a path to a file not yet written is still checked by where
// it would land.
func resolve(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	cur := abs
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs, nil
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
}
