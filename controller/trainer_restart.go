package controller

// This file holds what the controller does when the trainer loses its
// state under a running run (a `longhaul serve-trainer` SIGKILLed and
// started again comes back at step 0): exactly what a resumed controller
// does after its own crash. It loads the newest durable checkpoint into
// the trainer, rewinds the log's trained steps to it, publishes its
// weights, and goes on from there; the rewound steps are trained again
// from the same logged data, so the run ends as if nothing had happened.

import (
	"context"
	"errors"
	"fmt"

	"github.com/longhaul-rl/longhaul/train"
)

// maxFruitlessRecoveries bounds trainer recoveries in a row that were not
// followed by a trained step: a trainer that loses its state again at
// once (or never reaches the checkpoint's step) is a fault to report, not
// to loop on.
const maxFruitlessRecoveries = 5

// runRecovering runs the loop, recovering from trainer restarts.
func (c *Controller) runRecovering(ctx context.Context) error {
	fruitless := 0
	lastFrom := int64(-1)
	for {
		err := c.loop(ctx)
		if err == nil || ctx.Err() != nil || !errors.Is(err, train.ErrStateLost) {
			return err
		}
		at := c.view().step
		if at > lastFrom {
			fruitless = 0
		}
		if fruitless++; fruitless > maxFruitlessRecoveries {
			return fmt.Errorf("controller: the trainer lost its state %d times without training a step in between: %w", fruitless, err)
		}
		c.log.Warn("the trainer lost its state (restarted?): loading the newest checkpoint into it and rewinding, as after a crash",
			"step", at, "err", err)
		// The generation rounds of the interrupted loop are abandoned;
		// their effects are in the log, which the next round plans from.
		c.planner = planner{}
		if err := c.restoreRecovering(ctx); err != nil {
			return fmt.Errorf("controller: recovering the trainer: %w", err)
		}
		lastFrom = c.view().step
	}
}

// restoreRecovering is restore, started again when the trainer loses its
// state while it runs (restarted during the checkpoint load or the first
// export), a bounded number of times.
func (c *Controller) restoreRecovering(ctx context.Context) error {
	for n := 1; ; n++ {
		err := c.restore(ctx)
		if err == nil || ctx.Err() != nil || !errors.Is(err, train.ErrStateLost) || n > maxFruitlessRecoveries {
			return err
		}
		c.log.Warn("the trainer lost its state while being restored: restoring again", "err", err)
	}
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
