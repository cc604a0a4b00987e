package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/store/bucket"
	"github.com/longhaul-rl/longhaul/store/mirror"
)

// runDir is an opened run directory: local, or a bucket's local cache.
type runDir struct {
	dir    string   // the local directory the run reads and writes
	fs     store.FS // the seam over it
	lock   *DirLock
	mir    *mirror.Mirror
	client *bucket.Client
	cfg    config.Store
	log    *slog.Logger
	stop   context.CancelCauseFunc
}

// CacheDir is the local cache of a bucket run directory u under cfg:
// store.cache_dir, or ~/.cache/longhaul/runs/BUCKET/PREFIX.
func CacheDir(cfg *config.Config, u string) (string, error) {
	if cfg.Store.CacheDir != "" {
		return filepath.Abs(cfg.Store.CacheDir)
	}
	b, prefix, err := bucket.ParseURL(u)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("runner: no cache directory for %s (set store.cache_dir): %w", u, err)
	}
	return filepath.Join(cache, "longhaul", "runs", b, filepath.FromSlash(prefix)), nil
}

// LocalDir is where the run in runDir keeps its files on this machine:
// the directory itself, or a bucket's cache.
func LocalDir(cfg *config.Config, runDir string) (string, error) {
	if bucket.IsURL(runDir) {
		return CacheDir(cfg, runDir)
	}
	return filepath.Abs(runDir)
}

// openRunDir locks the run directory (and, in a bucket, takes the run's
// lease and opens the mirror). The returned context ends when another
// controller takes the run over.
func openRunDir(ctx context.Context, cfg *config.Config, opts Options, log *slog.Logger) (context.Context, *runDir, error) {
	// Absolute, because paths under it go to other processes (a remote
	// trainer's checkpoints and exports, a server's weight reload) whose
	// working directories differ; the log records paths relative to it.
	dir, err := LocalDir(cfg, opts.RunDir)
	if err != nil {
		return ctx, nil, fmt.Errorf("runner: run directory: %w", err)
	}
	// Raw: the directory must exist before the lock that picks the seam
	// can be taken in it.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ctx, nil, fmt.Errorf("runner: %w", err)
	}
	rd := &runDir{dir: dir, fs: store.Or(opts.FS), cfg: cfg.Store, log: log}
	// One writer per run directory on this machine (the lease is the one
	// across machines): two processes appending to one log would
	// interleave records and leave it unreadable.
	if rd.lock, err = Lock(rd.fs, dir); err != nil {
		return ctx, nil, err
	}
	if bucket.IsURL(opts.RunDir) {
		if filepath.IsAbs(cfg.Checkpointing.Dir) {
			rd.lock.Unlock()
			return ctx, nil, fmt.Errorf("runner: checkpointing.dir %q: must be relative to the run directory when the run is in a bucket (checkpoints outside it would not be shipped)", cfg.Checkpointing.Dir)
		}
		if err := rd.openMirror(ctx, opts.RunDir); err != nil {
			rd.lock.Unlock()
			return ctx, nil, err
		}
		ctx, rd.stop = context.WithCancelCause(ctx)
		go func() {
			select {
			case <-rd.mir.Lost():
				rd.stop(rd.mir.Err())
			case <-ctx.Done():
			}
		}()
	}
	if err := rd.fs.MkdirAll(filepath.Join(dir, "weights"), 0o755); err != nil {
		rd.close(ctx, nil)
		return ctx, nil, fmt.Errorf("runner: %w", err)
	}
	return ctx, rd, nil
}

func (rd *runDir) openMirror(ctx context.Context, u string) error {
	name, prefix, err := bucket.ParseURL(u)
	if err != nil {
		return fmt.Errorf("runner: --run-dir: %w", err)
	}
	c, err := bucket.New(ctx, name, bucket.Options{Logger: rd.log})
	if err != nil {
		return err
	}
	rd.client = c
	o := mirror.Options{URL: u, Prefix: prefix, Dir: rd.dir, Logger: rd.log,
		SyncInterval: time.Duration(rd.cfg.SyncIntervalS * float64(time.Second)),
		CacheBytes:   int64(rd.cfg.LocalCacheMB) << 20,
		LeaseTTL:     time.Duration(rd.cfg.LeaseS * float64(time.Second))}
	rd.log.Info("opening the run in the bucket", "run", bucket.Describe(u), "cache", rd.dir)
	if rd.mir, err = mirror.Open(ctx, c, o); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	rd.fs = rd.mir
	r := rd.mir.Resume()
	switch {
	case r.New:
		rd.log.Info("new run in the bucket", "run", u, "epoch", rd.mir.Epoch())
	case r.LocalKept:
		rd.log.Info("resuming from this machine's cache (newer than the bucket)", "run", u, "epoch", rd.mir.Epoch())
	default:
		args := []any{"run", u, "epoch", rd.mir.Epoch(), "shipped", r.Shipped.Format(time.RFC3339Nano),
			"log_offset", r.LogEnd, "files", r.Files, "bytes", r.Bytes, "stale_cache_discarded", r.Discarded}
		if p := r.Previous; p != nil && !p.Released {
			// What the lost controller did after its last shipment is
			// redone. It died before its next renewal was due (a third of
			// its TTL after the last one), which bounds the work lost.
			due := p.Renewed.Add(time.Duration(p.TTLS * float64(time.Second) / 3))
			args = append(args, "previous_holder", p.Holder, "previous_last_renewal", p.Renewed.Format(time.RFC3339Nano),
				"work_redone_at_most", max(0, due.Sub(r.Shipped)).Round(time.Millisecond))
		}
		rd.log.Warn("resuming from the bucket: work after its last shipment is redone", args...)
	}
	return nil
}

// logOptions adds the mirror's hooks to the run log's options.
func (rd *runDir) logOptions(lo runlog.Options) runlog.Options {
	if rd.mir != nil {
		lo.OnMilestone = rd.mir.Kick
		// A resume on an empty machine reads the whole chunk its snapshot
		// falls in: smaller chunks than a local run's keep that read small.
		lo.ChunkSize = int64(rd.cfg.LogChunkMB * (1 << 20))
		// No scrub pass: it would read, and so fetch, every chunk of the
		// history the cache left in the bucket. A bucket run's chunks are
		// checked against their SHA-256 whenever they are fetched.
		lo.ScrubRate = -1
	}
	return lo
}

// started begins shipping once the run log is open: every round takes
// the log's cut first.
func (rd *runDir) started(rl *runlog.Log) {
	if rd.mir != nil {
		rd.mir.Start(func() mirror.Cut { return rl.Cut() })
	}
}

// close ships what is left (bounded by store.final_sync_timeout_s),
// releases the lease and the lock. runErr is the run's outcome: a run that
// lost its lease reports that.
func (rd *runDir) close(ctx context.Context, runErr error) error {
	var err error
	if rd.mir != nil {
		if lost := rd.mir.Err(); lost != nil && !errors.Is(runErr, mirror.ErrFenced) {
			err = fmt.Errorf("runner: %w", lost)
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(rd.cfg.FinalSyncTimeoutS*float64(time.Second)))
		if cerr := rd.mir.Close(fctx); cerr != nil && rd.mir.Err() == nil {
			err = errors.Join(err, fmt.Errorf("runner: the bucket did not take the run's last records (they stay in %s; resume on this machine to keep them): %w", rd.dir, cerr))
		}
		cancel()
		if rd.stop != nil {
			rd.stop(nil)
		}
		rd.logTraffic()
	}
	return errors.Join(err, rd.lock.Unlock())
}

// TrafficMsg is the message of the log record that reports what a run
// cost in bucket requests and bytes when it closes (benchmarks read it).
const TrafficMsg = "bucket traffic"

func (rd *runDir) logTraffic() {
	s, m := rd.client.Stats().Snapshot(), rd.mir.Stats()
	rd.log.Info(TrafficMsg, "put_post_list", s.Puts, "lists", s.Lists, "get_head", s.Gets, "deletes", s.Deletes,
		"bytes_up", s.BytesUp, "bytes_down", s.BytesDown, "failed_attempts", s.Failed,
		"rounds", m.Rounds.Load(), "manifests", m.Manifests.Load(), "uploads", m.Uploads.Load(),
		"fetches", m.Fetches.Load(), "fetched_bytes", m.FetchedBytes.Load(), "evicted", m.Evicted.Load())
}
