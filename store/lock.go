package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrLocked is in the chain of Lock's error when another process holds
// the lock.
var ErrLocked = errors.New("locked by another process")

// lockFile takes an exclusive flock on name (created if missing) without
// waiting. The returned file holds the lock until it is closed; the
// kernel releases it when the process dies, SIGKILL included, so a crash
// never leaves a stale lock.
func lockFile(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("flock %s: %w", name, err)
	}
	return f, nil
}
