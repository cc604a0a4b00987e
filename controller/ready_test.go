package controller

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"
)

// t0 is the scripts' clock origin: ready now=S plans at t0 + S seconds.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (sc *scenario) names(ids []runlog.GroupID) string {
	var out []string
	for _, id := range ids {
		out = append(out, sc.name(id))
	}
	return strings.Join(out, " ")
}

// at prints a time of the script's clock as seconds since t0.
func at(t time.Time) string { return strconv.FormatFloat(t.Sub(t0).Seconds(), 'f', 3, 64) + "s" }

// ready takes one Ready from the scenario's planner, as the effect loop
// does: with the attempts the scenario has in flight (those earlier
// Readies started and no command ended since), the deadlines that ended
// attempts since the last Ready, a lost trainer, and the effects the
// command names (training, computing=N, committing=N, snapshotting). It
// appends the Ready's events, puts its attempts in flight and prints what
// it asks for.
func (sc *scenario) ready(a map[string]string) string {
	in := Input{Now: t0, Attempts: map[runlog.RolloutID]uint32{}, Timeouts: sc.timeouts, TrainerLost: sc.lost}
	for id, n := range sc.flight {
		in.Attempts[id] = n
	}
	if s, ok := a["now"]; ok {
		sec, _ := strconv.ParseFloat(s, 64)
		in.Now = t0.Add(time.Duration(sec * float64(time.Second)))
	}
	in.Served = sc.st.Version
	if s, ok := a["served"]; ok {
		in.Served, _ = strconv.ParseInt(s, 10, 64)
	}
	_, in.Training = a["training"]
	// computing=N: the train effect of step N is in flight, its commit not
	// yet released; committing=N: released
	for key, commit := range map[string]bool{"computing": false, "committing": true} {
		if v := a[key]; v != "" {
			in.TrainStep, _ = strconv.ParseInt(v, 10, 64)
			in.Training, in.Committing = true, commit
		}
	}
	_, in.Snapshotting = a["snapshotting"]
	rd, err := sc.pl.Take(sc.st, sc.cc, sc.order, in)
	if err != nil {
		return "error: " + err.Error()
	}
	defer sc.pl.Advance()
	sc.timeouts = map[runlog.RolloutID]Timeout{} // the plan recorded them
	var b strings.Builder
	sc.emit(&b, rd.Append...)
	if rd.Abort != nil {
		fmt.Fprintf(&b, "abort: %v\n", rd.Abort)
		return b.String()
	}
	if len(rd.Launch) > 0 {
		fmt.Fprintf(&b, "launch step %d: [%s]\n", rd.Step, sc.names(rd.Launch))
	}
	for _, at := range rd.Attempts {
		sc.flight[at.Rollout] = at.Attempt
		if !at.New {
			fmt.Fprintf(&b, "resume %s attempt %d\n", sc.rname(at.Rollout), at.Attempt)
		}
	}
	for _, h := range rd.Held {
		fmt.Fprintf(&b, "backoff %s attempt %d until %s\n", sc.rname(h.Rollout), h.Attempt, at(h.NotBefore))
	}
	if !rd.Wake.IsZero() {
		fmt.Fprintf(&b, "wake at %s\n", at(rd.Wake))
	}
	if rd.Train > 0 {
		fmt.Fprintf(&b, "train step %d\n", rd.Train)
	}
	if rd.Commit {
		fmt.Fprintf(&b, "commit step %d\n", in.TrainStep)
	}
	if rd.Checkpoint {
		fmt.Fprintf(&b, "checkpoint step %d\n", rd.CheckpointStep)
	}
	if rd.Snapshot {
		fmt.Fprintln(&b, "snapshot")
	}
	if rd.Stall > 0 {
		fmt.Fprintf(&b, "stalled for %s\n", rd.Stall)
	}
	if rd.Recover {
		fmt.Fprintln(&b, "recover the trainer")
	}
	if rd.Done {
		if rd.DataEnded {
			fmt.Fprintf(&b, "done: the data ran out before step %d\n", rd.NextStep)
		} else {
			fmt.Fprintf(&b, "done at step %d\n", rd.NextStep-1)
		}
	}
	if b.Len() == 0 {
		return "wait"
	}
	return b.String()
}

// timeout is an attempt in flight that a deadline ended (cause=call: a
// model call past call_timeout_s; cause=rollout: the attempt past
// rollout_timeout_s): it leaves the flight and the next ready reports it.
func (sc *scenario) timeout(a map[string]string) string {
	r := sc.rollout(a["r"])
	n, ok := sc.flight[r.ID]
	if !ok {
		return sc.rname(r.ID) + " has no attempt in flight"
	}
	delete(sc.flight, r.ID)
	cause := runlog.CauseCallTimeout
	if a["cause"] == "rollout" {
		cause = runlog.CauseRolloutTimeout
	}
	sc.timeouts[r.ID] = Timeout{Attempt: n, Cause: cause, Err: "context deadline exceeded"}
	return fmt.Sprintf("%s attempt %d ended: %s", sc.rname(r.ID), n, cause)
}

// errLost is the scripts' trainer that lost its state.
var errLost = errors.New("trainer came back at step 0 (train.ErrStateLost)")
