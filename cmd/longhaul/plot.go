package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/internal/runner"
)

func newPlotCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "plot RUN_DIR",
		Short: "draw a run's learning curve (RUN_DIR/learning_curve.png) from its metrics.jsonl, also mid-run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := runner.PlotRun(args[0]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), filepath.Join(args[0], runner.CurveFile))
			return nil
		},
	}
}
