package runlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/store"
)

// ErrClosed is returned by calls on a closed Log.
var ErrClosed = errors.New("runlog: log closed")

// Options configure a Log. The zero value is usable.
type Options struct {
	// ChunkSize is the size at which a chunk is closed and the next
	// one started (default 64 MiB).
	ChunkSize int64
	// Logger receives recovery and snapshot reports (default: discard).
	Logger *slog.Logger
	// NoGroupCommit makes every Append its own fsync: the baseline the
	// benchmarks compare group commit against.
	NoGroupCommit bool
	// MaxBatch bounds the appends that share one fsync (default 1024).
	MaxBatch int
	// MaxDefer bounds how long a staged append (Stage) that nobody waits
	// on may stay unwritten (default 100 ms): the work a crash can cost,
	// never what it can break. Negative: written at once, as an Append.
	MaxDefer time.Duration
	// SnapshotChain is how many incremental snapshots may follow a base
	// snapshot before the next one is a base again (default 16).
	SnapshotChain int
	// Hook, when set, is called at named points inside the log
	// ("snapshot.write"); crash tests SIGKILL the process there.
	Hook func(point string)
	// OnAppend, when set, is told how long each successful Append waited
	// until its events were durable (the Prometheus log-latency histogram).
	OnAppend func(time.Duration)
	// OnMilestone, when set, is called from the log's writer after a
	// SnapshotWritten or CheckpointDurable became durable (a mirrored run
	// directory ships its files then). It must not block.
	OnMilestone func()
	// FS is where every write goes (default: the OS); tests inject
	// faults through it.
	FS store.FS
	// ScrubRate bounds the reads of the pass after Open that checks every
	// older chunk against its seal (scrub.go), in bytes a second (default
	// 64 MiB/s). Negative: no pass.
	ScrubRate int64
}

// Dir layout under the run directory.
const (
	logSubdir  = "runlog"
	snapSubdir = "snap"
)

// Log is an open run log. Append is safe for concurrent use; appends from
// many goroutines share fsyncs (group commit).
type Log struct {
	opts    Options
	logger  *slog.Logger
	logDir  string
	snapDir string

	mu     sync.RWMutex
	s      *State // durable state: every event in it is on disk
	end    Offset // durable end of the log
	chunks []uint64
	dirty  map[GroupID]struct{} // groups changed since the last snapshot
	// forceBase: a Rewound shrank the trained list since the last
	// snapshot, so the next one cannot be a delta.
	forceBase bool

	recovery Recovery
	files    fileCache
	blobs    blobReader

	quit chan struct{}
	done chan struct{}
	once sync.Once

	// Under stageMu: what Append stages into and the syncer takes.
	stageMu   sync.Mutex
	room      *sync.Cond    // the current unit has room (MaxBatch) or the log closed
	kick      chan struct{} // wakes the syncer; buffered (1)
	idle      bool          // the syncer waits for a unit
	want      int           // appends the idle syncer expects before it writes
	waited    bool          // an append of the current unit is waited on
	first     time.Time     // when the current unit's first append was staged
	closed    bool
	w         *State // durable state plus the appends staged or syncing
	chunkBase uint64 // the chunk being staged into
	chunkSize uint64 // its size including staged units
	pack      *packWriter
	scratch   []byte
	cur       *unit
	inflight  []*unit // handed to the syncer, maybe not yet published
	seq       uint64

	// Owned by the syncer goroutine.
	chunkF, packF store.File
	sealer        sealer

	freeChunk chan []byte // written units' buffers, for the next units
	freePack  chan []byte
	freeUnit  chan *unit // written units, emptied, for reuse
	published uint64     // seq of the last published unit; under mu
	failed    error      // under mu

	snapMu sync.Mutex // one snapshot at a time
	chain  []snapMeta

	scrub scrubState
}

// Open opens the run log under dir (the run directory; files go to
// dir/runlog), creating it if absent. It cuts a torn tail (see Recovery),
// loads the newest valid snapshot and replays the log after it. A corrupt
// record in the middle of the log is an error (*CorruptionError).
func Open(ctx context.Context, dir string, opts Options) (*Log, error) {
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = 64 << 20
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 1024
	}
	if opts.NoGroupCommit {
		opts.MaxBatch = 1
	}
	if opts.MaxDefer == 0 {
		opts.MaxDefer = 100 * time.Millisecond
	}
	if opts.SnapshotChain <= 0 {
		opts.SnapshotChain = 16
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.FS == nil {
		opts.FS = store.OS
	}
	l := &Log{
		opts:      opts,
		logger:    opts.Logger,
		logDir:    filepath.Join(dir, logSubdir),
		snapDir:   filepath.Join(dir, logSubdir, snapSubdir),
		dirty:     map[GroupID]struct{}{},
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		kick:      make(chan struct{}, 1),
		idle:      true,
		freeChunk: make(chan []byte, 2),
		freePack:  make(chan []byte, 2),
		freeUnit:  make(chan *unit, 2),
		cur:       &unit{seq: 1},
	}
	l.files.dir, l.files.fs = l.logDir, opts.FS
	l.blobs.dir, l.blobs.fs = l.logDir, opts.FS
	if err := opts.FS.MkdirAll(l.snapDir, 0o755); err != nil {
		return nil, fmt.Errorf("open run log: %w", err)
	}
	if err := l.recover(ctx); err != nil {
		l.files.close()
		return nil, err
	}
	l.room = sync.NewCond(&l.stageMu)
	go l.syncer()
	l.startScrub(l.chunks[:len(l.chunks)-1])
	return l, nil
}

// Recovery reports what Open cut from a torn tail.
func (l *Log) Recovery() Recovery { return l.recovery }

// End returns the durable end of the log: the offset the next record gets.
func (l *Log) End() Offset {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.end
}

// View calls fn with the current durable state under a read lock. fn must
// not mutate s nor keep references into it after returning.
func (l *Log) View(fn func(s *State)) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	fn(l.s)
}

// ViewStaged is View over the state with every staged append applied,
// durable or not (what Stage validated against). A decision taken from it
// may rest on records a crash would lose, so whatever acts on it outside
// the process must first wait for an append staged after it: durability
// is a prefix of the staging order. fn runs under the staging lock and
// must neither stage nor wait.
func (l *Log) ViewStaged(fn func(s *State)) {
	l.stageMu.Lock()
	defer l.stageMu.Unlock()
	fn(l.w)
}

// markDirty records what an event changed, for incremental snapshots.
func (l *Log) markDirty(ev Event) {
	if ev.Kind() == KindRewound {
		l.forceBase = true
	}
	markDirty(l.dirty, ev)
}

// markDirty records the groups an event changed.
func markDirty(d map[GroupID]struct{}, ev Event) {
	switch v := ev.(type) {
	case PromptAdmitted:
		d[v.Group] = struct{}{}
	case AttemptStarted:
		d[v.Rollout.Group] = struct{}{}
	case CallFinished:
		d[v.Rollout.Group] = struct{}{}
	case *callRecord:
		d[v.Rollout.Group] = struct{}{}
	case EnvStep:
		d[v.Rollout.Group] = struct{}{}
	case Compaction:
		d[v.Rollout.Group] = struct{}{}
	case RolloutSealed:
		d[v.Rollout.Group] = struct{}{}
	case RolloutFailed:
		d[v.Rollout.Group] = struct{}{}
	case GroupCommitted:
		d[v.Group] = struct{}{}
	case GroupDropped:
		d[v.Group] = struct{}{}
	case GroupRequeued:
		d[v.Group] = struct{}{}
	case RolloutRegenerated:
		d[v.Rollout.Group] = struct{}{}
	case StepTrained:
		for _, g := range v.Groups {
			d[g] = struct{}{}
		}
	}
}

// Close stops the writer and closes the files. Appends in flight finish
// first; later ones return ErrClosed.
func (l *Log) Close() error {
	var err error
	l.once.Do(func() {
		l.scrub.stop() // its appends go through the syncer: stop it first
		<-l.scrub.done
		close(l.quit)
		<-l.done
		err = errors.Join(l.chunkF.Close(), l.packF.Close())
		l.files.close()
		l.blobs.close()
	})
	return err
}
