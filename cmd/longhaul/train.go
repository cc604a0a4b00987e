package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/examples"
	"github.com/longhaul-rl/longhaul/internal/config"
	"github.com/longhaul-rl/longhaul/internal/crashtest"
	"github.com/longhaul-rl/longhaul/internal/metrics"
	"github.com/longhaul-rl/longhaul/internal/runner"
)

func newTrainCmd() *cobra.Command {
	var (
		cfgPath  string
		runDir   string
		allow    []string
		logLevel string
		noBar    bool
	)
	cmd := &cobra.Command{
		Use:   "train [--config FILE] [--run-dir DIR] [key=value ...]",
		Short: "run GRPO (default: the built-in ledger task on the embedded model, examples/ledger.yaml)",
		Long: `Train runs a GRPO run, or resumes the one in --run-dir.

Without --config a new run uses the shipped default example (examples/ledger.yaml):
the embedded model learns the ledger task, whose episodes outgrow the
context and need compaction. Arguments of the form key=value override
config keys (e.g. grpo.num_generations_per_prompt=8). An existing run
directory is resumed; its config must match unless --allow-config-change
names the keys that may differ. Resuming without --config uses the run's
own config (the one whose digest the run log holds), with any key=value
overrides; every allowed change is logged and shown by inspect.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, name, err := loadConfig(cfgPath, args)
			if err != nil {
				return err
			}
			if runDir == "" {
				runDir = filepath.Join("runs", strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))+"-"+time.Now().Format("20060102-150405"))
			}
			lvl := slog.LevelInfo
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			out := cmd.OutOrStdout()
			tty := isTerminal(os.Stdout) && !noBar
			var progress *mpb.Progress
			var bar *mpb.Bar
			var last metrics.Step
			var inFlight int
			logOut := cmd.ErrOrStderr()
			if tty {
				progress = mpb.New(mpb.WithOutput(out), mpb.WithWidth(40))
				bar = progress.AddBar(int64(cfg.Run.MaxSteps),
					mpb.PrependDecorators(decor.Name("step "), decor.CountersNoUnit("%d/%d")),
					mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
						return fmt.Sprintf("reward %.3f  success %.1f%%  compactions/rollout %.2f  in flight %d  gen %.0f tok/s",
							last.RewardMean, 100*last.SuccessRate, last.CompactionsPerRollout, inFlight, last.GenTokensPerSecond)
					})))
				logOut = progress // log lines print above the bar
				lvl = max(lvl, slog.LevelWarn)
			}
			log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: lvl}))
			fmt.Fprintf(cmd.ErrOrStderr(), "longhaul: config %s, run directory %s\n", name, runDir)
			crash, err := crashtest.CrashHook(os.Getenv(crashtest.EnvCrashAt))
			if err != nil {
				return err
			}
			opts := runner.Options{RunDir: runDir, Logger: log, AllowChange: allow, Crash: crash,
				FromRun: cfgPath == "", Overrides: args}
			if bar != nil {
				opts.OnConfig = func(c *config.Config) { bar.SetTotal(int64(c.Run.MaxSteps), false) }
			}
			if tty {
				opts.Progress = func(p controller.Progress) {
					last, inFlight = p.Metrics, p.InFlight
					bar.SetCurrent(p.Step)
				}
			}
			err = runner.Train(cmd.Context(), cfg, opts)
			if progress != nil {
				if err != nil {
					bar.Abort(false)
				}
				progress.Wait()
			}
			if err != nil {
				return err
			}
			return summarize(out, runDir)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "config file (default: the embedded examples/ledger.yaml)")
	cmd.Flags().StringVar(&runDir, "run-dir", "", "run directory; an existing one is resumed (default: runs/<config>-<time>)")
	cmd.Flags().StringSliceVar(&allow, "allow-config-change", nil, "config keys that may differ from the run directory's config on resume (e.g. run.max_steps)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().BoolVar(&noBar, "no-progress", false, "plain log lines even on a terminal")
	return cmd
}

// loadConfig reads the config (or the embedded default) and applies the
// key=value overrides, then validates.
func loadConfig(path string, overrides []string) (*config.Config, string, error) {
	var cfg *config.Config
	var err error
	name := path
	if path == "" {
		name = examples.DefaultName
		cfg, err = config.Parse(name, examples.Default)
	} else {
		cfg, err = config.Load(path)
	}
	if err != nil {
		return nil, name, err
	}
	for _, o := range overrides {
		if !strings.Contains(o, "=") {
			return nil, name, fmt.Errorf("argument %q: want key=value", o)
		}
	}
	if err := cfg.ApplyOverrides(overrides); err != nil {
		return nil, name, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, name, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, name, nil
}

func summarize(w interface{ Write([]byte) (int, error) }, runDir string) error {
	steps, err := metrics.Read(filepath.Join(runDir, runner.MetricsFile))
	if err != nil || len(steps) == 0 {
		return err
	}
	first, last := steps[0], steps[len(steps)-1]
	fmt.Fprintf(w, "done: %d steps in %.0fs; success rate %.1f%% -> %.1f%%, reward %.3f -> %.3f, compactions/rollout %.2f\n",
		last.Step, last.ElapsedSeconds, 100*first.SuccessRate, 100*last.SuccessRate, first.RewardMean, last.RewardMean, last.CompactionsPerRollout)
	fmt.Fprintf(w, "metrics: %s\ncurve:   %s\n", filepath.Join(runDir, runner.MetricsFile), filepath.Join(runDir, runner.CurveFile))
	return nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
