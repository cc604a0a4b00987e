package runlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/longhaul-rl/longhaul/store"
)

// ReadRollouts folds the run directory's log read-only (like Inspect: no
// lock, no repair) and returns the state and the events of every rollout
// keep accepts, in log order with their tokens materialized. It is what
// `longhaul inspect` lists and shows rollouts from.
func ReadRollouts(ctx context.Context, dir string, keep func(RolloutID) bool) (*State, map[RolloutID][]Event, error) {
	evs := map[RolloutID][]Event{}
	f, err := readOnlyFold(ctx, dir, func(_ Offset, ev Event) error {
		if keep == nil {
			return nil
		}
		if id, ok := eventRollout(ev); ok && keep(id) {
			evs[id] = append(evs[id], ev)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	br := &blobReader{fs: store.OS, dir: filepath.Join(dir, logSubdir)}
	defer br.close()
	for id, list := range evs {
		if err := f.whole(id, len(list)); err != nil {
			return nil, nil, err
		}
		for i, ev := range list {
			if list[i], err = materialize(br, ev); err != nil {
				return nil, nil, err
			}
		}
		evs[id] = list
	}
	return f.s, evs, nil
}

// fold is what a read-only fold found.
type fold struct {
	s    *State
	tail *Recovery // a torn or unfinished last append, left as it is
	end  Offset    // offset of the last event
	// passed lists damaged records the fold passed over; from is then the
	// offset of the snapshot the state was taken from (0: folded whole).
	passed []LogDamaged
	from   uint64
}

// whole says whether all n of a rollout's events were read, or which
// damage took some.
func (f *fold) whole(id RolloutID, n int) error {
	r := f.s.Rollout(id)
	if r == nil || len(f.passed) == 0 || n >= len(r.Events) {
		return nil
	}
	d := f.passed[0]
	return &CorruptionError{Path: d.File, Offset: Offset(d.Offset), Err: fmt.Errorf("%w: %d of rollout %s's %d records are in damaged bytes: %s", ErrCorrupt, len(r.Events)-n, id, len(r.Events), d.Reason)}
}

// readOnlyFold folds the whole log of a run directory without writing to
// it, calling fn (if set) with every event before it is applied. Damage in
// the middle of the log is passed over when a snapshot after it gives the
// state (the run itself goes on from that snapshot: scrub.go); fn then
// sees every record that still reads. Damage the snapshot does not cover
// is an error, as before.
func readOnlyFold(ctx context.Context, dir string, fn func(Offset, Event) error) (*fold, error) {
	logDir := filepath.Join(dir, logSubdir)
	chunks, err := listChunks(store.OS, logDir)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", dir, err)
	}
	if len(chunks) == 0 {
		return nil, fmt.Errorf("inspect %s: no run log", dir)
	}
	f := &fold{s: NewState()}
	var tail Recovery
	apply := func(off Offset, ev Event) error {
		if fn != nil {
			if err := fn(off, ev); err != nil {
				return err
			}
		}
		if err := ApplyAt(f.s, ev, off); err != nil {
			return &CorruptionError{Path: logDir, Offset: off, Err: fmt.Errorf("replay: %w", err)}
		}
		f.end = off
		return nil
	}
	err = scanLog(ctx, store.OS, logDir, chunks, ^uint64(0), true, apply, &tail)
	var ce *CorruptionError
	if errors.As(err, &ce) {
		err = f.passOver(ctx, logDir, chunks, ce, fn, apply, &tail)
	}
	if err != nil {
		return nil, err
	}
	if tail.Truncated {
		f.tail = &tail
	}
	return f, nil
}

// passOver goes on after the damage ce from the newest snapshot that
// covers it: the records before the snapshot are only shown to fn (those
// that read), the ones after it are applied to the snapshot's state.
func (f *fold) passOver(ctx context.Context, logDir string, chunks []uint64, ce *CorruptionError, fn, apply func(Offset, Event) error, tail *Recovery) error {
	st, from := newestSnapshotAfter(logDir, uint64(ce.Offset))
	if st == nil {
		return ce
	}
	f.s, f.from = st, from
	return salvage(ctx, logDir, chunks, uint64(ce.Offset), func(off Offset, ev Event) error {
		if uint64(off) >= from {
			return apply(off, ev)
		}
		f.end = off
		if fn != nil {
			return fn(off, ev)
		}
		return nil
	}, func(path string, off uint64, err error) error {
		if off >= from {
			return &CorruptionError{Path: path, Offset: Offset(off), Err: err}
		}
		f.passed = append(f.passed, LogDamaged{File: filepath.Join(logSubdir, filepath.Base(path)), Offset: off, Reason: err.Error()})
		return nil
	}, tail)
}

// newestSnapshotAfter loads the newest snapshot chain of the log that
// covers offset off (nil when none loads).
func newestSnapshotAfter(logDir string, off uint64) (*State, uint64) {
	ro := &Log{snapDir: filepath.Join(logDir, snapSubdir), logger: slog.New(slog.DiscardHandler), opts: Options{FS: store.OS}}
	ents, _ := os.ReadDir(ro.snapDir)
	var offs []uint64
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".snap"); ok {
			if o, err := strconv.ParseUint(n, 10, 64); err == nil && o > off {
				offs = append(offs, o)
			}
		}
	}
	slices.Sort(offs)
	for i := len(offs) - 1; i >= 0; i-- {
		if s, _, err := ro.loadChain(offs[i]); err == nil {
			return s, offs[i]
		}
	}
	return nil, 0
}

// salvage calls fn with every record from offset from on that still reads:
// at each damaged frame it tells bad (which may stop it with an error)
// and goes on at the next whole frame. A torn tail of the last chunk ends
// it and is reported through tail.
func salvage(ctx context.Context, logDir string, chunks []uint64, from uint64, fn func(Offset, Event) error, bad func(path string, off uint64, err error) error, tail *Recovery) error {
	for i, base := range chunks {
		if i+1 < len(chunks) && chunks[i+1] <= from {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(logDir, chunkName(base))
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read run log: %w", err)
		}
		pos := 0
		if from > base {
			pos = int(min(from-base, uint64(len(b))))
		}
		for pos < len(b) {
			var undecoded *CorruptionError
			res, err := scanChunk(b, base, pos, func(off Offset, p []byte) error {
				ev, err := decodeEvent(p)
				if err != nil {
					return &CorruptionError{Path: path, Offset: off, Err: err}
				}
				return fn(off, ev)
			})
			at, why := 0, res.err
			switch {
			case errors.As(err, &undecoded) && undecoded.Path == path:
				at, why = int(uint64(undecoded.Offset)-base), undecoded.Err
			case err != nil:
				return err
			case res.err == nil:
				at = len(b)
			case res.torn && i == len(chunks)-1:
				*tail = Recovery{Truncated: true, File: path, Offset: Offset(base + uint64(res.end)), Bytes: int64(len(b) - res.end), Records: res.dropped, Message: res.err.Error()}
				return nil
			default:
				at = res.damage
			}
			if why == nil {
				break
			}
			if err := bad(path, base+uint64(at), why); err != nil {
				return err
			}
			pos = max(nextFramePos(b, at+1), chunkHeaderSize)
		}
	}
	return nil
}

// nextFramePos returns the position of the first whole frame at or after
// from in a chunk's bytes, or len(b).
func nextFramePos(b []byte, from int) int {
	for p := from; p+frameHeaderSize < len(b); p++ {
		if _, _, _, err := parseFrame(b[p:]); err == nil {
			return p
		}
	}
	return len(b)
}
