package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/examples"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/metrics/promtrain"
	"github.com/longhaul-rl/longhaul/runner"
	"github.com/longhaul-rl/longhaul/testkit/crashtest"
)

func newTrainCmd() *cobra.Command {
	var (
		cfgPath  string
		runDir   string
		allow    []string
		logLevel string
		noBar    bool
		// progress and metrics
		progressEvery time.Duration
		metricsAddr   string
		cpuProfile    string
		tracePath     string
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
				runDir = cfg.Store.RunDir
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
			logOut := cmd.ErrOrStderr()
			tr := newTracker(int64(cfg.Run.MaxSteps), time.Now)
			var disp *display
			if tty {
				disp = newBars(tr, out)
				logOut = disp.p // log lines print above the bars
				lvl = max(lvl, slog.LevelWarn)
			} else {
				disp = newPlain(tr, cmd.ErrOrStderr(), progressEvery)
			}
			log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: lvl}))
			fmt.Fprintf(cmd.ErrOrStderr(), "longhaul: config %s, run directory %s\n", name, runDir)
			crash, err := crashtest.CrashHook(os.Getenv(crashtest.EnvCrashAt))
			if err != nil {
				return err
			}
			trace, err := crashtest.GenTrace(os.Getenv(crashtest.EnvGenTrace))
			if err != nil {
				return err
			}
			opts := runner.Options{RunDir: runDir, Logger: log, AllowChange: allow, Crash: crash, WrapGenerator: trace,
				Progress: disp.progress, WarmStartProgress: disp.warmStart, Live: tr.setLive,
				FromRun: cfgPath == "", Overrides: args}
			if metricsAddr != "" {
				obs := promtrain.New(cfg.Run.MaxSteps)
				bound, stop, err := promtrain.Serve(cmd.Context(), metricsAddr, obs.Handler())
				if err != nil {
					return err
				}
				defer stop()
				opts.Observe = obs
				fmt.Fprintf(cmd.ErrOrStderr(), "longhaul: Prometheus metrics at http://%s/metrics\n", bound)
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			if tracePath != "" {
				stop, err := startTrace(tracePath)
				if err != nil {
					return err
				}
				defer stop()
			}
			err = runner.Train(cmd.Context(), cfg, opts)
			disp.stop(err != nil)
			reached := tr.step
			if err != nil && interrupted(cmd.Context()) {
				// A stop on request is not a failure: the log is closed
				// (fsynced appends, deferred closes done), so say how to go on.
				fmt.Fprintf(cmd.ErrOrStderr(), "longhaul: stopped after step %d of %d; resume with:\n  %s\n",
					reached, cfg.Run.MaxSteps, resumeCommand(cfgPath, runDir, allow, args))
				return nil
			}
			if err != nil {
				return err
			}
			local, err := runner.LocalDir(cfg, runDir)
			if err != nil {
				return err
			}
			return summarize(out, local)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "config file (default: the embedded examples/ledger.yaml)")
	cmd.Flags().StringVar(&runDir, "run-dir", "", "run directory, a local path or s3://BUCKET/PREFIX (docs/storage.md); an existing one is resumed (default: store.run_dir, else runs/<config>-<time>)")
	cmd.Flags().StringSliceVar(&allow, "allow-config-change", nil, "config keys that may differ from the run directory's config on resume (e.g. run.max_steps)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().BoolVar(&noBar, "no-progress", false, "plain progress lines (every --progress-every) instead of bars, even on a terminal")
	cmd.Flags().DurationVar(&progressEvery, "progress-every", 10*time.Second, "interval of the plain progress lines (pipes, --no-progress)")
	cmd.Flags().StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile of the run to this file (go tool pprof reads it)")
	cmd.Flags().StringVar(&tracePath, "trace", "", "write the runtime's execution trace of the run to this file (go tool trace reads it)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at HOST:PORT/metrics (\":9464\" binds to 127.0.0.1; off when empty)")
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

// resumeCommand is the command line that resumes the run in runDir.
func resumeCommand(cfgPath, runDir string, allow, overrides []string) string {
	parts := []string{"longhaul", "train"}
	if cfgPath != "" {
		parts = append(parts, "--config", shellQuote(cfgPath))
	}
	parts = append(parts, "--run-dir", shellQuote(runDir))
	if len(allow) > 0 {
		parts = append(parts, "--allow-config-change", shellQuote(strings.Join(allow, ",")))
	}
	for _, o := range overrides {
		parts = append(parts, shellQuote(o))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '=' || r == ',' || r == ':' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
