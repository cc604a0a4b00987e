package env

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Key identifies one environment call across processes, so an
// environment with side effects can apply each exactly once: a resumed
// rollout repeats calls it cannot tell were applied (the process died
// between the environment's answer and the log's record), and replays
// logged ones, with the same key. The rollout loop puts the key in the
// context of every Reset and Step; remote clients send it along.
type Key struct {
	Run     string // the run's id (stable across resume); "" outside a run
	Rollout string // the rollout's id, e.g. "g3.m1"
	Attempt uint32
	Step    int // the environment step of the attempt; -1 for reset
}

// String is the key's wire form: "run/rollout/attempt/step" for a step,
// "run/rollout/attempt/reset" for a reset.
func (k Key) String() string {
	s := "reset"
	if k.Step >= 0 {
		s = fmt.Sprint(k.Step)
	}
	return fmt.Sprintf("%s/%s/a%d/%s", k.Run, k.Rollout, k.Attempt, s)
}

type runKey struct{}
type callKey struct{}

// WithRun returns ctx carrying the run id of every key made under it.
func WithRun(ctx context.Context, run string) context.Context {
	return context.WithValue(ctx, runKey{}, run)
}

// RunOf returns the run id WithRun put in ctx ("" if none).
func RunOf(ctx context.Context) string {
	s, _ := ctx.Value(runKey{}).(string)
	return s
}

// WithKey returns ctx carrying k; Run is filled from WithRun when empty.
func WithKey(ctx context.Context, k Key) context.Context {
	if k.Run == "" {
		k.Run = RunOf(ctx)
	}
	return &keyCtx{ctx, k}
}

// keyCtx is context.WithValue for a Key in one allocation instead of two
// (the value context and the boxed Key): a rollout makes one per
// environment step. Value hands out a pointer to the key, which boxes for
// free; KeyOf copies it.
type keyCtx struct {
	context.Context
	k Key
}

func (c *keyCtx) Value(key any) any {
	if key == (callKey{}) {
		return &c.k
	}
	return c.Context.Value(key)
}

func (c *keyCtx) String() string { return fmt.Sprintf("%v.WithKey(%s)", c.Context, c.k) }

// KeyContexts hands out WithKey's contexts from chunks, so that a caller
// making many (a rollout: one per environment step) pays one allocation
// per chunk instead of one per call. Each context is handed out once and
// never rewritten, so an environment may keep it like any context. The
// zero value is ready; it is not safe for concurrent use.
type KeyContexts struct{ free []keyCtx }

// keyChunk is the number of contexts a chunk holds: a typical episode's.
const keyChunk = 16

// WithKey is WithKey(ctx, k) from the next free slot.
func (kc *KeyContexts) WithKey(ctx context.Context, k Key) context.Context {
	if k.Run == "" {
		k.Run = RunOf(ctx)
	}
	if len(kc.free) == 0 {
		kc.free = make([]keyCtx, keyChunk)
	}
	c := &kc.free[0]
	kc.free = kc.free[1:]
	c.Context, c.k = ctx, k
	return c
}

// KeyOf returns the key in ctx.
func KeyOf(ctx context.Context) (Key, bool) {
	k, ok := ctx.Value(callKey{}).(*Key)
	if !ok {
		return Key{}, false
	}
	return *k, true
}

type replayKey struct{}

// WithReplay marks ctx as a replay: the call repeats a key whose effects
// already happened, and is made only to bring a fresh instance's state
// forward. An environment with external side effects skips them.
func WithReplay(ctx context.Context) context.Context {
	return context.WithValue(ctx, replayKey{}, true)
}

// IsReplay reports whether ctx is marked by WithReplay.
func IsReplay(ctx context.Context) bool {
	b, _ := ctx.Value(replayKey{}).(bool)
	return b
}

// ParseKey parses Key.String's form (the run may contain "/").
func ParseKey(s string) (Key, error) {
	bad := fmt.Errorf("env: key %q: want run/rollout/aN/step", s)
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return Key{}, bad
	}
	k := Key{Step: -1}
	if last := s[i+1:]; last != "reset" {
		n, err := strconv.Atoi(last)
		if err != nil || n < 0 {
			return Key{}, bad
		}
		k.Step = n
	}
	s = s[:i]
	if i = strings.LastIndexByte(s, '/'); i < 0 || !strings.HasPrefix(s[i+1:], "a") {
		return Key{}, bad
	}
	a, err := strconv.ParseUint(s[i+2:], 10, 32)
	if err != nil {
		return Key{}, bad
	}
	k.Attempt = uint32(a)
	s = s[:i]
	if i = strings.LastIndexByte(s, '/'); i < 0 {
		return Key{}, bad
	}
	k.Run, k.Rollout = s[:i], s[i+1:]
	return k, nil
}
