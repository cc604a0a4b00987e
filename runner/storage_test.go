package runner

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train/ckpt"
	"github.com/longhaul-rl/longhaul/train/embedded"
)

// TestCheckpointWriteFailsKeepsPrevious: the embedded trainer's checkpoint
// files go through the run's storage seam. A full disk while the trainer
// writes the checkpoint of step 3 stops the run with an error that says
// the previous checkpoint stays valid; it does (step 0, verified, no
// temporary directory left), and a resume on a healthy disk ends with the
// weights of the uninterrupted run.
func TestCheckpointWriteFailsKeepsPrevious(t *testing.T) {
	cfg := tiny(t, "run.max_steps=6", "checkpointing.save_period=3")
	ref := t.TempDir()
	if err := Train(context.Background(), cfg, Options{RunDir: ref}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Checkpoints are written at steps 0, 3 and 6; the trainer's version
	// file is written once per checkpoint, so the second write is step 3's.
	f := &store.Faulty{FS: store.OS, Fault: store.NoSpace, At: 2, Match: embedded.MetaFile}
	err := Train(context.Background(), cfg, Options{RunDir: dir, FS: f})
	if !f.Fired() || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "checkpoint of step 3 (the previous checkpoint stays valid)") {
		t.Fatalf("err = %v (fault fired: %v); want ENOSPC from the checkpoint of step 3", err, f.Fired())
	}
	root := filepath.Join(dir, cfg.Checkpointing.Dir)
	e, m, rejected, ok, err := ckpt.Latest(root, 100)
	if err != nil || !ok || m.Step != 0 || len(rejected) != 0 {
		t.Fatalf("latest checkpoint: step %d ok %v rejected %v err %v; want step 0, valid", m.Step, ok, rejected, err)
	}
	if _, _, err := ckpt.Verify(e.Path); err != nil {
		t.Fatal(err)
	}
	des, _ := os.ReadDir(root)
	if len(des) != 1 {
		t.Fatalf("checkpoint directory holds %d entries, want only step 0's: %v", len(des), des)
	}
	if err := Train(context.Background(), cfg, Options{RunDir: dir}); err != nil {
		t.Fatalf("resume on a healthy disk: %v", err)
	}
	want, _ := os.ReadFile(filepath.Join(ref, WeightsFile))
	got, _ := os.ReadFile(filepath.Join(dir, WeightsFile))
	if len(want) == 0 || !bytes.Equal(want, got) {
		t.Fatalf("resumed weights (%d bytes) differ from the uninterrupted run's (%d bytes)", len(got), len(want))
	}
}

// TestStoredConfigWriteFails: the config copy a resume trusts is written
// through the seam; a full disk there stops the start before the run
// begins, and the same directory starts on a healthy disk.
func TestStoredConfigWriteFails(t *testing.T) {
	cfg := tiny(t)
	dir := t.TempDir()
	f := &store.Faulty{FS: store.OS, Fault: store.NoSpace, At: 1, Match: ".yaml"}
	err := Train(context.Background(), cfg, Options{RunDir: dir, FS: f})
	if !f.Fired() || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "store config") {
		t.Fatalf("err = %v (fired %v); want ENOSPC storing the config", err, f.Fired())
	}
	if err := Train(context.Background(), cfg, Options{RunDir: dir}); err != nil {
		t.Fatalf("start on a healthy disk: %v", err)
	}
}

// TestLockThroughSeam: the run lock is taken through the seam; a second
// holder is refused with ErrLocked naming the first, and the lock is free
// again once released.
func TestLockThroughSeam(t *testing.T) {
	dir := t.TempDir()
	fs := &store.Faulty{FS: store.OS}
	l1, err := Lock(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(fs, dir); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("second lock: %v; want ErrLocked naming the holder", err)
	}
	if err := l1.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := Lock(fs, dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Unlock()
}

// TestRunLogSyncFailsWhileCallsAreStaged: an fsync of the run log's chunk
// fails (a synthetic EIO from store.Faulty, not a real disk) in the
// middle of the RL steps, where the built-in environment's calls are
// staged and acted on before their fsync. The run stops with the log's
// error instead of going on or hanging, and a resume on a healthy disk
// ends with the uninterrupted run's weights.
func TestRunLogSyncFailsWhileCallsAreStaged(t *testing.T) {
	cfg := tiny(t, "run.max_steps=6")
	ref := t.TempDir()
	if err := Train(context.Background(), cfg, Options{RunDir: ref}); err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{12, 25} {
		dir := t.TempDir()
		f := &store.Faulty{FS: store.OS, Fault: store.FailSync, At: at, Match: ".seg"}
		err := Train(context.Background(), cfg, Options{RunDir: dir, FS: f})
		if !f.Fired() || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "log failed") {
			t.Fatalf("fsync %d failed: err = %v (fired %v); want the log's EIO", at, err, f.Fired())
		}
		t.Logf("fsync %d: %v", at, err)
		if err := Train(context.Background(), cfg, Options{RunDir: dir}); err != nil {
			t.Fatalf("resume on a healthy disk after fsync %d failed: %v", at, err)
		}
		want, _ := os.ReadFile(filepath.Join(ref, WeightsFile))
		got, _ := os.ReadFile(filepath.Join(dir, WeightsFile))
		if len(want) == 0 || !bytes.Equal(want, got) {
			t.Fatalf("after fsync %d failed, the resumed weights (%d bytes) differ from the uninterrupted run's (%d bytes)", at, len(got), len(want))
		}
	}
}
