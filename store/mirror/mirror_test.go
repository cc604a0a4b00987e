package mirror_test

// These tests run the mirror against s3test.Mem, an in-memory FAKE of the
// bucket: they prove the mirror's own logic (what a round ships, parts,
// eviction, fencing by ETag, the stale-cache rule). What a real S3 server
// does is proven against SeaweedFS in weed_test.go and the runner's tests.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/store/lease"
	"github.com/longhaul-rl/longhaul/store/mirror"
	"github.com/longhaul-rl/longhaul/testkit/s3test"
)

type wholeCut struct{ limits map[string]int64 }

func (c wholeCut) Limit(rel string, size int64) (int64, bool) {
	if n, ok := c.limits[rel]; ok {
		return n, n >= 0
	}
	return size, true
}
func (wholeCut) Replace(string) ([]byte, bool) { return nil, false }
func (wholeCut) LogEnd() uint64                { return 0 }

func open(t *testing.T, b *s3test.Mem, dir string, mod ...func(*mirror.Options)) *mirror.Mirror {
	t.Helper()
	o := mirror.Options{URL: "s3://fake/run", Prefix: "run", Dir: dir, SyncInterval: time.Hour, LeaseTTL: 600 * time.Millisecond}
	for _, f := range mod {
		f(&o)
	}
	m, err := mirror.Open(context.Background(), b, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func write(t *testing.T, fs store.FS, path string, b []byte, flag int) {
	t.Helper()
	if err := fs.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.OpenFile(path, flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func flush(t *testing.T, m *mirror.Mirror) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// A file the first machine wrote is read back on a second, empty one:
// listed, sized and fetched; a growing file ships as parts, then whole.
func TestRoundTripOnAnEmptyMachine(t *testing.T) {
	b := s3test.NewMem()
	dirA := t.TempDir()
	a := open(t, b, dirA)
	a.Start(func() mirror.Cut { return wholeCut{} })
	log := filepath.Join(dirA, "runlog", "x.seg")
	write(t, a, log, []byte("hello "), os.O_CREATE|os.O_WRONLY|os.O_APPEND)
	write(t, a, filepath.Join(dirA, "checkpoints", "step-1", "w"), bytes.Repeat([]byte{7}, 1000), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	flush(t, a)
	n := len(b.Keys("run/files/runlog/x.seg/"))
	write(t, a, log, []byte("world"), os.O_WRONLY|os.O_APPEND)
	flush(t, a)
	if got := len(b.Keys("run/files/runlog/x.seg/")); got != n+1 {
		t.Fatalf("an appended file shipped %d objects after %d: want one more part", got, n)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	dirB := t.TempDir()
	m := open(t, b, dirB)
	defer m.Close(context.Background())
	if r := m.Resume(); r.New || r.LocalKept || r.Files != 2 {
		t.Fatalf("resume %+v: want the bucket's 2 files, not local ones", r)
	}
	if _, err := os.Stat(filepath.Join(dirB, "runlog", "x.seg")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the empty machine's cache already holds the log before anything read it: %v", err)
	}
	ents, err := m.ReadDir(filepath.Join(dirB, "checkpoints"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "step-1" || !ents[0].IsDir() {
		t.Fatalf("ReadDir of a directory only the bucket holds: %v %v", ents, err)
	}
	fi, err := m.Stat(filepath.Join(dirB, "runlog", "x.seg"))
	if err != nil || fi.Size() != 11 {
		t.Fatalf("Stat: %v %v", fi, err)
	}
	got, err := store.ReadFile(m, filepath.Join(dirB, "runlog", "x.seg"))
	if err != nil || string(got) != "hello world" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// A round ships only what the cut allows: a file beyond it stays out of
// the manifest, a growing file only up to its limit.
func TestRoundShipsTheCut(t *testing.T) {
	b := s3test.NewMem()
	dir := t.TempDir()
	a := open(t, b, dir)
	cut := wholeCut{limits: map[string]int64{"runlog/c.seg": 4, "runlog/snap/9.snap": -1}}
	a.Start(func() mirror.Cut { return cut })
	write(t, a, filepath.Join(dir, "runlog", "c.seg"), []byte("0123456789"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	write(t, a, filepath.Join(dir, "runlog", "snap", "9.snap"), []byte("beyond"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	flush(t, a)
	a.Close(context.Background())
	dirB := t.TempDir()
	m := open(t, b, dirB)
	defer m.Close(context.Background())
	got, err := store.ReadFile(m, filepath.Join(dirB, "runlog", "c.seg"))
	if err != nil || string(got) != "0123" {
		t.Fatalf("chunk shipped as %q (%v), want its first 4 bytes", got, err)
	}
	if _, err := m.Stat(filepath.Join(dirB, "runlog", "snap", "9.snap")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file the cut excludes was shipped: %v", err)
	}
}

// A damaged object is detected by its SHA-256 and never used.
func TestDamagedObjectIsRefused(t *testing.T) {
	b := s3test.NewMem()
	dir := t.TempDir()
	a := open(t, b, dir)
	a.Start(func() mirror.Cut { return wholeCut{} })
	write(t, a, filepath.Join(dir, "f"), []byte("the run's bytes"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	flush(t, a)
	a.Close(context.Background())
	keys := b.Keys("run/files/f/")
	if len(keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
	b.Set(keys[0], []byte("the run's bytez"))
	dirB := t.TempDir()
	m := open(t, b, dirB)
	defer m.Close(context.Background())
	got, err := store.ReadFile(m, filepath.Join(dirB, "f"))
	if !errors.Is(err, mirror.ErrDamaged) {
		t.Fatalf("read %q, err %v: want ErrDamaged", got, err)
	}
	if _, err := os.Stat(filepath.Join(dirB, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the damaged bytes reached the cache: %v", err)
	}
}

// Sealed chunks leave a cache that outgrows its budget and come back
// when read; the newest chunk stays.
func TestEvictionBoundsTheCache(t *testing.T) {
	b := s3test.NewMem()
	dir := t.TempDir()
	a := open(t, b, dir, func(o *mirror.Options) { o.CacheBytes = 500 })
	defer a.Close(context.Background())
	a.Start(func() mirror.Cut { return wholeCut{} })
	for i := range 4 {
		write(t, a, filepath.Join(dir, "runlog", strings.Repeat("0", 3)+string(rune('0'+i))+".seg"), bytes.Repeat([]byte{byte(i)}, 1000), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	}
	r, err := a.Open(filepath.Join(dir, "runlog", "0000.seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	flush(t, a)
	var left []string
	ents, _ := os.ReadDir(filepath.Join(dir, "runlog"))
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if len(left) != 1 || left[0] != "0003.seg" {
		t.Fatalf("cache holds %v after a round over its 500-byte budget: want only the newest chunk", left)
	}
	p := make([]byte, 10)
	if n, err := r.ReadAt(p, 500); n != 10 || err != nil || p[0] != 0 {
		t.Fatalf("a reader of an evicted chunk: %d %v %v", n, err, p)
	}
	if a.Stats().Fetches.Load() != 1 {
		t.Fatalf("fetches %d: the evicted chunk should have been fetched back once", a.Stats().Fetches.Load())
	}
}

// Fencing: a controller whose lease was taken over can no longer change
// the manifest, and its writes fail.
func TestTakenOverControllerIsFenced(t *testing.T) {
	b := s3test.NewMem()
	dirA := t.TempDir()
	a := open(t, b, dirA)
	a.Start(func() mirror.Cut { return wholeCut{} })
	write(t, a, filepath.Join(dirA, "f"), []byte("a1"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	flush(t, a)
	// B takes over once A's lease is not renewed: the fake's clock is
	// real, so stop A's renewals as a paused process would.
	a.StopRenewing()
	dirB := t.TempDir()
	m := open(t, b, dirB)
	defer m.Close(context.Background())
	if m.Epoch() <= a.Epoch() {
		t.Fatalf("epochs %d then %d", a.Epoch(), m.Epoch())
	}
	write(t, a, filepath.Join(dirA, "f"), []byte("a2, after the takeover"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Flush(ctx); !errors.Is(err, mirror.ErrFenced) {
		t.Fatalf("the old controller's flush: %v, want ErrFenced", err)
	}
	if _, err := a.OpenFile(filepath.Join(dirA, "g"), os.O_CREATE|os.O_WRONLY, 0o644); !errors.Is(err, mirror.ErrFenced) {
		t.Fatalf("the old controller's write: %v, want ErrFenced", err)
	}
	got, err := store.ReadFile(m, filepath.Join(dirB, "f"))
	if err != nil || string(got) != "a1" {
		t.Fatalf("the new controller reads %q (%v), want what A shipped before the takeover", got, err)
	}
	a.Close(context.Background())
}

// A second controller on another directory is refused while the first
// renews its lease.
func TestSecondControllerIsRefused(t *testing.T) {
	b := s3test.NewMem()
	a := open(t, b, t.TempDir())
	defer a.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := mirror.Open(ctx, b, mirror.Options{URL: "s3://fake/run", Prefix: "run", Dir: t.TempDir(), LeaseTTL: time.Second})
	if !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("second controller: %v, want ErrHeld", err)
	}
}

// A cache that followed another writer's history is discarded; the
// machine's own cache (same directory, restarted process) is kept.
func TestStaleCacheIsDiscarded(t *testing.T) {
	b := s3test.NewMem()
	dirA, dirB := t.TempDir(), t.TempDir()
	a := open(t, b, dirA)
	a.Start(func() mirror.Cut { return wholeCut{} })
	write(t, a, filepath.Join(dirA, "f"), []byte("v1"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	flush(t, a)
	write(t, a, filepath.Join(dirA, "local-only"), []byte("never shipped"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	a.Close(context.Background())

	again := open(t, b, dirA) // the same machine
	if !again.Resume().LocalKept {
		t.Fatal("the machine's own cache was not kept")
	}
	again.Close(context.Background())

	m := open(t, b, dirB)
	m.Start(func() mirror.Cut { return wholeCut{} })
	write(t, m, filepath.Join(dirB, "f"), []byte("v2 from B"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	flush(t, m)
	m.Close(context.Background())

	back := open(t, b, dirA)
	defer back.Close(context.Background())
	if r := back.Resume(); r.LocalKept || !r.Discarded {
		t.Fatalf("resume %+v: A's cache follows an older history and must be discarded", r)
	}
	if _, err := os.Stat(filepath.Join(dirA, "local-only")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a file of the stale history survived")
	}
	got, err := store.ReadFile(back, filepath.Join(dirA, "f"))
	if err != nil || string(got) != "v2 from B" {
		t.Fatalf("read %q (%v)", got, err)
	}
}

// A file rewritten while a round reads it (metrics.jsonl rewound on a
// resume) is not shipped as a mix of its old and new bytes: that round
// keeps the old entry, the next ships the new content whole.
func TestRewrittenDuringUploadIsNotMixed(t *testing.T) {
	b := s3test.NewMem()
	dir := t.TempDir()
	a := open(t, b, dir)
	a.Start(func() mirror.Cut { return wholeCut{} })
	path := filepath.Join(dir, "m.jsonl")
	write(t, a, path, []byte("aaaa\n"), os.O_CREATE|os.O_WRONLY|os.O_APPEND)
	flush(t, a)
	write(t, a, path, []byte("bbbb\n"), os.O_WRONLY|os.O_APPEND)
	done := false
	b.BeforeUpload = func(key string) {
		if done || !strings.Contains(key, "m.jsonl") {
			return
		}
		done = true
		if err := a.Truncate(path, 0); err != nil {
			t.Error(err)
		}
		write(t, a, path, []byte("cccc\ncccc\n"), os.O_WRONLY|os.O_APPEND)
	}
	flush(t, a)
	if !done {
		t.Fatal("the upload hook did not run")
	}
	check := func(want string) {
		t.Helper()
		d := t.TempDir()
		got, err := mirror.Pull(context.Background(), b, "run", d)
		if err != nil {
			t.Fatal(err)
		}
		_ = got
		bs, _ := os.ReadFile(filepath.Join(d, "m.jsonl"))
		if string(bs) != want {
			t.Fatalf("the bucket holds %q, want %q", bs, want)
		}
	}
	check("aaaa\n")
	flush(t, a)
	check("cccc\ncccc\n")
	a.Close(context.Background())
}
