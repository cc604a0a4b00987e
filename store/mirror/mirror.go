// Package mirror keeps a run directory in an S3-compatible bucket, with a
// local directory as its cache. It is a store.FS: every write goes to the
// local directory first (fsync'd there, so a process crash loses nothing,
// as without a bucket), and a syncer ships the directory to the bucket on a
// short clock and at once after every snapshot and checkpoint. Reads of a
// file the cache does not hold fetch it from the bucket, checked against
// the SHA-256 the manifest records; listings merge the cache and the
// manifest. So the run log, the checkpoint code and the trainers run
// unchanged on a machine whose disk starts empty, and fetch only what they
// read: the newest snapshot, the log after it, the newest checkpoint.
//
// What the bucket holds is always a consistent prefix of the run: each
// sync round takes a cut from the run log first (its durable end; see
// runlog.ShipCut), then uploads the files' bytes that cut covers, then
// writes the manifest naming them, under If-Match on the manifest it last
// wrote. Objects are written once under keys no other writer uses, so the
// manifest switches atomically from one consistent cut to the next, and a
// controller that lost its lease cannot change what a resume reads.
//
// The local directory stays bounded: sealed log chunks whose bytes the
// manifest holds leave the cache when it outgrows Options.CacheBytes, and
// come back if something reads them.
package mirror

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/store/bucket"
	"github.com/longhaul-rl/longhaul/store/lease"
)

// StateDir is the cache's own bookkeeping inside the local directory
// (never shipped).
const StateDir = ".longhaul-mirror"

// WeightsDir is where a run exports the weights servers reload. It may be
// a shared volume's mount point that exists before the cache does
// (deploy/kubernetes), so a new cache accepts it and emptying a stale
// cache empties it without removing it.
const WeightsDir = "weights"

// Cut is what a sync round may ship: runlog.ShipCut implements it.
type Cut interface {
	// Limit: how many bytes of the file rel (of size bytes) to ship; ok
	// false to ship none of it.
	Limit(rel string, size int64) (n int64, ok bool)
	// Replace: content to ship for rel instead of the local file's.
	Replace(rel string) ([]byte, bool)
	// LogEnd is the run log's durable end at the cut.
	LogEnd() uint64
}

// Options configure Open.
type Options struct {
	// URL is s3://BUCKET/PREFIX, for messages and the cache's identity.
	URL    string
	Prefix string // key prefix in the bucket (no slashes at the ends)
	// Dir is the local cache directory (created if missing).
	Dir string
	// SyncInterval is the clock of the sync rounds (default 5 s).
	SyncInterval time.Duration
	// CacheBytes bounds the sealed log chunks kept locally (0: unbounded).
	CacheBytes int64
	// LeaseTTL is how long this controller may go without renewing its
	// lease before another may take the run (default 20 s).
	LeaseTTL time.Duration
	// Holder names this controller in the lease (default host and pid).
	Holder string
	Logger *slog.Logger
	// Workers uploads at once (default 4).
	Workers int
}

// Mirror is an open mirrored run directory: a store.FS over the cache.
type Mirror struct {
	objs   bucket.Objects
	o      Options
	prefix string // "" or "PREFIX/"
	root   string
	log    *slog.Logger
	lease  *lease.Lease
	writer string
	resume Resume

	mu      sync.Mutex
	man     *Manifest // what the bucket holds now
	etag    string
	tomb    map[string]bool     // removed here, still in the manifest
	track   map[string]*tracked // files written through the seam by this process
	st      map[string]fileStat // each file's local stat when last shipped or fetched
	readers map[string]map[*reader]struct{}
	fetchMu map[string]*sync.Mutex
	fenced  error
	cut     func() Cut
	seq     uint64 // object keys used by this epoch
	gen     uint64 // rounds asked for (Flush)
	synced  uint64 // the newest asked-for round that succeeded
	cond    *sync.Cond
	stats   Stats

	kick chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once

	// lost is set, and lostCh closed, once the run was taken over (the
	// lease lost, or the manifest fenced).
	lost     atomic.Bool
	lostCh   chan struct{}
	lostOnce sync.Once
}

func (m *Mirror) markLost() {
	m.lost.Store(true)
	m.lostOnce.Do(func() { close(m.lostCh) })
}

// Resume tells what Open found: what the bucket held and who had it.
type Resume struct {
	// New is true when the bucket held no run at this prefix.
	New bool
	// LocalKept: the cache was this directory's own and newer than the
	// bucket (a process restart on the same machine); Discarded: the cache
	// held another writer's history and was emptied.
	LocalKept, Discarded bool
	// Shipped is when the manifest the run resumes from was written, and
	// LogEnd the log offset it covers.
	Shipped time.Time
	LogEnd  uint64
	// Previous is the lease taken over (nil if none was held).
	Previous *lease.Record
	// Files and Bytes in the bucket's manifest.
	Files int
	Bytes int64
	// AbortedUploads: unfinished multipart uploads an earlier writer left
	// (killed mid-upload), aborted at Open; no manifest names them.
	AbortedUploads int
}

type fileStat struct {
	Size  int64  `json:"size"`
	MTime int64  `json:"mtime_ns"`
	Ino   uint64 `json:"ino"`
	Key   string `json:"key"` // the manifest entry's last object when shipped or fetched
}

func statOf(fi os.FileInfo, key string) fileStat {
	s := fileStat{Size: fi.Size(), MTime: fi.ModTime().UnixNano(), Key: key}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.Ino = st.Ino
	}
	return s
}

func (a fileStat) same(b fileStat) bool { return a == b }

// state is the cache's bookkeeping file.
type state struct {
	URL    string              `json:"url"`
	Writer string              `json:"writer"`
	Files  map[string]fileStat `json:"files"`
}

// Open takes the run's lease, reads its manifest, decides what the local
// cache is worth, and claims the manifest for this controller (the claim
// fences the previous holder). Call Start once the run log is open to
// begin shipping, and Close at the end.
func Open(ctx context.Context, objs bucket.Objects, o Options) (*Mirror, error) {
	if o.SyncInterval <= 0 {
		o.SyncInterval = 5 * time.Second
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Holder == "" {
		host, _ := os.Hostname()
		o.Holder = fmt.Sprintf("pid %d on %s", os.Getpid(), host)
	}
	root, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	m := &Mirror{objs: objs, o: o, root: root, log: o.Logger, tomb: map[string]bool{}, track: map[string]*tracked{},
		st: map[string]fileStat{}, readers: map[string]map[*reader]struct{}{}, fetchMu: map[string]*sync.Mutex{},
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}), lostCh: make(chan struct{})}
	m.cond = sync.NewCond(&m.mu)
	if o.Prefix != "" {
		m.prefix = o.Prefix + "/"
	}
	if err := os.MkdirAll(filepath.Join(root, StateDir), 0o755); err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	st, err := m.loadState()
	if err != nil {
		return nil, err
	}
	m.writer = st.Writer
	m.lease, err = lease.Acquire(ctx, objs, lease.Options{Key: m.prefix + leaseKey, TTL: o.LeaseTTL, Holder: o.Holder, Writer: m.writer, Logger: m.log})
	if err != nil {
		return nil, fmt.Errorf("mirror: %s: %w", o.URL, err)
	}
	if err := m.claim(ctx, st); err != nil {
		m.lease.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	go func() {
		select {
		case <-m.lease.Lost():
			m.markLost()
		case <-m.quit:
		}
	}()
	m.cleanup(ctx)
	return m, nil
}

// loadState reads the cache's bookkeeping, making a new cache id for an
// empty directory. A directory with files but no bookkeeping is refused:
// it is not a cache of this run, and deleting it is not ours to decide.
func (m *Mirror) loadState() (state, error) {
	path := filepath.Join(m.root, StateDir, "state.json")
	b, err := os.ReadFile(path)
	if err == nil {
		var st state
		if jerr := json.Unmarshal(b, &st); jerr == nil && st.Writer != "" {
			if st.URL != m.o.URL {
				return st, fmt.Errorf("mirror: %s is the cache of %s, not of %s: give another cache directory", m.root, st.URL, m.o.URL)
			}
			if st.Files == nil {
				st.Files = map[string]fileStat{}
			}
			return st, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return state{}, fmt.Errorf("mirror: %w", err)
	}
	ents, err := os.ReadDir(m.root)
	if err != nil {
		return state{}, fmt.Errorf("mirror: %w", err)
	}
	for _, e := range ents {
		if e.Name() != StateDir && e.Name() != "lock" && !(e.Name() == WeightsDir && e.IsDir()) {
			return state{}, fmt.Errorf("mirror: %s holds files but is not a cache of %s (no %s): give an empty or new cache directory", m.root, m.o.URL, StateDir)
		}
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	st := state{URL: m.o.URL, Writer: hex.EncodeToString(id[:]), Files: map[string]fileStat{}}
	// Written durably before anything else: a cache whose id is lost
	// would have to be thrown away.
	return st, m.saveState(st)
}

func (m *Mirror) saveState(st state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	if err := store.WriteAtomic(store.OS, filepath.Join(m.root, StateDir, "state.json"), b); err != nil {
		return fmt.Errorf("mirror: cache state: %w", err)
	}
	return nil
}

// claim reads the manifest, keeps or empties the cache, and writes the
// manifest again under this epoch (If-Match), which fences the previous
// writer: its next manifest write fails.
func (m *Mirror) claim(ctx context.Context, st state) error {
	for {
		man, etag, err := m.retryManifest(ctx)
		if err != nil {
			return err
		}
		r := Resume{New: man == nil, Previous: m.lease.Previous()}
		if man == nil {
			man = &Manifest{Format: format, Files: map[string]*Entry{}}
		}
		r.Shipped, r.LogEnd, r.Files = man.Written, man.LogEnd, len(man.Files)
		for _, e := range man.Files {
			r.Bytes += e.Size
		}
		if !r.New && man.Writer == m.writer {
			r.LocalKept = true
			m.st = st.Files
		} else if err := m.emptyCache(); err != nil {
			return err
		} else {
			r.Discarded = len(st.Files) > 0
			m.st = map[string]fileStat{}
		}
		next := *man
		next.Epoch, next.Seq, next.Writer, next.Holder, next.Written = m.lease.Epoch(), man.Seq+1, m.writer, m.o.Holder, time.Now().UTC()
		tag, err := writeManifest(ctx, m.objs, m.prefix+manifestKey, &next, etag)
		if errors.Is(err, ErrFenced) {
			continue // the previous holder wrote once more before our claim: read it again
		}
		if err != nil {
			return fmt.Errorf("mirror: claiming %s: %w", m.o.URL, err)
		}
		m.man, m.etag, m.resume = &next, tag, r
		return m.saveState(state{URL: m.o.URL, Writer: m.writer, Files: m.st})
	}
}

// retryManifest reads the manifest, waiting out an outage.
func (m *Mirror) retryManifest(ctx context.Context) (*Manifest, string, error) {
	wait := time.Second
	for {
		man, etag, err := readManifest(ctx, m.objs, m.prefix+manifestKey)
		if err == nil || ctx.Err() != nil || errors.Is(err, errBadManifest) || bucket.Permanent(err) {
			return man, etag, err
		}
		m.log.Warn("mirror: bucket unreachable; retrying", "err", err, "in", wait)
		if !sleep(ctx, wait) {
			return nil, "", fmt.Errorf("mirror: %w (last error: %w)", ctx.Err(), err)
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// emptyCache removes the cache's files (the lock and the bookkeeping stay).
func (m *Mirror) emptyCache() error {
	ents, err := os.ReadDir(m.root)
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	for _, e := range ents {
		path := filepath.Join(m.root, e.Name())
		if e.Name() == StateDir || e.Name() == "lock" {
			continue
		}
		if e.Name() == WeightsDir && e.IsDir() {
			// Possibly a shared volume's mount point (deploy/kubernetes):
			// its content goes, the directory stays.
			path = filepath.Join(path, "*")
		}
		matches, _ := filepath.Glob(path)
		for _, p := range matches {
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("mirror: emptying the stale cache: %w", err)
			}
		}
	}
	return nil
}

// cleanup aborts multipart uploads a killed writer left and deletes the
// objects no manifest names that earlier epochs wrote (a lost writer's
// late uploads). Best effort: garbage costs storage, not correctness.
func (m *Mirror) cleanup(ctx context.Context) {
	if n, err := m.objs.AbortUploads(ctx, m.prefix+filesDir); err != nil {
		m.log.Warn("mirror: aborting unfinished uploads", "err", err)
	} else if n > 0 {
		m.resume.AbortedUploads = n
		m.log.Info("mirror: aborted unfinished multipart uploads of an earlier writer", "uploads", n)
	}
	objs, err := m.objs.List(ctx, m.prefix+filesDir)
	if err != nil {
		m.log.Warn("mirror: listing for cleanup", "err", err)
		return
	}
	m.mu.Lock()
	named := map[string]bool{}
	for _, e := range m.man.Files {
		for _, p := range e.Parts {
			named[p.Key] = true
		}
	}
	epoch := m.lease.Epoch()
	m.mu.Unlock()
	for _, o := range objs {
		k := o.Key[len(m.prefix):]
		if !named[k] && keyEpoch(k) < epoch {
			if err := m.objs.Delete(ctx, o.Key); err != nil {
				m.log.Warn("mirror: cleanup", "key", o.Key, "err", err)
			}
		}
	}
}

// Resume says what Open found.
func (m *Mirror) Resume() Resume { return m.resume }

// Root is the local cache directory.
func (m *Mirror) Root() string { return m.root }

// Epoch is this controller's lease epoch.
func (m *Mirror) Epoch() uint64 { return m.lease.Epoch() }

// Lost is closed when this controller lost the run: its lease taken
// over, or its manifest write refused.
func (m *Mirror) Lost() <-chan struct{} { return m.lostCh }

// Err is the reason the mirror stopped writing (ErrFenced or
// lease.ErrLost in its chain), or nil.
func (m *Mirror) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced != nil {
		return m.fenced
	}
	if err := m.lease.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return nil
}

// Close ships what is left (waiting up to ctx for the bucket), stops the
// syncer and releases the lease.
func (m *Mirror) Close(ctx context.Context) error {
	var err error
	if m.cut != nil && m.Err() == nil {
		err = m.Flush(ctx)
	}
	m.once.Do(func() { close(m.quit) })
	if m.cut != nil {
		<-m.done
	}
	m.mu.Lock()
	st := state{URL: m.o.URL, Writer: m.writer, Files: maps.Clone(m.st)}
	m.mu.Unlock()
	err = errors.Join(err, m.saveState(st))
	if m.Err() == nil && err == nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = m.lease.Release(rctx)
	} else {
		// Not released: the bucket may lack what this run did, so the next
		// controller must wait out the lease (and finds the log where the
		// bucket has it).
		m.lease.Stop()
	}
	m.closeReaders()
	return err
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
