package runlog

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/store"
)

// Snapshots. A snapshot file snap/<offset>.snap holds the state of the log
// up to offset (exclusive):
//
//	"LHSN" [version u8 = 1] [kind u8: 0 base, 1 delta] [offset u64 LE] [parent offset u64 LE]
//	body
//	[CRC32C u32 LE of all the bytes before it]
//
// A base body holds the whole state; a delta holds the scalars, the tail of
// the append-only lists, and only the groups changed since its parent, so
// its cost follows what changed. Loading folds base, then deltas, in order.
// After SnapshotChain deltas (or once the deltas outweigh the base) the
// next snapshot is a base and the old chain is deleted.

const (
	snapVersion = 5 // 2 added per-class failure counts, Regenerate, AdmittedFor and Retries; 3: Counts has a ConfigChanged entry; 4: a LogDamaged count and the Damage list; 5: a failure's cause
	snapBase    = 0
	snapDelta   = 1
	snapHeader  = 22
)

var snapMagic = [4]byte{'L', 'H', 'S', 'N'}

// SnapshotInfo describes one written snapshot.
type SnapshotInfo struct {
	Offset   Offset // state covers the log up to here (exclusive)
	Path     string // relative to the run directory
	Base     bool   // a full snapshot, not a delta
	Bytes    int64
	Groups   int // groups written
	Duration time.Duration
}

type snapMeta struct {
	offset, parent uint64
	kind           uint8
	path           string
	bytes          int64
	trained, ckpts int // list lengths covered, for the next delta
}

func snapName(off uint64) string { return fmt.Sprintf("%020d.snap", off) }

// Snapshot writes a snapshot of the durable state (incremental when it
// can be) and then appends SnapshotWritten for it.
func (l *Log) Snapshot(ctx context.Context) (SnapshotInfo, error) {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	t0 := time.Now()
	var deltaBytes, baseBytes int64
	for _, m := range l.chain {
		if m.kind == snapBase {
			baseBytes = m.bytes
		} else {
			deltaBytes += m.bytes
		}
	}
	l.mu.Lock()
	base := len(l.chain) == 0 || len(l.chain) > l.opts.SnapshotChain || deltaBytes > baseBytes || l.forceBase
	var parent snapMeta
	if !base {
		parent = l.chain[len(l.chain)-1]
	}
	off := uint64(l.end)
	if !l.s.Started {
		// Nothing to keep yet, and SnapshotWritten may not precede RunStarted.
		l.mu.Unlock()
		return SnapshotInfo{Offset: Offset(off)}, nil
	}
	if !base && off == parent.offset {
		l.mu.Unlock()
		return SnapshotInfo{Offset: Offset(off), Path: parent.path, Bytes: 0}, nil
	}
	dirty, forced := l.dirty, l.forceBase
	l.dirty, l.forceBase = map[GroupID]struct{}{}, false
	kind := uint8(snapBase)
	if !base {
		kind = snapDelta
	}
	b := snapHeaderBytes(kind, off, parent.offset)
	var ids []GroupID
	if !base {
		ids = make([]GroupID, 0, len(dirty))
		for id := range dirty {
			ids = append(ids, id)
		}
		slices.Sort(ids)
	}
	b = encodeStateBody(b, l.s, base, ids, parent.trained, parent.ckpts)
	meta := snapMeta{offset: off, parent: parent.offset, kind: kind, trained: len(l.s.Trained), ckpts: len(l.s.Checkpoints)}
	ngroups := len(ids)
	if base {
		ngroups = len(l.s.Groups)
	}
	l.mu.Unlock()
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))

	restore := func() {
		l.mu.Lock()
		for id := range dirty {
			l.dirty[id] = struct{}{}
		}
		l.forceBase = l.forceBase || forced
		l.mu.Unlock()
	}
	name := snapName(off)
	if err := writeFileDurable(l.opts.FS, l.snapDir, name, b, l.opts.Hook); err != nil {
		restore()
		return SnapshotInfo{}, fmt.Errorf("write snapshot: %w", err)
	}
	rel := filepath.Join(logSubdir, snapSubdir, name)
	if _, err := l.Append(ctx, SnapshotWritten{Offset: off, Path: rel}); err != nil {
		restore()
		return SnapshotInfo{}, fmt.Errorf("record snapshot: %w", err)
	}
	meta.path, meta.bytes = rel, int64(len(b))
	if base {
		old := l.chain
		l.chain = []snapMeta{meta}
		// The new base is durable and recorded: the old chain is no
		// longer needed to recover.
		for _, m := range old {
			if m.offset != off {
				if err := l.opts.FS.Remove(filepath.Join(l.snapDir, snapName(m.offset))); err != nil && !errors.Is(err, os.ErrNotExist) {
					l.logger.Warn("runlog: remove old snapshot", "err", err)
				}
			}
		}
	} else {
		l.chain = append(l.chain, meta)
	}
	info := SnapshotInfo{Offset: Offset(off), Path: rel, Base: base, Bytes: int64(len(b)), Groups: ngroups, Duration: time.Since(t0)}
	l.logger.Debug("runlog: snapshot", "offset", off, "base", base, "bytes", info.Bytes, "groups", ngroups, "took", info.Duration)
	return info, nil
}

func snapHeaderBytes(kind uint8, off, parent uint64) []byte {
	b := make([]byte, 0, 4096)
	b = append(b, snapMagic[:]...)
	b = append(b, snapVersion, kind)
	b = binary.LittleEndian.AppendUint64(b, off)
	return binary.LittleEndian.AppendUint64(b, parent)
}

// writeFileDurable writes dir/name via a tmp file, fsync and rename, then
// fsyncs dir, so the file is either whole or absent after a crash.
// hook (may be nil) is called at "snapshot.write", between the fsync of the
// temporary file and its rename: crash tests kill the process there.
func writeFileDurable(fs store.FS, dir, name string, b []byte, hook func(string)) (err error) {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			fs.Remove(tmp)
		}
	}()
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if hook != nil {
		hook("snapshot.write")
	}
	if err = fs.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(fs, dir)
}

// encodeStateBody appends the snapshot body. With full, every group;
// otherwise only ids. Lists are written from the given start indexes.
func encodeStateBody(dst []byte, s *State, full bool, ids []GroupID, trainedFrom, ckptFrom int) []byte {
	e := enc{b: dst}
	e.bool(s.Started)
	e.uv(s.Seed)
	e.str(s.Mode)
	e.b = append(e.b, s.ConfigDigest[:]...)
	e.uv(uint64(s.Epoch))
	e.uv(s.NextCursor)
	e.sv(s.Step)
	e.sv(s.Version)
	e.uv(s.LastSnapshot.Offset)
	e.str(s.LastSnapshot.Path)
	e.uv(s.Applied)
	for _, c := range s.Counts {
		e.uv(c)
	}
	if full {
		trainedFrom, ckptFrom = 0, 0
	}
	e.uv(uint64(trainedFrom))
	e.uv(uint64(len(s.Trained) - trainedFrom))
	for _, t := range s.Trained[trainedFrom:] {
		e.sv(t.Step)
		e.sv(t.Version)
		e.uv(uint64(len(t.Groups)))
		for _, g := range t.Groups {
			e.uv(uint64(g))
		}
	}
	e.uv(uint64(ckptFrom))
	e.uv(uint64(len(s.Checkpoints) - ckptFrom))
	for _, c := range s.Checkpoints[ckptFrom:] {
		e.sv(c.Step)
		e.sv(c.Version)
		e.str(c.Path)
		e.b = append(e.b, c.ManifestDigest[:]...)
	}
	// The damage list is short (damage is rare): every snapshot holds it
	// whole.
	e.uv(uint64(len(s.Damage)))
	for _, dm := range s.Damage {
		e.str(dm.File)
		e.uv(dm.Offset)
		e.str(dm.Reason)
	}
	if full {
		e.uv(uint64(len(s.Order)))
		for _, id := range s.Order {
			encodeGroup(&e, s.Groups[id])
		}
	} else {
		e.uv(uint64(len(ids)))
		for _, id := range ids {
			encodeGroup(&e, s.Groups[id])
		}
	}
	return e.b
}

func encodeGroup(e *enc, g *Group) {
	e.uv(uint64(g.ID))
	e.uv(g.Seq)
	e.uv(uint64(g.Epoch))
	e.uv(g.Cursor)
	e.str(g.PromptID)
	e.u8(uint8(g.Status))
	e.sv(g.Step)
	e.sv(g.ForStep)
	e.sv(g.AdmittedFor)
	e.uv(uint64(g.Retries))
	e.uv(uint64(g.Replaces))
	e.uv(uint64(len(g.Members)))
	for _, r := range g.Members {
		e.u8(uint8(r.Status))
		e.uv(uint64(r.Attempt))
		e.uv(r.AttemptSeed)
		e.sv(r.AttemptVersion)
		e.uv(uint64(r.CtxLen))
		e.uv(uint64(r.Segment))
		e.uv(uint64(r.Compactions))
		e.bool(r.CompactionPending)
		e.uv(uint64(r.EnvSteps))
		e.f64(r.EnvReward)
		e.bool(r.EnvDone)
		e.uv(uint64(r.Failures))
		e.uv(uint64(r.InfraFailures))
		e.uv(uint64(r.DataFailures))
		e.bool(r.Regenerate)
		e.uv(uint64(r.EpisodeStart))
		e.uv(uint64(r.LastFailure.Attempt))
		e.str(r.LastFailure.Class)
		e.str(r.LastFailure.Reason)
		e.u8(uint8(r.LastFailure.Cause))
		e.str(r.Outcome)
		e.f64(r.Reward)
		e.bool(r.Success)
		e.uv(uint64(len(r.Calls)))
		var prev uint64
		for _, c := range r.Calls {
			e.uv(uint64(c.Offset) - prev)
			prev = uint64(c.Offset)
			e.uv(uint64(c.Attempt))
			e.uv(uint64(c.Prefix))
			e.uv(uint64(c.Suffix))
			e.uv(uint64(c.Sampled))
			e.sv(c.Version)
			e.uv(uint64(c.Segment))
			e.u8(uint8(btoi(c.Stop) | btoi(c.Selected)<<1))
		}
		e.uv(uint64(len(r.Events)))
		prev = 0
		for _, o := range r.Events {
			e.uv(uint64(o) - prev)
			prev = uint64(o)
		}
	}
}

// decodeStateBody folds a snapshot body into s (empty for a base).
func decodeStateBody(s *State, b []byte) error {
	d := dec{b: b}
	s.Started = d.bool()
	s.Seed = d.uv()
	s.Mode = d.str()
	d.fixed(s.ConfigDigest[:])
	s.Epoch = d.u32()
	s.NextCursor = d.uv()
	s.Step = d.sv()
	s.Version = d.sv()
	s.LastSnapshot.Offset = d.uv()
	s.LastSnapshot.Path = d.str()
	s.Applied = d.uv()
	for i := range s.Counts {
		s.Counts[i] = d.uv()
	}
	from, n := d.uv(), d.count()
	if from > uint64(len(s.Trained)) {
		d.fail("trained list starts at %d of %d", from, len(s.Trained))
		return d.err
	}
	s.Trained = s.Trained[:from]
	for i := 0; i < n && d.err == nil; i++ {
		t := TrainedStep{Step: d.sv(), Version: d.sv()}
		m := d.count()
		for j := 0; j < m && d.err == nil; j++ {
			t.Groups = append(t.Groups, GroupID(d.uv()))
		}
		s.Trained = append(s.Trained, t)
	}
	from, n = d.uv(), d.count()
	if from > uint64(len(s.Checkpoints)) {
		d.fail("checkpoint list starts at %d of %d", from, len(s.Checkpoints))
		return d.err
	}
	s.Checkpoints = s.Checkpoints[:from]
	for i := 0; i < n && d.err == nil; i++ {
		c := CheckpointDurable{Step: d.sv(), Version: d.sv(), Path: d.str()}
		d.fixed(c.ManifestDigest[:])
		s.Checkpoints = append(s.Checkpoints, c)
	}
	n = d.count()
	s.Damage = s.Damage[:0]
	for i := 0; i < n && d.err == nil; i++ {
		s.Damage = append(s.Damage, LogDamaged{File: d.str(), Offset: d.uv(), Reason: d.str()})
	}
	if s.Groups == nil {
		s.Groups = map[GroupID]*Group{}
	}
	n = d.count()
	for i := 0; i < n && d.err == nil; i++ {
		g := decodeGroup(&d)
		if d.err == nil {
			s.Groups[g.ID] = g
		}
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d bytes left in snapshot", ErrDecode, len(d.b))
	}
	return nil
}

// count reads a length and bounds it by the bytes left (every element
// takes at least one byte), so a bad length cannot allocate wildly.
func (d *dec) count() int {
	n := d.uv()
	if n > uint64(len(d.b)) {
		d.fail("count %d beyond payload", n)
		return 0
	}
	return int(n)
}

func decodeGroup(d *dec) *Group {
	g := &Group{ID: GroupID(d.uv()), Seq: d.uv(), Epoch: d.u32(), Cursor: d.uv(), PromptID: d.str(), Status: GroupStatus(d.u8()), Step: d.sv(), ForStep: d.sv(), AdmittedFor: d.sv(), Retries: d.u32(), Replaces: GroupID(d.uv())}
	n := d.count()
	g.Members = make([]*Rollout, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		r := &Rollout{ID: RolloutID{Group: g.ID, Member: uint16(i)}}
		r.Status = RolloutStatus(d.u8())
		r.Attempt = d.u32()
		r.AttemptSeed = d.uv()
		r.AttemptVersion = d.sv()
		r.CtxLen = d.u32()
		r.Segment = d.u32()
		r.Compactions = d.u32()
		r.CompactionPending = d.bool()
		r.EnvSteps = d.u32()
		r.EnvReward = d.f64()
		r.EnvDone = d.bool()
		r.Failures = d.u32()
		r.InfraFailures = d.u32()
		r.DataFailures = d.u32()
		r.Regenerate = d.bool()
		r.EpisodeStart = d.u32()
		r.LastFailure = Failure{Attempt: d.u32(), Class: d.str(), Reason: d.str(), Cause: FailureCause(d.u8())}
		r.Outcome = d.str()
		r.Reward = d.f64()
		r.Success = d.bool()
		nc := d.count()
		if nc > 0 {
			r.Calls = make([]Call, 0, nc)
		}
		var prev uint64
		for j := 0; j < nc && d.err == nil; j++ {
			prev += d.uv()
			c := Call{Offset: Offset(prev), Attempt: d.u32(), Prefix: d.u32(), Suffix: d.u32(), Sampled: d.u32(), Version: d.sv(), Segment: d.u32()}
			f := d.u8()
			c.Stop, c.Selected = f&1 != 0, f&2 != 0
			r.Calls = append(r.Calls, c)
		}
		ne := d.count()
		if ne > 0 {
			r.Events = make([]Offset, 0, ne)
		}
		prev = 0
		for j := 0; j < ne && d.err == nil; j++ {
			prev += d.uv()
			r.Events = append(r.Events, Offset(prev))
		}
		g.Members = append(g.Members, r)
	}
	return g
}

// rebuildOrder restores the admission order from the groups' Seq.
func rebuildOrder(s *State) {
	s.Order = s.Order[:0]
	for id := range s.Groups {
		s.Order = append(s.Order, id)
	}
	sort.Slice(s.Order, func(i, j int) bool { return s.Groups[s.Order[i]].Seq < s.Groups[s.Order[j]].Seq })
}

// readSnap reads and checks one snapshot file.
func readSnap(fs store.FS, path string) (snapMeta, []byte, error) {
	b, err := store.ReadFile(fs, path)
	if err != nil {
		return snapMeta{}, nil, err
	}
	if len(b) < snapHeader+4 {
		return snapMeta{}, nil, corruptf("snapshot %s: short file", path)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return snapMeta{}, nil, corruptf("snapshot %s: checksum", path)
	}
	if [4]byte(b[:4]) != snapMagic {
		return snapMeta{}, nil, corruptf("snapshot %s: magic", path)
	}
	if b[4] != snapVersion {
		return snapMeta{}, nil, fmt.Errorf("snapshot %s: %w %d", path, ErrUnknownVersion, b[4])
	}
	m := snapMeta{kind: b[5], offset: binary.LittleEndian.Uint64(b[6:]), parent: binary.LittleEndian.Uint64(b[14:]), bytes: int64(len(b))}
	if m.kind != snapBase && m.kind != snapDelta {
		return snapMeta{}, nil, corruptf("snapshot %s: kind %d", path, m.kind)
	}
	return m, body[snapHeader:], nil
}

// loadSnapshots returns the state of the newest snapshot chain that loads
// cleanly and covers no more than filesEnd, the offset it covers, and the
// chain. Without one it returns the empty state at offset 0. A snapshot
// that fails to load is only a lost shortcut: replay covers it.
func (l *Log) loadSnapshots(filesEnd uint64) (*State, uint64, []snapMeta, error) {
	ents, _ := l.opts.FS.ReadDir(l.snapDir)
	var offs []uint64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			l.opts.FS.Remove(filepath.Join(l.snapDir, e.Name()))
			continue
		}
		n, ok := strings.CutSuffix(e.Name(), ".snap")
		if !ok {
			continue
		}
		if o, err := strconv.ParseUint(n, 10, 64); err == nil {
			offs = append(offs, o)
		}
	}
	slices.Sort(offs)
	for i := len(offs) - 1; i >= 0; i-- {
		if offs[i] > filesEnd {
			if _, _, err := readSnap(l.opts.FS, filepath.Join(l.snapDir, snapName(offs[i]))); err == nil {
				// A whole snapshot was taken of records that were durable:
				// the log that no longer reaches them lost acknowledged data.
				return nil, 0, nil, &ShortLogError{Path: l.logDir, End: filesEnd, Expected: offs[i], By: "snapshot " + filepath.Join(l.snapDir, snapName(offs[i]))}
			}
			l.logger.Warn("runlog: damaged snapshot beyond the log end ignored", "offset", offs[i], "end", filesEnd)
			continue
		}
		s, chain, err := l.loadChain(offs[i])
		if err != nil {
			l.logger.Warn("runlog: snapshot not loaded", "offset", offs[i], "err", err)
			continue
		}
		return s, offs[i], chain, nil
	}
	return NewState(), 0, nil, nil
}

func (l *Log) loadChain(off uint64) (*State, []snapMeta, error) {
	var metas []snapMeta
	var bodies [][]byte
	for {
		m, body, err := readSnap(l.opts.FS, filepath.Join(l.snapDir, snapName(off)))
		if err != nil {
			return nil, nil, err
		}
		if m.offset != off {
			return nil, nil, corruptf("snapshot %s names offset %d", snapName(off), m.offset)
		}
		m.path = filepath.Join(logSubdir, snapSubdir, snapName(off))
		metas = append(metas, m)
		bodies = append(bodies, body)
		if m.kind == snapBase {
			break
		}
		if m.parent >= off {
			return nil, nil, corruptf("snapshot %d has parent %d", off, m.parent)
		}
		off = m.parent
	}
	slices.Reverse(metas)
	slices.Reverse(bodies)
	s := NewState()
	for i, body := range bodies {
		if err := decodeStateBody(s, body); err != nil {
			return nil, nil, fmt.Errorf("snapshot %d: %w", metas[i].offset, err)
		}
		metas[i].trained, metas[i].ckpts = len(s.Trained), len(s.Checkpoints)
	}
	rebuildOrder(s)
	s.settle()
	return s, metas, nil
}

// Digest returns a SHA-256 of the state's canonical encoding: equal states
// have equal digests. Tests use it to compare folds.
func (s *State) Digest() [32]byte {
	return sha256.Sum256(encodeStateBody(nil, s, true, nil, 0, 0))
}

// Equal reports whether two states are the same.
func (s *State) Equal(o *State) bool { return s.Digest() == o.Digest() }
