package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/longhaul-rl/longhaul/store"
)

// LockFile is the file in a run directory whose flock marks the one process
// allowed to write the run. The kernel drops the lock when that process
// dies (SIGKILL included), so a crash never leaves a stale lock behind.
const LockFile = "lock"

// ErrLocked is matched by the error of Lock when another process holds the
// run directory.
var ErrLocked = errors.New("run directory in use")

// DirLock is a held run-directory lock.
type DirLock struct {
	fs   store.FS
	path string
	f    store.File
}

// Lock takes the exclusive lock on dir without waiting, through the
// storage seam (fs; nil is the OS). When another process holds it, the
// error names that process's PID and host (as it wrote them into the lock
// file).
func Lock(fs store.FS, dir string) (*DirLock, error) {
	if fs == nil {
		fs = store.OS
	}
	path := filepath.Join(dir, LockFile)
	f, err := fs.Lock(path)
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			holder := "an unknown process"
			if b, rerr := store.ReadFile(fs, path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
				holder = strings.TrimSpace(string(b))
			}
			return nil, fmt.Errorf("runner: %s: %w by %s (one writer per run; wait for it to exit or stop it)", dir, ErrLocked, holder)
		}
		return nil, fmt.Errorf("runner: lock: %w", err)
	}
	host, _ := os.Hostname()
	// The holder's identity is informational only: the flock is the lock,
	// so a failure to write it (a full disk) does not stop the run.
	if err := fs.Truncate(path, 0); err == nil {
		_, _ = f.Write([]byte(fmt.Sprintf("pid %d on host %s\n", os.Getpid(), host)))
	}
	return &DirLock{fs: fs, path: path, f: f}, nil
}

// Unlock releases the lock. The file stays: removing it would let a third
// process lock a new inode while a second still holds the old one.
func (l *DirLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.fs.Truncate(l.path, 0)
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	return err
}
