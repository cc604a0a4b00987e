package runner

// Benchmarks of a run kept in a bucket (SeaweedFS on loopback; skipped
// without it). Figures are ratios against a baseline measured in the same
// window, and per-step counts: docs/storage.md, "Benchmarks".
//
//	go test -run '^$' -bench 'Bucket|ResumeOnEmpty' -benchtime 1x ./runner/

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/testkit/s3test"
)

// traffic records the "bucket traffic" record a run logs when it closes.
type traffic struct {
	mu    sync.Mutex
	attrs map[string]int64
}

func (h *traffic) Enabled(context.Context, slog.Level) bool { return true }
func (h *traffic) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *traffic) WithGroup(string) slog.Handler            { return h }
func (h *traffic) Handle(_ context.Context, r slog.Record) error {
	if r.Message != TrafficMsg {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attrs = map[string]int64{}
	r.Attrs(func(a slog.Attr) bool {
		h.attrs[a.Key] = a.Value.Int64()
		return true
	})
	return nil
}

func benchConfig(b *testing.B, path string, overrides ...string) *config.Config {
	b.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := cfg.ApplyOverrides(overrides); err != nil {
		b.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	return cfg
}

func setBucketEnv(b *testing.B, srv *s3test.Server) {
	for _, kv := range srv.Env() {
		k, v, _ := cutKV(kv)
		b.Setenv(k, v)
	}
}

func cutKV(kv string) (string, string, bool) {
	for i := range kv {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// BenchmarkBucketOverhead: the default run (examples/ledger.yaml,
// shortened to 30 steps; warm start included) with its run directory in
// the bucket against local-only, alternating, in one window. Reports the
// wall ratio, and the bucket's requests and bytes per step.
func BenchmarkBucketOverhead(b *testing.B) {
	srv, c := s3test.Shared(b)
	setBucketEnv(b, srv)
	const steps = 30
	var local, remote time.Duration
	var sum map[string]int64
	// A new prefix for every run: the benchmark function runs again for a
	// larger b.N, and a prefix used before would resume a finished run.
	for i := 0; i < b.N; i++ {
		cfg := benchConfig(b, filepath.Join("..", "examples", "ledger.yaml"), fmt.Sprintf("run.max_steps=%d", steps))
		t0 := time.Now()
		if err := Train(context.Background(), cfg, Options{RunDir: b.TempDir()}); err != nil {
			b.Fatal(err)
		}
		local += time.Since(t0)
		h := &traffic{}
		cfg = benchConfig(b, filepath.Join("..", "examples", "ledger.yaml"), fmt.Sprintf("run.max_steps=%d", steps), "store.cache_dir="+b.TempDir())
		t0 = time.Now()
		if err := Train(context.Background(), cfg, Options{RunDir: fmt.Sprintf("s3://%s/overhead-%d", c.Bucket(), time.Now().UnixNano()), Logger: slog.New(h)}); err != nil {
			b.Fatal(err)
		}
		remote += time.Since(t0)
		h.mu.Lock()
		if sum == nil {
			sum = map[string]int64{}
		}
		for k, v := range h.attrs {
			sum[k] += v
		}
		h.mu.Unlock()
	}
	n := float64(b.N * steps)
	b.ReportMetric(remote.Seconds()/local.Seconds(), "wall_ratio")
	b.ReportMetric(local.Seconds()/float64(b.N), "local_s")
	b.ReportMetric(remote.Seconds()/float64(b.N), "bucket_s")
	b.ReportMetric(float64(sum["put_post_list"])/n, "puts/step")
	b.ReportMetric(float64(sum["get_head"])/n, "gets/step")
	b.ReportMetric(float64(sum["bytes_up"])/n/1024, "KiB_up/step")
	b.ReportMetric(float64(sum["manifests"])/n, "manifests/step")
	b.Logf("bucket traffic over %d runs of %d steps: %v", b.N, steps, sum)
}

// BenchmarkResumeOnEmptyMachine: a run of the tiny config kept in the
// bucket for S steps (untimed), then a resume on an empty cache directory
// to step S+1 (timed): the time and the bytes it fetched, at S = 3, 30 and
// 300 (1x, 10x and 100x the log), with 256 KiB log chunks (the 3-step log
// is about one chunk; store.log_chunk_mb scales the same way).
func BenchmarkResumeOnEmptyMachine(b *testing.B) {
	srv, c := s3test.Shared(b)
	setBucketEnv(b, srv)
	runs := 0 // the benchmark function runs again for a larger b.N: new prefixes
	for _, steps := range []int{3, 30, 300} {
		b.Run(fmt.Sprintf("steps=%d", steps), func(b *testing.B) {
			var took time.Duration
			var fetched, logBytes, snapBytes int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				runs++
				prefix := fmt.Sprintf("resume-%d-%d", steps, runs)
				u := fmt.Sprintf("s3://%s/%s", c.Bucket(), prefix)
				over := []string{"rollout_checkpointing.snapshot_attempt_interval_s=0.2", "checkpointing.save_period=3",
					"store.sync_interval_s=0.5", "store.log_chunk_mb=0.25"}
				cfg := benchConfig(b, filepath.Join("..", "examples", "ledger-tiny.yaml"), append(over, fmt.Sprintf("run.max_steps=%d", steps), "store.cache_dir="+b.TempDir())...)
				if err := Train(context.Background(), cfg, Options{RunDir: u}); err != nil {
					b.Fatal(err)
				}
				man := pullManifest(b, c, prefix)
				logBytes, snapBytes = 0, 0
				for rel, e := range man.Files {
					switch filepath.Dir(rel) {
					case "runlog":
						logBytes += e.Size
					case filepath.Join("runlog", "snap"):
						snapBytes += e.Size
					}
				}
				h := &traffic{}
				cfg = benchConfig(b, filepath.Join("..", "examples", "ledger-tiny.yaml"), append(over, fmt.Sprintf("run.max_steps=%d", steps+1), "store.cache_dir="+b.TempDir())...)
				b.StartTimer()
				t0 := time.Now()
				if err := Train(context.Background(), cfg, Options{RunDir: u, AllowChange: []string{"run.max_steps"}, Logger: slog.New(h)}); err != nil {
					b.Fatal(err)
				}
				took += time.Since(t0)
				fetched += h.attrs["fetched_bytes"]
			}
			b.ReportMetric(took.Seconds()/float64(b.N), "resume_s")
			b.ReportMetric(float64(fetched)/float64(b.N)/1024, "fetched_KiB")
			b.ReportMetric(float64(logBytes)/1024, "log_KiB")
			b.ReportMetric(float64(snapBytes)/1024, "snapshots_KiB")
		})
	}
}
