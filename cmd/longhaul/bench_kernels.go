package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/model/kern/kernbench"
)

func newBenchKernelsCmd() *cobra.Command {
	var (
		reps   int
		slice  time.Duration
		noPeer bool
		mib    int
	)
	cmd := &cobra.Command{
		Use:   "kernels",
		Short: "FMA peak, kernel path and GEMM GFLOP/s at the training shapes (share of peak), with numpy/OpenBLAS as peer; DRAM read rate and decode GEMV bytes/s",
		Long: `Kernels measures this machine's FMA peak on the kernel path in use (1 and 2
cores), then the GEMM rate at the default model's training shapes, single-
threaded and with 2 shards, as a share of the peak measured right before each
timing (medians and best of --reps pairs: the machine may be shared; the
load average is printed). When
/usr/bin/python3 has numpy, the same shapes run through numpy (OpenBLAS with 1
and 2 threads) as the peer. LONGHAUL_KERN_PATH=avx2 measures the AVX2 path
on an AVX-512 machine. Then the memory-bound side: the streaming read rate
of a --stream-mib buffer (sized past the last-level cache, so it measures
DRAM) on 1 and 2 cores, and the decode GEMV (m = 1, packed weights of that
size) in weight bytes per second as a share of it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := kernbench.Options{Reps: reps, Slice: slice}
			rep, err := kernbench.Run(cmd.Context(), kernbench.TrainingShapes, o)
			if err != nil {
				return err
			}
			var peer *kernbench.Peer
			if !noPeer {
				if peer, err = kernbench.RunPeer(cmd.Context(), kernbench.TrainingShapes, o); err != nil {
					return err
				}
			}
			kernbench.Print(cmd.OutOrStdout(), rep, peer)
			if mib <= 0 {
				return nil
			}
			bw, err := kernbench.RunBandwidth(cmd.Context(), mib<<20, o)
			if err != nil {
				return err
			}
			kernbench.PrintBandwidth(cmd.OutOrStdout(), bw)
			return nil
		},
	}
	cmd.Flags().IntVar(&reps, "reps", 7, "timed pairs per shape (median reported)")
	cmd.Flags().DurationVar(&slice, "slice", 30*time.Millisecond, "length of each timed slice")
	cmd.Flags().IntVar(&mib, "stream-mib", kernbench.DefaultStreamBytes>>20, "buffer for the DRAM read and GEMV rates, MiB (0: skip them)")
	cmd.Flags().BoolVar(&noPeer, "no-peer", false, "skip the numpy/OpenBLAS peer")
	return cmd
}
