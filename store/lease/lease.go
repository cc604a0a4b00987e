// Package lease makes one controller the writer of a run kept in a
// bucket, across machines. The lease is one object holding the holder's
// epoch; it is created with If-None-Match: * and every later write (a
// renewal, a takeover, a release) is an If-Match on the ETag last seen, so
// two contenders can never both believe they wrote it.
//
// A contender that finds the lease held watches it: if the holder renews it
// within the lease's TTL the contender is refused (ErrHeld); if it stays
// unchanged for a whole TTL, measured on the contender's own clock (no
// clock agreement between machines is assumed), the holder is taken for
// lost and the contender takes the lease over with the next epoch. A
// holder that was only paused or partitioned finds out at its next renewal
// (its If-Match fails: Lost). Fencing what it might still write is the
// mirror's job: its manifest is written with If-Match too, so a holder
// that lost the lease can no longer change what a resume reads.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/store/bucket"
)

// Errors of Acquire and of a held lease.
var (
	// ErrHeld: a live controller holds the run (it renewed the lease while
	// this one watched).
	ErrHeld = errors.New("lease: the run is held by another controller")
	// ErrLost: another controller took the lease over from this one.
	ErrLost = errors.New("lease: taken over by another controller")
)

// Record is the lease object's content.
type Record struct {
	Holder   string    `json:"holder"` // host and pid, for messages
	Writer   string    `json:"writer"` // the holder's cache id (same id: same local directory)
	Epoch    uint64    `json:"epoch"`
	TTLS     float64   `json:"ttl_s"`
	Renewed  time.Time `json:"renewed"` // the holder's clock; for people only
	Renewals uint64    `json:"renewals"`
	Released bool      `json:"released"`
}

// Options configure Acquire.
type Options struct {
	Key    string        // the lease object's key
	TTL    time.Duration // how long a holder may go without renewing (default 20 s)
	Holder string        // who we are, for others' messages
	// Writer is the local cache's id: a lease whose writer is ours was
	// held by an earlier process on this same directory, which the local
	// lock proves dead, so it is taken at once.
	Writer string
	Logger *slog.Logger
	// Retry is the pause between tries while the bucket cannot be reached
	// (default 1 s, doubling to 10 s).
	Retry time.Duration
}

// Lease is a held lease, renewed in the background until Release.
type Lease struct {
	objs bucket.Objects
	o    Options
	prev *Record

	wmu  sync.Mutex // one write at a time
	mu   sync.Mutex
	rec  Record
	etag string
	err  error

	lost chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Acquire takes the lease, waiting out a bucket outage (until ctx ends)
// and a holder that stopped renewing (one TTL).
func Acquire(ctx context.Context, objs bucket.Objects, o Options) (*Lease, error) {
	if o.TTL <= 0 {
		o.TTL = 20 * time.Second
	}
	if o.Retry <= 0 {
		o.Retry = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Lease{objs: objs, o: o, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	backoff := o.Retry
	for {
		ok, err := l.try(ctx)
		if ok {
			go l.renew()
			return l, nil
		}
		if errors.Is(err, ErrHeld) || bucket.Permanent(err) || ctx.Err() != nil {
			return nil, errors.Join(err, ctx.Err())
		}
		if err != nil {
			o.Logger.Warn("lease: bucket unreachable; retrying", "err", err, "in", backoff)
			if !sleep(ctx, backoff) {
				return nil, fmt.Errorf("lease: %w (last error: %w)", ctx.Err(), err)
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = o.Retry
	}
}

// try makes one attempt: ok when the lease is ours; err nil and !ok when
// the lease changed under us (try again).
func (l *Lease) try(ctx context.Context) (bool, error) {
	b, etag, err := l.objs.Get(ctx, l.o.Key)
	if errors.Is(err, bucket.ErrNotFound) {
		return l.take(ctx, Record{}, bucket.Cond{IfNoneMatch: "*"})
	}
	if err != nil {
		return false, err
	}
	var prev Record
	if err := json.Unmarshal(b, &prev); err != nil {
		return false, fmt.Errorf("lease: %s is not a lease (%w); remove it if no controller runs", l.o.Key, err)
	}
	if prev.Released || (l.o.Writer != "" && prev.Writer == l.o.Writer) {
		return l.take(ctx, prev, bucket.Cond{IfMatch: etag})
	}
	ttl := time.Duration(prev.TTLS * float64(time.Second))
	if ttl <= 0 {
		ttl = l.o.TTL
	}
	l.o.Logger.Info("lease: held; watching for renewals", "holder", prev.Holder, "epoch", prev.Epoch, "ttl", ttl)
	// Watch one TTL and a tenth (a holder renews every third of it).
	deadline := time.Now().Add(ttl + ttl/10)
	for time.Now().Before(deadline) {
		if !sleep(ctx, ttl/8) {
			return false, ctx.Err()
		}
		b2, etag2, err := l.objs.Get(ctx, l.o.Key)
		if err != nil {
			// A read that failed saw nothing: keep watching. The take
			// at the end is conditional on the ETag first read, so a
			// renewal this watch missed makes it fail, not steal.
			l.o.Logger.Warn("lease: reading it while watching failed", "err", err)
			continue
		}
		if etag2 != etag {
			var now Record
			if json.Unmarshal(b2, &now) == nil && now.Released {
				return false, nil
			}
			return false, fmt.Errorf("%w: %s (epoch %d, renewed while this controller watched): one controller per run; stop it, or wait until it stops renewing (ttl %s)",
				ErrHeld, now.Holder, now.Epoch, ttl)
		}
	}
	l.o.Logger.Warn("lease: holder stopped renewing; taking over", "holder", prev.Holder, "epoch", prev.Epoch)
	return l.take(ctx, prev, bucket.Cond{IfMatch: etag})
}

func (l *Lease) take(ctx context.Context, prev Record, cond bucket.Cond) (bool, error) {
	rec := Record{Holder: l.o.Holder, Writer: l.o.Writer, Epoch: prev.Epoch + 1, TTLS: l.o.TTL.Seconds(), Renewed: time.Now().UTC()}
	b, _ := json.Marshal(rec)
	etag, err := l.objs.Put(ctx, l.o.Key, b, cond)
	if errors.Is(err, bucket.ErrPrecondition) {
		// Someone else wrote it first, or our own retried write did.
		mine, etag2, rerr := l.isMine(ctx, rec)
		switch {
		case rerr != nil:
			return false, rerr
		case mine:
			etag, err = etag2, nil
		default:
			return false, nil
		}
	}
	if err != nil {
		return false, err
	}
	if prev.Epoch > 0 {
		p := prev
		l.prev = &p
	}
	l.rec, l.etag = rec, etag
	return true, nil
}

// isMine reports whether the lease now holds exactly rec (a write of ours
// that succeeded although its answer was lost), with its ETag. An error
// means the lease could not be read: not knowing is not a loss, and the
// caller tries again later.
func (l *Lease) isMine(ctx context.Context, rec Record) (bool, string, error) {
	b, etag, err := l.objs.Get(ctx, l.o.Key)
	if err != nil {
		return false, "", fmt.Errorf("lease: reading it back after a refused write: %w", err)
	}
	var now Record
	if json.Unmarshal(b, &now) != nil {
		return false, "", nil
	}
	return now.Epoch == rec.Epoch && now.Writer == rec.Writer && now.Holder == rec.Holder && now.Renewals == rec.Renewals && now.Released == rec.Released, etag, nil
}

// renew renews every third of the TTL until Release or loss.
func (l *Lease) renew() {
	defer close(l.done)
	t := time.NewTicker(l.o.TTL / 3)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		err := l.write(context.Background(), false)
		switch {
		case errors.Is(err, ErrLost):
			l.o.Logger.Error("lease: lost", "err", err)
			return
		case err != nil && !failing:
			l.o.Logger.Warn("lease: renewal failed; retrying (an outage is waited out)", "err", err)
			failing = true
		case err == nil && failing:
			l.o.Logger.Info("lease: renewed again")
			failing = false
		}
	}
}

// write writes the next renewal (or the release) under If-Match. Writes
// take turns on wmu, held across the request; mu only guards the fields,
// so Err and Epoch (asked on every write of the run's files) never wait
// on the bucket.
func (l *Lease) write(ctx context.Context, release bool) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	rec, etag, lerr := l.rec, l.etag, l.err
	l.mu.Unlock()
	if lerr != nil {
		return lerr
	}
	rec.Renewals++
	rec.Renewed = time.Now().UTC()
	rec.Released = release
	b, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(ctx, l.o.TTL)
	defer cancel()
	etag, err := l.objs.Put(ctx, l.o.Key, b, bucket.Cond{IfMatch: etag})
	if errors.Is(err, bucket.ErrPrecondition) {
		mine, etag2, rerr := l.isMine(ctx, rec)
		switch {
		case rerr != nil:
			return rerr
		case mine:
			etag, err = etag2, nil
		default:
			l.mu.Lock()
			l.err = fmt.Errorf("%w (this controller held epoch %d)", ErrLost, rec.Epoch)
			lerr = l.err
			l.mu.Unlock()
			close(l.lost)
			return lerr
		}
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.rec, l.etag = rec, etag
	l.mu.Unlock()
	return nil
}

// Epoch is the held epoch: a fencing token that grows with every holder.
func (l *Lease) Epoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.Epoch
}

// Previous is the lease record this one replaced (nil for a new run).
func (l *Lease) Previous() *Record { return l.prev }

// Lost is closed when another controller took the lease over.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err is ErrLost (wrapped) once the lease is lost, else nil.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Stop stops the renewals without releasing: the next controller waits
// one TTL (used when this one's work may not all be in the bucket).
func (l *Lease) Stop() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

// Release stops the renewals and marks the lease released, so the next
// controller takes it at once. A lost lease is left alone.
func (l *Lease) Release(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	if l.Err() != nil {
		return nil
	}
	// A write whose answer or read-back failed is tried again a few
	// times: a lease left unreleased makes the next controller wait a TTL.
	var err error
	for try := 1; try <= 5; try++ {
		if err = l.write(ctx, true); err == nil || errors.Is(err, ErrLost) || bucket.Permanent(err) {
			return err
		}
		if !sleep(ctx, time.Duration(try)*l.o.Retry) {
			return errors.Join(err, ctx.Err())
		}
	}
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
