package ckpt_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/runner"
	"github.com/longhaul-rl/longhaul/train/ckpt"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
)

// Checkpoint benchmarks (issue 6).
//
//	GOEXPERIMENT=simd go test ./train/ckpt -run '^$' -bench . -benchtime 3x
//
// BenchmarkWriteThroughput times ckpt.Write of a checkpoint laid out as
// train/embedded writes one (fill=embedded; see fillLike), and with a fill
// that only writes the bytes (fill=bulk), against a plain sequential write
// + fsync of the same number of bytes to the same file system, alternating
// them; it reports the best of each, their ratio, and where ckpt.Write's
// time goes (fill vs the hash pass, fsyncs and renames after it).

var sizes = []int{64 << 20, 256 << 20}

// randomBytes is incompressible content for the files.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(b)
	return b
}

// writeAtomic is how model.SaveSafetensors writes the weights.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// fillLike writes weights and state as train/embedded.SaveCheckpoint does:
// the weights and config.json with plain writes (model.WriteFiles), the state encoded in
// one buffer with its CRC32C appended and written through a bufio.Writer
// in one call (model.Trainer.SaveState), then trainer.json. fillTime accumulates the
// time spent inside it.
func fillLike(weights, state []byte, fillTime *time.Duration) func(dir string) error {
	return func(dir string) error {
		t0 := time.Now()
		defer func() { *fillTime += time.Since(t0) }()
		if err := os.WriteFile(filepath.Join(dir, tembedded.WeightsFile), weights, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"bench"}`), 0o644); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(dir, tembedded.StateFile))
		if err != nil {
			return err
		}
		w := bufio.NewWriter(f)
		_, err = w.Write(binary.LittleEndian.AppendUint32(state, crc32.Checksum(state, crc32.MakeTable(crc32.Castagnoli))))
		if err := errors.Join(err, w.Flush(), f.Close()); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, tembedded.MetaFile), []byte(`{"version":1}`), 0o644)
	}
}

// fillBulk writes the same two files with 1 MiB writes and no fsync (ckpt.Write
// fsyncs every file): what ckpt.Write itself costs beyond the bytes.
func fillBulk(weights, state []byte, fillTime *time.Duration) func(dir string) error {
	return func(dir string) error {
		t0 := time.Now()
		defer func() { *fillTime += time.Since(t0) }()
		for _, f := range []struct {
			name string
			b    []byte
		}{{tembedded.WeightsFile, weights}, {tembedded.StateFile, state}} {
			if err := writeChunks(filepath.Join(dir, f.name), f.b, false); err != nil {
				return err
			}
		}
		return nil
	}
}

// writeChunks writes b sequentially in 1 MiB writes, with an fsync when
// sync is set. With sync it is the disk's sequential write speed as a
// checkpoint sees it (the baseline).
func writeChunks(path string, b []byte, sync bool) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for off := 0; off < len(b); off += 1 << 20 {
		if _, err := f.Write(b[off:min(off+1<<20, len(b))]); err != nil {
			f.Close()
			return err
		}
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func BenchmarkWriteThroughput(b *testing.B) {
	for _, total := range sizes {
		for _, fill := range []struct {
			name string
			fn   func(weights, state []byte, t *time.Duration) func(string) error
		}{{"embedded", fillLike}, {"bulk", fillBulk}} {
			b.Run(fmt.Sprintf("MiB=%d/fill=%s", total>>20, fill.name), func(b *testing.B) { benchThroughput(b, total, fill.fn) })
		}
	}
}

func benchThroughput(b *testing.B, total int, fill func(weights, state []byte, t *time.Duration) func(string) error) {
	// Weights : optimizer state = 4 : 16 bytes per parameter (AdamW's two
	// float64 moments).
	params := total / 20
	buf := randomBytes(total)
	weights, state := buf[:4*params], buf[4*params:]
	root := b.TempDir()
	bestC, bestP, bestH := time.Duration(1<<62), time.Duration(1<<62), time.Duration(1<<62)
	var bestFill time.Duration
	var ckptBytes int64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		// Plain sequential write + fsync of the same bytes, same file system.
		plain := filepath.Join(root, "plain.bin")
		t0 := time.Now()
		if err := writeChunks(plain, buf, true); err != nil {
			b.Fatal(err)
		}
		bestP = min(bestP, time.Since(t0))
		os.Remove(plain)
		// SHA-256 of the same bytes in memory: the hash pass ckpt.Write adds.
		t0 = time.Now()
		sha256.Sum256(buf)
		bestH = min(bestH, time.Since(t0))
		b.StartTimer()
		var ft time.Duration
		t0 = time.Now()
		path, _, err := ckpt.Write(root, ckpt.Manifest{Step: int64(i + 1), Version: int64(i + 1)}, fill(weights, state, &ft))
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if d < bestC {
			bestC, bestFill = d, ft
		}
		ckptBytes = dirBytes(path)
		os.RemoveAll(path)
		b.StartTimer()
	}
	b.StopTimer()
	mbs := func(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(float64(ckptBytes), "ckpt-bytes")
	b.ReportMetric(ms(bestC), "ckpt-ms")
	b.ReportMetric(ms(bestFill), "fill-ms")
	b.ReportMetric(ms(bestC-bestFill), "hash+sync-ms")
	b.ReportMetric(mbs(ckptBytes, bestC), "ckpt-MB/s")
	b.ReportMetric(ms(bestP), "plain-ms")
	b.ReportMetric(mbs(int64(total), bestP), "plain-MB/s")
	b.ReportMetric(mbs(int64(total), bestH), "sha256-MB/s")
	b.ReportMetric(100*mbs(ckptBytes, bestC)/mbs(int64(total), bestP), "ratio-%")
}

func dirBytes(dir string) (n int64) {
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// BenchmarkDefaultModelCheckpoint: the real default-model checkpoint,
// train/embedded.Trainer.SaveCheckpoint through ckpt.Write, as the
// controller writes it (encode included).
func BenchmarkDefaultModelCheckpoint(b *testing.B) {
	cfg := config.Default()
	m, err := runner.InitModel(cfg)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := tembedded.New(m, runner.OptimConfig(cfg), runner.LossConfig(cfg))
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	ctx := context.Background()
	best := time.Duration(1 << 62)
	var size int64
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		path, _, err := ckpt.Write(root, ckpt.Manifest{Step: int64(i + 1), Version: int64(i + 1)}, func(dir string) error {
			return tr.SaveCheckpoint(ctx, dir)
		})
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		best = min(best, d)
		size = dirBytes(path)
		if i == b.N-1 {
			des, _ := os.ReadDir(path)
			for _, de := range des {
				if fi, err := de.Info(); err == nil {
					b.Logf("%s: %d bytes", de.Name(), fi.Size())
				}
			}
		}
		os.RemoveAll(path)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(best.Microseconds())/1000, "best-ms")
	b.ReportMetric(float64(size), "bytes")
	b.ReportMetric(float64(size)/1e6/best.Seconds(), "MB/s")
}

// onePass models a checkpoint writer that hashes while it writes (a second
// goroutine hashes each 1 MiB chunk as the first writes it) and then
// fsyncs: no read-back pass. It is not ckpt.Write; it shows what removing
// the hash pass would reach on this disk.
func onePass(path string, b []byte) ([32]byte, error) {
	f, err := os.Create(path)
	if err != nil {
		return [32]byte{}, err
	}
	chunks := make(chan []byte, 8)
	sum := make(chan [32]byte)
	go func() {
		h := sha256.New()
		for c := range chunks {
			h.Write(c)
		}
		sum <- [32]byte(h.Sum(nil))
	}()
	for off := 0; off < len(b) && err == nil; off += 1 << 20 {
		c := b[off:min(off+1<<20, len(b))]
		chunks <- c
		_, err = f.Write(c)
	}
	close(chunks)
	s := <-sum
	if err == nil {
		err = f.Sync()
	}
	return s, errors.Join(err, f.Close())
}

// BenchmarkOnePassPrototype: onePass of the checkpoint's bytes (weights and
// state files) against the plain sequential write + fsync, alternating.
func BenchmarkOnePassPrototype(b *testing.B) {
	for _, total := range sizes {
		b.Run(fmt.Sprintf("MiB=%d", total>>20), func(b *testing.B) {
			buf := randomBytes(total)
			params := total / 20
			root := b.TempDir()
			bestO, bestP := time.Duration(1<<62), time.Duration(1<<62)
			for range b.N {
				plain := filepath.Join(root, "plain.bin")
				t0 := time.Now()
				if err := writeChunks(plain, buf, true); err != nil {
					b.Fatal(err)
				}
				bestP = min(bestP, time.Since(t0))
				os.Remove(plain)
				t0 = time.Now()
				for i, part := range [][]byte{buf[:4*params], buf[4*params:]} {
					if _, err := onePass(filepath.Join(root, fmt.Sprint("part", i)), part); err != nil {
						b.Fatal(err)
					}
				}
				bestO = min(bestO, time.Since(t0))
				os.Remove(filepath.Join(root, "part0"))
				os.Remove(filepath.Join(root, "part1"))
			}
			mbs := func(d time.Duration) float64 { return float64(total) / 1e6 / d.Seconds() }
			b.ReportMetric(mbs(bestO), "onepass-MB/s")
			b.ReportMetric(mbs(bestP), "plain-MB/s")
			b.ReportMetric(100*mbs(bestO)/mbs(bestP), "ratio-%")
		})
	}
}
