package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/testkit/crashtest"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "benchmarks and end-to-end proofs"}
	cmd.AddCommand(newBenchCrashCmd())
	cmd.AddCommand(newBenchKernelsCmd())
	cmd.AddCommand(newBenchModelCmd())
	cmd.AddCommand(newBenchSummariesCmd())
	return cmd
}

func newBenchCrashCmd() *cobra.Command {
	var (
		kills   int
		seed    uint64
		cfgPath string
		dir     string
	)
	cmd := &cobra.Command{
		Use:   "crash [--kills K] [--config FILE] [key=value ...]",
		Short: "run a deterministic config uninterrupted and again with K SIGKILLs, and compare",
		Long: `Crash runs the config twice as child processes of this binary: once
uninterrupted, and once killed with SIGKILL K times (at crash points inside
training, checkpoint writing and snapshots, and at random moments) and
resumed after each kill. It prints "identical" when both end with the same
weights digest, the same per-step trained prompts and the same logged
token sequences, or the first difference (and exits 1).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "longhaul-crash-"); err != nil {
					return err
				}
				defer os.RemoveAll(dir)
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			res, err := crashtest.Run(cmd.Context(), crashtest.Options{Binary: bin, Config: cfgPath,
				Overrides: args, Kills: kills, Seed: seed, Dir: abs, Log: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%d kills; %d steps, %d calls; weights %s\n", len(res.Kills), res.Resumed.Steps, res.Resumed.Calls, res.Resumed.WeightsSHA256)
			if !res.Identical {
				fmt.Fprintln(out, "DIFFERENT:", res.Difference)
				return fmt.Errorf("bench crash: resumed run differs from the uninterrupted one")
			}
			fmt.Fprintln(out, "identical")
			return nil
		},
	}
	cmd.Flags().IntVar(&kills, "kills", 5, "SIGKILLs to deliver")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the kill schedule")
	cmd.Flags().StringVar(&cfgPath, "config", "", "config file (default: the embedded default example)")
	cmd.Flags().StringVar(&dir, "dir", "", "where to keep the two run directories (default: a temporary directory, removed after)")
	return cmd
}
