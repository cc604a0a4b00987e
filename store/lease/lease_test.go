package lease_test

// These tests run the lease against s3test.Mem, an in-memory FAKE of the
// bucket that keeps S3's If-None-Match / If-Match semantics: they prove
// the lease's own rules. That SeaweedFS honours the same conditions is
// bucket.TestServerHonoursConditionalPuts; the lease against the real
// server across processes is crashtest.TestTwoControllersOneRun.

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/store/bucket"
	"github.com/longhaul-rl/longhaul/store/lease"
	"github.com/longhaul-rl/longhaul/testkit/s3test"
)

const key = "run/lease.json"

func acquire(t *testing.T, b *s3test.Mem, holder string, ttl time.Duration) *lease.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lease.Acquire(ctx, b, lease.Options{Key: key, TTL: ttl, Holder: holder, Writer: holder, Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("%s: %v", holder, err)
	}
	return l
}

func record(t *testing.T, b *s3test.Mem) lease.Record {
	t.Helper()
	raw, _, err := b.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var r lease.Record
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// A holder that stopped renewing (a paused process) is taken over with the
// next epoch; its later write is refused (ErrLost) and leaves the winner's
// lease as it was, so the winner keeps renewing it.
func TestTakenOverHolderCannotWrite(t *testing.T) {
	b := s3test.NewMem()
	a := acquire(t, b, "A", 300*time.Millisecond)
	if a.Epoch() != 1 || a.Previous() != nil {
		t.Fatalf("a new run's lease: epoch %d, previous %v", a.Epoch(), a.Previous())
	}
	a.Stop()
	w := acquire(t, b, "B", 300*time.Millisecond)
	defer w.Stop()
	if w.Epoch() != 2 || w.Previous() == nil || w.Previous().Holder != "A" || w.Previous().Released {
		t.Fatalf("the takeover: epoch %d, previous %+v", w.Epoch(), w.Previous())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Release(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("the old holder's release after the takeover: %v, want ErrLost", err)
	}
	if r := record(t, b); r.Holder != "B" || r.Epoch != 2 || r.Released {
		t.Fatalf("after the old holder's write the lease is %+v, want B's epoch 2", r)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("the winner's release: %v", err)
	}
	if r := record(t, b); r.Holder != "B" || !r.Released {
		t.Fatalf("after the winner's release the lease is %+v", r)
	}
}

// A contender is refused while the holder renews, and a released lease is
// taken at once with the next epoch.
func TestHeldLeaseIsRefusedReleasedIsTaken(t *testing.T) {
	b := s3test.NewMem()
	// A renews every third of its TTL; B watches a whole TTL for one.
	a := acquire(t, b, "A", time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := lease.Acquire(ctx, b, lease.Options{Key: key, TTL: time.Second, Holder: "B", Writer: "B"})
	if !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("a contender while A renews: %v, want ErrHeld", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := acquire(t, b, "C", time.Second)
	defer c.Stop()
	if c.Epoch() != 2 || c.Previous() == nil || !c.Previous().Released {
		t.Fatalf("after a release: epoch %d, previous %+v", c.Epoch(), c.Previous())
	}
}

// lostAnswer applies a Put and then answers as a retry of it would (412:
// the first attempt changed the ETag), and fails the next Get: a reset
// that cut the answer, then a read-back that did not get through.
type lostAnswer struct {
	*s3test.Mem
	armed, failGet bool
}

func (b *lostAnswer) Put(ctx context.Context, k string, data []byte, c bucket.Cond) (string, error) {
	tag, err := b.Mem.Put(ctx, k, data, c)
	if b.armed && err == nil {
		b.armed, b.failGet = false, true
		return "", bucket.ErrPrecondition
	}
	return tag, err
}

func (b *lostAnswer) Get(ctx context.Context, k string) ([]byte, string, error) {
	if b.failGet {
		b.failGet = false
		return nil, "", errors.New("connection reset by peer")
	}
	return b.Mem.Get(ctx, k)
}

// TestUnreadableLeaseIsNotLost: a write of the lease whose answer was lost
// and whose read-back failed leaves the lease held (not knowing is not a
// loss); Release tries again, finds its own record and releases. Before,
// the holder declared itself taken over, left the lease unreleased and
// the next controller waited a TTL for it.
func TestUnreadableLeaseIsNotLost(t *testing.T) {
	b := &lostAnswer{Mem: s3test.NewMem()}
	l, err := lease.Acquire(context.Background(), b, lease.Options{Key: key, TTL: time.Minute, Holder: "a", Writer: "a", Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.armed = true
	if err := l.Release(context.Background()); err != nil || l.Err() != nil {
		t.Fatalf("release with its answer lost and the read-back failed once: %v (lease error %v)", err, l.Err())
	}
	if b.armed || b.failGet {
		t.Fatal("the fault was not met: the test proves nothing")
	}
	select {
	case <-l.Lost():
		t.Fatal("the lease says it was taken over")
	default:
	}
	if r := record(t, b.Mem); !r.Released || r.Holder != "a" {
		t.Fatalf("lease after the release: %+v", r)
	}
}

// flakyGets fails every other Get.
type flakyGets struct {
	*s3test.Mem
	n int
}

func (b *flakyGets) Get(ctx context.Context, k string) ([]byte, string, error) {
	b.n++
	if b.n%2 == 0 {
		return nil, "", errors.New("unexpected EOF")
	}
	return b.Mem.Get(ctx, k)
}

// TestWatchOutlastsFailedReads: a holder that stopped renewing is taken
// over even when reads of the lease keep failing while it is watched (a
// failed read saw nothing; the take is conditional). Before, each failed
// read restarted the watch, and under steady faults it never ended.
func TestWatchOutlastsFailedReads(t *testing.T) {
	mem := s3test.NewMem()
	old := acquire(t, mem, "a", 200*time.Millisecond)
	old.Stop() // paused: never renews again, never releases
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := &flakyGets{Mem: mem}
	l, err := lease.Acquire(ctx, b, lease.Options{Key: key, TTL: 200 * time.Millisecond, Holder: "b", Writer: "b", Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("taking over a holder that stopped, with every other read failing: %v", err)
	}
	defer l.Stop()
	if r := record(t, mem); r.Holder != "b" || r.Epoch != 2 {
		t.Fatalf("lease after the takeover: %+v", r)
	}
}
