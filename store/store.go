// Package store is the seam every file of a run goes through: the run
// log's chunks, blob packs, snapshots and watermark, checkpoints and the
// embedded trainer's files in them, exported weights, the stored configs,
// metrics and TensorBoard files, and the run lock. Writes, reads, renames,
// removes and listings all pass through an FS, so one implementation can
// keep a run on the local disk (OS), another can fail the way disks do
// (Faulty: a full disk at a chosen call, a write cut short, a failed
// fsync), and another can keep the local directory as a cache of a bucket
// (store/mirror), with nothing above the seam knowing which.
package store

import (
	"errors"
	"io"
	"os"
)

// File is an open file being written.
type File interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
	Name() string
}

// Reader is an open file being read.
type Reader interface {
	io.Reader
	io.ReaderAt
	Close() error
	Name() string
}

// FS creates, reads, syncs, lists and publishes files.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Open opens name for reading.
	Open(name string) (Reader, error)
	Stat(name string) (os.FileInfo, error)
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]os.DirEntry, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	RemoveAll(path string) error
	MkdirAll(path string, perm os.FileMode) error
	Truncate(name string, size int64) error
	// SyncDir fsyncs a directory, making renames and creations in it durable.
	SyncDir(dir string) error
	// Lock opens name (creating it) holding an exclusive lock on it, or
	// fails at once with ErrLocked; closing the file releases the lock.
	Lock(name string) (File, error)
}

// OS is the real file system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Open(name string) (Reader, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Stat(name string) (os.FileInfo, error)        { return os.Stat(name) }
func (osFS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Rename(o, n string) error                     { return os.Rename(o, n) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) RemoveAll(path string) error                  { return os.RemoveAll(path) }
func (osFS) MkdirAll(path string, perm os.FileMode) error { return os.MkdirAll(path, perm) }
func (osFS) Truncate(name string, size int64) error       { return os.Truncate(name, size) }
func (osFS) Lock(name string) (File, error)               { return lockFile(name) }
func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Or returns fs, or OS when fs is nil.
func Or(fs FS) FS {
	if fs == nil {
		return OS
	}
	return fs
}

// ReadFile reads the whole of name.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	return b, errors.Join(err, f.Close())
}

// WriteFile writes b to a new file at path and fsyncs it.
func WriteFile(fs FS, path string, b []byte) error {
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteAtomic writes b to path durably: a fsync'd temporary file renamed
// into place, then the directory fsync'd, so path holds either its old
// content or b after a crash, never a mix.
func WriteAtomic(fs FS, path string, b []byte) error {
	tmp := path + ".tmp"
	err := WriteFile(fs, tmp, b)
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		err = fs.SyncDir(dirOf(path))
	}
	if err != nil {
		fs.Remove(tmp)
	}
	return err
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if os.IsPathSeparator(path[i]) {
			if i == 0 {
				return path[:1]
			}
			return path[:i]
		}
	}
	return "."
}

// SyncFile fsyncs an existing file.
func SyncFile(fs FS, path string) error {
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// PutFile writes b to a new file at path without an fsync: for files
// whose durability a later step provides (a checkpoint's files are
// fsync'd by the checkpoint writer before it publishes them).
func PutFile(fs FS, path string, b []byte) error {
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
