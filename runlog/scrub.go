package runlog

// The scrub pass. Open verifies only what was appended since the last
// Open (the verified watermark) and replays only what its snapshot does
// not cover, so a byte that flips later in an older chunk would stay
// hidden until some read needed it, maybe weeks on, when the copy that
// could replace it is gone. After Open, one pass on its own goroutine
// checks every chunk but the one being written against its seal (seal.go),
// newest first, reading at most Options.ScrubRate bytes a second; a chunk
// its writer never sealed is verified record by record and blob by blob,
// then sealed. Damage is reported naming file and offset, with what the
// run still needs of those bytes, and logged as a LogDamaged event (once);
// the run goes on, since its state comes from the snapshot.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// defaultScrubRate bounds the pass's reads: a 10 GiB log takes under three
// minutes, and a resume never waits for it.
const defaultScrubRate = 64 << 20

// scrubState is the pass's outcome, read by Scrubbed once done is closed.
type scrubState struct {
	stop  context.CancelFunc
	done  chan struct{}
	found []LogDamaged
	err   error
}

// startScrub runs the pass over the chunks at bases (all sealed or to be
// sealed) on its own goroutine.
func (l *Log) startScrub(bases []uint64) {
	ctx, stop := context.WithCancel(context.Background())
	l.scrub = scrubState{stop: stop, done: make(chan struct{})}
	if l.opts.ScrubRate < 0 {
		close(l.scrub.done)
		return
	}
	go func() {
		defer close(l.scrub.done)
		l.scrub.err = l.scrubPass(ctx, bases)
		if l.scrub.err != nil && ctx.Err() == nil {
			l.logger.Warn("runlog: scrub pass stopped", "err", l.scrub.err)
		}
	}()
}

// Scrubbed waits until the scrub pass that Open started is over and
// returns the damage it found (already logged and reported). An error says
// the pass did not finish (the log closed, a file could not be read, or
// ctx ended first); it is off when Options.ScrubRate is negative.
func (l *Log) Scrubbed(ctx context.Context) ([]LogDamaged, error) {
	select {
	case <-l.scrub.done:
		return slices.Clone(l.scrub.found), l.scrub.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Log) scrubPass(ctx context.Context, bases []uint64) error {
	p := pacer{rate: l.opts.ScrubRate, start: time.Now()}
	if p.rate == 0 {
		p.rate = defaultScrubRate
	}
	for i := len(bases) - 1; i >= 0; i-- {
		found, err := l.scrubChunk(ctx, &p, bases[i])
		if err != nil {
			return err
		}
		for _, d := range found {
			l.reportDamage(ctx, d)
		}
	}
	return nil
}

// damage is one finding of the pass: where, what, and the rollouts whose
// records or tokens it took.
type damage struct {
	path     string
	off      uint64
	err      error
	rollouts []RolloutID
}

// scrubChunk checks the chunk at base against its seal, or verifies and
// seals it when it has none. Files are streamed: a pack is several times
// its chunk's size, so only a damaged one is read whole.
func (l *Log) scrubChunk(ctx context.Context, p *pacer, base uint64) ([]damage, error) {
	chunkPath, packPath := filepath.Join(l.logDir, chunkName(base)), filepath.Join(l.logDir, packName(base))
	s, sealed, err := readSeal(l.logDir, base)
	if err != nil {
		l.logger.Warn("runlog: seal unreadable; verifying the chunk record by record", "err", err)
	}
	if !sealed {
		return l.sealChunk(ctx, p, base)
	}
	cn, csum, err := p.hash(ctx, chunkPath)
	if err != nil {
		return nil, err
	}
	pn, psum, err := p.hash(ctx, packPath)
	if err != nil {
		return nil, err
	}
	var out []damage
	var chunk []byte
	if cn != s.chunkSize || csum != s.chunkSum || pn != s.packSize || psum != s.packSum {
		if chunk, err = os.ReadFile(chunkPath); err != nil {
			return nil, fmt.Errorf("scrub: %w", err)
		}
	}
	if cn != s.chunkSize || csum != s.chunkSum {
		out = append(out, locateInChunk(base, chunkPath, chunk, s.chunkSize))
	}
	if pn != s.packSize || psum != s.packSum {
		out = append(out, locateInPack(base, packPath, chunk, s.packSize))
	}
	return out, nil
}

// sealChunk verifies every record of a chunk its writer did not seal and
// every blob its call records reference, then seals it.
func (l *Log) sealChunk(ctx context.Context, p *pacer, base uint64) ([]damage, error) {
	chunkPath, packPath := filepath.Join(l.logDir, chunkName(base)), filepath.Join(l.logDir, packName(base))
	chunk, err := p.read(ctx, chunkPath)
	if err != nil {
		return nil, err
	}
	res, err := scanChunk(chunk, base, 0, func(off Offset, b []byte) error {
		ev, err := decodeEvent(b)
		if err != nil {
			return &CorruptionError{Path: chunkPath, Offset: off, Err: err}
		}
		if cr, ok := ev.(*callRecord); ok && cr.mode == tokensBlobs {
			for _, ref := range []blobRef{cr.suffix, cr.sampled} {
				if _, err := l.blobs.get(ref); err != nil {
					return &damage{path: packPath, off: ref.Off, err: err, rollouts: []RolloutID{cr.Rollout}}
				}
				p.n += int64(ref.Len)
			}
		}
		return nil
	})
	var d *damage
	var ce *CorruptionError
	switch {
	case errors.As(err, &d):
		return []damage{*d}, nil
	case errors.As(err, &ce):
		return []damage{{path: chunkPath, off: uint64(ce.Offset), err: ce.Err}}, nil
	case err != nil:
		return nil, err
	case res.err != nil:
		return []damage{{path: chunkPath, off: base + uint64(res.damage), err: res.err}}, nil
	}
	pn, psum, err := p.hash(ctx, packPath)
	if err != nil {
		return nil, err
	}
	s := seal{base: base, chunkSize: uint64(len(chunk)), chunkSum: sha256.Sum256(chunk), packSize: pn, packSum: psum}
	if err := writeSeal(l.opts.FS, l.logDir, s); err != nil {
		l.logger.Warn("runlog: chunk verified but not sealed", "err", err)
	}
	return nil, nil
}

func (d *damage) Error() string { return d.err.Error() }

// checkBlobFrame checks the blob frame at the start of b: its length fits,
// its CRC and its SHA-256 prefix match. It returns the data length.
func checkBlobFrame(b []byte) (uint32, error) {
	if len(b) < blobHeaderSize {
		return 0, corruptf("short blob header (%d bytes)", len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(len(b)) < blobHeaderSize+uint64(n) {
		return 0, corruptf("blob length %d beyond the pack's end", n)
	}
	data := b[blobHeaderSize : blobHeaderSize+int(n)]
	full := sha256.Sum256(data)
	if crc32.Update(crc32.Checksum(b[8:24], castagnoli), castagnoli, data) != binary.LittleEndian.Uint32(b[4:]) || [16]byte(full[:16]) != [16]byte(b[8:24]) {
		return 0, corruptf("blob checksum")
	}
	return n, nil
}

// locateInChunk finds where a chunk that no longer matches its seal is
// damaged, and the rollouts whose records lie in the damaged span.
func locateInChunk(base uint64, path string, chunk []byte, sealedSize uint64) damage {
	res, err := scanChunk(chunk, base, 0, func(off Offset, p []byte) error {
		if _, err := decodeEvent(p); err != nil {
			return &CorruptionError{Path: path, Offset: off, Err: err}
		}
		return nil
	})
	var ce *CorruptionError
	switch {
	case errors.As(err, &ce):
		return damage{path: path, off: uint64(ce.Offset), err: ce.Err}
	case res.err != nil:
		return damage{path: path, off: base + uint64(res.damage), err: res.err}
	case uint64(len(chunk)) != sealedSize:
		return damage{path: path, off: base + min(uint64(len(chunk)), sealedSize), err: corruptf("the file is %d bytes, sealed at %d", len(chunk), sealedSize)}
	}
	return damage{path: path, off: base, err: corruptf("the file's digest differs from its seal though every frame checks: it was rewritten")}
}

// locateInPack finds the first damaged blob frame of a pack that no longer
// matches its seal, reading it frame by frame, and the rollouts whose call
// records (in chunk) reference it.
func locateInPack(base uint64, path string, chunk []byte, sealedSize uint64) damage {
	d := damage{path: path}
	pos, span := uint64(0), uint64(math.MaxUint64)
	f, err := os.Open(path)
	if err != nil {
		d.err = corruptf("pack unreadable: %v", err)
		return d
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		d.err = corruptf("pack unreadable: %v", err)
		return d
	}
	size := uint64(fi.Size())
	r := bufio.NewReaderSize(f, 1<<20)
	var frame []byte
	for pos < size {
		hdr, _ := r.Peek(blobHeaderSize)
		if len(hdr) < blobHeaderSize {
			d.off, d.err = pos, corruptf("at byte %d: short blob header (%d bytes)", pos, len(hdr))
			break
		}
		n := uint64(binary.LittleEndian.Uint32(hdr))
		if n > maxPayload || pos+blobHeaderSize+n > size {
			d.off, d.err = pos, corruptf("at byte %d: blob length %d beyond the pack's end", pos, n)
			break
		}
		frame = slices.Grow(frame[:0], int(blobHeaderSize+n))[:blobHeaderSize+n]
		if _, err := io.ReadFull(r, frame); err != nil {
			d.off, d.err = pos, corruptf("at byte %d: %v", pos, err)
			break
		}
		if _, err := checkBlobFrame(frame); err != nil {
			// The length reads: only this blob is lost.
			d.off, d.err, span = pos, fmt.Errorf("at byte %d: %w", pos, err), pos+uint64(len(frame))
			break
		}
		pos += uint64(len(frame))
	}
	switch {
	case d.err != nil:
	case size != sealedSize:
		d.off, d.err = min(size, sealedSize), corruptf("the file is %d bytes, sealed at %d", size, sealedSize)
	default:
		d.err = corruptf("the file's digest differs from its seal though every blob checks: it was rewritten")
		return d
	}
	// The call records of this chunk that reference a blob in the damaged
	// span: the bad blob, or everything from it on when its length is
	// damaged (which hides where the next blob starts).
	scanChunk(chunk, base, 0, func(_ Offset, p []byte) error {
		ev, err := decodeEvent(p)
		cr, ok := ev.(*callRecord)
		if err != nil || !ok || cr.mode != tokensBlobs {
			return nil
		}
		for _, ref := range []blobRef{cr.suffix, cr.sampled} {
			if ref.Len > 0 && ref.Pack == base && ref.Off+blobHeaderSize+uint64(ref.Len) > d.off && ref.Off < span {
				d.rollouts = append(d.rollouts, cr.Rollout)
				break
			}
		}
		return nil
	})
	return d
}

// reportDamage says what the damage takes from the run, reports it and
// logs it as a LogDamaged event unless the log holds that finding already.
func (l *Log) reportDamage(ctx context.Context, d damage) {
	rel := filepath.Join(logSubdir, filepath.Base(d.path))
	var verdict string
	dup := false
	l.View(func(s *State) {
		ids := d.rollouts
		if strings.HasSuffix(d.path, ".seg") {
			ids = rolloutsInSpan(s, d.off, nextFrame(d.path, d.off))
		}
		verdict = needOf(s, d.off, strings.HasSuffix(d.path, ".seg"), ids, rel)
		for _, x := range s.Damage {
			dup = dup || (x.File == rel && x.Offset == d.off)
		}
	})
	ev := LogDamaged{File: rel, Offset: d.off, Reason: fmt.Sprintf("%v; %s", d.err, verdict)}
	l.logger.Error("runlog: damage in a sealed chunk of the run log", "file", d.path, "offset", d.off, "detail", ev.Reason)
	l.scrub.found = append(l.scrub.found, ev)
	if dup {
		return
	}
	if _, err := l.Append(ctx, ev); err != nil {
		l.logger.Warn("runlog: damage not logged", "err", err)
	}
}

// nextFrame returns where the next whole frame after the damage at off
// starts in the chunk file at path (its end when none does).
func nextFrame(path string, off uint64) uint64 {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < chunkHeaderSize {
		return off + 1
	}
	base := binary.LittleEndian.Uint64(b[8:])
	if off < base || off-base >= uint64(len(b)) {
		return off + 1
	}
	return base + uint64(nextFramePos(b, int(off-base)+1))
}

// rolloutsInSpan returns the rollouts with an event recorded in [from, to).
func rolloutsInSpan(s *State, from, to uint64) []RolloutID {
	var out []RolloutID
	for _, id := range s.Order {
		for _, r := range s.Groups[id].Members {
			i, _ := slices.BinarySearch(r.Events, Offset(from))
			if i < len(r.Events) && uint64(r.Events[i]) < to {
				out = append(out, r.ID)
			}
		}
	}
	return out
}

// needOf says what the run still needs of damaged bytes: records a resume
// would replay (not covered by the newest snapshot), or a rollout it may
// still read (open, committed, or trained after the newest checkpoint, so
// a rewind would train it again).
func needOf(s *State, off uint64, record bool, ids []RolloutID, rel string) string {
	ck := int64(-1)
	if n := len(s.Checkpoints); n > 0 {
		ck = s.Checkpoints[n-1].Step
	}
	var needed, spent []string
	for _, id := range ids {
		g := s.Groups[id.Group]
		switch {
		case g == nil:
		case g.Status == GroupStatusOpen || g.Status == GroupStatusCommitted:
			needed = append(needed, fmt.Sprintf("%s (group %s)", id, g.Status))
		case g.Status == GroupStatusTrained && g.Step > ck:
			needed = append(needed, fmt.Sprintf("%s (trained at step %d, after checkpoint step %d)", id, g.Step, ck))
		default:
			spent = append(spent, id.String())
		}
	}
	switch {
	case record && s.LastSnapshot.Offset <= off:
		return fmt.Sprintf("needed: no snapshot covers offset %d, so the next resume must replay it; restore %s from a copy", off, rel)
	case len(needed) > 0:
		return fmt.Sprintf("needed by rollout %s: the run stops with an error naming %s when it reads them; restore the file from a copy, or resume from an older run directory", list(needed), rel)
	case len(spent) > 0:
		return fmt.Sprintf("not needed to go on (the snapshot at offset %d covers it; rollout %s trained before checkpoint step %d): lost for inspect only", s.LastSnapshot.Offset, list(spent), ck)
	}
	return fmt.Sprintf("not needed to go on: the snapshot at offset %d covers it", s.LastSnapshot.Offset)
}

func list(xs []string) string {
	if len(xs) > 4 {
		return fmt.Sprintf("%s and %d more", strings.Join(xs[:4], ", "), len(xs)-4)
	}
	return strings.Join(xs, ", ")
}

// pacer bounds the pass's reads to rate bytes a second on average.
type pacer struct {
	rate  int64
	start time.Time
	n     int64
}

// read reads the file at path in blocks, waiting between blocks as the
// rate requires.
func (p *pacer) read(ctx context.Context, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	const block = 1 << 20
	b := make([]byte, fi.Size())
	for at := 0; at < len(b); {
		k, err := io.ReadFull(f, b[at:min(at+block, len(b))])
		at += k
		if err != nil {
			return nil, fmt.Errorf("scrub %s: %w", path, err)
		}
		p.n += int64(k)
		if err := p.wait(ctx); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// hash streams the file at path through SHA-256 as read does; a missing
// file hashes as empty (the seal then shows what was lost).
func (p *pacer) hash(ctx context.Context, path string) (uint64, [32]byte, error) {
	var sum [32]byte
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, sha256.Sum256(nil), nil
	}
	if err != nil {
		return 0, sum, fmt.Errorf("scrub: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var n uint64
	for {
		k, err := f.Read(buf)
		h.Write(buf[:k])
		n += uint64(k)
		p.n += int64(k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, sum, fmt.Errorf("scrub %s: %w", path, err)
		}
		if err := p.wait(ctx); err != nil {
			return 0, sum, err
		}
	}
	h.Sum(sum[:0])
	return n, sum, nil
}

func (p *pacer) wait(ctx context.Context) error {
	due := p.start.Add(time.Duration(float64(p.n) / float64(p.rate) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
