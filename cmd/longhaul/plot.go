package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runner"
)

func newPlotCmd() *cobra.Command {
	var compare bool
	var out string
	cmd := &cobra.Command{
		Use:   "plot RUN_DIR | plot --compare RUN_DIR...",
		Short: "draw a run's learning curve (RUN_DIR/learning_curve.png) from its metrics.jsonl, also mid-run; --compare overlays runs",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !compare {
				if len(args) != 1 {
					return fmt.Errorf("plot takes one run directory (use --compare for several), got %d", len(args))
				}
				if err := runner.PlotRun(args[0]); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), filepath.Join(args[0], runner.CurveFile))
				return nil
			}
			var runs []metrics.Run
			for _, dir := range args {
				steps, err := metrics.Read(filepath.Join(dir, runner.MetricsFile))
				if err != nil {
					return fmt.Errorf("%s: %w", dir, err)
				}
				runs = append(runs, metrics.Run{Name: filepath.Base(filepath.Clean(dir)), Steps: steps})
			}
			if err := metrics.Compare(runs, out); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), out)
			return nil
		},
	}
	cmd.Flags().BoolVar(&compare, "compare", false, "overlay the smoothed curves of several runs")
	cmd.Flags().StringVar(&out, "out", "compare.png", "output of --compare (.png, .svg or .pdf)")
	return cmd
}
