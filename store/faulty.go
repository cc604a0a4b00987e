package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Fault is one failure Faulty injects.
type Fault int

// The faults a disk shows.
const (
	// NoSpace fails the chosen write with ENOSPC after writing nothing.
	NoSpace Fault = iota + 1
	// ShortWrite writes only half of the chosen write's bytes, then fails
	// with ENOSPC: a torn write, as a full disk or a crash leaves it.
	ShortWrite
	// FailSync fails the chosen fsync with EIO (the data's fate unknown).
	FailSync
	// FailAfterBytes lets writes through until Bytes bytes are written in
	// total, then writes what fits and fails with ENOSPC (and every later
	// write): a disk that fills up.
	FailAfterBytes
)

// Faulty wraps an FS and injects one fault: at the At-th matching write or
// fsync (1-based; for FailAfterBytes, once Bytes bytes are written).
// Only files whose base name contains Match are affected ("" = all).
// After the fault every later write and fsync of a matching file fails too
// (a disk that failed stays failed), unless Once is set.
type Faulty struct {
	FS    FS
	Fault Fault
	At    int
	Bytes int64
	Match string
	Once  bool

	mu      sync.Mutex
	writes  int
	syncs   int
	written int64
	fired   bool
}

// Fired reports whether the fault has happened.
func (f *Faulty) Fired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

func (f *Faulty) matches(name string) bool {
	return f.Match == "" || strings.Contains(filepath.Base(name), f.Match)
}

// OpenFile opens through the wrapped FS; writes and syncs are checked.
func (f *Faulty) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || !f.matches(name) {
		return file, err
	}
	return &faultyFile{File: file, fs: f}, nil
}

func (f *Faulty) Open(name string) (Reader, error)             { return f.FS.Open(name) }
func (f *Faulty) Stat(name string) (os.FileInfo, error)        { return f.FS.Stat(name) }
func (f *Faulty) ReadDir(name string) ([]os.DirEntry, error)   { return f.FS.ReadDir(name) }
func (f *Faulty) Rename(o, n string) error                     { return f.FS.Rename(o, n) }
func (f *Faulty) Remove(name string) error                     { return f.FS.Remove(name) }
func (f *Faulty) RemoveAll(path string) error                  { return f.FS.RemoveAll(path) }
func (f *Faulty) MkdirAll(path string, perm os.FileMode) error { return f.FS.MkdirAll(path, perm) }
func (f *Faulty) Truncate(name string, size int64) error       { return f.FS.Truncate(name, size) }
func (f *Faulty) SyncDir(dir string) error                     { return f.FS.SyncDir(dir) }

// Lock locks through the wrapped FS; writes to the lock file are checked.
func (f *Faulty) Lock(name string) (File, error) {
	file, err := f.FS.Lock(name)
	if err != nil || !f.matches(name) {
		return file, err
	}
	return &faultyFile{File: file, fs: f}, nil
}

type faultyFile struct {
	File
	fs *Faulty
}

func (ff *faultyFile) Write(p []byte) (int, error) {
	f := ff.fs
	f.mu.Lock()
	f.writes++
	n := len(p)
	var err error
	switch {
	case f.fired && !f.Once:
		n, err = 0, syscall.ENOSPC
	case f.fired:
	case f.Fault == NoSpace && f.writes == f.At:
		n, err, f.fired = 0, syscall.ENOSPC, true
	case f.Fault == ShortWrite && f.writes == f.At:
		n, err, f.fired = len(p)/2, syscall.ENOSPC, true
	case f.Fault == FailAfterBytes && f.written+int64(len(p)) > f.Bytes:
		n, err, f.fired = int(f.Bytes-f.written), syscall.ENOSPC, true
	}
	f.written += int64(n)
	f.mu.Unlock()
	if n > 0 {
		if w, werr := ff.File.Write(p[:n]); werr != nil {
			return w, werr
		}
	}
	if err != nil {
		return n, &os.PathError{Op: "write", Path: ff.Name(), Err: err}
	}
	return n, nil
}

func (ff *faultyFile) Sync() error {
	f := ff.fs
	f.mu.Lock()
	f.syncs++
	var err error
	switch {
	case f.fired && !f.Once:
		err = syscall.EIO
	case f.Fault == FailSync && !f.fired && f.syncs == f.At:
		err, f.fired = syscall.EIO, true
	}
	f.mu.Unlock()
	if err != nil {
		return &os.PathError{Op: "fsync", Path: ff.Name(), Err: err}
	}
	return ff.File.Sync()
}

func (f *Faulty) String() string {
	return fmt.Sprintf("faulty(%d at %d, bytes %d, match %q)", f.Fault, f.At, f.Bytes, f.Match)
}
