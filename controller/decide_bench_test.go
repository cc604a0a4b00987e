package controller

import (
	"fmt"
	"testing"

	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/runlog"
)

// BenchmarkDecide is the decision cost with 10,000 rollouts in flight
// (1,250 groups of 8, all running): per call event, folding one
// CallFinished into the state (runlog.Apply, what the log does on every
// append) plus the rollout's next-attempt decision; per step, every
// group's outcome and the next step's admissions.
//
// Targets (issue #11): call ≤ 5 µs and 0 allocs/op in steady state (the
// B/op left is the amortized growth of a rollout's Calls and Events);
// step has no target: its allocations are the admission events it makes.
//
//	go test ./controller -run '^$' -bench Decide -benchmem
func BenchmarkDecide(b *testing.B) {
	cfg, order, st, must := benchRun(b, 1250)
	var ids []runlog.RolloutID
	for _, a := range admitStep(b, st, 1, cfg, order, must) {
		for m := range a.Size {
			ids = append(ids, runlog.RolloutID{Group: a.Group, Member: m})
		}
	}
	if len(ids) != 10000 {
		b.Fatalf("%d rollouts", len(ids))
	}
	suffix, sampled, lps := []int32{1, 2, 3}, []int32{4, 5}, []float32{-1, -1}
	b.Run("call", func(b *testing.B) {
		// The events are made (and boxed into runlog.Event) before the
		// clock starts: in a run the rollout that makes an event pays for
		// it; this measures the fold and the decision. The fold's one
		// amortized cost left is the growth of a rollout's Calls slice.
		evs := make([]runlog.Event, b.N)
		for i := range b.N {
			id := ids[i%len(ids)]
			r := st.Rollout(id)
			evs[i] = runlog.CallFinished{Rollout: id, Attempt: 1, Call: uint32(len(r.Calls) + i/len(ids)), PromptPrefix: r.CtxLen + uint32(i/len(ids))*5,
				PromptSuffix: suffix, Sampled: sampled, Logprobs: lps, Finish: runlog.FinishStop, Selected: true}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			id := ids[i%len(ids)]
			r := st.Rollout(id)
			if err := runlog.Apply(st, evs[i]); err != nil {
				b.Fatal(err)
			}
			if p := nextAttempt(r, cfg.RolloutFailure, cfg.Run.Seed); p.start || p.done {
				b.Fatal("a running rollout is not resumed")
			}
		}
	})
	b.Run("decide-only", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if p := nextAttempt(st.Rollout(ids[i%len(ids)]), cfg.RolloutFailure, cfg.Run.Seed); p.start {
				b.Fatal("a running rollout is not resumed")
			}
		}
	})
	b.Run("step", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			for _, gid := range st.Order {
				if ev := groupOutcome(st.Groups[gid], cfg.RolloutFailure); ev != nil {
					b.Fatal("a running group has an outcome")
				}
			}
			if _, err := admissions(st, 2, cfg, order); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPlanLongRun is the planner's per-plan scan (genDone for the next
// step: its round and admissions) after 100 and after 2,000 trained steps
// of 8 groups. The scans skip the groups done with (runlog.State.Unsettled),
// so the cost should not grow with the run's length.
//
//	go test ./controller -run '^$' -bench PlanLongRun
func BenchmarkPlanLongRun(b *testing.B) {
	for _, steps := range []int64{100, 2000} {
		b.Run(fmt.Sprintf("steps=%d", steps), func(b *testing.B) {
			cfg, order, st, must := benchRun(b, 8)
			for k := int64(1); k <= steps; k++ {
				var groups []runlog.GroupID
				for _, a := range admitStep(b, st, k, cfg, order, must) {
					for m := range a.Size {
						id := runlog.RolloutID{Group: a.Group, Member: m}
						must(runlog.RolloutSealed{Rollout: id, Attempt: 1, Outcome: runlog.OutcomeCompleted})
					}
					must(runlog.GroupCommitted{Group: a.Group})
					groups = append(groups, a.Group)
				}
				must(runlog.StepTrained{Step: k, Groups: groups, Version: k})
			}
			var running []runlog.GroupID
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if genDone(st, steps+1, cfg, order, running) {
					b.Fatal("the next step is generated before it started")
				}
			}
			b.ReportMetric(float64(len(st.Order)), "groups")
		})
	}
}

// benchRun is a started deterministic run's state over 4,096 prompts with
// perStep groups of 8 a step, and must, which applies an event to it.
func benchRun(b *testing.B, perStep int) (*Config, *data.Order, *runlog.State, func(runlog.Event)) {
	cfg := ctl(b, testConfig(b, "data.num_prompts=4096", fmt.Sprintf("grpo.num_prompts_per_step=%d", perStep), "grpo.num_generations_per_prompt=8"))
	ds := data.NewGenerated(4096, func(i int) (data.Prompt, error) {
		return data.Prompt{ID: "p", Task: []byte(`{}`)}, nil
	})
	order, _ := data.NewOrder(ds, cfg.Run.Seed, true)
	st := runlog.NewState()
	must := func(ev runlog.Event) {
		if err := runlog.Apply(st, ev); err != nil {
			b.Fatal(err)
		}
	}
	must(runlog.RunStarted{Seed: cfg.Run.Seed, Mode: "deterministic"})
	return cfg, order, st, must
}

// admitStep applies step k's admissions and starts every member's first
// attempt; it returns the admitted groups.
func admitStep(b *testing.B, st *runlog.State, k int64, cfg *Config, order *data.Order, must func(runlog.Event)) []runlog.PromptAdmitted {
	adm, err := admissions(st, k, cfg, order)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]runlog.PromptAdmitted, 0, len(adm))
	for _, ev := range adm {
		must(ev)
		a := ev.(runlog.PromptAdmitted)
		for m := range a.Size {
			must(runlog.AttemptStarted{Rollout: runlog.RolloutID{Group: a.Group, Member: m}, Attempt: 1})
		}
		out = append(out, a)
	}
	return out
}
