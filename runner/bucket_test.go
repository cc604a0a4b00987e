package runner

// These tests keep runs in a real S3 server, SeaweedFS on loopback
// (testkit/s3test); without the weed binary they are skipped, or fail when
// LONGHAUL_REQUIRE_S3 is set (CI). The machine-loss storm, the outage and
// the two-controller tests run whole processes: testkit/crashtest.

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/store/bucket"
	"github.com/longhaul-rl/longhaul/store/mirror"
	"github.com/longhaul-rl/longhaul/testkit/faultproxy"
	"github.com/longhaul-rl/longhaul/testkit/s3test"
)

func TestMain(m *testing.M) { os.Exit(s3test.Main(m)) }

// bucketRun points the AWS environment at srv (or at endpoint, a proxy
// in front of it) and returns the run's s3:// URL in the test's bucket.
func bucketRun(t *testing.T, srv *s3test.Server, c *bucket.Client, name string, endpoint ...string) string {
	t.Helper()
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if len(endpoint) > 0 {
		t.Setenv("AWS_ENDPOINT_URL", endpoint[0])
	}
	return "s3://" + c.Bucket() + "/" + name
}

func bucketConfig(t *testing.T, overrides ...string) []string {
	return append([]string{"run.max_steps=8", "checkpointing.save_period=3", "rollout_checkpointing.enabled=true",
		"rollout_checkpointing.snapshot_attempt_interval_s=0.01", "store.sync_interval_s=0.05", "store.lease_s=1"}, overrides...)
}

func weights(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stopAt returns a context that ends once the run reports step k, as a
// SIGTERM would end it.
func stopAt(k int64) (context.Context, func(controller.Progress)) {
	ctx, cancel := context.WithCancel(context.Background())
	return ctx, func(p controller.Progress) {
		if p.Step >= k {
			cancel()
		}
	}
}

// TestBucketRunResumesOnAnEmptyMachine: a run kept in the bucket, stopped
// at step 4, resumes on a machine whose cache directory starts empty and
// ends with the weights of an uninterrupted local run.
func TestBucketRunResumesOnAnEmptyMachine(t *testing.T) {
	srv, c := s3test.Shared(t)
	u := bucketRun(t, srv, c, "resume")
	cfg := tiny(t, bucketConfig(t)...)
	ref := t.TempDir()
	if err := Train(context.Background(), cfg, Options{RunDir: ref}); err != nil {
		t.Fatal(err)
	}
	first := tiny(t, bucketConfig(t, "store.cache_dir="+t.TempDir())...)
	ctx, progress := stopAt(4)
	if err := Train(ctx, first, Options{RunDir: u, Progress: progress}); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	empty := t.TempDir()
	second := tiny(t, bucketConfig(t, "store.cache_dir="+empty)...)
	if err := Train(context.Background(), second, Options{RunDir: u}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(weights(t, ref), weights(t, empty)) {
		t.Fatal("the run resumed on an empty machine ends with other weights than the uninterrupted run")
	}
	pulled := t.TempDir()
	if _, err := mirror.Pull(context.Background(), c, "resume", pulled); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(weights(t, ref), weights(t, pulled)) {
		t.Fatal("the bucket's copy of the finished run holds other weights")
	}
}

// TestBucketFaultsAreRetried: throttling (503 SlowDown), reset connections
// and truncated answers between the controller and the bucket are
// retried; the run and its resume on an empty machine end as the
// uninterrupted run does.
func TestBucketFaultsAreRetried(t *testing.T) {
	srv, c := s3test.Shared(t)
	// Only an answer with a body can be cut short, and nearly every request
	// of a run is a PUT: every fourth GET is truncated, so that some are.
	isGet := func(r *faultproxy.Request) bool { return r.Method == http.MethodGet }
	plan := faultproxy.FirstOf(faultproxy.When(isGet, faultproxy.Every(4, faultproxy.Truncated)),
		faultproxy.Random(7, 0.25, faultproxy.SlowDown, faultproxy.Reset))
	p := faultproxy.NewWithOptions(srv.Endpoint, plan, faultproxy.Options{PreserveHost: true})
	defer p.Close()
	u := bucketRun(t, srv, c, "faults", p.URL())
	cfg := tiny(t, bucketConfig(t)...)
	ref := t.TempDir()
	if err := Train(context.Background(), cfg, Options{RunDir: ref}); err != nil {
		t.Fatal(err)
	}
	ctx, progress := stopAt(4)
	if err := Train(ctx, tiny(t, bucketConfig(t, "store.cache_dir="+t.TempDir())...), Options{RunDir: u, Progress: progress}); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	empty := t.TempDir()
	if err := Train(context.Background(), tiny(t, bucketConfig(t, "store.cache_dir="+empty)...), Options{RunDir: u}); err != nil {
		t.Fatal(err)
	}
	counts := p.Counts()
	if counts["slowdown"] == 0 || counts["reset"] == 0 || counts["truncated"] == 0 {
		t.Fatalf("faults injected %v: want every kind at least once", counts)
	}
	if !bytes.Equal(weights(t, ref), weights(t, empty)) {
		t.Fatalf("with faults %v the resumed run ends with other weights", counts)
	}
}

// TestDamagedObjectStopsTheResume: an object of the run damaged in the
// bucket (bytes flipped, or cut short) is detected by its SHA-256 when a
// resume on an empty machine fetches it, and the resume stops with an
// error naming it instead of using it.
func TestDamagedObjectStopsTheResume(t *testing.T) {
	srv, c := s3test.Shared(t)
	u := bucketRun(t, srv, c, "damage")
	if err := Train(context.Background(), tiny(t, bucketConfig(t, "store.cache_dir="+t.TempDir())...), Options{RunDir: u}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	man := pullManifest(t, c, "damage")
	for _, cut := range []bool{false, true} {
		// The newest snapshot and the log chunk are what a resume reads first.
		for rel, e := range man.Files {
			if !strings.HasSuffix(rel, ".seg") {
				continue
			}
			key := "damage/" + e.Parts[len(e.Parts)-1].Key
			b, _, err := c.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			bad := bytes.Clone(b)
			if cut {
				bad = bad[:len(bad)/2]
			} else {
				bad[len(bad)/2] ^= 0x40
			}
			if _, err := c.Put(ctx, key, bad, bucket.Cond{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Put(ctx, key, b, bucket.Cond{}) })
		}
		err := Train(ctx, tiny(t, bucketConfig(t, "store.cache_dir="+t.TempDir(), "run.max_steps=9")...), Options{RunDir: u, AllowChange: []string{"run.max_steps"}})
		if !errors.Is(err, mirror.ErrDamaged) {
			t.Fatalf("resume from a damaged bucket (cut %v): %v, want ErrDamaged", cut, err)
		}
	}
}

func pullManifest(t testing.TB, c *bucket.Client, prefix string) *mirror.Manifest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	man, err := mirror.Pull(ctx, c, prefix, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return man
}

// TestResumeFetchesOnlyTheTail: with small log chunks, a resume on an
// empty machine fetches the snapshot, the log from the chunk the snapshot
// falls in, and the newest checkpoint: the chunks the snapshot covers
// stay in the bucket (not in the new cache), and the run still ends with
// the uninterrupted run's weights.
func TestResumeFetchesOnlyTheTail(t *testing.T) {
	srv, c := s3test.Shared(t)
	u := bucketRun(t, srv, c, "tail")
	over := bucketConfig(t, "run.max_steps=12", "store.log_chunk_mb=0.03")
	ref := t.TempDir()
	if err := Train(context.Background(), tiny(t, over...), Options{RunDir: ref}); err != nil {
		t.Fatal(err)
	}
	ctx, progress := stopAt(10)
	if err := Train(ctx, tiny(t, append(over, "store.cache_dir="+t.TempDir())...), Options{RunDir: u, Progress: progress}); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	man := pullManifest(t, c, "tail")
	var chunks []string
	for rel := range man.Files {
		if strings.HasSuffix(rel, ".seg") {
			chunks = append(chunks, rel)
		}
	}
	if len(chunks) < 4 {
		t.Fatalf("the log has %d chunks: make them smaller for this test", len(chunks))
	}
	empty := t.TempDir()
	if err := Train(context.Background(), tiny(t, append(over, "store.cache_dir="+empty)...), Options{RunDir: u}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(weights(t, ref), weights(t, empty)) {
		t.Fatal("the resumed run ends with other weights")
	}
	first := filepath.Join(empty, "runlog", "00000000000000000000.seg")
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the resume fetched the log's first chunk (of %d), which its snapshot covers", len(chunks))
	}
}
