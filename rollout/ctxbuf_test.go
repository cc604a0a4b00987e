package rollout_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
)

// retainer is a generator and a recorder that keep what the loop hands
// them (the prompts it sends, the events it records) beside copies taken
// on the spot: the loop builds its context in place in one buffer, and a
// prompt or an event that the loop wrote into afterwards shows up as a
// kept slice that no longer equals its copy.
type retainer struct {
	g                     gen.Generator
	prompts, promptCopies [][]int32
	events                []runlog.Event
	eventCopies           []string
}

func (r *retainer) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	for _, q := range reqs {
		r.prompts, r.promptCopies = append(r.prompts, q.Prompt), append(r.promptCopies, slices.Clone(q.Prompt))
	}
	return r.g.Generate(ctx, reqs)
}

func (r *retainer) Record(_ context.Context, evs ...runlog.Event) error {
	for _, ev := range evs {
		r.events, r.eventCopies = append(r.events, ev), append(r.eventCopies, fmt.Sprintf("%#v", ev))
	}
	return nil
}

func (r *retainer) check(t *testing.T) {
	t.Helper()
	for i := range r.prompts {
		if !slices.Equal(r.prompts[i], r.promptCopies[i]) {
			t.Fatalf("prompt %d changed after its call:\n now %v\nsent %v", i, r.prompts[i], r.promptCopies[i])
		}
	}
	for i, ev := range r.events {
		if got := fmt.Sprintf("%#v", ev); got != r.eventCopies[i] {
			t.Fatalf("event %d changed after it was recorded:\n now %s\n was %s", i, got, r.eventCopies[i])
		}
	}
}

// checkRecord checks the token record a live rollout sent: the prompt
// after a selected call without a compaction between is exactly the
// previous prompt + the sampled tokens (+ the end marker of a truncated
// reply) + the observation's message (+ the summary request) + the
// generation prompt, and a resampled candidate sees its prompt again.
// The buffer's bookkeeping going wrong (a reply written twice, a message
// dropped) breaks this even when no kept slice changes.
func (r *retainer) checkRecord(t *testing.T, summaryRequest string) {
	t.Helper()
	var calls []runlog.CallFinished
	var obs []string // the observation after each call ("" if none)
	var compacted []bool
	for _, ev := range r.events {
		switch e := ev.(type) {
		case runlog.CallFinished:
			calls, obs, compacted = append(calls, e), append(obs, ""), append(compacted, false)
		case runlog.EnvStep:
			if !e.Done {
				obs[len(obs)-1] = e.Observation
			}
		case runlog.Compaction:
			compacted[len(compacted)-1] = true
		}
	}
	if len(calls) != len(r.prompts) {
		t.Fatalf("%d calls logged, %d prompts sent", len(calls), len(r.prompts))
	}
	for k, p := range r.promptCopies {
		// Every prompt is a whole conversation: BOS, messages, the
		// generation prompt (after a compaction too).
		if n := len(p); n == 0 || p[n-1] != bytetok.Assistant {
			t.Fatalf("prompt %d does not end with the generation prompt: %v", k, p)
		}
		if re, err := bytetok.Render(bytetok.Parse(p[:len(p)-1]), true); err != nil || !slices.Equal(re, p) {
			t.Fatalf("prompt %d is not a rendered conversation: %v", k, p)
		}
	}
	for k := 0; k+1 < len(calls); k++ {
		prev, next := r.promptCopies[k], r.promptCopies[k+1]
		if !calls[k].Selected {
			if !slices.Equal(next, prev) {
				t.Fatalf("call %d resamples call %d with another prompt", k+1, k)
			}
			continue
		}
		if compacted[k] {
			continue
		}
		want := append(slices.Clone(prev), calls[k].Sampled...)
		if last := calls[k].Sampled[len(calls[k].Sampled)-1]; last != bytetok.End {
			want = append(want, bytetok.End)
		}
		var err error
		if obs[k] != "" {
			if want, err = bytetok.AppendMessage(want, lhtok.Message{Role: lhtok.RoleUser, Content: obs[k]}); err != nil {
				t.Fatal(err)
			}
		}
		plain := append(slices.Clone(want), bytetok.Assistant)
		summary, err := bytetok.AppendMessage(slices.Clone(want), lhtok.Message{Role: lhtok.RoleUser, Content: summaryRequest})
		if err != nil {
			t.Fatal(err)
		}
		summary = append(summary, bytetok.Assistant)
		if !slices.Equal(next, plain) && (summaryRequest == "" || !slices.Equal(next, summary)) {
			t.Fatalf("prompt %d does not continue prompt %d:\n got %v\nwant %v", k+1, k, next, plain)
		}
	}
}

// TestKeptSlicesNeverChange runs ledger rollouts down every path of the
// loop's context buffer: compactions (recency: the new context rendered
// after the old one; summarize: a summary call first), rejected
// candidates (a reply written after a prompt that is then resampled),
// length-truncated replies (the end marker appended) and resumes from
// every cut of the log (replayed calls, whose replies are not in the
// buffer). Every prompt sent and every event recorded must stay as it
// was when handed out, and a resumed rollout must record what the
// uninterrupted one did.
func TestKeptSlicesNeverChange(t *testing.T) {
	keepGoing := func(context.Context) (env.Environment, error) {
		return reg.New("ledger", json.RawMessage(`{"stop_on_error":false}`))
	}
	long := &scripted.Func{Reply: func(gen.Request) (string, error) { return "9+9=18 and more", nil }}
	n := 0
	everyOther := func(context.Context, string, []int32) error {
		if n++; n%2 == 1 {
			return errors.New("rejected")
		}
		return nil
	}
	for _, c := range []struct {
		name     string
		g        gen.Generator
		cc       compaction.Config
		validate rollout.Validator
		keepOn   bool
		summary  string
	}{
		{"recency", scripted.LedgerOracle(""), recency, nil, false, ""},
		{"summarize", scripted.LedgerOracle(compaction.DefaultSummaryRequest), summarizeCC, nil, false, compaction.DefaultSummaryRequest},
		{"resample", scripted.LedgerOracle(""), recency, everyOther, false, ""},
		{"truncated", long, recency, nil, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := func(r *retainer) rollout.Spec {
				sp := ledgerSpec(t, r, r, c.cc)
				sp.Validator, sp.MaxResamples = c.validate, 2
				if c.keepOn {
					sp.NewEnv = keepGoing
				}
				return sp
			}
			n = 0
			full := &retainer{g: c.g}
			res, err := rollout.Run(context.Background(), spec(full), nil)
			if err != nil {
				t.Fatal(err)
			}
			full.check(t)
			full.checkRecord(t, c.summary)
			if res.Compactions == 0 || len(full.events) < 8 {
				t.Fatalf("the rollout did not exercise compaction: %+v, %d events", res, len(full.events))
			}
			rejected, truncated := 0, 0
			for _, ev := range full.events {
				if cf, ok := ev.(runlog.CallFinished); ok && !cf.Selected {
					rejected++
				} else if ok && cf.Finish == runlog.FinishLength {
					truncated++
				}
			}
			if (c.validate != nil) != (rejected > 0) || c.keepOn != (truncated > 0) {
				t.Fatalf("%d rejected and %d truncated calls: not the path under test", rejected, truncated)
			}
			if c.validate != nil {
				return // resuming a rejection needs the validator's state; the other cases cover replay
			}
			for cut := 1; cut < len(full.events); cut++ {
				r := &retainer{g: c.g}
				if _, err := rollout.Run(context.Background(), spec(r), full.events[:cut]); err != nil {
					t.Fatalf("resume at cut %d: %v", cut, err)
				}
				r.check(t)
				if got, want := fmt.Sprintf("%#v", append(full.events[:cut:cut], r.events...)), fmt.Sprintf("%#v", full.events); got != want {
					t.Fatalf("resume at cut %d recorded other events", cut)
				}
			}
		})
	}
}

// TestLoopAllocs bounds the loop's own allocations per call on the byte
// path (ledger, recency compaction, a generator that shares one result
// and a recorder that keeps the events): the context grows in place and
// a call's tokens are views of it. Measured 5.4 per call (65 per 12-call
// rollout: per call the two events boxed and the reply's text, per
// compaction its message list, lineage and event, per rollout the loop,
// its environment and episode); the code before this test: 25.0.
func TestLoopAllocs(t *testing.T) {
	toks := append(bytetok.Encode("1+2=3"), bytetok.End)
	g := shared{{Tokens: toks, Logprobs: make([]float32, len(toks)), Finish: runlog.FinishStop}}
	keepGoing := func(context.Context) (env.Environment, error) {
		return reg.New("ledger", json.RawMessage(`{"stop_on_error":false}`))
	}
	rec := &sliceRecorder{evs: make([]runlog.Event, 0, 256)}
	sp := ledgerSpec(t, g, rec, recency)
	sp.NewEnv = keepGoing
	var calls int
	allocs := testing.AllocsPerRun(20, func() {
		rec.evs = rec.evs[:0]
		res, err := rollout.Run(context.Background(), sp, nil)
		if err != nil || res.Compactions == 0 {
			t.Fatalf("%+v, %v", res, err)
		}
		calls = res.Calls
	})
	if per := allocs / float64(calls); per > 6 {
		t.Fatalf("the loop allocates %.1f times per call (%v per %d-call rollout), want at most 6", per, allocs, calls)
	}
}

// shared answers every request with the same result.
type shared []gen.Result

func (g shared) Generate(_ context.Context, reqs []gen.Request) ([]gen.Result, error) {
	if len(reqs) != 1 {
		return nil, errors.New("shared: one request at a time")
	}
	return g, nil
}

// sliceRecorder keeps events in a slice with room for a rollout's.
type sliceRecorder struct{ evs []runlog.Event }

func (r *sliceRecorder) Record(_ context.Context, evs ...runlog.Event) error {
	r.evs = append(r.evs, evs...)
	return nil
}
