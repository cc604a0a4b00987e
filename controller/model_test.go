package controller

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/runlog"
	"pgregory.net/rapid"
)

// TestControllerModel is a model-based test of the whole controller with a
// fake generator, trainer and the real run log and environments: random
// modes, failure patterns (infra and data, some exhausting a budget so
// groups are retried or dropped), two epochs, and crashes at random
// generator calls (a crash cancels the run; the next life reopens the log
// and builds a new controller from it). After every life:
//   - no prompt is trained twice in an epoch;
//   - no call the log held when the life started was generated again;
//   - no rollout failed more attempts of one class in one budget round
//     than its budget allows (a restart never hands out a fresh budget);
//   - without retries, groups are trained in admission order.
//
// At the end every prompt of both epochs is trained exactly once, unless
// its group was dropped for good.
func TestControllerModel(t *testing.T) {
	// Each check runs several controller lives on a real, fsynced log:
	// fewer checks than rapid's default 100 keep it within seconds, unless
	// -rapid.checks asks for more.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		f.Value.Set("20")
		defer f.Value.Set(f.DefValue)
	}
	rapid.Check(t, func(rt *rapid.T) {
		mode := rapid.SampledFrom([]string{"deterministic", "throughput"}).Draw(rt, "mode")
		onDrop := rapid.SampledFrom([]string{"retry", "shrink"}).Draw(rt, "on_dropped_prompt")
		lag := rapid.IntRange(0, 1).Draw(rt, "lag")
		cfg := testConfig(t, "run.mode="+mode, "rollout_failure.on_dropped_prompt="+onDrop, fmt.Sprint("run.max_lag=", lag),
			"data.num_prompts=6", "grpo.num_prompts_per_step=3", "run.max_epochs=2", "run.max_steps=100",
			"rollout_failure.max_infra_attempts=3", "rollout_failure.max_data_attempts=2", "rollout_failure.max_group_retries=1",
			"rollout_failure.min_step_batch_fraction=0.5")
		h := newHarness(t, cfg)
		infraEvery := rapid.IntRange(2, 9).Draw(rt, "infra_every")
		badCursor := rapid.Bool().Draw(rt, "bad_prompts") // member 0 of every third group fails its data budget once
		var crashAt atomic.Int64
		var invocations atomic.Int64
		var cancel context.CancelCauseFunc
		h.gen.fail = func(ctx context.Context, k callKey, n int) error {
			if invocations.Add(1) == crashAt.Load() {
				cancel(errCrash)
				<-ctx.Done()
				return ctx.Err()
			}
			g := h.groupIndex(k.id.Group)
			switch {
			case badCursor && g%3 == 0 && k.id.Member == 0 && k.call == 1 && n <= 3:
				// Two failures use up the first budget round; the third
				// fails the retried round's first attempt, the fourth works.
				return failure.NewData("generate", fmt.Errorf("injected bad output of %s", k))
			case int(k.call+uint32(g)+uint32(k.id.Member))%infraEvery == 0 && n == 1:
				return injected(k)
			}
			return nil
		}
		done := false
		for life := 0; life < 8 && !done; life++ {
			logged := h.loggedCalls()
			before := map[callKey]int{}
			for k := range logged {
				before[k] = h.gen.count(k)
			}
			ctx, c := context.WithCancelCause(context.Background())
			cancel = c
			invocations.Store(0)
			if life < 7 && rapid.Bool().Draw(rt, "crash") {
				crashAt.Store(int64(rapid.IntRange(1, 60).Draw(rt, "crash_at")))
			} else {
				crashAt.Store(0)
			}
			err := h.run(ctx)
			c(nil)
			switch {
			case err == nil:
				done = true
			case context.Cause(ctx) == errCrash:
			default:
				rt.Fatalf("life %d: %v", life, err)
			}
			for k := range logged {
				if h.gen.count(k) != before[k] {
					rt.Fatalf("life %d: logged call %s was generated again", life, k)
				}
			}
			h.checkInvariants(rt, onDrop != "retry")
		}
		if !done {
			rt.Fatal("the run did not finish in 8 lives")
		}
		h.checkComplete(rt)
	})
}

// groupIndex is a group's admission index (cursor over both epochs).
func (h *harness) groupIndex(id runlog.GroupID) int {
	for e := range uint32(4) {
		for cur := range uint64(h.cfg.Data.NumPrompts) {
			if runlog.NewGroupID(h.cfg.Run.Seed, e, cur) == id {
				return int(e)*h.cfg.Data.NumPrompts + int(cur)
			}
		}
	}
	return -1
}

func (h *harness) loggedCalls() map[callKey]bool {
	out := map[callKey]bool{}
	st := h.state()
	for _, g := range st.Groups {
		for _, r := range g.Members {
			for i := range r.Calls {
				out[callKey{r.ID, uint32(i)}] = true
			}
		}
	}
	return out
}

func (h *harness) checkInvariants(rt *rapid.T, inOrder bool) {
	st := h.state()
	seen := map[string]bool{}
	var trained []runlog.GroupID
	for _, ts := range st.Trained {
		for _, id := range ts.Groups {
			g := st.Groups[id]
			k := fmt.Sprintf("epoch %d prompt %s", g.Epoch, g.PromptID)
			if seen[k] {
				rt.Fatalf("%s trained twice", k)
			}
			seen[k] = true
			trained = append(trained, id)
		}
	}
	if inOrder {
		var admitted []runlog.GroupID
		for _, id := range st.Order {
			if st.Groups[id].Status != runlog.GroupStatusDropped {
				admitted = append(admitted, id)
			}
		}
		if len(trained) > len(admitted) || !slices.Equal(trained, admitted[:len(trained)]) {
			rt.Fatalf("trained %v, not the admitted groups %v in order", trained, admitted)
		}
	}
	// Failed attempts per budget round, counted from the events: a round
	// ends at the group's GroupRequeued.
	type key struct {
		id    runlog.RolloutID
		class string
	}
	round := map[key]int{}
	rf := h.cfg.RolloutFailure
	for _, ev := range h.events() {
		switch e := ev.(type) {
		case runlog.RolloutFailed:
			k := key{e.Rollout, e.Class}
			round[k]++
			limit := rf.MaxDataAttempts
			if e.Class == failure.Infra {
				limit = rf.MaxInfraAttempts
			}
			if round[k] > limit {
				rt.Fatalf("rollout %s failed %d %s attempts in one budget round (budget %d)", e.Rollout, round[k], e.Class, limit)
			}
		case runlog.GroupRequeued:
			for k := range round {
				if k.id.Group == e.Group {
					delete(round, k)
				}
			}
		}
	}
}

func (h *harness) checkComplete(rt *rapid.T) {
	st := h.state()
	for e := range uint32(2) {
		got := map[string]int{}
		for _, id := range st.Order {
			g := st.Groups[id]
			if g.Epoch == e && (g.Status == runlog.GroupStatusTrained || g.Status == runlog.GroupStatusDropped) {
				got[g.PromptID]++
			}
		}
		if len(got) != h.cfg.Data.NumPrompts {
			rt.Fatalf("epoch %d: trained or dropped %v, want each of the %d prompts", e, got, h.cfg.Data.NumPrompts)
		}
		for p, n := range got {
			if n != 1 {
				rt.Fatalf("epoch %d: prompt %s trained/dropped %d times", e, p, n)
			}
		}
	}
}
