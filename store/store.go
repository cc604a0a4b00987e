// Package store is the seam every durable write of a run goes through:
// the run log's chunks and blob packs, its snapshots and watermark, the
// checkpoint directory's manifest, fsyncs and renames, the embedded
// trainer's checkpoint files, the stored configs and the run lock. The real
// implementation is the OS; Faulty wraps one to fail the way disks do
// (a full disk at a chosen call, a write cut short, a failed fsync), so
// tests can prove what survives each.
package store

import (
	"os"
)

// File is an open file being written.
type File interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
	Name() string
}

// FS creates, syncs and publishes files.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
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
