// Command longhaul is the CLI of the longhaul RL post-training system.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "longhaul:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "longhaul",
		Short:         "RL post-training for long-horizon agents whose context is compacted, that loses nothing to a crash",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTrainCmd(), newInspectCmd(), newServeCmd(), newServeTrainerCmd(), newBenchCmd(), newPlotCmd(), newInitModelCmd())
	return root
}
