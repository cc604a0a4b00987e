package main

import (
	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/model/modelbench"
)

func newBenchModelCmd() *cobra.Command {
	var (
		dir string
		o   modelbench.Options
	)
	cmd := &cobra.Command{
		Use:   "model --model DIR",
		Short: "a model directory's load, steady-state decode and prefill, each beside the machine's limit",
		Long: `Model measures, in one run on this machine: the 2-core streaming read rate
and FMA peak; loading the directory against reading its weight files; the
steady-state decode rate (tokens after a warm-up: the time of warm+N tokens
less that of warm tokens) at batch 1 against the limit read rate ÷ weight
bytes a token reads, and at a larger batch against batch 1; and a long
prefill against the FMA peak. A BF16 checkpoint is timed as loaded (mapped,
BF16) and as a float32 copy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Log = cmd.ErrOrStderr()
			rep, err := modelbench.Run(cmd.Context(), dir, o)
			if err != nil {
				return err
			}
			modelbench.Print(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "model", "", "HF model directory (e.g. from init-model)")
	f.IntVar(&o.Reps, "reps", 3, "repetitions of each timing (medians are reported)")
	f.IntVar(&o.NewTokens, "new-tokens", 128, "decode steps timed after the warm-up")
	f.IntVar(&o.Warm, "warm", 16, "decode steps before the timed ones")
	f.IntVar(&o.Prefill, "prefill", 512, "prompt tokens of the prefill timing")
	f.IntVar(&o.Batch, "batch", 16, "rows of the batched decode")
	f.IntVar(&o.StreamMiB, "stream-mib", 1024, "buffer of the read-rate measurement (past the last-level cache)")
	f.BoolVar(&o.SkipF32, "skip-f32", false, "do not also time a float32 copy of a BF16 checkpoint")
	f.BoolVar(&o.SkipLoad, "skip-load", false, "do not time loading against reading")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}
