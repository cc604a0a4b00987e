package runner

import (
	"log/slog"

	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/metrics"
)

// fillMetrics writes again, from the run log, the rows of trained steps
// that metrics.jsonl lacks (a damaged line set aside, a file removed): the
// file is a view of the log, and a view that lost a row is rebuilt rather
// than left with a hole.
func fillMetrics(c *controller.Controller, mw *metrics.Writer, log *slog.Logger) error {
	missing := mw.Missing(c.TrainedSteps())
	if len(missing) == 0 {
		return nil
	}
	rows, err := c.RebuildRows(missing)
	if err != nil {
		return err
	}
	if err := mw.Fill(rows); err != nil {
		return err
	}
	log.Warn("metrics.jsonl lacked rows of trained steps; rebuilt them from the run log (the trainer's figures and timings are not in the log: those fields are zero, and the rows say \"rebuilt\": true)",
		"steps", missing)
	return nil
}
