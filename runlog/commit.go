package runlog

// This file holds the append path: Append, and the group commit pipeline
// (staging under stageMu, then the syncer) that makes appends durable.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

type applied struct {
	ev  Event
	off Offset
}

type request struct {
	evs  []Event
	off  Offset
	err  error
	ok   bool
	seq  uint64        // the unit it was staged into
	done chan struct{} // buffered (1): answered by a send, so a request can be reused
}

// requests recycles Append's requests and their channels: an append per
// model call is the hot path, and each costs three allocations otherwise.
var requests = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

// answer tells the waiting Append that r is decided.
func (r *request) answer() { r.done <- struct{}{} }

// Append validates evs in order with Apply, writes them as one atomic
// append, fsyncs, and applies them to the state. It returns the offset of
// the first event once all are durable. If any event is invalid nothing is
// written and the error says which. Concurrent Appends share one fsync.
//
// ctx is checked once, before the events are staged: once staged, Append
// waits for their outcome even if ctx is cancelled (the append may already
// be durable). After Close it returns ErrClosed.
func (l *Log) Append(ctx context.Context, evs ...Event) (Offset, error) {
	s, err := l.Stage(ctx, evs...)
	if err != nil {
		return 0, err
	}
	return s.Wait()
}

// Staged is an append that Stage validated and ordered but that may not be
// durable yet. Wait must be called exactly once.
type Staged struct {
	l   *Log
	req *request
	t0  time.Time
}

// Stage is the first half of Append: it validates evs and stages them as
// one atomic append, ordered after every append staged before it, and
// returns without waiting for the fsync. An invalid event, a failed or
// closed log, or a done ctx is reported here and nothing is staged.
//
// Durability is a prefix of the staging order: once an append staged
// later is durable, so is this one. That lets a caller whose next effect
// stays inside the process go on before the fsync, and wait (here, or on a
// later Append) only before an effect outside it.
//
// A staged append is written when one of its unit's appends is waited on
// (Wait, Append), or Options.MaxDefer after the unit's first append, or
// when the unit is full or the log closes: appends staged while nothing
// waits share one fsync however long they take to come.
func (l *Log) Stage(ctx context.Context, evs ...Event) (Staged, error) {
	if len(evs) == 0 {
		return Staged{}, errors.New("runlog: append of no events")
	}
	if err := ctx.Err(); err != nil {
		return Staged{}, err
	}
	s := Staged{l: l}
	if l.opts.OnAppend != nil {
		s.t0 = time.Now()
	}
	req := requests.Get().(*request)
	// A copy, so the caller's variadic slice does not escape to the heap.
	req.evs = append(req.evs[:0], evs...)
	s.req = req
	l.stageMu.Lock()
	for len(l.cur.reqs) >= l.opts.MaxBatch && !l.closed {
		l.room.Wait()
	}
	if l.closed {
		l.stageMu.Unlock()
		s.release()
		return Staged{}, ErrClosed
	}
	if err := l.stage(req); err != nil {
		l.stageMu.Unlock()
		s.release()
		return Staged{}, err
	}
	n := len(l.cur.reqs)
	if n == 1 {
		l.first = time.Now()
	}
	// The first append wakes the syncer to time the unit's deferral; a
	// waited unit, once it holds the appends the syncer expects.
	kick := l.idle && n > 0 && (n == 1 || ((l.waited || l.opts.MaxDefer < 0) && n >= l.want) || n >= l.opts.MaxBatch)
	l.stageMu.Unlock()
	if kick {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return s, nil
}

// Wait returns the offset of the staged append's first event once all its
// events are durable, or the error that failed the log.
func (s Staged) Wait() (Offset, error) {
	s.l.urge(s.req)
	<-s.req.done
	off, err := s.req.off, s.req.err
	if err == nil && s.l.opts.OnAppend != nil {
		s.l.opts.OnAppend(time.Since(s.t0))
	}
	s.release()
	return off, err
}

// urge tells the syncer that r is waited on, if its unit is still being
// staged (a unit already taken is being written anyway).
func (l *Log) urge(r *request) {
	l.stageMu.Lock()
	kick := false
	if r.seq == l.cur.seq && !l.waited {
		l.waited, kick = true, l.idle
	}
	l.stageMu.Unlock()
	if kick {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// release recycles the request once nothing will answer it again.
func (s Staged) release() {
	r := s.req
	clear(r.evs)
	r.evs, r.off, r.err = r.evs[:0], 0, nil
	requests.Put(r)
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

// Group commit runs as a two-stage pipeline. Append validates (Apply on
// the staged state w), encodes and buffers its events into the current
// unit under stageMu, in the caller's goroutine; the syncer takes the unit,
// writes and fsyncs it and then publishes it and answers its appends. Every
// append that arrives while the syncer is in fsync joins the next unit, so
// one fsync acknowledges them all.
//
// Taking the staged unit the moment the syncer goes idle splits the
// appenders into cohorts that never merge again: the ones just answered
// are still on their way back when the next fsync starts without them, so
// with 64 writers a round of appends cost three to four fsyncs. So when
// the syncer goes idle it expects back every appender of the unit just
// written plus the ones already waiting, and lingers until that many
// appends are staged (the append that completes the count wakes it), for
// at most as long as the last write took (the wait an appender that misses
// the unit would have anyway). No append is answered before its fsync:
// only when the fsync starts moves. A unit that only holds staged appends
// nobody waits on yet is not written before Options.MaxDefer (Stage).
func (l *Log) syncer() {
	defer close(l.done)
	var (
		linger     time.Duration // the longest wait for a full unit
		lastLen    int           // appends in the unit written last
		lingerFrom time.Time     // when the wait for a fuller waited unit began
		timer      = time.NewTimer(time.Hour)
	)
	timer.Stop()
	for {
		l.stageMu.Lock()
		n := len(l.cur.reqs)
		if n == 0 && l.closed {
			l.stageMu.Unlock()
			return
		}
		write, wake := false, time.Time{} // wake: when to look again
		if n > 0 {
			now := time.Now()
			switch {
			case l.closed || n >= l.opts.MaxBatch:
				write = true
			case l.waited || l.opts.MaxDefer < 0:
				if lingerFrom.IsZero() {
					lingerFrom = now
				}
				wake = lingerFrom.Add(linger)
				write = n >= l.want || !now.Before(wake)
			default: // staged only: deferred
				wake = l.first.Add(l.opts.MaxDefer)
				write = !now.Before(wake)
			}
		}
		if write {
			u := l.take()
			l.idle, l.waited, lastLen, lingerFrom = false, false, n, time.Time{}
			l.room.Broadcast()
			l.stageMu.Unlock()
			timer.Stop()
			t0 := time.Now()
			l.sync(u)
			linger = min(time.Since(t0), maxLinger)
			l.stageMu.Lock()
			l.idle, l.want = true, lastLen+len(l.cur.reqs)
			l.stageMu.Unlock()
			continue
		}
		l.stageMu.Unlock()
		var timerc <-chan time.Time
		if !wake.IsZero() {
			timer.Reset(time.Until(wake))
			timerc = timer.C
		}
		select {
		case <-l.kick:
		case <-timerc:
		case <-l.quit:
			l.stageMu.Lock()
			l.closed = true
			l.room.Broadcast()
			l.stageMu.Unlock()
		}
	}
}

// maxLinger bounds the syncer's wait for a fuller unit, whatever the last
// fsync took.
const maxLinger = 2 * time.Millisecond

func (l *Log) failure() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.failed
}

// stage validates and encodes one append into the current unit, or
// returns the reason it was rejected (nothing of it staged).
func (l *Log) stage(r *request) error {
	if err := l.failure(); err != nil {
		return err
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
		r.seq = u.seq
		return nil
	}
	u.recs = u.recs[:bm]
	l.pack.rollback(pm)
	if len(u.acc) > am {
		// Earlier events of this append reached w: rebuild it.
		u.acc = u.acc[:am]
		l.rebuildW()
	}
	return err
}

// rebuildW recomputes the staged state as the durable state plus every
// accepted event not yet published (under stageMu). It holds mu's read
// lock throughout: a unit it reads cannot be published meanwhile, so the
// syncer cannot recycle it (and clear its events) under its feet.
func (l *Log) rebuildW() {
	l.mu.RLock()
	defer l.mu.RUnlock()
	w, pub := l.s.Clone(), l.published
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

// take returns the current unit for writing and starts the next one
// (under stageMu).
func (l *Log) take() *unit {
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
	return u
}

// buffer returns a written unit's buffer for reuse, or nil.
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
		// Emptied here, under stageMu, not when recycled: until take
		// filters it out of inflight, rebuildW may still read its seq.
		*u = unit{reqs: u.reqs[:0], acc: u.acc[:0]}
		return u
	default:
		return &unit{}
	}
}

// recycle keeps a written unit and its buffers for the next units (the
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
	l.sealer.wrote(u.recs, u.pack)
	l.mu.Lock()
	for _, a := range u.acc {
		if err := ApplyAt(l.s, a.ev, a.off); err != nil {
			l.mu.Unlock()
			panic(fmt.Sprintf("runlog: durable state rejected an event staging accepted: %v", err))
		}
		l.markDirty(a.ev)
	}
	l.end, l.published = u.end, u.seq
	l.mu.Unlock()
	if l.opts.OnMilestone != nil && slices.ContainsFunc(u.acc, isMilestone) {
		l.opts.OnMilestone()
	}
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

// roll closes the full chunk, seals it (seal.go) and starts the next one
// at base.
func (l *Log) roll(base uint64) error {
	if err := l.chunkF.Close(); err != nil {
		return fmt.Errorf("close chunk: %w", err)
	}
	if err := l.packF.Close(); err != nil {
		return fmt.Errorf("close pack: %w", err)
	}
	// Its bytes are durable already; a seal that fails to write only
	// leaves the chunk to be verified record by record after the next Open.
	if err := writeSeal(l.opts.FS, l.logDir, l.sealer.seal()); err != nil {
		l.logger.Warn("runlog: chunk not sealed; the next open verifies it", "err", err)
	}
	chunk, pack, err := createChunk(l.opts.FS, l.logDir, base)
	if err != nil {
		return err
	}
	l.sealer.start(base)
	l.chunkF, l.packF = chunk, pack
	l.mu.Lock()
	l.chunks = append(l.chunks, base)
	l.end = Offset(base + chunkHeaderSize)
	l.mu.Unlock()
	return nil
}
