package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// ErrDamaged is in the chain of a fetch whose object does not match the
// size and SHA-256 the manifest records, after retries: it is never used.
var ErrDamaged = errors.New("mirror: object in the bucket is damaged")

// fetch brings rel, which only the bucket holds, into the cache: every
// part is downloaded, checked against its size and SHA-256, written to a
// temporary file, fsync'd and renamed into place (a torn download never
// looks like a file the run wrote). One fetch per file at a time.
func (m *Mirror) fetch(rel, path string) error {
	m.mu.Lock()
	mu := m.fetchMu[rel]
	if mu == nil {
		mu = &sync.Mutex{}
		m.fetchMu[rel] = mu
	}
	m.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if _, err := os.Lstat(path); err == nil {
		return nil // fetched meanwhile
	}
	m.mu.Lock()
	e := m.remote(rel)
	m.mu.Unlock()
	if e == nil {
		return &os.PathError{Op: "open", Path: path, Err: os.ErrNotExist}
	}
	t0 := time.Now()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	tmp := path + ".fetch"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	err = m.download(f, e)
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("mirror: fetching %s from %s: %w", rel, m.o.URL, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	m.mu.Lock()
	m.st[rel] = statOf(fi, e.lastKey())
	m.mu.Unlock()
	m.stats.Fetches.Add(1)
	m.stats.FetchedBytes.Add(e.Size)
	m.log.Debug("mirror: fetched", "file", rel, "bytes", e.Size, "took", time.Since(t0))
	return nil
}

// download writes e's parts to f, each checked. A part whose bytes fail
// their check is downloaded again (a transfer cut short or garbled), and
// after three failures the file is reported damaged; an unreachable
// bucket is waited out (bounded: a reader waits at most a few minutes).
func (m *Mirror) download(f *os.File, e *Entry) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var off int64
	for _, p := range e.Parts {
		bad, wait := 0, 500*time.Millisecond
		for {
			err := m.downloadPart(ctx, f, off, p)
			if err == nil {
				break
			}
			if errors.Is(err, ErrDamaged) {
				m.stats.Damaged.Add(1)
				if bad++; bad >= 3 {
					return err
				}
			}
			m.log.Warn("mirror: download failed; retrying", "key", p.Key, "err", err)
			if !sleep(ctx, wait) {
				return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
			}
			wait = min(2*wait, 10*time.Second)
		}
		off += p.Size
	}
	return f.Truncate(off)
}

func (m *Mirror) downloadPart(ctx context.Context, f *os.File, off int64, p Part) error {
	body, err := m.objs.Open(ctx, m.prefix+p.Key)
	if err != nil {
		return err
	}
	defer body.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(io.NewOffsetWriter(f, off), h), io.LimitReader(body, p.Size+1))
	if err != nil {
		return fmt.Errorf("mirror: reading %s: %w", p.Key, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != p.Size || sum != p.SHA256 {
		return fmt.Errorf("%w: %s: %d bytes with SHA-256 %.12s, the manifest says %d bytes with %.12s", ErrDamaged, p.Key, n, sum, p.Size, p.SHA256)
	}
	return nil
}

// reader is a read handle of a cached file. Its file may be closed under
// it when the file leaves the cache; the next read opens it again (and
// fetches it back).
type reader struct {
	m    *Mirror
	rel  string
	name string
	f    atomic.Pointer[os.File]
	pos  atomic.Int64
}

// reopen opens r's file, fetching it when the cache lacks it. It is
// registered under mu, so eviction sees it.
func (m *Mirror) reopen(r *reader) error {
	for i := 0; ; i++ {
		if _, err := os.Lstat(r.name); errors.Is(err, os.ErrNotExist) {
			if err := m.fetch(r.rel, r.name); err != nil {
				return err
			}
		}
		m.mu.Lock()
		f, err := os.Open(r.name)
		if err == nil {
			if m.readers[r.rel] == nil {
				m.readers[r.rel] = map[*reader]struct{}{}
			}
			m.readers[r.rel][r] = struct{}{}
			r.f.Store(f)
		}
		m.mu.Unlock()
		if err == nil || !errors.Is(err, os.ErrNotExist) || i == 2 {
			return err
		}
		// Evicted between the fetch and the open: fetch again.
	}
}

func (r *reader) Name() string { return r.name }

func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	for i := 0; ; i++ {
		f := r.f.Load()
		if f == nil {
			if err := r.m.reopen(r); err != nil {
				return 0, err
			}
			continue
		}
		n, err := f.ReadAt(p, off)
		if errors.Is(err, os.ErrClosed) && i < 3 {
			r.f.CompareAndSwap(f, nil)
			continue
		}
		return n, err
	}
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.ReadAt(p, r.pos.Load())
	r.pos.Add(int64(n))
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (r *reader) Close() error {
	r.m.mu.Lock()
	delete(r.m.readers[r.rel], r)
	r.m.mu.Unlock()
	if f := r.f.Swap(nil); f != nil {
		return f.Close()
	}
	return nil
}

// closeReaders closes the files of every open reader (Close).
func (m *Mirror) closeReaders() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rs := range m.readers {
		for r := range rs {
			if f := r.f.Swap(nil); f != nil {
				f.Close()
			}
		}
	}
}
