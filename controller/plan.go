package controller

import (
	"fmt"
	"time"

	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/runlog"
)

// Ready is everything the controller does next, planned (plan) from the
// run state the log folds, the config, and what the effect loop reports
// in flight (Input). It covers the whole loop: a generation round of one
// step, the step to train, a checkpoint or snapshot that is due, the
// watchdog's verdict and the end of the run.
//
// Ordering contract: append BEFORE launching. The effect loop appends
// Append in one atomic Log.Append and only then starts anything else
// (Launch, Train, Checkpoint, Snapshot), so no work starts that the log
// does not already know about: a crash between the two leaves the
// decisions in the log, and the next plan, reading the same state, finds
// them made (prompts admitted, outcomes decided, members marked for
// regeneration) and starts the same work. Effects report only by appending
// events (a launched group's members append their calls and seals, the
// train effect appends StepTrained, the checkpoint effect
// CheckpointDurable); the loop wakes when one ends and plans again from
// the log.
type Ready struct {
	// Step is the step of the generation round (Append, Launch); 0: none.
	Step int64
	// Append holds admissions, group outcomes (commit, requeue, drop) and
	// regenerations of stale members.
	Append []runlog.Event
	// Launch holds the open groups of Step to run, in admission order:
	// each member runs until it seals or uses up its attempts.
	Launch []runlog.GroupID
	// Train is the step to train now (0: none): every group scheduled for
	// it has an outcome. The effect reads the groups' events, picks the
	// batch (stepBatch), trains and appends StepTrained.
	Train int64
	// Checkpoint says that a checkpoint of the trained step
	// CheckpointStep is due (checkpointing.save_period, the last step, or
	// the end of the data) and not yet durable.
	Checkpoint     bool
	CheckpointStep int64
	// Snapshot says that a run-state snapshot is due
	// (rollout_checkpointing.snapshot_attempt_interval_s).
	Snapshot bool
	// Stall, when positive, is how long the log has not moved: past
	// rollout_failure.stall_timeout_s the watchdog warns or aborts.
	Stall time.Duration
	// DataEnded: run.max_epochs used up the data before step NextStep.
	DataEnded bool
	NextStep  int64
	// Done: nothing is left to do: the run ends.
	Done bool

	mem memory // the planner's memory once this Ready is performed
}

// Empty reports whether the Ready asks for nothing.
func (rd *Ready) Empty() bool {
	return len(rd.Append) == 0 && len(rd.Launch) == 0 && rd.Train == 0 && !rd.Checkpoint &&
		!rd.Snapshot && rd.Stall == 0 && !rd.Done
}

// Input is what the effect loop knows that the log does not: the clock
// reading, the version the generator serves, and the effects in flight.
type Input struct {
	Now    time.Time
	Served int64
	// Running holds the launched groups whose members have not all
	// returned; the planner neither launches them again nor decides
	// their outcome.
	Running map[runlog.GroupID]bool
	// Training: a train or checkpoint effect holds the trainer.
	Training bool
	// Snapshotting: a snapshot is being written.
	Snapshotting bool
}

// memory is the little the planner remembers between Readies, all of it
// about the clock: when the log last moved, when the watchdog last
// warned, when the last snapshot was due (and the log's length then).
type memory struct {
	seen                       uint64
	progress, warned, snapshot time.Time
	// snapApplied is the event count the log reaches with the last
	// snapshot's own record: while it is unchanged no snapshot is due.
	snapApplied uint64
}

// plan decides the next Ready. It is pure: no I/O, no clock (the time is
// an input), no randomness; the same inputs give the same Ready.
//
// The schedule: in deterministic mode one thing happens at a time, in
// the order of the old single-goroutine loop: steps k..k+lag are
// generated (k = the next step to train), then step k is trained, then
// its checkpoint if due. In throughput mode generation of step s starts as
// soon as version s-1-lag is served and runs while earlier steps train.
func plan(st *runlog.State, cfg *Config, order *data.Order, in Input, mem memory) (Ready, error) {
	rd := Ready{mem: mem}
	rd.mem, rd.Stall = watch(mem, st.Applied, in.Now, durationS(cfg.RolloutFailure.StallTimeoutS))
	if iv := durationS(cfg.SnapshotIntervalS); iv > 0 && !in.Snapshotting && in.Now.Sub(mem.snapshot) >= iv {
		rd.mem.snapshot = in.Now
		// Nothing new since the last snapshot: another would cost a write
		// for nothing, and its SnapshotWritten record would look like
		// progress to the watchdog through an outage. The log then holds
		// exactly one event more than when the last one was due, its own
		// record (a failed snapshot leaves none, and is tried again).
		if st.Applied != mem.snapApplied {
			rd.Snapshot, rd.mem.snapApplied = true, st.Applied+1
		}
	}
	k, last := st.Step+1, int64(cfg.Run.MaxSteps)
	deterministic := !cfg.Run.Throughput()
	ended := k <= last && dataEnded(st, k, cfg, in.Running) && genDone(st, k, cfg, order, in.Running)
	if !in.Training && checkpointDue(st, cfg, ended) {
		rd.Checkpoint, rd.CheckpointStep = true, st.Step
	}
	trainerBusy := in.Training || rd.Checkpoint
	if k <= last && !ended && len(in.Running) == 0 && !(deterministic && trainerBusy) {
		limit := last
		if deterministic {
			// Generation looks lag steps ahead even past max_steps, so that
			// a run resumed with a larger run.max_steps generates those
			// steps with the version the schedule names (k-1-lag), exactly
			// as a longer run would have.
			limit = k + int64(cfg.Run.MaxLag)
		}
		for s := k; s <= limit; s++ {
			if !deterministic && in.Served < s-1-int64(cfg.Run.MaxLag) {
				break
			}
			app, launch, err := genRound(st, s, cfg, order, in.Running)
			if err != nil {
				return Ready{}, err
			}
			if len(app) > 0 || len(launch) > 0 {
				rd.Step, rd.Append, rd.Launch = s, app, launch
				break
			}
		}
	}
	genIdle := len(in.Running) == 0 && rd.Step == 0
	if k <= last && !ended && !trainerBusy && (genIdle || !deterministic && genDone(st, k, cfg, order, in.Running)) {
		rd.Train = k
	}
	if (k > last || ended) && !trainerBusy && len(in.Running) == 0 {
		rd.Done, rd.DataEnded, rd.NextStep = true, ended, k
	}
	return rd, nil
}

// genRound is one generation round of step s: the prompts s still needs
// (admissions), and for each open group of s not running now: in
// throughput mode its stale members to regenerate (then the group runs),
// else its outcome once its members are done, else a launch.
func genRound(st *runlog.State, s int64, cfg *Config, order *data.Order, running map[runlog.GroupID]bool) (app []runlog.Event, launch []runlog.GroupID, err error) {
	adm, err := admissions(st, s, cfg, order)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range st.Order {
		g := st.Groups[id]
		if g.ForStep != s || g.Status != runlog.GroupStatusOpen || running[id] {
			continue
		}
		if cfg.Run.Throughput() {
			if stale := staleMembers(g, s, int64(cfg.Run.MaxLag)); len(stale) > 0 {
				for _, m := range stale {
					app = append(app, runlog.RolloutRegenerated{Rollout: m,
						Reason: fmt.Sprintf("calls older than run.max_lag (%d) allows for step %d", cfg.Run.MaxLag, s)})
				}
				launch = append(launch, id)
				continue
			}
		}
		if ev := groupOutcome(g, cfg.RolloutFailure); ev != nil {
			app = append(app, ev)
			continue
		}
		launch = append(launch, id)
	}
	for _, ev := range adm {
		launch = append(launch, ev.(runlog.PromptAdmitted).Group)
	}
	return append(adm, app...), launch, nil
}

// genDone reports whether step s is generated: no round is left to plan
// for it and none of its groups is running.
func genDone(st *runlog.State, s int64, cfg *Config, order *data.Order, running map[runlog.GroupID]bool) bool {
	for id := range running {
		if g := st.Groups[id]; g != nil && g.ForStep == s {
			return false
		}
	}
	app, launch, err := genRound(st, s, cfg, order, running)
	return err == nil && len(app) == 0 && len(launch) == 0
}

// dataEnded reports whether step k got no prompt because run.max_epochs
// ran out: the run ends before it. A step past the data that holds only
// retried groups which were then dropped for good has nothing to train
// either.
func dataEnded(st *runlog.State, k int64, cfg *Config, running map[runlog.GroupID]bool) bool {
	if cfg.Run.MaxEpochs <= 0 {
		return false
	}
	for _, id := range st.Order {
		if g := st.Groups[id]; g.ForStep == k && (g.AdmittedFor == k || g.Status != runlog.GroupStatusDropped || running[id]) {
			return false
		}
	}
	return true
}

// checkpointDue reports whether the last trained step needs a checkpoint
// that the log does not record yet: every checkpointing.save_period steps,
// at run.max_steps, and when the data ran out (the run's last step).
func checkpointDue(st *runlog.State, cfg *Config, ended bool) bool {
	cp := cfg.Checkpointing
	k := st.Step
	if !cp.Enabled || k <= 0 || !(k%int64(cp.SavePeriod) == 0 || k == int64(cfg.Run.MaxSteps) || ended) {
		return false
	}
	for _, c := range st.Checkpoints {
		if c.Step == k {
			return false
		}
	}
	return true
}

// watch is the stall watchdog's decision: after the stall timeout without
// a new event it reports how long the log has been still (once per
// timeout).
func watch(m memory, applied uint64, now time.Time, limit time.Duration) (memory, time.Duration) {
	if limit <= 0 {
		return m, 0
	}
	if applied != m.seen || m.progress.IsZero() {
		m.seen, m.progress = applied, now
		return m, 0
	}
	if now.Sub(m.progress) < limit || now.Sub(m.warned) < limit {
		return m, 0
	}
	m.warned = now
	return m, now.Sub(m.progress)
}

// planner hands out one Ready at a time: taking a second before the
// first was performed (Advance) would plan from a state that does not yet
// hold the first one's events, and decide the same things twice.
type planner struct {
	taken   bool
	mem     memory
	pending memory
}

// start sets the planner's clock memory at the start of a process: the
// watchdog and the snapshot interval count from now.
func (p *planner) start(now time.Time) { p.mem = memory{progress: now, snapshot: now} }

// Take plans the next Ready from st; it panics if the previous Ready was
// not advanced.
func (p *planner) Take(st *runlog.State, cfg *Config, order *data.Order, in Input) (Ready, error) {
	if p.taken {
		panic("controller: Ready taken twice without Advance")
	}
	rd, err := plan(st, cfg, order, in, p.mem)
	if err == nil {
		p.taken, p.pending = true, rd.mem
	}
	return rd, err
}

// Advance says the last Ready was performed: its events are in the log
// and its effects are started.
func (p *planner) Advance() { p.taken, p.mem = false, p.pending }

// durationS converts a config's seconds; 0 or less means none (0).
func durationS(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
