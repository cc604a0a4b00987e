package runlog

// This file holds the read paths over the log's files: every event in
// order, one rollout's events, and the contexts they fold into.

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/longhaul-rl/longhaul/store"
)

// Events calls fn for every event of the log, in order, with tokens read
// from the blob store. It stops at the first error fn returns.
func (l *Log) Events(ctx context.Context, fn func(off Offset, ev Event) error) error {
	l.mu.RLock()
	end, chunks := l.end, slices.Clone(l.chunks)
	l.mu.RUnlock()
	return scanLog(ctx, l.opts.FS, l.logDir, chunks, uint64(end), false, func(off Offset, ev Event) error {
		ev, err := materialize(&l.blobs, ev)
		if err != nil {
			return err
		}
		return fn(off, ev)
	}, nil)
}

// scanLog decodes every committed event of the chunks up to end. With
// tolerateTail, a torn tail of the last chunk ends the scan and is
// reported through tail instead of failing.
func scanLog(ctx context.Context, fs store.FS, dir string, chunks []uint64, end uint64, tolerateTail bool, fn func(Offset, Event) error, tail *Recovery) error {
	for i, base := range chunks {
		if base >= end {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(dir, chunkName(base))
		b, err := store.ReadFile(fs, path)
		if err != nil {
			return fmt.Errorf("read run log: %w", err)
		}
		if uint64(len(b)) > end-base {
			b = b[:end-base]
		}
		res, err := scanChunk(b, base, 0, func(off Offset, p []byte) error {
			ev, err := decodeEvent(p)
			if err != nil {
				return &CorruptionError{Path: path, Offset: off, Err: err}
			}
			return fn(off, ev)
		})
		if err != nil {
			return err
		}
		if res.err != nil {
			if tolerateTail && res.torn && i == len(chunks)-1 {
				if tail != nil {
					*tail = Recovery{Truncated: true, File: path, Offset: Offset(base + uint64(res.end)), Bytes: int64(len(b) - res.end), Records: res.dropped, Message: res.err.Error()}
				}
				return nil
			}
			return &CorruptionError{Path: path, Offset: Offset(base + uint64(res.damage)), Err: res.err}
		}
	}
	return nil
}

// materialize replaces a call record's blob references with its tokens.
func materialize(br *blobReader, ev Event) (Event, error) {
	cr, ok := ev.(*callRecord)
	if !ok {
		return ev, nil
	}
	c := cr.CallFinished
	if cr.mode == tokensBlobs {
		sb, err := br.get(cr.suffix)
		if err != nil {
			return nil, err
		}
		mb, err := br.get(cr.sampled)
		if err != nil {
			return nil, err
		}
		c.PromptSuffix = getTokens(sb)
		c.Sampled = getTokens(mb[:4*cr.nSampled])
		c.Logprobs = getFloats(mb[4*cr.nSampled:])
	}
	return c, nil
}

// RolloutEvents returns the events of one rollout in log order, with
// tokens: what a resumed rollout replays. It reads only that rollout's
// records, located through the state's index.
func (l *Log) RolloutEvents(id RolloutID) ([]Event, error) {
	var offs []Offset
	var chunks []uint64
	var err error
	l.View(func(s *State) {
		r, e := s.rollout(id)
		if e != nil {
			err = e
			return
		}
		offs = slices.Clone(r.Events)
		chunks = slices.Clone(l.chunks)
	})
	if err != nil {
		return nil, fmt.Errorf("rollout events: %w", err)
	}
	evs := make([]Event, 0, len(offs))
	for _, off := range offs {
		ev, err := l.eventAt(chunks, off)
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// eventAt reads, checks and decodes the record at off.
func (l *Log) eventAt(chunks []uint64, off Offset) (Event, error) {
	i := sort.Search(len(chunks), func(i int) bool { return chunks[i] > uint64(off) }) - 1
	if i < 0 {
		return nil, fmt.Errorf("runlog: offset %d before the first chunk", off)
	}
	name := chunkName(chunks[i])
	f, err := l.files.file(name)
	if err != nil {
		return nil, err
	}
	pos := int64(uint64(off) - chunks[i])
	var h [frameHeaderSize]byte
	if _, err := f.ReadAt(h[:], pos); err != nil {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: fmt.Errorf("%w: read record: %w", ErrCorrupt, err)}
	}
	n := int(uint32(h[0]) | uint32(h[1])<<8 | uint32(h[2])<<16 | uint32(h[3])<<24)
	if n > maxPayload {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: corruptf("frame length %d", n)}
	}
	b := make([]byte, frameHeaderSize+n)
	if _, err := f.ReadAt(b, pos); err != nil {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: fmt.Errorf("%w: read record: %w", ErrCorrupt, err)}
	}
	p, _, _, err := parseFrame(b)
	if err != nil {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: err}
	}
	ev, err := decodeEvent(p)
	if err != nil {
		return nil, &CorruptionError{Path: f.Name(), Offset: off, Err: err}
	}
	return materialize(&l.blobs, ev)
}

// fileCache keeps read-only handles on the log's files.
type fileCache struct {
	fs    store.FS
	dir   string
	mu    sync.Mutex
	files map[string]store.Reader
}

func (c *fileCache) file(name string) (store.Reader, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.files[name]; f != nil {
		return f, nil
	}
	f, err := store.Or(c.fs).Open(filepath.Join(c.dir, name))
	if err != nil {
		return nil, fmt.Errorf("runlog: %w", err)
	}
	if c.files == nil {
		c.files = map[string]store.Reader{}
	}
	c.files[name] = f
	return f, nil
}

func (c *fileCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.files {
		f.Close()
	}
	c.files = nil
}

// Context returns the rollout's current context: the prompt of its latest
// selected call followed by that call's sampled tokens (what the next
// call's PromptPrefix counts into). It is nil before the first call.
func (l *Log) Context(id RolloutID) ([]int32, error) {
	evs, err := l.RolloutEvents(id)
	if err != nil {
		return nil, err
	}
	ctx, _ := Contexts(evs)
	return ctx, nil
}

// Contexts folds a rollout's events (as RolloutEvents returns them) into
// its current context and the full prompt of every call, in call order.
func Contexts(evs []Event) (ctx []int32, prompts [][]int32) {
	for _, ev := range evs {
		c, ok := ev.(CallFinished)
		if !ok {
			continue
		}
		p := make([]int32, 0, int(c.PromptPrefix)+len(c.PromptSuffix))
		p = append(p, ctx[:min(int(c.PromptPrefix), len(ctx))]...)
		p = append(p, c.PromptSuffix...)
		prompts = append(prompts, p)
		if c.Selected {
			ctx = append(slices.Clip(p), c.Sampled...)
		}
	}
	return ctx, prompts
}
