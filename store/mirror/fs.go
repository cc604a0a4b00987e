package mirror

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/store"
)

// The store.FS of a mirror. Paths outside the cache directory pass
// straight to the OS. Inside it, the local file wins; a file only the
// manifest names is fetched when opened, sized by Stat and listed by
// ReadDir from the manifest.

var _ store.FS = (*Mirror)(nil)

// tracked is what the seam saw of a file this process writes: how many
// handles are open for writing it, and the lowest offset changed since the
// last sync round took a look (MaxInt64: only appended to).
type tracked struct {
	open      int
	dirtyFrom int64
}

// rel maps a path into the cache ("" and false when outside it).
func (m *Mirror) rel(name string) (string, bool) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return "", false
	}
	r, err := filepath.Rel(m.root, abs)
	if err != nil || r == "." || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", false
	}
	return filepath.ToSlash(r), true
}

// remote returns the manifest entry of rel when the cache lacks the file
// and the run did not remove it (under mu).
func (m *Mirror) remote(rel string) *Entry {
	if m.tomb[rel] {
		return nil
	}
	return m.man.Files[rel]
}

// checkWrite refuses writes once the run was taken over. It is on every
// write of the run's files, so it reads a flag, not the bucket or a lock.
func (m *Mirror) checkWrite(name string) error {
	if !m.lost.Load() {
		return nil
	}
	if err := m.Err(); err != nil {
		return &os.PathError{Op: "write", Path: name, Err: err}
	}
	return nil
}

// startTracking notes a write handle (or a truncation) of rel. The file's
// bytes count as unchanged since they were shipped only if its stat still
// matches what the last ship (or fetch) saw.
func (m *Mirror) startTracking(rel, path string, fresh bool) *tracked {
	t := m.track[rel]
	if t == nil {
		t = &tracked{dirtyFrom: 0}
		if fi, err := os.Stat(path); err == nil && !fresh {
			if st, ok := m.st[rel]; ok && st.same(statOf(fi, st.Key)) && st.Key == m.man.Files[rel].lastKey() {
				t.dirtyFrom = math.MaxInt64
			}
		}
		m.track[rel] = t
	}
	if fresh {
		t.dirtyFrom = 0
	}
	return t
}

// OpenFile implements store.FS. Opening for writing a file only the
// bucket holds fetches it first (unless it is being truncated anyway).
func (m *Mirror) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	rel, in := m.rel(name)
	writing := flag&(os.O_WRONLY|os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_TRUNC) != 0
	if !in || !writing {
		return store.OS.OpenFile(name, flag, perm)
	}
	if err := m.checkWrite(name); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(name); errors.Is(err, os.ErrNotExist) {
		m.mu.Lock()
		e := m.remote(rel)
		m.mu.Unlock()
		if e != nil && flag&os.O_EXCL != 0 {
			return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrExist}
		}
		if e != nil && flag&os.O_TRUNC == 0 {
			if err := m.fetch(rel, name); err != nil {
				return nil, err
			}
		}
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	delete(m.tomb, rel)
	t := m.startTracking(rel, name, flag&os.O_TRUNC != 0)
	t.open++
	var pos int64
	if flag&os.O_APPEND != 0 {
		pos = -1
	}
	m.mu.Unlock()
	return &file{File: f, m: m, rel: rel, t: t, pos: pos}, nil
}

// file is a write handle of a cached file.
type file struct {
	*os.File
	m      *Mirror
	rel    string
	t      *tracked
	pos    int64 // -1: O_APPEND (writes never change what is already there)
	closed bool
}

func (f *file) Write(p []byte) (int, error) {
	if err := f.m.checkWrite(f.Name()); err != nil {
		return 0, err
	}
	n, err := f.File.Write(p)
	if f.pos >= 0 {
		f.m.mu.Lock()
		f.t.dirtyFrom = min(f.t.dirtyFrom, f.pos)
		f.m.mu.Unlock()
		f.pos += int64(n)
	}
	return n, err
}

func (f *file) Close() error {
	f.m.mu.Lock()
	if !f.closed {
		f.closed = true
		f.t.open--
	}
	f.m.mu.Unlock()
	return f.File.Close()
}

// Open implements store.FS: the local file, or the bucket's fetched.
func (m *Mirror) Open(name string) (store.Reader, error) {
	rel, in := m.rel(name)
	if !in {
		return store.OS.Open(name)
	}
	r := &reader{m: m, rel: rel, name: name}
	if err := m.reopen(r); err != nil {
		return nil, err
	}
	return r, nil
}

// Stat implements store.FS.
func (m *Mirror) Stat(name string) (os.FileInfo, error) {
	fi, err := os.Stat(name)
	rel, in := m.rel(name)
	if !in || !errors.Is(err, os.ErrNotExist) {
		return fi, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.remote(rel); e != nil {
		return remoteInfo{name: filepath.Base(name), size: e.Size, mod: m.man.Written}, nil
	}
	if m.remoteDir(rel) {
		return remoteInfo{name: filepath.Base(name), dir: true, mod: m.man.Written}, nil
	}
	return nil, err
}

// remoteDir reports whether the manifest names a file under rel (under mu).
func (m *Mirror) remoteDir(rel string) bool {
	for k := range m.man.Files {
		if strings.HasPrefix(k, rel+"/") && !m.tomb[k] {
			return true
		}
	}
	return false
}

// ReadDir implements store.FS: the local entries and the manifest's.
func (m *Mirror) ReadDir(name string) ([]os.DirEntry, error) {
	local, err := os.ReadDir(name)
	rel, in := m.rel(name)
	if !in {
		return local, err
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range local {
		seen[e.Name()] = true
	}
	if rel == "" || rel == "." {
		seen[StateDir] = true
	}
	out := slices.Clip(local)
	m.mu.Lock()
	for k, e := range m.man.Files {
		rest, ok := strings.CutPrefix(k, rel+"/")
		if !ok || m.tomb[k] {
			continue
		}
		child, deeper, isDir := strings.Cut(rest, "/")
		_ = deeper
		if seen[child] {
			continue
		}
		seen[child] = true
		out = append(out, fs.FileInfoToDirEntry(remoteInfo{name: child, size: e.Size, dir: isDir, mod: m.man.Written}))
	}
	m.mu.Unlock()
	if err != nil && len(out) == 0 {
		return nil, err
	}
	slices.SortFunc(out, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// Rename implements store.FS. A source only the bucket holds is fetched.
func (m *Mirror) Rename(oldpath, newpath string) error {
	orel, oin := m.rel(oldpath)
	nrel, nin := m.rel(newpath)
	if !oin && !nin {
		return os.Rename(oldpath, newpath)
	}
	if err := m.checkWrite(newpath); err != nil {
		return err
	}
	if oin {
		if _, err := os.Lstat(oldpath); errors.Is(err, os.ErrNotExist) {
			m.mu.Lock()
			e := m.remote(orel)
			m.mu.Unlock()
			if e != nil {
				if err := m.fetch(orel, oldpath); err != nil {
					return err
				}
			}
		}
	}
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if oin {
		m.removed(orel)
	}
	if nin {
		// What is now at newpath has no shipped past: ship it whole.
		for k := range m.man.Files {
			if k == nrel || strings.HasPrefix(k, nrel+"/") {
				delete(m.tomb, k)
			}
		}
		for k, t := range m.track {
			if k == nrel || strings.HasPrefix(k, nrel+"/") {
				t.dirtyFrom = 0
			}
		}
		delete(m.st, nrel)
		for k := range m.st {
			if strings.HasPrefix(k, nrel+"/") {
				delete(m.st, k)
			}
		}
	}
	return nil
}

// removed marks rel and everything under it as removed by the run (under mu).
func (m *Mirror) removed(rel string) {
	for k := range m.man.Files {
		if k == rel || strings.HasPrefix(k, rel+"/") {
			m.tomb[k] = true
		}
	}
	for k := range m.st {
		if k == rel || strings.HasPrefix(k, rel+"/") {
			delete(m.st, k)
		}
	}
	for k := range m.track {
		if k == rel || strings.HasPrefix(k, rel+"/") {
			m.track[k].dirtyFrom = 0
		}
	}
}

// Remove implements store.FS.
func (m *Mirror) Remove(name string) error {
	rel, in := m.rel(name)
	if !in {
		return os.Remove(name)
	}
	if err := m.checkWrite(name); err != nil {
		return err
	}
	err := os.Remove(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	had := m.remote(rel) != nil
	if err != nil && !(errors.Is(err, os.ErrNotExist) && had) {
		return err
	}
	m.removed(rel)
	return nil
}

// RemoveAll implements store.FS.
func (m *Mirror) RemoveAll(path string) error {
	rel, in := m.rel(path)
	if !in {
		return os.RemoveAll(path)
	}
	if err := m.checkWrite(path); err != nil {
		return err
	}
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	m.mu.Lock()
	m.removed(rel)
	m.mu.Unlock()
	return nil
}

// MkdirAll implements store.FS.
func (m *Mirror) MkdirAll(path string, perm os.FileMode) error { return os.MkdirAll(path, perm) }

// Truncate implements store.FS. A file only the bucket holds is fetched.
func (m *Mirror) Truncate(name string, size int64) error {
	rel, in := m.rel(name)
	if !in {
		return os.Truncate(name, size)
	}
	if err := m.checkWrite(name); err != nil {
		return err
	}
	if _, err := os.Lstat(name); errors.Is(err, os.ErrNotExist) {
		m.mu.Lock()
		e := m.remote(rel)
		m.mu.Unlock()
		if e != nil {
			if err := m.fetch(rel, name); err != nil {
				return err
			}
		}
	}
	m.mu.Lock()
	t := m.startTracking(rel, name, false)
	t.dirtyFrom = min(t.dirtyFrom, size)
	m.mu.Unlock()
	return os.Truncate(name, size)
}

// SyncDir implements store.FS.
func (m *Mirror) SyncDir(dir string) error { return store.OS.SyncDir(dir) }

// Lock implements store.FS: the local lock (one process per cache
// directory); the lease is the lock across machines.
func (m *Mirror) Lock(name string) (store.File, error) { return store.OS.Lock(name) }

// remoteInfo is the os.FileInfo of a file or directory only the bucket holds.
type remoteInfo struct {
	name string
	size int64
	dir  bool
	mod  time.Time
}

func (i remoteInfo) Name() string { return i.name }
func (i remoteInfo) Size() int64  { return i.size }
func (i remoteInfo) Mode() os.FileMode {
	if i.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
func (i remoteInfo) ModTime() time.Time { return i.mod }
func (i remoteInfo) IsDir() bool        { return i.dir }
func (i remoteInfo) Sys() any           { return nil }
