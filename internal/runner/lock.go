package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// LockFile is the file in a run directory whose flock marks the one process
// allowed to write the run. The kernel drops the lock when that process
// dies (SIGKILL included), so a crash never leaves a stale lock behind.
const LockFile = "lock"

// ErrLocked is matched by the error of Lock when another process holds the
// run directory.
var ErrLocked = errors.New("run directory in use")

// DirLock is a held run-directory lock.
type DirLock struct{ f *os.File }

// Lock takes the exclusive lock on dir without waiting. When another
// process holds it, the error names that process's PID and host (as it
// wrote them into the lock file).
func Lock(dir string) (*DirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("runner: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "an unknown process"
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = strings.TrimSpace(string(b))
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("runner: %s: %w by %s (one writer per run; wait for it to exit or stop it)", dir, ErrLocked, holder)
		}
		return nil, fmt.Errorf("runner: lock %s: %w", path, err)
	}
	host, _ := os.Hostname()
	// The holder's identity is informational only: the flock is the lock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d on host %s\n", os.Getpid(), host)), 0)
	}
	return &DirLock{f: f}, nil
}

// Unlock releases the lock. The file stays: removing it would let a third
// process lock a new inode while a second still holds the old one.
func (l *DirLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	err = errors.Join(err, l.f.Close())
	l.f = nil
	return err
}
