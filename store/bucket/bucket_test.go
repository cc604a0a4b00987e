package bucket_test

// These tests run against a real S3 server, SeaweedFS on loopback
// (testkit/s3test.Start); without the weed binary they are skipped, or
// fail when LONGHAUL_REQUIRE_S3 is set (CI).

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/store/bucket"
	"github.com/longhaul-rl/longhaul/testkit/faultproxy"
	"github.com/longhaul-rl/longhaul/testkit/s3test"
)

func TestMain(m *testing.M) { os.Exit(s3test.Main(m)) }

// The server honours the conditional puts the lease and the manifest rely
// on: If-None-Match: * refuses an existing key, If-Match refuses a stale
// ETag (412), and a refused put changes nothing.
func TestServerHonoursConditionalPuts(t *testing.T) {
	_, c := s3test.Shared(t)
	ctx := context.Background()
	tag1, err := c.Put(ctx, "cond/k", []byte("one"), bucket.Cond{IfNoneMatch: "*"})
	if err != nil {
		t.Fatalf("create-once on a new key: %v", err)
	}
	if _, err := c.Put(ctx, "cond/k", []byte("two"), bucket.Cond{IfNoneMatch: "*"}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("If-None-Match: * on an existing key: %v, want a refusal", err)
	}
	tag2, err := c.Put(ctx, "cond/k", []byte("three"), bucket.Cond{IfMatch: tag1})
	if err != nil {
		t.Fatalf("If-Match with the current ETag: %v", err)
	}
	if tag2 == tag1 {
		t.Fatalf("the ETag did not change with the content (%s)", tag1)
	}
	if _, err := c.Put(ctx, "cond/k", []byte("four"), bucket.Cond{IfMatch: tag1}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("If-Match with a stale ETag: %v, want a refusal", err)
	}
	if _, err := c.Put(ctx, "cond/missing", []byte("x"), bucket.Cond{IfMatch: tag1}); err == nil {
		t.Fatal("If-Match on a missing key succeeded")
	}
	b, tag, err := c.Get(ctx, "cond/k")
	if err != nil || string(b) != "three" || tag != tag2 {
		t.Fatalf("after the refusals the object is %q (%s, %v), want %q (%s)", b, tag, err, "three", tag2)
	}
}

// A multipart upload (three parts) reads back byte for byte, and a cut
// one leaves no object.
func TestMultipartUpload(t *testing.T) {
	_, c := s3test.Shared(t)
	ctx := context.Background()
	data := make([]byte, 12<<20+123)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if err := c.Upload(ctx, "mp/big", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	got, _, err := c.Get(ctx, "mp/big")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want the %d uploaded", len(got), err, len(data))
	}
	// Cut: the reader fails after the first part.
	err = c.Upload(ctx, "mp/cut", &failAfter{r: bytes.NewReader(data), n: 6 << 20}, int64(len(data)))
	if err == nil {
		t.Fatal("an upload whose reader failed succeeded")
	}
	if _, _, err := c.Get(ctx, "mp/cut"); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("a cut multipart upload left an object: %v", err)
	}
}

type failAfter struct {
	r *bytes.Reader
	n int
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("cut")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

// Throttling (503 SlowDown), reset connections and 500s are retried with
// backoff; a body cut short is an error, never short data.
func TestRetriesThrottlingAndResets(t *testing.T) {
	srv, direct := s3test.Shared(t)
	ctx := context.Background()
	p := faultproxy.NewWithOptions(srv.Endpoint, nil, faultproxy.Options{PreserveHost: true})
	defer p.Close()
	c := srv.Client(t, direct.Bucket(), p.URL())
	for _, f := range []faultproxy.Fault{faultproxy.SlowDown, faultproxy.Reset, faultproxy.Status500} {
		p.SetPlan(faultproxy.FirstK(3, f))
		key := "retry/" + f.String()
		if _, err := c.Put(ctx, key, []byte(f.String()), bucket.Cond{}); err != nil {
			t.Fatalf("%v three times: %v, want it retried", f, err)
		}
		if p.Injected(f) != 3 {
			t.Fatalf("%v injected %d times", f, p.Injected(f))
		}
	}
	if got := c.Stats().Snapshot().Failed; got < 9 {
		t.Fatalf("counted %d failed attempts, want the 9 injected", got)
	}
	if _, err := c.Put(ctx, "retry/body", bytes.Repeat([]byte("x"), 4096), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	p.SetPlan(faultproxy.When(func(r *faultproxy.Request) bool { return r.Method == http.MethodGet }, faultproxy.FirstK(1, faultproxy.Truncated)))
	b, _, err := c.Get(ctx, "retry/body")
	if err == nil && len(b) != 4096 {
		t.Fatalf("a truncated body came back as %d bytes without an error", len(b))
	}
	if p.Injected(faultproxy.Truncated) != 1 {
		t.Fatal("no truncation injected")
	}
	ctx2, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if b, _, err := c.Get(ctx2, "retry/body"); err != nil || len(b) != 4096 {
		t.Fatalf("the next get: %d bytes, %v", len(b), err)
	}
}
