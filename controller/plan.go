package controller

import (
	"fmt"

	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/internal/config"
	"github.com/longhaul-rl/longhaul/runlog"
)

// Ready is one round of generation decisions for a step, planned from the
// run state alone (plan): the events to append and the groups to run.
//
// Ordering contract: append BEFORE launching. The effect loop appends
// Append in one atomic Log.Append and only then launches Launch, so no
// work starts that the log does not already know about: a crash between
// the two leaves the decisions in the log, and the next plan, reading the
// same state, finds them made (prompts admitted, members marked for
// regeneration) and launches the same groups. Results come back only as
// events appended by the launched work; the next round plans from them.
type Ready struct {
	Step   int64
	Append []runlog.Event   // admissions, then regenerations of stale members
	Launch []runlog.GroupID // the step's open groups, in admission order, to run to an outcome
}

// plan decides a generation round of step s: the prompts step s still
// needs (admissions), in throughput mode the stale members of its retried
// groups to regenerate, and its open groups to run. It is pure: no I/O,
// no clock, no randomness; the same state gives the same Ready.
func plan(st *runlog.State, s int64, cfg *config.Config, order *data.Order) (Ready, error) {
	rd := Ready{Step: s}
	adm, err := admissions(st, s, cfg, order)
	if err != nil {
		return Ready{}, err
	}
	rd.Append = adm
	for _, id := range st.Order {
		g := st.Groups[id]
		if g.ForStep != s || g.Status != runlog.GroupStatusOpen {
			continue
		}
		if cfg.Run.Mode == "throughput" {
			for _, m := range staleMembers(g, s, int64(cfg.Run.MaxLag)) {
				rd.Append = append(rd.Append, runlog.RolloutRegenerated{Rollout: m,
					Reason: fmt.Sprintf("calls older than run.max_lag (%d) allows for step %d", cfg.Run.MaxLag, s)})
			}
		}
		rd.Launch = append(rd.Launch, id)
	}
	for _, ev := range adm {
		rd.Launch = append(rd.Launch, ev.(runlog.PromptAdmitted).Group)
	}
	return rd, nil
}

// planner hands out one Ready at a time: taking a second before the
// first was performed (Advance) would plan from a state that does not yet
// hold the first one's events, and decide the same things twice.
type planner struct{ taken bool }

// Take plans the next round from st; it panics if the previous Ready was
// not advanced.
func (p *planner) Take(st *runlog.State, s int64, cfg *config.Config, order *data.Order) (Ready, error) {
	if p.taken {
		panic("controller: Ready taken twice without Advance")
	}
	rd, err := plan(st, s, cfg, order)
	if err == nil {
		p.taken = true
	}
	return rd, err
}

// Advance says the last Ready was performed: its events are in the log
// and its launched work has reported back through it.
func (p *planner) Advance() { p.taken = false }
