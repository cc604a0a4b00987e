package runlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/internal/storage"
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
	// SnapshotChain is how many incremental snapshots may follow a base
	// snapshot before the next one is a base again (default 16).
	SnapshotChain int
	// Hook, when set, is called at named points inside the log
	// ("snapshot.write"); crash tests SIGKILL the process there.
	Hook func(point string)
	// OnAppend, when set, is told how long each successful Append waited
	// until its events were durable (the Prometheus log-latency histogram).
	OnAppend func(time.Duration)
	// FS is where every write goes (default: the OS); tests inject
	// faults through it.
	FS storage.FS
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

	reqc chan *request
	quit chan struct{}
	done chan struct{}
	once sync.Once

	// Owned by the stager goroutine.
	w         *State // durable state plus the appends staged or syncing
	chunkBase uint64 // the chunk being staged into
	chunkSize uint64 // its size including staged units
	pack      *packWriter
	scratch   []byte
	cur       *unit
	inflight  []*unit // handed to the syncer, maybe not yet published
	seq       uint64

	// Owned by the syncer goroutine.
	chunkF, packF storage.File

	freeChunk  chan []byte // written units' buffers, back to the stager
	freePack   chan []byte
	freeUnit   chan *unit    // written units, emptied, back to the stager
	readyc     chan time.Duration // the syncer is idle; how long its last write took
	unitc      chan *unit
	stagerDone chan struct{}
	published  uint64 // seq of the last published unit; under mu
	failed     error  // under mu

	snapMu sync.Mutex // one snapshot at a time
	chain  []snapMeta
}

type applied struct {
	ev  Event
	off Offset
}

type request struct {
	evs  []Event
	off  Offset
	err  error
	ok   bool
	done chan struct{} // buffered (1): answered by a send, so a request can be reused
}

// requests recycles Append's requests and their channels: an append per
// model call is the hot path, and each costs three allocations otherwise.
var requests = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

// answer tells the waiting Append that r is decided.
func (r *request) answer() { r.done <- struct{}{} }

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
	if opts.SnapshotChain <= 0 {
		opts.SnapshotChain = 16
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.FS == nil {
		opts.FS = storage.OS
	}
	l := &Log{
		opts:       opts,
		logger:     opts.Logger,
		logDir:     filepath.Join(dir, logSubdir),
		snapDir:    filepath.Join(dir, logSubdir, snapSubdir),
		dirty:      map[GroupID]struct{}{},
		reqc:       make(chan *request),
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
		readyc:     make(chan time.Duration),
		unitc:      make(chan *unit, 1),
		freeChunk:  make(chan []byte, 2),
		freePack:   make(chan []byte, 2),
		freeUnit:   make(chan *unit, 2),
		stagerDone: make(chan struct{}),
		cur:        &unit{seq: 1},
	}
	l.files.dir = l.logDir
	l.blobs.dir = l.logDir
	if err := opts.FS.MkdirAll(l.snapDir, 0o755); err != nil {
		return nil, fmt.Errorf("open run log: %w", err)
	}
	if err := l.recover(ctx); err != nil {
		l.files.close()
		return nil, err
	}
	go l.stager()
	go l.syncer()
	return l, nil
}

// recover replays the log into l.s and opens a fresh chunk for appends.
func (l *Log) recover(ctx context.Context) error {
	bases, err := listChunks(l.logDir)
	if err != nil {
		return err
	}
	var filesEnd uint64
	if n := len(bases); n > 0 {
		fi, err := os.Stat(filepath.Join(l.logDir, chunkName(bases[n-1])))
		if err != nil {
			return fmt.Errorf("open run log: %w", err)
		}
		filesEnd = bases[n-1] + uint64(fi.Size())
	}
	verified := l.readWatermark()
	if filesEnd < verified {
		return &ShortLogError{Path: lastChunkPath(l.logDir, bases), End: filesEnd, Expected: verified, By: "the verified watermark"}
	}
	st, from, chain, err := l.loadSnapshots(filesEnd)
	if err != nil {
		return err
	}
	l.chain = chain
	var end uint64
	for i, base := range bases {
		if err := ctx.Err(); err != nil {
			return err
		}
		last := i == len(bases)-1
		if i > 0 && base != end {
			return &CorruptionError{Path: chunkName(base), Offset: Offset(end), Err: corruptf("chunk starts at %d, previous one ends at %d", base, end)}
		}
		path := filepath.Join(l.logDir, chunkName(base))
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("open run log: %w", err)
		}
		size := base + uint64(len(b))
		if from >= size && from > base {
			end = size // covered by the snapshot
			continue
		}
		start := 0
		if from > base {
			start = int(from - base)
		}
		res, err := scanChunk(b, base, start, func(off Offset, p []byte) error {
			ev, err := decodeEvent(p)
			if err == nil {
				err = ApplyAt(st, ev, off)
			}
			if err == nil {
				l.markDirty(ev)
			}
			if err != nil {
				return &CorruptionError{Path: path, Offset: off, Err: fmt.Errorf("replay: %w", err)}
			}
			return nil
		})
		if err != nil {
			return err
		}
		end = base + uint64(res.end)
		if res.err == nil {
			continue
		}
		if !last || !res.torn {
			return &CorruptionError{Path: path, Offset: Offset(base + uint64(res.damage)), Err: res.err}
		}
		l.recovery = Recovery{Truncated: true, File: path, Offset: Offset(end), Bytes: int64(len(b) - res.end), Records: res.dropped, Message: res.err.Error()}
		l.logger.Warn("runlog: cut torn tail", "segment", path, "offset", end, "bytes", l.recovery.Bytes, "records", res.dropped, "reason", res.err)
		if err := l.opts.FS.Truncate(path, int64(res.end)); err != nil {
			return fmt.Errorf("cut torn tail: %w", err)
		}
		if err := storage.SyncFile(l.opts.FS, path); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	if n := len(bases); n > 0 {
		// A chunk with no records (or a torn header) is replaced by a
		// fresh one at the same base.
		if last := bases[n-1]; end-last <= chunkHeaderSize {
			for _, name := range []string{chunkName(last), packName(last)} {
				if err := l.opts.FS.Remove(filepath.Join(l.logDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("open run log: %w", err)
				}
			}
			bases = bases[:n-1]
			end = last
		}
	}
	if from > end {
		return &ShortLogError{Path: lastChunkPath(l.logDir, bases), End: end, Expected: from, By: "the loaded snapshot"}
	}
	if end < verified {
		return &ShortLogError{Path: lastChunkPath(l.logDir, bases), End: end, Expected: verified, By: "the verified watermark"}
	}
	if err := l.verifyRange(ctx, bases, verified, end); err != nil {
		return err
	}
	if err := l.writeWatermark(end); err != nil {
		return err
	}
	chunk, pack, err := createChunk(l.opts.FS, l.logDir, end)
	if err != nil {
		return err
	}
	l.s, l.w = st, st.Clone()
	l.chunks = append(bases, end)
	l.chunkF, l.packF = chunk, pack
	l.chunkBase, l.chunkSize = end, chunkHeaderSize
	l.pack = newPackWriter(end)
	l.end = Offset(end + chunkHeaderSize)
	return nil
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

// Append validates evs in order with Apply, writes them as one atomic
// append, fsyncs, and applies them to the state. It returns the offset of
// the first event once all are durable. If any event is invalid nothing is
// written and the error says which. Concurrent Appends share one fsync.
//
// Once an append has been handed to the writer, Append waits for its
// outcome even if ctx is cancelled: the append may already be durable.
func (l *Log) Append(ctx context.Context, evs ...Event) (Offset, error) {
	if len(evs) == 0 {
		return 0, errors.New("runlog: append of no events")
	}
	var t0 time.Time
	if l.opts.OnAppend != nil {
		t0 = time.Now()
	}
	req := requests.Get().(*request)
	// A copy, so the caller's variadic slice does not escape to the heap.
	req.evs = append(req.evs[:0], evs...)
	defer func() {
		clear(req.evs)
		req.evs, req.off, req.err = req.evs[:0], 0, nil
		requests.Put(req)
	}()
	select {
	case l.reqc <- req:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-l.quit:
		return 0, ErrClosed
	}
	<-req.done
	if req.err == nil && l.opts.OnAppend != nil {
		l.opts.OnAppend(time.Since(t0))
	}
	return req.off, req.err
}

// A unit is a batch of appends staged together and made durable by one
// fsync (two when it carries blobs: the pack first).
type unit struct {
	seq      uint64
	reqs     []*request
	recs     []byte    // framed records, for the chunk file
	pack     []byte    // blob frames
	acc      []applied // the accepted events, with offsets
	end      Offset    // log end once written
	roll     bool      // start the next chunk at nextBase afterwards
	nextBase uint64
}

// Group commit runs as a two-stage pipeline. The stager validates (Apply on
// its private state w), encodes and buffers appends into a unit; the syncer
// writes and fsyncs one unit at a time and then publishes it. Every append
// that arrives while the syncer is in fsync joins the next unit, so one
// fsync acknowledges them all.
//
// Handing the staged unit over the moment the syncer goes idle splits the
// appenders into cohorts that never merge again: the ones just answered
// are still on their way back when the next fsync starts without them, so
// with 64 writers a round of appends cost three to four fsyncs. So when
// the syncer goes idle the stager expects back every appender of the unit
// just written plus the ones already waiting, and lingers until that many
// appends are staged, for at most as long as the last write took (the
// wait an appender that misses the unit would have anyway). No append is
// answered before its fsync: only when the fsync starts moves.
func (l *Log) stager() {
	defer close(l.stagerDone)
	var (
		idle    bool          // the syncer waits for a unit
		want    int           // appends expected before handing off
		linger  time.Duration // the longest wait for them
		lastLen int           // appends in the unit handed off last
		timer   = time.NewTimer(time.Hour)
		timing  bool
	)
	timer.Stop()
	handOff := func() {
		if timing {
			timer.Stop()
			timing = false
		}
		lastLen = len(l.cur.reqs)
		idle = false
		l.handOff()
	}
	for {
		n := len(l.cur.reqs)
		if idle && n > 0 {
			if n >= want || n >= l.opts.MaxBatch || linger <= 0 {
				handOff()
				continue
			}
			if !timing {
				timer.Reset(linger)
				timing = true
			}
		}
		reqc, readyc, timerc := l.reqc, l.readyc, (<-chan time.Time)(nil)
		if n >= l.opts.MaxBatch {
			reqc = nil
		}
		if idle {
			readyc = nil
		}
		if timing {
			timerc = timer.C
		}
		select {
		case r := <-reqc:
			l.stage(r)
		case took := <-readyc:
			idle, want = true, lastLen+n
			linger = min(took, maxLinger)
		case <-timerc:
			timing = false
			if len(l.cur.reqs) > 0 {
				handOff()
			}
		case <-l.quit:
			if len(l.cur.reqs) > 0 {
				if !idle {
					<-l.readyc
				}
				l.handOff()
			}
			return
		}
	}
}

// maxLinger bounds the stager's wait for a fuller unit, whatever the last
// fsync took.
const maxLinger = 2 * time.Millisecond

func (l *Log) failure() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.failed
}

// stage validates and encodes one append into the current unit, or
// answers it with the reason it was rejected.
func (l *Log) stage(r *request) {
	if err := l.failure(); err != nil {
		r.err = err
		r.answer()
		return
	}
	u := l.cur
	bm, pm, am := len(u.recs), l.pack.mark(), len(u.acc)
	pos := l.chunkBase + l.chunkSize
	r.off = Offset(pos + uint64(bm))
	var err error
	for i, ev := range r.evs {
		off := Offset(pos + uint64(len(u.recs)))
		// Validate first so a rejected event never reaches the pack.
		if err = ApplyAt(l.w, ev, off); err != nil {
			break
		}
		u.acc = append(u.acc, applied{ev, off})
		var p []byte
		if p, err = encodeEvent(l.scratch[:0], ev, l.pack.put); err != nil {
			break
		}
		l.scratch = p
		var flags byte
		if i == len(r.evs)-1 {
			flags = flagCommit
		}
		u.recs = appendFrame(u.recs, p, flags)
	}
	if err == nil {
		u.reqs = append(u.reqs, r)
		return
	}
	u.recs = u.recs[:bm]
	l.pack.rollback(pm)
	if len(u.acc) > am {
		// Earlier events of this append reached w: rebuild it.
		u.acc = u.acc[:am]
		l.rebuildW()
	}
	r.err = err
	r.answer()
}

// rebuildW recomputes the stager's state as the durable state plus every
// accepted event not yet published.
func (l *Log) rebuildW() {
	l.mu.RLock()
	w, pub := l.s.Clone(), l.published
	l.mu.RUnlock()
	for _, u := range append(l.inflight, l.cur) {
		if u.seq <= pub {
			continue
		}
		for _, a := range u.acc {
			if err := ApplyAt(w, a.ev, a.off); err != nil {
				panic(fmt.Sprintf("runlog: re-applying an accepted event failed: %v", err))
			}
		}
	}
	l.w = w
}

// handOff gives the current unit to the syncer (which is idle).
func (l *Log) handOff() {
	u := l.cur
	u.pack = l.pack.take()
	l.chunkSize += uint64(len(u.recs))
	u.end = Offset(l.chunkBase + l.chunkSize)
	if int64(l.chunkSize) >= l.opts.ChunkSize {
		u.roll, u.nextBase = true, l.chunkBase+l.chunkSize
		l.chunkBase, l.chunkSize = u.nextBase, chunkHeaderSize
		l.pack = newPackWriter(u.nextBase)
	}
	l.mu.RLock()
	pub := l.published
	l.mu.RUnlock()
	keep := l.inflight[:0]
	for _, v := range l.inflight {
		if v.seq > pub {
			keep = append(keep, v)
		}
	}
	l.inflight = append(keep, u)
	l.seq++
	// A recycled unit was published before the syncer went idle, so the
	// filter above has dropped it from inflight: rebuildW never sees it
	// twice.
	l.cur = l.unit()
	l.cur.seq, l.cur.recs = l.seq+1, l.buffer(l.freeChunk)
	l.pack.buf = l.buffer(l.freePack)
	l.unitc <- u
}

// buffer returns a written unit's buffer for reuse, or nil (the stager).
func (l *Log) buffer(free chan []byte) []byte {
	select {
	case b := <-free:
		return b
	default:
		return nil
	}
}

// unit returns an empty unit for staging: a written one back from the
// syncer (its slices keep their capacity), or a new one.
func (l *Log) unit() *unit {
	select {
	case u := <-l.freeUnit:
		// Emptied here, not by the syncer: until the stager filters it out
		// of inflight, rebuildW may still read its seq.
		*u = unit{reqs: u.reqs[:0], acc: u.acc[:0]}
		return u
	default:
		return &unit{}
	}
}

// recycle hands a written unit and its buffers back to the stager (the
// syncer): once written and answered, nothing reads them.
func (l *Log) recycle(u *unit) {
	give := func(free chan []byte, b []byte) {
		if cap(b) == 0 || cap(b) > maxRecycled {
			return
		}
		select {
		case free <- b[:0]:
		default:
		}
	}
	give(l.freeChunk, u.recs)
	give(l.freePack, u.pack)
	u.recs, u.pack = nil, nil
	clear(u.acc) // the events: let them be collected (rebuildW skips a published unit)
	if cap(u.reqs) > 1<<16 || cap(u.acc) > 1<<16 {
		return
	}
	select {
	case l.freeUnit <- u:
	default:
	}
}

// maxRecycled bounds the buffers kept for reuse, so one huge append does
// not pin its memory for the rest of the run.
const maxRecycled = 4 << 20

func (l *Log) syncer() {
	defer close(l.done)
	var took time.Duration
	for {
		select {
		case l.readyc <- took:
		case <-l.stagerDone:
			return
		}
		var u *unit
		select {
		case u = <-l.unitc:
		case <-l.stagerDone:
			// The stager's last unit may be waiting: it is written too.
			select {
			case u = <-l.unitc:
				l.sync(u)
			default:
			}
			return
		}
		t0 := time.Now()
		l.sync(u)
		took = time.Since(t0)
	}
}

// sync makes one unit durable, publishes it and answers its appends.
func (l *Log) sync(u *unit) {
	defer func() {
		for _, r := range u.reqs {
			r.answer()
		}
		clear(u.reqs) // the requests are reused once answered
		l.recycle(u)
	}()
	err := l.failure()
	if err == nil && len(u.pack) > 0 {
		if _, err = l.packF.Write(u.pack); err == nil {
			err = l.packF.Sync()
		}
		if err != nil {
			err = fmt.Errorf("write pack: %w", err)
		}
	}
	if err == nil {
		if _, err = l.chunkF.Write(u.recs); err == nil {
			err = l.chunkF.Sync()
		}
		if err != nil {
			err = fmt.Errorf("write chunk: %w", err)
		}
	}
	if err != nil {
		l.fail(err)
		for _, r := range u.reqs {
			r.err = l.failure()
		}
		return
	}
	l.mu.Lock()
	for _, a := range u.acc {
		if err := ApplyAt(l.s, a.ev, a.off); err != nil {
			l.mu.Unlock()
			panic(fmt.Sprintf("runlog: durable state rejected an event the stager accepted: %v", err))
		}
		l.markDirty(a.ev)
	}
	l.end, l.published = u.end, u.seq
	l.mu.Unlock()
	if u.roll {
		if err := l.roll(u.nextBase); err != nil {
			l.fail(err)
		}
	}
}

// fail marks the log failed: after a failed write or fsync nothing about
// the file can be trusted, so every later append is refused.
func (l *Log) fail(err error) {
	l.logger.Error("runlog: append failed", "err", err)
	l.mu.Lock()
	if l.failed == nil {
		l.failed = fmt.Errorf("runlog: log failed: %w", err)
	}
	l.mu.Unlock()
}

// roll closes the full chunk and starts the next one at base.
func (l *Log) roll(base uint64) error {
	if err := l.chunkF.Close(); err != nil {
		return fmt.Errorf("close chunk: %w", err)
	}
	if err := l.packF.Close(); err != nil {
		return fmt.Errorf("close pack: %w", err)
	}
	chunk, pack, err := createChunk(l.opts.FS, l.logDir, base)
	if err != nil {
		return err
	}
	l.chunkF, l.packF = chunk, pack
	l.mu.Lock()
	l.chunks = append(l.chunks, base)
	l.end = Offset(base + chunkHeaderSize)
	l.mu.Unlock()
	return nil
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
		close(l.quit)
		<-l.done
		err = errors.Join(l.chunkF.Close(), l.packF.Close())
		l.files.close()
		l.blobs.close()
	})
	return err
}

// Events calls fn for every event of the log, in order, with tokens read
// from the blob store. It stops at the first error fn returns.
func (l *Log) Events(ctx context.Context, fn func(off Offset, ev Event) error) error {
	l.mu.RLock()
	end, chunks := l.end, slices.Clone(l.chunks)
	l.mu.RUnlock()
	return scanLog(ctx, l.logDir, chunks, uint64(end), false, func(off Offset, ev Event) error {
		ev, err := materialize(&l.blobs, ev)
		if err != nil {
			return err
		}
		return fn(off, ev)
	}, nil)
}

// scanLog decodes every committed event of the chunks up to end. With
// tolerateTail, a torn tail of the last chunk ends the scan and is
// reported through tail instead of failing.
func scanLog(ctx context.Context, dir string, chunks []uint64, end uint64, tolerateTail bool, fn func(Offset, Event) error, tail *Recovery) error {
	for i, base := range chunks {
		if base >= end {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(dir, chunkName(base))
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read run log: %w", err)
		}
		if uint64(len(b)) > end-base {
			b = b[:end-base]
		}
		res, err := scanChunk(b, base, 0, func(off Offset, p []byte) error {
			ev, err := decodeEvent(p)
			if err != nil {
				return &CorruptionError{Path: path, Offset: off, Err: err}
			}
			return fn(off, ev)
		})
		if err != nil {
			return err
		}
		if res.err != nil {
			if tolerateTail && res.torn && i == len(chunks)-1 {
				if tail != nil {
					*tail = Recovery{Truncated: true, File: path, Offset: Offset(base + uint64(res.end)), Bytes: int64(len(b) - res.end), Records: res.dropped, Message: res.err.Error()}
				}
				return nil
			}
			return &CorruptionError{Path: path, Offset: Offset(base + uint64(res.damage)), Err: res.err}
		}
	}
	return nil
}

// materialize replaces a call record's blob references with its tokens.
func materialize(br *blobReader, ev Event) (Event, error) {
	cr, ok := ev.(*callRecord)
	if !ok {
		return ev, nil
	}
	c := cr.CallFinished
	if cr.mode == tokensBlobs {
		sb, err := br.get(cr.suffix)
		if err != nil {
			return nil, err
		}
		mb, err := br.get(cr.sampled)
		if err != nil {
			return nil, err
		}
		c.PromptSuffix = getTokens(sb)
		c.Sampled = getTokens(mb[:4*cr.nSampled])
		c.Logprobs = getFloats(mb[4*cr.nSampled:])
	}
	return c, nil
}

// RolloutEvents returns the events of one rollout in log order, with
// tokens: what a resumed rollout replays. It reads only that rollout's
// records, located through the state's index.
func (l *Log) RolloutEvents(id RolloutID) ([]Event, error) {
	var offs []Offset
	var chunks []uint64
	var err error
	l.View(func(s *State) {
		r, e := s.rollout(id)
		if e != nil {
			err = e
			return
		}
		offs = slices.Clone(r.Events)
		chunks = slices.Clone(l.chunks)
	})
	if err != nil {
		return nil, fmt.Errorf("rollout events: %w", err)
	}
	evs := make([]Event, 0, len(offs))
	for _, off := range offs {
		ev, err := l.eventAt(chunks, off)
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// eventAt reads, checks and decodes the record at off.
func (l *Log) eventAt(chunks []uint64, off Offset) (Event, error) {
	i := sort.Search(len(chunks), func(i int) bool { return chunks[i] > uint64(off) }) - 1
	if i < 0 {
		return nil, fmt.Errorf("runlog: offset %d before the first chunk", off)
	}
	name := chunkName(chunks[i])
	f, err := l.files.file(name)
	if err != nil {
		return nil, err
	}
	pos := int64(uint64(off) - chunks[i])
	var h [frameHeaderSize]byte
	if _, err := f.ReadAt(h[:], pos); err != nil {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: fmt.Errorf("%w: read record: %w", ErrCorrupt, err)}
	}
	n := int(uint32(h[0]) | uint32(h[1])<<8 | uint32(h[2])<<16 | uint32(h[3])<<24)
	if n > maxPayload {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: corruptf("frame length %d", n)}
	}
	b := make([]byte, frameHeaderSize+n)
	if _, err := f.ReadAt(b, pos); err != nil {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: fmt.Errorf("%w: read record: %w", ErrCorrupt, err)}
	}
	p, _, _, err := parseFrame(b)
	if err != nil {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: err}
	}
	ev, err := decodeEvent(p)
	if err != nil {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: err}
	}
	return materialize(&l.blobs, ev)
}

// fileCache keeps read-only handles on the log's files.
type fileCache struct {
	dir   string
	mu    sync.Mutex
	files map[string]*os.File
}

func (c *fileCache) file(name string) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.files[name]; f != nil {
		return f, nil
	}
	f, err := os.Open(filepath.Join(c.dir, name))
	if err != nil {
		return nil, fmt.Errorf("runlog: %w", err)
	}
	if c.files == nil {
		c.files = map[string]*os.File{}
	}
	c.files[name] = f
	return f, nil
}

func (c *fileCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.files {
		f.Close()
	}
	c.files = nil
}

// Context returns the rollout's current context: the prompt of its latest
// selected call followed by that call's sampled tokens (what the next
// call's PromptPrefix counts into). It is nil before the first call.
func (l *Log) Context(id RolloutID) ([]int32, error) {
	evs, err := l.RolloutEvents(id)
	if err != nil {
		return nil, err
	}
	ctx, _ := Contexts(evs)
	return ctx, nil
}

// Contexts folds a rollout's events (as RolloutEvents returns them) into
// its current context and the full prompt of every call, in call order.
func Contexts(evs []Event) (ctx []int32, prompts [][]int32) {
	for _, ev := range evs {
		c, ok := ev.(CallFinished)
		if !ok {
			continue
		}
		p := make([]int32, 0, int(c.PromptPrefix)+len(c.PromptSuffix))
		p = append(p, ctx[:min(int(c.PromptPrefix), len(ctx))]...)
		p = append(p, c.PromptSuffix...)
		prompts = append(prompts, p)
		if c.Selected {
			ctx = append(slices.Clip(p), c.Sampled...)
		}
	}
	return ctx, prompts
}
