// Package rollout runs one rollout's agent loop: render the context, call
// the generator, select a response, step the environment, compact the
// context when it grows too long, and seal the rollout with an outcome.
//
// Every fact is recorded through a Recorder before the loop acts on it, and
// the loop is resumable from its own events: Run(ctx, spec, prior) replays
// prior without generating a logged call again, brings the environment to
// the logged state (restore from the last snapshot, else replay the logged
// actions from the seed), and continues live.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/runlog"
)

// Recorder makes events durable: Record returns once all of evs are, as
// one atomic append (after a crash all of them are in the log or none).
// It must not keep evs: the loop reuses the slice.
type Recorder interface {
	Record(ctx context.Context, evs ...runlog.Event) error
}

// RecorderFunc adapts a function to Recorder.
type RecorderFunc func(ctx context.Context, evs ...runlog.Event) error

// Record implements Recorder.
func (f RecorderFunc) Record(ctx context.Context, evs ...runlog.Event) error { return f(ctx, evs...) }

// Validator inspects a selected candidate; a non-nil error rejects it and
// its text becomes CallFinished.Reject.
type Validator func(ctx context.Context, text string, sampled []int32) error

// SampleSeed is the sampling seed of a call: derived from (run seed,
// "sample", group, member, call). The attempt is left out on purpose: the
// call index is unique over all attempts, so a retried attempt draws fresh
// seeds only for calls never logged, and a resumed rollout samples exactly
// what an uninterrupted one would (deterministic mode's bit-identity).
func SampleSeed(seed uint64, id runlog.RolloutID, call uint32) uint64 {
	return rng.Derive(seed, "sample", uint64(id.Group), uint64(id.Member), uint64(call))
}

// Run runs (or resumes) one attempt of a rollout. prior holds the events
// this rollout already recorded, in log order, from any attempt; events of
// other rollouts and kinds are ignored. It returns the result when sealed;
// on failure it records RolloutFailed and returns an error carrying a
// *failure.Failure. Cancellation of ctx returns ctx's error without recording
// anything new (an environment step already taken is still logged).
func Run(ctx context.Context, spec Spec, prior []runlog.Event) (Result, error) {
	l, err := newLoop(spec, prior)
	if err != nil {
		return Result{}, failure.NewData("spec", err)
	}
	if r, ok := l.sealedInPrior(); ok {
		return r, nil
	}
	res, err := l.run(ctx)
	if len(l.held) > 0 && (err == nil || ctx.Err() != nil) {
		// A step held when the loop ends (cancelled between the step and
		// the next append) is logged before the environment is closed.
		if ferr := l.flush(ctx); ferr != nil {
			l.log.Warn("logging the last environment step", "rollout", spec.Rollout, "err", ferr)
			if err == nil {
				err = ferr
			}
		}
	}
	// Nothing is returned (a result, a failure) before a staged call is
	// durable: the caller's next effect may leave the process. A staged
	// seal is the caller's to settle (Spec.StageSeal).
	if l.sealStaged && err == nil {
		l.staged = false
	} else if serr := l.settle(); serr != nil && err == nil {
		err = serr
	}
	if l.env != nil {
		// Close even if ctx is done: a remote session must not leak.
		if cerr := l.env.Close(context.WithoutCancel(ctx)); cerr != nil {
			l.log.Warn("env close", "rollout", spec.Rollout, "err", cerr)
		}
	}
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	var rec *recordError
	if errors.As(err, &rec) {
		return Result{}, failure.NewInfra("record", err)
	}
	ferr := failure.Wrap("rollout", err)
	ev := runlog.RolloutFailed{Rollout: spec.Rollout, Attempt: spec.Attempt, Class: failure.ClassOf(ferr), Reason: ferr.Error()}
	if errors.Is(ferr, ErrDiverged) {
		// A typed fact for the controller: the next attempt starts over.
		ev.Cause = runlog.CauseDiverged
	}
	// A step held back goes first, in the same append.
	if rerr := spec.Recorder.Record(ctx, append(l.held, ev)...); rerr != nil {
		return Result{}, errors.Join(ferr, failure.NewInfra("record", rerr))
	}
	return Result{}, ferr
}

type recordError struct{ err error }

func (e *recordError) Error() string { return "record: " + e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

type loop struct {
	s      Spec
	log    *slog.Logger
	prior  []runlog.Event
	pos    int
	policy compaction.Policy
	thresh int

	env      env.Environment
	envKey   string           // the rollout's ID as the environment sees it, formatted once
	keys     env.KeyContexts  // the contexts that carry the keys, allocated a chunk at a time
	pending  []runlog.EnvStep // logged steps not yet applied to env
	envStale bool             // env lags the log (pending is not empty)

	msgs []compaction.Message
	ctx  []int32 // the start and msgs' tokens; a view of arena (ctxbuf.go)
	// arena is the array the context grows in; its len is the written
	// part, never rewritten.
	arena []int32
	base  int // where ctx starts in arena
	// reply is the decoded text of the last accepted reply, replyOf its
	// sampled tokens: parse reads it instead of decoding again.
	reply   string
	replyOf []int32
	// prev is the previous selected call's prompt + sampled tokens, the
	// base of the next call's PromptPrefix; nil at the first call and after
	// a compaction (the next prompt is stored whole).
	prev []int32

	nextCall     uint32
	lastSelected uint32
	hasCall      bool
	turns        int
	sampled      int
	reward       float64
	done         bool
	success      bool
	compactions  uint32
	compactedAt  int // turn of the last compaction; -1 if none
	obsRole      string
	// episode is the attempt that started the current episode (the first
	// attempt, or the last one that restarted it): environment keys name
	// it, so an attempt that continues an episode repeats the keys of the
	// steps an earlier attempt may have applied without logging.
	episode uint32

	// Framing from Spec.Chat: the tokens that open a conversation, the
	// generation prompt after the messages, and the stop tokens (the first
	// also closes a length-truncated reply).
	open, genPrompt, stops []int32

	// app renders an appending Chat's context (the byte template's);
	// bridged is set for any other Chat: cb holds its token record
	// (chatloop.go).
	app     lhtok.Appender
	bridged bool
	cb      chatState
	// req is the one-request batch of every call, kept so that a call
	// does not allocate it. It is written only before a call: a generator
	// that returned early on a canceled context (gen.Batcher) may still
	// read it, but an attempt makes no call after a failed one.
	req [1]gen.Request
	// held are events recorded but not yet appended (hold): the next
	// append takes them first, and no effect runs while any is held.
	held    []runlog.Event
	heldBuf [4]runlog.Event // held's first array, in the loop's own allocation
	// stager is the recorder when call records are staged (stage.go);
	// staged: call records are staged and not yet settled.
	stager Stager
	staged bool
	// sealStaged: the seal went out staged (Spec.StageSeal), for the
	// caller to settle.
	sealStaged bool
}

func newLoop(s Spec, prior []runlog.Event) (*loop, error) {
	if s.Generator == nil || s.Recorder == nil || s.NewEnv == nil {
		return nil, fmt.Errorf("rollout: spec needs Generator, Recorder and NewEnv")
	}
	if s.Limits.MaxTokensPerCall <= 0 {
		return nil, fmt.Errorf("rollout: Limits.MaxTokensPerCall must be > 0")
	}
	if err := s.Compaction.Validate(); err != nil {
		return nil, err
	}
	l := &loop{s: s, log: s.Logger, compactedAt: -1, obsRole: s.ObservationRole}
	l.held = l.heldBuf[:0]
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.obsRole == "" {
		l.obsRole = lhtok.RoleUser
	}
	l.policy = s.Policy
	if l.policy == nil {
		p, err := s.Compaction.New()
		if err != nil {
			return nil, err
		}
		l.policy = p
	}
	l.thresh = s.Compaction.ThresholdFor(s.Seed, s.Rollout.Group)
	if err := l.initBridged(); err != nil {
		return nil, err
	}
	var seen uint32 // calls logged so far, over all attempts
	for _, ev := range prior {
		switch e := ev.(type) {
		case runlog.AttemptStarted:
			// A restarted attempt (its environment could not be brought
			// back) starts the episode over: what came before is abandoned,
			// and only the call numbering continues.
			if e.Rollout == s.Rollout && e.Restart {
				l.prior, l.nextCall = l.prior[:0], seen
			}
			if e.Rollout == s.Rollout && (l.episode == 0 || e.Restart) {
				l.episode = e.Attempt
			}
		case runlog.CallFinished:
			if e.Rollout == s.Rollout {
				l.prior = append(l.prior, e)
				seen = e.Call + 1
			}
		case runlog.EnvStep:
			if e.Rollout == s.Rollout {
				l.prior = append(l.prior, e)
			}
		case runlog.Compaction:
			if e.Rollout == s.Rollout {
				l.prior = append(l.prior, e)
			}
		case runlog.RolloutSealed:
			if e.Rollout == s.Rollout {
				l.prior = append(l.prior, e)
			}
		}
	}
	if l.episode == 0 {
		l.episode = s.Attempt
	}
	return l, nil
}

// envCtx carries the idempotency key of the episode's step (-1: reset)
// to the environment.
func (l *loop) envCtx(ctx context.Context, step int) context.Context {
	if l.envKey == "" {
		l.envKey = l.s.Rollout.String()
	}
	return l.keys.WithKey(ctx, env.Key{Rollout: l.envKey, Attempt: l.episode, Step: step})
}

func (l *loop) sealedInPrior() (Result, bool) {
	calls := 0
	for _, ev := range l.prior {
		switch e := ev.(type) {
		case runlog.CallFinished:
			calls++
		case runlog.RolloutSealed:
			return Result{Outcome: e.Outcome, Reward: e.Reward, Success: e.Success, Calls: calls, Replayed: len(l.prior)}, true
		}
	}
	return Result{}, false
}

// peek returns the next prior event, or nil when the loop is live.
func (l *loop) peek() runlog.Event {
	if l.pos < len(l.prior) {
		return l.prior[l.pos]
	}
	return nil
}

func (l *loop) diverged(want string) error {
	return failure.NewData("resume", fmt.Errorf("%w: at prior event %d: loop expects %s, log has %T", ErrDiverged, l.pos, want, l.peek()))
}

// record makes ev durable, in one append with the events held before it.
func (l *loop) record(ctx context.Context, ev runlog.Event) error {
	if err := l.appendHeld(ctx, ev, false); err != nil {
		return err
	}
	// A staged call went out before ev, so it is durable now: settle
	// only collects its outcome.
	return l.settle()
}

// appendHeld appends the held events and ev as one append: recorded, or
// staged (stage.go).
func (l *loop) appendHeld(ctx context.Context, ev runlog.Event, stage bool) error {
	l.held = append(l.held, ev)
	var err error
	if stage {
		err = l.stager.Stage(ctx, l.held...)
	} else {
		err = l.s.Recorder.Record(ctx, l.held...)
	}
	if err != nil && len(l.held) > 1 && ctx.Err() != nil {
		// Cancelled before the append: the held steps were taken (and a
		// held compaction decided), so they are logged on their own; ev is not.
		if herr := l.s.Recorder.Record(context.WithoutCancel(ctx), l.held[:len(l.held)-1]...); herr != nil {
			l.log.Warn("logging held events", "rollout", l.s.Rollout, "err", herr)
		}
	}
	clear(l.held)
	l.held = l.held[:0]
	if err != nil {
		return &recordError{err}
	}
	return nil
}

// hold records ev with the loop's next append: for an environment step,
// which nothing outside the process acts on before the next step, and a
// compaction declared after it (a decision). The next step flushes first
// (envStep), and so does every exit of Run; the model call in between does
// not (it changes nothing outside the process), so they go out in one
// append with the next call's record or the seal: one fsync per turn.
func (l *loop) hold(ev runlog.Event) { l.held = append(l.held, ev) }

// flush makes the held events durable in one append. They are facts
// already taken, so a cancelled ctx does not stop their append: a refusal
// is retried without the cancel (Append looks at its context only before
// staging, so a refused append wrote nothing). Not WithoutCancel up
// front: it allocates, and this runs once per call.
func (l *loop) flush(ctx context.Context) error {
	if len(l.held) == 0 {
		return nil
	}
	err := l.s.Recorder.Record(ctx, l.held...)
	if err != nil && ctx.Err() != nil {
		err = l.s.Recorder.Record(context.WithoutCancel(ctx), l.held...)
	}
	clear(l.held)
	l.held = l.held[:0]
	if err != nil {
		return &recordError{err}
	}
	return l.settle()
}

func (l *loop) run(ctx context.Context) (Result, error) {
	e, err := l.s.NewEnv(ctx)
	if err != nil {
		return Result{}, failure.Wrap("env.new", err)
	}
	l.env = e
	l.startStaging(e)
	// The framing (generation prompt, stop tokens) serves both the loop's
	// own calls and an external agent's.
	if err := l.frame(ctx); err != nil {
		return Result{}, failure.NewData("spec", err)
	}
	if a, ok := e.(env.Agent); ok {
		return l.drive(ctx, a)
	}
	if l.bridged {
		return l.runChat(ctx)
	}
	// Reset even when resuming: the first message is not in the log as
	// text, and a replay or restore starts from a reset environment.
	obs, err := e.Reset(l.envCtx(ctx, -1), l.s.Task, l.s.EnvSeed)
	if err != nil {
		return Result{}, failure.Wrap("env.reset", err)
	}
	l.ctx = l.extend(nil, l.open)
	// Room for the messages of a few turns (a reply and an observation
	// each), so the list does not regrow turn by turn.
	l.msgs = make([]compaction.Message, 0, 16)
	if l.s.System != "" {
		if err := l.appendMsg(lhtok.RoleSystem, l.s.System); err != nil {
			return Result{}, err
		}
	}
	if err := l.appendMsg(lhtok.RoleUser, obs); err != nil {
		return Result{}, err
	}

	lim := l.s.Limits
	for {
		switch {
		case l.done:
			return l.seal(ctx, runlog.OutcomeCompleted)
		case lim.MaxTurns > 0 && l.turns >= lim.MaxTurns:
			return l.seal(ctx, runlog.OutcomeMaxTurns)
		case lim.MaxSampledTokens > 0 && l.sampled >= lim.MaxSampledTokens:
			return l.seal(ctx, runlog.OutcomeMaxTokens)
		}
		if err := l.maybeCompact(ctx); err != nil {
			if errors.Is(err, errOverBudget) {
				return l.seal(ctx, runlog.OutcomeMaxTokens)
			}
			return Result{}, err
		}
		prompt := l.promptOf(l.ctx)
		if l.overBudget(len(prompt)) {
			return l.seal(ctx, runlog.OutcomeMaxTokens)
		}
		call, err := l.selectCall(ctx, prompt, l.s.Validator)
		if err != nil {
			return Result{}, err
		}
		action := l.parse(call.Sampled)
		if err := l.step(ctx, action); err != nil {
			return Result{}, err
		}
	}
}

var errOverBudget = errors.New("rollout: context over budget")

func (l *loop) overBudget(promptLen int) bool {
	b := l.s.Limits.ContextBudget
	return b > 0 && promptLen+l.s.Limits.MaxTokensPerCall > b
}

func (l *loop) parse(sampled []int32) string {
	if l.s.Parse != nil {
		return l.s.Parse(sampled)
	}
	if l.bridged {
		return strings.TrimSpace(l.cb.parse(sampled).Message.Content)
	}
	if len(sampled) > 0 && len(sampled) == len(l.replyOf) && &sampled[0] == &l.replyOf[0] {
		return strings.TrimSpace(l.reply) // the reply accept just decoded
	}
	return strings.TrimSpace(l.app.Text(sampled))
}

func (l *loop) seal(ctx context.Context, outcome string) (Result, error) {
	gen.Leave(ctx) // no more calls: a batcher need not wait for this rollout
	if l.pos < len(l.prior) {
		if _, ok := l.peek().(runlog.RolloutSealed); !ok {
			return Result{}, l.diverged("RolloutSealed")
		}
	}
	if outcome == runlog.OutcomeCompleted {
		// Success of a replayed final step is not logged: replay it.
		if err := l.syncEnv(ctx); err != nil {
			return Result{}, err
		}
	} else {
		l.success = false
	}
	ev := runlog.RolloutSealed{Rollout: l.s.Rollout, Attempt: l.s.Attempt, Outcome: outcome, Reward: l.reward, Success: l.success}
	if l.stager != nil && l.s.StageSeal {
		if err := l.appendHeld(ctx, ev, true); err != nil {
			return Result{}, err
		}
		l.staged, l.sealStaged = true, true
	} else if err := l.record(ctx, ev); err != nil {
		return Result{}, err
	}
	return Result{Outcome: outcome, Reward: l.reward, Success: l.success, Turns: l.turns, Calls: int(l.nextCall),
		Compactions: int(l.compactions), Replayed: l.pos}, nil
}
