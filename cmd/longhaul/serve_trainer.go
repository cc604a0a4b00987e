package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/internal/allowpath"
	"github.com/longhaul-rl/longhaul/runner"
	"github.com/longhaul-rl/longhaul/train/remote"
)

func newServeTrainerCmd() *cobra.Command {
	var (
		host, apiKey, checkpoint, cfgPath string
		allowPaths                        []string
		port                              int
		maxBody                           int64
	)
	cmd := &cobra.Command{
		Use:   "serve-trainer [--config FILE] [--checkpoint DIR] [key=value ...]",
		Short: "serve the embedded trainer over the trainer protocol (docs/serving.md)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if apiKey == "" {
				apiKey = os.Getenv("LONGHAUL_API_KEY")
			}
			cfg, _, err := loadConfig(cfgPath, args)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			t, err := runner.EmbeddedTrainer(cmd.Context(), cfg, checkpoint, log)
			if err != nil {
				return err
			}
			allow, err := allowpath.New(allowPaths)
			if err != nil {
				return err
			}
			h := remote.NewHandler(runner.NewWarmTrainer(t, runner.OptimConfig(cfg)), remote.HandlerOptions{APIKey: apiKey, MaxBodyBytes: maxBody, Logger: log, AllowPaths: &allow})
			if err := listenAndServe(cmd.Context(), log, net.JoinHostPort(host, strconv.Itoa(port)), h); err != nil {
				return fmt.Errorf("serve-trainer: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&host, "host", "127.0.0.1", "address to bind")
	f.IntVar(&port, "port", 8001, "port to bind (0 picks a free one)")
	f.StringVar(&apiKey, "api-key", "", "require this bearer token (default $LONGHAUL_API_KEY)")
	f.StringVar(&cfgPath, "config", "", "config whose model, optim, loss and warmstart sections the trainer uses (default: the embedded example)")
	f.StringSliceVar(&allowPaths, "allow-path", nil, "directory checkpoints and weight exports may be written to or read from (repeatable; default: the working directory)")
	f.StringVar(&checkpoint, "checkpoint", "", "checkpoint directory to resume from")
	f.Int64Var(&maxBody, "max-body-bytes", 1<<30, "largest train_step payload accepted (413 beyond)")
	return cmd
}
