package rollout

// The environment half of the loop: step (or replay) the environment and
// bring a fresh instance to the logged state.

import (
	"context"
	"fmt"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/runlog"
)

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
			return failure.NewData("resume", fmt.Errorf("%w: turn %d: logged action %q, replay has %q", ErrDiverged, turn, s.Action, action))
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
			return failure.Wrap("env.step", err)
		}
		st = runlog.EnvStep{Rollout: l.s.Rollout, Attempt: l.s.Attempt, Turn: turn, Action: action,
			Observation: res.Observation, Reward: res.Reward, Done: res.Done}
		// A final step's state is never restored (syncEnv replays it, for
		// Success), so it is not taken: one snapshot fewer per episode.
		if sn, ok := l.env.(env.Snapshotter); ok && !res.Done {
			if st.State, err = sn.Snapshot(ctx); err != nil {
				return failure.Wrap("env.snapshot", err)
			}
		}
		// Durable before the loop's next effect, with the compaction or
		// seal that may follow it (hold).
		l.hold(st)
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
		if err := l.appendMsg(l.obsRole, st.Observation); err != nil {
			return err
		}
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
			return failure.Wrap("env.restore", err)
		}
	} else {
		for _, s := range l.pending {
			res, err := l.envStep(ctx, int(s.Turn), s.Action)
			if err != nil {
				return failure.Wrap("env.replay", err)
			}
			if res.Observation != s.Observation || res.Reward != s.Reward || res.Done != s.Done {
				return failure.NewData("env.replay", fmt.Errorf("%w: turn %d: environment is not deterministic (logged %q/%v/%v, replay %q/%v/%v)",
					ErrDiverged, s.Turn, s.Observation, s.Reward, s.Done, res.Observation, res.Reward, res.Done))
			}
			l.success = res.Success
		}
	}
	l.pending, l.envStale = nil, false
	return nil
}
