package mirror

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Stats counts what the mirror did.
type Stats struct {
	Rounds, Failed, Manifests atomic.Int64
	Uploads, UploadedBytes    atomic.Int64
	Fetches, FetchedBytes     atomic.Int64
	Evicted, EvictedBytes     atomic.Int64
	Damaged                   atomic.Int64
	// LastShipped is the UnixNano of the newest manifest written.
	LastShipped atomic.Int64
}

// Stats returns the mirror's counters.
func (m *Mirror) Stats() *Stats { return &m.stats }

// Start begins shipping: cut is called at the start of every round (the
// run log's ShipCut), so the round ships a consistent prefix of the run.
func (m *Mirror) Start(cut func() Cut) {
	m.mu.Lock()
	m.cut = cut
	m.mu.Unlock()
	go m.loop()
}

// Kick asks for a round now (after a snapshot or a checkpoint); it never
// blocks.
func (m *Mirror) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Flush asks for a round and waits until one that started after the call
// has shipped, or ctx ends, or the mirror is fenced.
func (m *Mirror) Flush(ctx context.Context) error {
	m.mu.Lock()
	m.gen++
	want := m.gen
	m.mu.Unlock()
	m.Kick()
	stop := context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.cond.Broadcast()
		m.mu.Unlock()
	})
	defer stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.synced < want && m.fenced == nil && ctx.Err() == nil {
		m.cond.Wait()
	}
	if m.fenced != nil {
		return m.fenced
	}
	if m.synced < want {
		return fmt.Errorf("mirror: shipping to %s: %w", m.o.URL, ctx.Err())
	}
	return nil
}

// loop runs rounds on the clock, on kicks and flushes, retrying a failed
// round (an outage, throttling past the client's retries) with backoff
// while the run goes on locally.
func (m *Mirror) loop() {
	defer close(m.done)
	t := time.NewTicker(m.o.SyncInterval)
	defer t.Stop()
	var failingSince time.Time
	var lastWarn time.Time
	retry := time.Duration(0)
	for {
		var wake <-chan time.Time
		if retry > 0 {
			wake = time.After(retry)
		}
		select {
		case <-m.quit:
			return
		case <-t.C:
		case <-m.kick:
		case <-wake:
		}
		m.mu.Lock()
		gen := m.gen
		m.mu.Unlock()
		err := m.round(context.Background())
		m.stats.Rounds.Add(1)
		m.mu.Lock()
		switch {
		case errors.Is(err, ErrFenced):
			if m.fenced == nil {
				m.fenced = err
			}
			m.markLost()
		case err == nil:
			m.synced = max(m.synced, gen)
		}
		m.cond.Broadcast()
		fenced := m.fenced
		m.mu.Unlock()
		switch {
		case fenced != nil:
			m.log.Error("mirror: stopped shipping", "err", fenced)
			return
		case err != nil:
			m.stats.Failed.Add(1)
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if time.Since(lastWarn) > time.Minute {
				m.log.Warn("mirror: shipping failed; the run goes on and the bucket catches up when it answers", "err", err, "failing_for", time.Since(failingSince).Round(time.Second))
				lastWarn = time.Now()
			}
			retry = min(max(2*retry, 500*time.Millisecond), m.o.SyncInterval)
		default:
			if !failingSince.IsZero() {
				m.log.Info("mirror: shipping again", "after", time.Since(failingSince).Round(time.Second))
				failingSince, lastWarn = time.Time{}, time.Time{}
			}
			retry = 0
		}
	}
}

// job is one upload of a round: bytes [from, to) of a file (or data).
type job struct {
	rel      string
	path     string
	from, to int64
	data     []byte // replaced content
	whole    bool   // replaces the entry's parts (else appends a part)
	stat     fileStat
	part     Part
	gone     bool // the file was removed before it could be read
}

// round ships one consistent cut: see the package doc.
func (m *Mirror) round(ctx context.Context) error {
	m.mu.Lock()
	cutFn, prev := m.cut, m.man
	m.mu.Unlock()
	cut := cutFn()
	local, err := m.walk()
	if err != nil {
		return err
	}
	m.mu.Lock()
	dirty := map[string]int64{}
	for rel, t := range m.track {
		dirty[rel] = t.dirtyFrom
		t.dirtyFrom = math.MaxInt64
	}
	jobs, next := m.plan(cut, local, dirty, prev)
	m.mu.Unlock()
	restore := func() {
		m.mu.Lock()
		for rel, d := range dirty {
			if t := m.track[rel]; t != nil {
				t.dirtyFrom = min(t.dirtyFrom, d)
			}
		}
		m.mu.Unlock()
	}
	if err := m.upload(ctx, jobs); err != nil {
		restore()
		return err
	}
	m.changedMeanwhile(jobs)
	if len(jobs) == 0 && len(next) == len(prev.Files) {
		return nil // nothing changed: no manifest write
	}
	man := &Manifest{Format: format, Epoch: prev.Epoch, Seq: prev.Seq + 1, Writer: prev.Writer, Holder: prev.Holder,
		Written: time.Now().UTC(), LogEnd: cut.LogEnd(), Files: next}
	for _, j := range jobs {
		if j.gone {
			continue
		}
		e := &Entry{Size: j.to, Parts: []Part{j.part}}
		if !j.whole {
			old := next[j.rel]
			e.Parts = append(append([]Part(nil), old.Parts...), j.part)
		}
		next[j.rel] = e
	}
	m.mu.Lock()
	etag := m.etag
	m.mu.Unlock()
	tag, err := writeManifest(ctx, m.objs, m.prefix+manifestKey, man, etag)
	if err != nil {
		restore()
		return err
	}
	m.stats.Manifests.Add(1)
	m.stats.LastShipped.Store(man.Written.UnixNano())
	m.mu.Lock()
	m.man, m.etag = man, tag
	for rel := range m.tomb {
		if _, ok := man.Files[rel]; !ok {
			delete(m.tomb, rel)
		}
	}
	for _, j := range jobs {
		if !j.gone {
			j.stat.Key = j.part.Key
			m.st[j.rel] = j.stat
		}
	}
	st := state{URL: m.o.URL, Writer: m.writer, Files: maps.Clone(m.st)} // a copy: the run changes m.st under mu while it is saved
	m.mu.Unlock()
	m.dropUnnamed(ctx, prev, man)
	if err := m.saveState(st); err != nil {
		m.log.Warn("mirror: saving cache state", "err", err)
	}
	m.evict(local)
	return nil
}

// changedMeanwhile drops the uploads whose bytes changed while they were
// read (metrics.jsonl rewound by a resume, a file rewritten outside the
// seam): the manifest keeps the file's previous entry, and the next round
// ships it again.
func (m *Mirror) changedMeanwhile(jobs []*job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range jobs {
		if j.gone || j.data != nil {
			continue
		}
		if t := m.track[j.rel]; t != nil {
			j.gone = t.dirtyFrom < j.to
			continue
		}
		if fi, err := os.Stat(j.path); err != nil || !statOf(fi, "").same(j.stat) {
			j.gone = true
		}
	}
}

// walk lists the cache's regular files (relative path → stat), leaving
// out the lock, the mirror's bookkeeping and temporary files.
func (m *Mirror) walk() (map[string]os.FileInfo, error) {
	out := map[string]os.FileInfo{}
	err := filepath.WalkDir(m.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != m.root && (name == StateDir || strings.HasPrefix(name, ".tmp")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || skipFile(name) || path == filepath.Join(m.root, "lock") {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		rel, _ := filepath.Rel(m.root, path)
		out[filepath.ToSlash(rel)] = fi
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mirror: listing the cache: %w", err)
	}
	return out, nil
}

// skipFile: temporary files are never shipped (a write in progress).
func skipFile(name string) bool {
	return strings.Contains(name, ".tmp") || strings.HasSuffix(name, ".fetch")
}

// plan decides each file's upload (under mu): nothing when the bucket
// already has the bytes, a new part when the file only grew since, the
// whole file otherwise. next is the manifest's file table before the
// uploads are added.
func (m *Mirror) plan(cut Cut, local map[string]os.FileInfo, dirty map[string]int64, prev *Manifest) ([]*job, map[string]*Entry) {
	next := make(map[string]*Entry, len(prev.Files))
	for rel, e := range prev.Files {
		if _, here := local[rel]; here || !m.tomb[rel] {
			next[rel] = e // shipped, or evicted from the cache: still the run's
		}
	}
	var jobs []*job
	for rel, fi := range local {
		limit, ok := cut.Limit(rel, fi.Size())
		if !ok {
			continue
		}
		e := prev.Files[rel]
		path := filepath.Join(m.root, filepath.FromSlash(rel))
		j := &job{rel: rel, path: path, to: limit, whole: true, stat: statOf(fi, "")}
		if data, ok := cut.Replace(rel); ok {
			if e != nil && e.Size == int64(len(data)) && len(e.Parts) == 1 && e.Parts[0].SHA256 == sha256Hex(data) {
				continue
			}
			j.data, j.to = data, int64(len(data))
			jobs = append(jobs, j)
			continue
		}
		st, known := m.st[rel]
		_, tracked := m.track[rel]
		unchanged := known && e != nil && st.Key == e.lastKey() && e.Size == limit
		switch {
		case tracked && unchanged && dirty[rel] >= e.Size:
			continue
		case !tracked && unchanged && st.same(statOf(fi, st.Key)):
			continue
		case tracked && e != nil && known && st.Key == e.lastKey() && dirty[rel] >= e.Size && limit > e.Size && len(e.Parts) < maxParts:
			j.from, j.whole = e.Size, false
		case tracked && e != nil && known && st.Key == e.lastKey() && dirty[rel] >= e.Size && limit == e.Size:
			continue
		}
		jobs = append(jobs, j)
	}
	// A file written in parts is shipped whole once nobody writes it any
	// more (a sealed log chunk), so reading it back is one request.
	for rel, e := range next {
		if len(e.Parts) < 2 {
			continue
		}
		fi, here := local[rel]
		if t := m.track[rel]; !here || (t != nil && t.open > 0) || fi.Size() != e.Size || hasJob(jobs, rel) {
			continue
		}
		if st, ok := m.st[rel]; !ok || st.Key != e.lastKey() {
			continue
		}
		jobs = append(jobs, &job{rel: rel, path: filepath.Join(m.root, filepath.FromSlash(rel)), to: e.Size, whole: true, stat: statOf(fi, "")})
	}
	return jobs, next
}

// maxParts bounds the objects of one growing file; past it the file is
// shipped whole again.
const maxParts = 256

func hasJob(jobs []*job, rel string) bool {
	for _, j := range jobs {
		if j.rel == rel {
			return true
		}
	}
	return false
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// upload runs the round's uploads, Workers at a time. Each object gets a
// key of this epoch that was never used.
func (m *Mirror) upload(ctx context.Context, jobs []*job) error {
	sem := make(chan struct{}, m.o.Workers)
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	epoch := m.lease.Epoch()
	for i, j := range jobs {
		m.mu.Lock()
		m.seq++
		j.part.Key = objectKey(j.rel, epoch, m.seq)
		m.mu.Unlock()
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = m.uploadOne(ctx, j)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (m *Mirror) uploadOne(ctx context.Context, j *job) error {
	var r io.Reader
	if j.data != nil {
		r = bytes.NewReader(j.data)
	} else {
		f, err := os.Open(j.path)
		if errors.Is(err, os.ErrNotExist) {
			j.gone = true // removed since the walk (an old snapshot): the next round sees it gone
			return nil
		}
		if err != nil {
			return fmt.Errorf("mirror: %w", err)
		}
		defer f.Close()
		r = io.NewSectionReader(f, j.from, j.to-j.from)
	}
	h := sha256.New()
	size := j.to - j.from
	if err := m.objs.Upload(ctx, m.prefix+j.part.Key, io.TeeReader(r, h), size); err != nil {
		return err
	}
	j.part.Size, j.part.SHA256 = size, hex.EncodeToString(h.Sum(nil))
	m.stats.Uploads.Add(1)
	m.stats.UploadedBytes.Add(size)
	return nil
}

// dropUnnamed deletes the objects prev named and man does not (best
// effort). Only after man is written: a writer deletes nothing a manifest
// it did not replace still names.
func (m *Mirror) dropUnnamed(ctx context.Context, prev, man *Manifest) {
	named := map[string]bool{}
	for _, e := range man.Files {
		for _, p := range e.Parts {
			named[p.Key] = true
		}
	}
	for _, e := range prev.Files {
		for _, p := range e.Parts {
			if !named[p.Key] {
				if err := m.objs.Delete(ctx, m.prefix+p.Key); err != nil {
					m.log.Debug("mirror: delete", "key", p.Key, "err", err)
				}
			}
		}
	}
}
