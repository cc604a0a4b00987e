package rollout

import "github.com/longhaul-rl/longhaul/runlog"

// Trace extracts one rollout's calls and declared boundaries from log
// events (any order of attempts; the log order is kept), the input of
// segment.Build. Every logged call belongs to the rollout's single chain:
// a resumed attempt reuses the calls before it and never regenerates one.
// A restarted attempt (AttemptStarted.Restart) begins a new chain: only the
// calls after the last restart are the rollout's trajectory.
func Trace(events []runlog.Event, id runlog.RolloutID) ([]runlog.CallFinished, []runlog.Compaction) {
	// Sized by a first pass: a step reads every rollout's trace, and
	// growing two slices call by call was a good part of its garbage.
	nc, nb := 0, 0
	for _, ev := range events {
		switch ev.(type) {
		case runlog.CallFinished:
			nc++
		case runlog.Compaction:
			nb++
		}
	}
	calls := make([]runlog.CallFinished, 0, nc)
	bounds := make([]runlog.Compaction, 0, nb)
	for _, ev := range events {
		switch e := ev.(type) {
		case runlog.AttemptStarted:
			if e.Rollout == id && e.Restart {
				calls, bounds = calls[:0], bounds[:0]
			}
		case runlog.CallFinished:
			if e.Rollout == id {
				calls = append(calls, e)
			}
		case runlog.Compaction:
			if e.Rollout == id {
				bounds = append(bounds, e)
			}
		}
	}
	return calls, bounds
}
