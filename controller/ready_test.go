package controller

import (
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

// ready takes one Ready from the scenario's planner with the effects the
// command names in flight, appends its events (as the effect loop does,
// before anything starts) and prints what it asks for.
func (sc *scenario) ready(a map[string]string) string {
	in := Input{Now: t0, Running: map[runlog.GroupID]bool{}}
	if s, ok := a["now"]; ok {
		sec, _ := strconv.ParseFloat(s, 64)
		in.Now = t0.Add(time.Duration(sec * float64(time.Second)))
	}
	in.Served = sc.st.Version
	if s, ok := a["served"]; ok {
		in.Served, _ = strconv.ParseInt(s, 10, 64)
	}
	if s := a["running"]; s != "" {
		for _, g := range strings.Split(s, ",") {
			in.Running[sc.group(g).ID] = true
		}
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
	var b strings.Builder
	sc.emit(&b, rd.Append...)
	if len(rd.Launch) > 0 {
		fmt.Fprintf(&b, "launch step %d: [%s]\n", rd.Step, sc.names(rd.Launch))
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
