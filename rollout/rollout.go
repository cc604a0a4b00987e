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
	"slices"
	"strings"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/model/tokenizer"
	"github.com/longhaul-rl/longhaul/runlog"
)

// Recorder makes an event durable; Record returns once it is.
type Recorder interface {
	Record(ctx context.Context, ev runlog.Event) error
}

// RecorderFunc adapts a function to Recorder.
type RecorderFunc func(ctx context.Context, ev runlog.Event) error

// Record implements Recorder.
func (f RecorderFunc) Record(ctx context.Context, ev runlog.Event) error { return f(ctx, ev) }

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
// *Failure. Cancellation of ctx returns ctx's error without recording.
func Run(ctx context.Context, spec Spec, prior []runlog.Event) (Result, error) {
	l, err := newLoop(spec, prior)
	if err != nil {
		return Result{}, Data("spec", err)
	}
	if r, ok := l.sealedInPrior(); ok {
		return r, nil
	}
	res, err := l.run(ctx)
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
		return Result{}, Infra("record", err)
	}
	ferr := classify("rollout", err)
	ev := runlog.RolloutFailed{Rollout: spec.Rollout, Attempt: spec.Attempt, Class: ClassOf(ferr), Reason: ferr.Error()}
	if rerr := spec.Recorder.Record(ctx, ev); rerr != nil {
		return Result{}, errors.Join(ferr, Infra("record", rerr))
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
	pending  []runlog.EnvStep // logged steps not yet applied to env
	envStale bool             // env lags the log (pending is not empty)

	msgs []compaction.Message
	ctx  []int32 // == compaction.Render(msgs)
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
	obsRole      tokenizer.Role
	// episode is the attempt that started the current episode (the first
	// attempt, or the last one that restarted it): environment keys name
	// it, so an attempt that continues an episode repeats the keys of the
	// steps an earlier attempt may have applied without logging.
	episode uint32

	// Framing from Spec.Chat: the tokens that open a conversation, the
	// generation prompt after the messages, and the stop tokens (the first
	// also closes a length-truncated reply).
	open, genPrompt, stops []int32

	// bridged is set for a Chat other than the byte template: cb holds
	// its token record (chatloop.go).
	bridged bool
	cb      chatState
	// req is the one-request batch of every call, kept so that a call
	// does not allocate it. It is written only before a call: a generator
	// that returned early on a canceled context (gen.Batcher) may still
	// read it, but an attempt makes no call after a failed one.
	req [1]gen.Request
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
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.obsRole == "" {
		l.obsRole = tokenizer.RoleUser
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
	return env.WithKey(ctx, env.Key{Rollout: l.envKey, Attempt: l.episode, Step: step})
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
	return Data("resume", fmt.Errorf("%w: at prior event %d: loop expects %s, log has %T", ErrDiverged, l.pos, want, l.peek()))
}

func (l *loop) record(ctx context.Context, ev runlog.Event) error {
	if err := l.s.Recorder.Record(ctx, ev); err != nil {
		return &recordError{err}
	}
	return nil
}

func (l *loop) appendMsg(m compaction.Message) {
	l.msgs = append(l.msgs, m)
	l.ctx = append(l.ctx, m.Tokens...)
}

func (l *loop) run(ctx context.Context) (Result, error) {
	e, err := l.s.NewEnv(ctx)
	if err != nil {
		return Result{}, classify("env.new", err)
	}
	l.env = e
	// The framing (generation prompt, stop tokens) serves both the loop's
	// own calls and an external agent's.
	if err := l.frame(ctx); err != nil {
		return Result{}, Data("spec", err)
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
		return Result{}, classify("env.reset", err)
	}
	l.ctx = slices.Clone(l.open)
	if l.s.System != "" {
		m, err := compaction.NewMessage(tokenizer.RoleSystem, l.s.System)
		if err != nil {
			return Result{}, err
		}
		l.appendMsg(m)
	}
	m, err := compaction.NewMessage(tokenizer.RoleUser, obs)
	if err != nil {
		return Result{}, err
	}
	l.appendMsg(m)

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
	return strings.TrimSpace(tokenizer.DecodeText(sampled))
}

// selectCall makes a call, resampling rejected candidates, and appends the
// selected response to the context.
func (l *loop) selectCall(ctx context.Context, prompt []int32, validate Validator) (runlog.CallFinished, error) {
	for resample := 0; ; resample++ {
		call, err := l.call(ctx, prompt, validate)
		if err != nil {
			return call, err
		}
		if call.Selected {
			l.accept(prompt, call)
			return call, nil
		}
		if resample >= l.s.MaxResamples {
			return call, Data("select", fmt.Errorf("%w: %d candidates rejected, last: %s", ErrSelectionExhausted, resample+1, call.Reject))
		}
	}
}

func (l *loop) accept(prompt []int32, call runlog.CallFinished) {
	l.prev = append(prompt[:len(prompt):len(prompt)], call.Sampled...)
	if l.bridged {
		l.cb.sampled = call.Sampled
		l.lastSelected, l.hasCall = call.Call, true
		l.sampled += len(call.Sampled)
		return
	}
	toks := make([]int32, 0, len(call.Sampled)+len(l.genPrompt)+1)
	toks = append(toks, l.genPrompt...)
	toks = append(toks, call.Sampled...)
	if len(call.Sampled) == 0 || !slices.Contains(l.stops, call.Sampled[len(call.Sampled)-1]) {
		// A length-truncated reply gets its end marker as prompt context;
		// the context still extends prompt + sampled.
		toks = append(toks, l.stops[0])
	}
	l.msgs = append(l.msgs, compaction.Message{Role: tokenizer.RoleAssistant, Content: tokenizer.DecodeText(call.Sampled), Tokens: toks})
	// The context is exactly prev (+ end marker): reuse it rather than
	// re-render.
	l.ctx = append(l.prev[:len(l.prev):len(l.prev)], toks[len(l.genPrompt)+len(call.Sampled):]...)
	l.lastSelected, l.hasCall = call.Call, true
	l.sampled += len(call.Sampled)
}

// delta returns the call's stored prompt form against the previous context.
func (l *loop) delta(prompt []int32) (uint32, []int32) {
	p := 0
	if l.prev != nil {
		n := min(len(l.prev), len(prompt))
		for p < n && l.prev[p] == prompt[p] {
			p++
		}
	}
	return uint32(p), slices.Clone(prompt[p:])
}

// call makes (or replays) one model call.
func (l *loop) call(ctx context.Context, prompt []int32, validate Validator) (runlog.CallFinished, error) {
	prefix, suffix := l.delta(prompt)
	idx := l.nextCall
	if ev := l.peek(); ev != nil {
		c, ok := ev.(runlog.CallFinished)
		if !ok {
			return c, l.diverged("CallFinished")
		}
		if c.Call != idx || c.PromptPrefix != prefix || !slices.Equal(c.PromptSuffix, suffix) {
			return c, Data("resume", fmt.Errorf("%w: call %d (logged %d): prompt differs from the log", ErrDiverged, idx, c.Call))
		}
		l.pos++
		l.nextCall++
		return c, nil
	}
	req := gen.Request{
		Prompt:      prompt,
		MaxTokens:   l.s.Limits.MaxTokensPerCall,
		Temperature: l.s.Sampling.Temperature,
		TopP:        l.s.Sampling.TopP,
		TopK:        l.s.Sampling.TopK,
		Stop:        slices.Clone(l.stops),
		Seed:        SampleSeed(l.s.Seed, l.s.Rollout, idx),
	}
	l.req[0] = req
	out, err := l.s.Generator.Generate(ctx, l.req[:])
	if err != nil {
		return runlog.CallFinished{}, classify("generate", err)
	}
	if len(out) != 1 || len(out[0].Tokens) == 0 || len(out[0].Tokens) != len(out[0].Logprobs) {
		return runlog.CallFinished{}, Data("generate", fmt.Errorf("rollout: generator broke the contract: %d results, want 1 with tokens and one logprob each", len(out)))
	}
	r := out[0]
	c := runlog.CallFinished{
		Rollout: l.s.Rollout, Attempt: l.s.Attempt, Call: idx,
		PromptPrefix: prefix, PromptSuffix: suffix,
		Sampled: slices.Clone(r.Tokens), Logprobs: slices.Clone(r.Logprobs),
		Finish: r.Finish, Version: r.Version, Selected: true,
	}
	if validate != nil {
		if verr := validate(ctx, l.text(r.Tokens), r.Tokens); verr != nil {
			c.Selected, c.Reject = false, verr.Error()
		}
	}
	if err := l.record(ctx, c); err != nil {
		return c, err
	}
	l.nextCall++
	return c, nil
}

// step applies (or replays) one environment step.
func (l *loop) step(ctx context.Context, action string) error {
	turn := uint32(l.turns)
	var st runlog.EnvStep
	if ev := l.peek(); ev != nil {
		s, ok := ev.(runlog.EnvStep)
		if !ok {
			return l.diverged("EnvStep")
		}
		if s.Turn != turn || s.Action != action {
			return Data("resume", fmt.Errorf("%w: turn %d: logged action %q, replay has %q", ErrDiverged, turn, s.Action, action))
		}
		l.pos++
		l.pending = append(l.pending, s)
		l.envStale = true
		st = s
	} else {
		if err := l.syncEnv(ctx); err != nil {
			return err
		}
		res, err := l.envStep(ctx, int(turn), action)
		if err != nil {
			return classify("env.step", err)
		}
		st = runlog.EnvStep{Rollout: l.s.Rollout, Attempt: l.s.Attempt, Turn: turn, Action: action,
			Observation: res.Observation, Reward: res.Reward, Done: res.Done}
		if sn, ok := l.env.(env.Snapshotter); ok {
			if st.State, err = sn.Snapshot(ctx); err != nil {
				return classify("env.snapshot", err)
			}
		}
		if err := l.record(ctx, st); err != nil {
			return err
		}
		l.success = res.Success
	}
	l.turns++
	l.reward += st.Reward
	l.done = st.Done
	if !st.Done && st.Observation != "" && l.bridged {
		if err := l.cb.observe(st.Observation, string(l.obsRole)); err != nil {
			return err
		}
	} else if !st.Done && st.Observation != "" {
		m, err := compaction.NewMessage(l.obsRole, st.Observation)
		if err != nil {
			return err
		}
		l.appendMsg(m)
	}
	return nil
}

// syncEnv brings the environment to the last logged step: restore its
// snapshot when it has one, else replay the logged actions (the
// environment is deterministic), checking every result against the log.
// A final step is always replayed because Success is not logged.
func (l *loop) syncEnv(ctx context.Context) error {
	if !l.envStale {
		return nil
	}
	last := l.pending[len(l.pending)-1]
	if sn, ok := l.env.(env.Snapshotter); ok && len(last.State) > 0 && !last.Done {
		if err := sn.Restore(ctx, last.State); err != nil {
			return classify("env.restore", err)
		}
	} else {
		for _, s := range l.pending {
			res, err := l.envStep(ctx, int(s.Turn), s.Action)
			if err != nil {
				return classify("env.replay", err)
			}
			if res.Observation != s.Observation || res.Reward != s.Reward || res.Done != s.Done {
				return Data("env.replay", fmt.Errorf("%w: turn %d: environment is not deterministic (logged %q/%v/%v, replay %q/%v/%v)",
					ErrDiverged, s.Turn, s.Observation, s.Reward, s.Done, res.Observation, res.Reward, res.Done))
			}
			l.success = res.Success
		}
	}
	l.pending, l.envStale = nil, false
	return nil
}

// maybeCompact compacts the context when the next prompt reaches the
// threshold: at most once per turn, never before the first call, and only
// when the policy changes something.
func (l *loop) maybeCompact(ctx context.Context) error {
	if l.policy == nil || l.thresh <= 0 || !l.hasCall || l.compactedAt == l.turns || len(l.ctx)+1 < l.thresh {
		return nil
	}
	before := len(l.ctx)
	var res compaction.Result
	var err error
	afterCall := l.lastSelected
	if sp, ok := l.policy.(compaction.Summarizer); ok {
		if dry, err := sp.Fold(l.msgs, ""); err != nil || !folds(dry) {
			return err
		}
		old := l.msgs
		req, err := compaction.NewMessage(tokenizer.RoleUser, sp.SummaryRequest())
		if err != nil {
			return err
		}
		l.appendMsg(req)
		prompt := l.promptOf(l.ctx)
		if l.overBudget(len(prompt)) {
			return errOverBudget
		}
		call, err := l.selectCall(ctx, prompt, nil)
		if err != nil {
			return err
		}
		before = len(l.ctx)
		afterCall = call.Call
		if res, err = sp.Fold(old, l.parse(call.Sampled)); err != nil {
			return Data("compaction", err)
		}
	} else {
		if res, err = l.policy.Compact(l.msgs); err != nil {
			return Data("compaction", err)
		}
		if !res.Changed {
			return nil
		}
	}
	newCtx := compaction.Render(res.Messages)
	ev := runlog.Compaction{Rollout: l.s.Rollout, Attempt: l.s.Attempt, Boundary: l.compactions, AfterCall: afterCall,
		Policy: l.policy.Name(), Lineage: res.Lineage, TokensBefore: uint32(before), TokensAfter: uint32(len(newCtx))}
	if err := l.declareCompaction(ctx, ev); err != nil {
		return err
	}
	l.msgs, l.ctx, l.prev = res.Messages, newCtx, nil
	l.compactions++
	l.compactedAt = l.turns
	return nil
}

func folds(r compaction.Result) bool {
	for _, ln := range r.Lineage {
		if ln.Op == runlog.OpSummarized {
			return true
		}
	}
	return false
}

func (l *loop) seal(ctx context.Context, outcome string) (Result, error) {
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
	if err := l.record(ctx, ev); err != nil {
		return Result{}, err
	}
	return Result{Outcome: outcome, Reward: l.reward, Success: l.success, Turns: l.turns, Calls: int(l.nextCall),
		Compactions: int(l.compactions), Replayed: l.pos}, nil
}

// declareCompaction logs a compaction boundary, or on resume checks it
// against the logged one (the byte and chat-template paths share it).
func (l *loop) declareCompaction(ctx context.Context, ev runlog.Compaction) error {
	if pev := l.peek(); pev != nil {
		c, ok := pev.(runlog.Compaction)
		if !ok {
			return l.diverged("Compaction")
		}
		if c.Boundary != ev.Boundary || c.AfterCall != ev.AfterCall || c.Policy != ev.Policy || !slices.Equal(c.Lineage, ev.Lineage) {
			return Data("resume", fmt.Errorf("%w: compaction %d differs from the log", ErrDiverged, ev.Boundary))
		}
		l.pos++
		return nil
	}
	return l.record(ctx, ev)
}
