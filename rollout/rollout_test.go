package rollout_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
)

var reg = env.Builtin()

func ledgerTask(t *testing.T, index int) env.Task {
	t.Helper()
	task, err := reg.Task("ledger", nil, 7, index)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func newEnv(name string) func(context.Context) (env.Environment, error) {
	return func(context.Context) (env.Environment, error) { return reg.New(name, nil) }
}

// noSnapshot hides an environment's Snapshotter so resume must replay.
type noSnapshot struct{ env.Environment }

func ledgerSpec(t *testing.T, g gen.Generator, rec rollout.Recorder, cc compaction.Config) rollout.Spec {
	return rollout.Spec{
		Seed:      42,
		Rollout:   runlog.RolloutID{Group: 9, Member: 1},
		Attempt:   1,
		Task:      ledgerTask(t, 0),
		EnvSeed:   5,
		NewEnv:    newEnv("ledger"),
		Generator: g,
		Recorder:  rec,
		Limits: rollout.Limits{MaxTurns: 50, MaxTokensPerCall: env.LedgerMaxTokensPerCall,
			ContextBudget: env.LedgerContextBudget},
		Compaction: cc,
	}
}

var recency = compaction.Config{Policy: compaction.PolicyRecency, KeepTurns: env.LedgerKeepTurns, Threshold: env.LedgerCompactThreshold}

func count[T runlog.Event](evs []runlog.Event) int {
	n := 0
	for _, e := range evs {
		if _, ok := e.(T); ok {
			n++
		}
	}
	return n
}

func TestLedgerOracleNeedsCompaction(t *testing.T) {
	ctx := context.Background()
	for i := range 5 {
		// With compaction: solved, and compaction fired 3 to 6 times.
		rec := &scripted.Recorder{}
		res, err := rollout.Run(ctx, ledgerSpec(t, scripted.LedgerOracle(""), rec, recency), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != runlog.OutcomeCompleted || !res.Success || res.Reward < 0.999 {
			t.Fatalf("task %d with compaction: %+v", i, res)
		}
		if res.Compactions < 3 || res.Compactions > 6 {
			t.Fatalf("task %d: %d compactions, want 3..6", i, res.Compactions)
		}
		evs := rec.Events()
		if count[runlog.Compaction](evs) != res.Compactions {
			t.Fatalf("compaction events %d != %d", count[runlog.Compaction](evs), res.Compactions)
		}
		// The segments are valid: each compaction is a declared break.
		calls, bounds := rollout.Trace(evs, runlog.RolloutID{Group: 9, Member: 1})
		segs, st, err := segment.Build(calls, bounds, segment.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) != res.Compactions+1 || st.Declared != res.Compactions {
			t.Fatalf("segments %d, stats %+v", len(segs), st)
		}
		for _, s := range segs {
			if len(s.Tokens) > env.LedgerContextBudget {
				t.Fatalf("segment of %d tokens exceeds the budget", len(s.Tokens))
			}
		}

		// Without compaction: the context overflows the budget.
		rec = &scripted.Recorder{}
		res, err = rollout.Run(ctx, ledgerSpec(t, scripted.LedgerOracle(""), rec, compaction.Config{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != runlog.OutcomeMaxTokens || res.Success || res.Reward > 0.99 {
			t.Fatalf("task %d without compaction: %+v", i, res)
		}
	}
}

func TestLedgerOracleSummarize(t *testing.T) {
	cc := summarizeCC
	rec := &scripted.Recorder{}
	res, err := rollout.Run(context.Background(), ledgerSpec(t, scripted.LedgerOracle(compaction.DefaultSummaryRequest), rec, cc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || res.Compactions == 0 {
		t.Fatalf("%+v", res)
	}
	evs := rec.Events()
	calls, bounds := rollout.Trace(evs, runlog.RolloutID{Group: 9, Member: 1})
	segs, _, err := segment.Build(calls, bounds, segment.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The summary call is trainable: it is the last call of its segment.
	var c runlog.Compaction
	for _, e := range evs {
		if cc, ok := e.(runlog.Compaction); ok {
			c = cc
			break
		}
	}
	if segs[0].LastCall != c.AfterCall || segs[0].Spans[len(segs[0].Spans)-1].Call != c.AfterCall {
		t.Fatalf("summary call %d not trained in segment 0 (last call %d)", c.AfterCall, segs[0].LastCall)
	}
	if res.Calls != 12+res.Compactions {
		t.Fatalf("calls %d, want %d", res.Calls, 12+res.Compactions)
	}
}

// strictGen fails the test if asked for a call already in the log: it
// answers with the reference generator only for calls past logged.
type strictGen struct {
	t      *testing.T
	inner  gen.Generator
	logged map[uint64]bool // sample seeds of logged calls
}

func (g *strictGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	for _, r := range reqs {
		if g.logged[r.Seed] {
			g.t.Errorf("generator asked again for a logged call (seed %x)", r.Seed)
			return nil, errors.New("logged call regenerated")
		}
	}
	return g.inner.Generate(ctx, reqs)
}

// TestResumeAtEveryCut runs a rollout to completion, then resumes it from
// every prefix of its events and checks the resumed run records exactly
// the missing events, without generating a logged call again.
func TestResumeAtEveryCut(t *testing.T) {
	id := runlog.RolloutID{Group: 9, Member: 1}
	type variant struct {
		name   string
		cc     compaction.Config
		gen    func() gen.Generator
		snap   bool
		reject bool
	}
	oracle := func() gen.Generator { return scripted.LedgerOracle(compaction.DefaultSummaryRequest) }
	variants := []variant{
		{name: "recency/snapshot", cc: recency, gen: oracle, snap: true},
		{name: "recency/replay", cc: recency, gen: oracle},
		{name: "summarize/replay", cc: summarizeCC, gen: oracle},
		{name: "recency/rejections", cc: recency, gen: oracle, snap: true, reject: true},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			ctx := context.Background()
			mk := func(g gen.Generator, rec rollout.Recorder) rollout.Spec {
				s := ledgerSpec(t, g, rec, v.cc)
				if !v.snap {
					s.NewEnv = func(context.Context) (env.Environment, error) {
						e, err := reg.New("ledger", nil)
						return noSnapshot{e}, err
					}
				}
				if v.reject {
					s.Validator = rejectX
					s.MaxResamples = 8
					s.Generator = &flaky{inner: g}
				}
				return s
			}
			rec := &scripted.Recorder{}
			want, err := rollout.Run(ctx, mk(v.gen(), rec), nil)
			if err != nil {
				t.Fatal(err)
			}
			full := rec.Events()
			if v.reject && count[runlog.CallFinished](full) <= want.Turns {
				t.Fatalf("no rejected calls in the rejection variant")
			}
			for k := 0; k <= len(full); k++ {
				logged := map[uint64]bool{}
				for _, e := range full[:k] {
					if c, ok := e.(runlog.CallFinished); ok {
						logged[rollout.SampleSeed(42, id, c.Call)] = true
					}
				}
				rec := &scripted.Recorder{}
				got, err := rollout.Run(ctx, mk(&strictGen{t: t, inner: v.gen(), logged: logged}, rec), full[:k:k])
				if err != nil {
					t.Fatalf("cut %d: %v", k, err)
				}
				all := append(append([]runlog.Event(nil), full[:k]...), rec.Events()...)
				if k == len(full) {
					all = full // already sealed: nothing recorded
					if n := len(rec.Events()); n != 0 {
						t.Fatalf("cut %d: sealed rollout recorded %d events", k, n)
					}
				}
				if diff := cmp.Diff(full, all); diff != "" {
					t.Fatalf("cut %d: events differ (-want +got):\n%s", k, diff)
				}
				if got.Outcome != want.Outcome || got.Reward != want.Reward || got.Success != want.Success {
					t.Fatalf("cut %d: result %+v, want %+v", k, got, want)
				}
			}
		})
	}
}

// flaky spoils the reply of every call whose seed is divisible by 3 (a
// deterministic choice) with a leading "x", which rejectX rejects.
type flaky struct{ inner gen.Generator }

func (f *flaky) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	out, err := f.inner.Generate(ctx, reqs)
	if err != nil {
		return nil, err
	}
	for i, r := range reqs {
		if r.Seed%3 == 0 {
			out[i].Tokens = append([]int32{'x'}, out[i].Tokens...)
			out[i].Logprobs = append([]float32{-1}, out[i].Logprobs...)
		}
	}
	return out, nil
}

func TestSelectionRejectsAndResamples(t *testing.T) {
	rec := &scripted.Recorder{}
	s := ledgerSpec(t, &flaky{inner: scripted.LedgerOracle("")}, rec, recency)
	s.Validator = rejectX
	s.MaxResamples = 5
	res, err := rollout.Run(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success {
		t.Fatalf("%+v", res)
	}
	rejected := 0
	for _, e := range rec.Events() {
		if c, ok := e.(runlog.CallFinished); ok && !c.Selected {
			rejected++
			if c.Reject != "not a digit" {
				t.Fatalf("reject reason %q", c.Reject)
			}
		}
	}
	if rejected == 0 {
		t.Fatal("no rejected calls recorded")
	}
	calls, bounds := rollout.Trace(rec.Events(), s.Rollout)
	segs, st, err := segment.Build(calls, bounds, segment.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rejected != rejected || st.Trainable != 6*12 { // 12 answers of "b+d=r" + end
		t.Fatalf("stats %+v (segments %d)", st, len(segs))
	}

	// With no resamples allowed, the first rejection fails the rollout (data).
	rec = &scripted.Recorder{}
	s.Recorder, s.MaxResamples = rec, 0
	s.Generator = &flaky{inner: scripted.LedgerOracle("")}
	_, err = rollout.Run(context.Background(), s, nil)
	var f *failure.Failure
	if !errors.As(err, &f) || f.Class != failure.Data || !errors.Is(err, rollout.ErrSelectionExhausted) {
		t.Fatalf("err %v", err)
	}
	evs := rec.Events()
	if rf, ok := evs[len(evs)-1].(runlog.RolloutFailed); !ok || rf.Class != failure.Data {
		t.Fatalf("last event %#v", evs[len(evs)-1])
	}
}

func rejectX(_ context.Context, text string, _ []int32) error {
	if strings.HasPrefix(text, "x") {
		return errors.New("not a digit")
	}
	return nil
}

type failGen struct{ err error }

func (g failGen) Generate(context.Context, []gen.Request) ([]gen.Result, error) { return nil, g.err }

// classed is an error of another package carrying its failure class.
type classed struct{ class string }

func (c classed) Error() string        { return "no generation server is up" }
func (c classed) FailureClass() string { return c.class }

func TestFailureClasses(t *testing.T) {
	for _, tc := range []struct {
		err   error
		class string
	}{
		{failure.NewInfra("generate", errors.New("503")), failure.Infra},
		{context.DeadlineExceeded, failure.Infra},
		{errors.New("mystery"), failure.Data},
		{failure.NewData("generate", errors.New("400")), failure.Data},
		// Another package's typed error that says its class (gen/openai's).
		{fmt.Errorf("wrapped: %w", classed{failure.Infra}), failure.Infra},
		{classed{failure.Data}, failure.Data},
	} {
		rec := &scripted.Recorder{}
		_, err := rollout.Run(context.Background(), ledgerSpec(t, failGen{tc.err}, rec, recency), nil)
		if got := failure.ClassOf(err); got != tc.class {
			t.Errorf("%v: class %s, want %s", tc.err, got, tc.class)
		}
		evs := rec.Events()
		rf, ok := evs[len(evs)-1].(runlog.RolloutFailed)
		if !ok || rf.Class != tc.class {
			t.Errorf("%v: last event %#v", tc.err, evs[len(evs)-1])
		}
	}
	// A cancelled context records nothing and returns the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := &scripted.Recorder{}
	_, err := rollout.Run(ctx, ledgerSpec(t, scripted.LedgerOracle(""), rec, recency), nil)
	if !errors.Is(err, context.Canceled) || len(rec.Events()) != 0 {
		t.Fatalf("err %v, %d events", err, len(rec.Events()))
	}
}

func TestLimits(t *testing.T) {
	rec := &scripted.Recorder{}
	s := ledgerSpec(t, scripted.LedgerOracle(""), rec, recency)
	s.Limits.MaxTurns = 3
	res, err := rollout.Run(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != runlog.OutcomeMaxTurns || res.Turns != 3 || res.Success {
		t.Fatalf("%+v", res)
	}
	// The guess env with a bisecting agent.
	rec = &scripted.Recorder{}
	task, err := reg.Task("guess", json.RawMessage(`{"size":16}`), 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	s = ledgerSpec(t, bisect(), rec, compaction.Config{})
	s.Task, s.NewEnv = task, newEnv("guess")
	s.Limits.MaxTokensPerCall, s.Limits.ContextBudget = 8, 128
	res, err = rollout.Run(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || res.Reward != 1 {
		t.Fatalf("guess: %+v", res)
	}
}

// bisect is a scripted guess agent: it narrows [lo, hi] from the feedback.
func bisect() *scripted.Func {
	return &scripted.Func{Reply: func(req gen.Request) (string, error) {
		lo, hi := 0, 0
		var last int
		for _, m := range scripted.Messages(req.Prompt) {
			switch {
			case strings.HasPrefix(m.Content, "guess 0-"):
				fmt.Sscanf(m.Content, "guess 0-%d", &hi)
			case m.Role == "assistant" && m.Content != "":
				fmt.Sscanf(m.Content, "%d", &last)
			case m.Content == "higher":
				lo = last + 1
			case m.Content == "lower":
				hi = last - 1
			}
		}
		return fmt.Sprint((lo + hi) / 2), nil
	}}
}

// summarizeCC triggers earlier than recency: the summary request itself
// (11 tokens) must fit the budget.
var summarizeCC = compaction.Config{Policy: compaction.PolicySummarize, Threshold: 36}

func TestRecorderFailure(t *testing.T) {
	rec := &scripted.Recorder{Fail: errors.New("disk full")}
	_, err := rollout.Run(context.Background(), ledgerSpec(t, scripted.LedgerOracle(""), rec, recency), nil)
	if failure.ClassOf(err) != failure.Infra || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err %v", err)
	}
}

func TestMaxSampledTokens(t *testing.T) {
	rec := &scripted.Recorder{}
	s := ledgerSpec(t, scripted.LedgerOracle(""), rec, recency)
	s.Limits.MaxSampledTokens = 23 // 6 per answer: stops after 4 answers
	res, err := rollout.Run(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != runlog.OutcomeMaxTokens || res.Turns != 4 {
		t.Fatalf("%+v", res)
	}
}

// flipEnv answers differently on replay: a non-deterministic environment.
type flipEnv struct {
	env.Environment
	n *int
}

func (f flipEnv) Step(ctx context.Context, a string) (env.StepResult, error) {
	r, err := f.Environment.Step(ctx, a)
	*f.n++
	if *f.n > 3 {
		r.Reward += 1
	}
	return r, err
}

func TestResumeDivergence(t *testing.T) {
	ctx := context.Background()
	rec := &scripted.Recorder{}
	if _, err := rollout.Run(ctx, ledgerSpec(t, scripted.LedgerOracle(""), rec, recency), nil); err != nil {
		t.Fatal(err)
	}
	full := rec.Events()
	cut := full[:len(full)-1] // everything but the seal
	// A changed compaction config no longer matches the logged prompts.
	other := recency
	other.KeepTurns = 3
	rec2 := &scripted.Recorder{}
	_, err := rollout.Run(ctx, ledgerSpec(t, scripted.LedgerOracle(""), rec2, other), cut)
	if !errors.Is(err, rollout.ErrDiverged) || failure.ClassOf(err) != failure.Data {
		t.Fatalf("changed config: %v", err)
	}
	// The log says so as a typed fact, which the controller's restart
	// decision reads (not the reason's text).
	if evs := rec2.Events(); len(evs) == 0 {
		t.Fatal("the diverged attempt recorded nothing")
	} else if f, ok := evs[len(evs)-1].(runlog.RolloutFailed); !ok || f.Cause != runlog.CauseDiverged || f.Class != failure.Data {
		t.Fatalf("diverged attempt recorded %+v, want a data RolloutFailed with CauseDiverged", evs[len(evs)-1])
	}
	// A non-deterministic environment is caught on replay.
	n := 0
	s := ledgerSpec(t, scripted.LedgerOracle(""), &scripted.Recorder{}, recency)
	s.NewEnv = func(context.Context) (env.Environment, error) {
		e, err := reg.New("ledger", nil)
		return flipEnv{Environment: e, n: &n}, err
	}
	_, err = rollout.Run(ctx, s, full[:10])
	if !errors.Is(err, rollout.ErrDiverged) {
		t.Fatalf("non-deterministic env: %v", err)
	}
}

// TestRestartAfterDivergence: an attempt whose environment cannot be
// brought back (it diverges on replay) restarts the episode as a new
// attempt: fresh environment and context, call numbers continuing, and
// only the restarted chain is the rollout's trajectory.
func TestRestartAfterDivergence(t *testing.T) {
	ctx := context.Background()
	reg := env.Builtin()
	rec := &scripted.Recorder{}
	if _, err := rollout.Run(ctx, ledgerSpec(t, scripted.LedgerOracle(""), rec, recency), nil); err != nil {
		t.Fatal(err)
	}
	before := rec.Events()[:10] // an attempt cut mid-episode
	lastCall := uint32(0)
	for _, ev := range before {
		if c, ok := ev.(runlog.CallFinished); ok {
			lastCall = c.Call
		}
	}
	id := runlog.RolloutID{Group: 9, Member: 1}
	// The log as the controller writes it: the restart is an attempt.
	log := &scripted.Recorder{}
	for _, ev := range before {
		log.Record(ctx, ev)
	}
	log.Record(ctx, runlog.AttemptStarted{Rollout: id, Attempt: 2, Restart: true})
	n := 0
	s := ledgerSpec(t, scripted.LedgerOracle(""), log, recency)
	s.Attempt = 2
	s.NewEnv = func(context.Context) (env.Environment, error) {
		e, err := reg.New("ledger", nil)
		return flipEnv{Environment: e, n: &n}, err
	}
	res, err := rollout.Run(ctx, s, log.Events())
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != runlog.OutcomeCompleted || res.Turns != 12 {
		t.Fatalf("restarted rollout: %+v", res)
	}
	calls, bounds := rollout.Trace(log.Events(), id)
	if len(calls) == 0 || calls[0].Call != lastCall+1 || calls[0].Attempt != 2 || calls[0].PromptPrefix != 0 {
		t.Fatalf("restarted chain starts with %+v, want call %d of attempt 2 with a whole prompt", calls[0], lastCall+1)
	}
	for _, c := range calls {
		if c.Attempt != 2 {
			t.Fatalf("call %d of attempt %d in the restarted trajectory", c.Call, c.Attempt)
		}
	}
	if _, _, err := segment.Build(calls, bounds, segment.Config{}); err != nil {
		t.Fatalf("segments of the restarted chain: %v", err)
	}
}
