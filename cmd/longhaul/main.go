// Command longhaul is the CLI of the longhaul RL post-training system.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := interruptContext(context.Background(), os.Stderr)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "longhaul:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "longhaul",
		Short:         "RL post-training for long-horizon agents whose context is compacted, that loses nothing to a crash",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTrainCmd(), newInspectCmd(), newServeCmd(), newServeTrainerCmd(), newBenchCmd(), newPlotCmd(), newInitModelCmd())
	return root
}

// buildVersion is set at link time (-ldflags "-X main.buildVersion=v1.2.3");
// otherwise the module version go install recorded, or "devel".
var buildVersion string

func version() string {
	v := buildVersion
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		if v == "" {
			v = "devel"
		}
		return v + " (" + bi.GoVersion + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	}
	if v == "" {
		v = "devel"
	}
	return v
}
