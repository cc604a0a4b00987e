package controller

// This file holds what the controller does when the trainer loses its
// state under a running run (a `longhaul serve-trainer` SIGKILLed and
// started again comes back at step 0): exactly what a resumed controller
// does after its own crash. The planner decides it (Ready.Recover, once
// the effects in flight have ended); the effect loads the newest durable
// checkpoint into the trainer, rewinds the log's trained steps to it,
// publishes its weights, and the run goes on from there; the rewound
// steps are trained again from the same logged data, so the run ends as
// if nothing had happened.

import (
	"context"
	"errors"
	"fmt"

	"github.com/longhaul-rl/longhaul/train"
)

// errNotRestored is what the loop starts with as Input.TrainerLost: the
// trainer holds no state of this run until the newest durable checkpoint
// (or the warm start) is loaded into it.
var errNotRestored = errors.New("controller: the trainer is not restored yet")

// recoverTrainer is the effect of Ready.Recover: the trainer lost its
// state (lost) or holds none yet, and nothing is in flight, so it is
// restored as after a crash. It returns the version restored (published).
func (c *Controller) recoverTrainer(ctx context.Context, lost error) (int64, error) {
	if !errors.Is(lost, errNotRestored) {
		c.log.Warn("the trainer lost its state (restarted?): loading the newest checkpoint into it and rewinding, as after a crash",
			"step", c.view().step, "err", lost)
	}
	return c.restore(ctx)
}

// syncTrainer asks the trainer where it stands after a checkpoint was
// loaded into it (or it was initialised) and checks that it is at step:
// the answer also fences the trainer's next calls (a remote trainer that
// restarts again is then caught before a step is applied to it).
func (c *Controller) syncTrainer(ctx context.Context, step int64) error {
	st, err := c.o.Trainer.State(ctx)
	if err != nil {
		return fmt.Errorf("controller: trainer state: %w", err)
	}
	if st.Step != step {
		return fmt.Errorf("controller: the trainer is at step %d after restoring step %d: %w", st.Step, step, train.ErrStateLost)
	}
	return nil
}
