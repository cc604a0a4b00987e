package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/examples"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runner"
)

// summariesOptions are the flags of `longhaul bench summaries`.
type summariesOptions struct {
	config     string
	out        string
	conditions string
	seeds      int
	firstSeed  uint64
	jobs       int
	window     int
	plot       bool
	overrides  []string
	// bin and env run the children: this binary (tests: the test binary
	// playing it) and extra environment.
	bin string
	env []string
}

func newBenchSummariesCmd() *cobra.Command {
	var o summariesOptions
	cmd := &cobra.Command{
		Use:   "summaries [--config FILE] [--seeds N] [--out DIR] [--jobs J] [--conditions a,b,...] [key=value ...]",
		Short: "the summary study: recency, untrained, trained and separately weighted summaries, and no compaction, over seeds",
		Long: `Summaries runs the compaction study of docs/results.md: the config
(default: the embedded examples/recall.yaml) under five conditions at equal
steps, (a) to (d) at its context budget:

  a-recency   recency compaction, no summary
  b-masked    the policy's summaries, their tokens out of the loss
  c-rollout   summaries trained with the rollout's advantage
  d-separate  summaries trained with FoldAct's separated loss weight
  e-full      no compaction, a 128-token context (upper bound)

each for --seeds seeds (run.seed = first-seed, first-seed+1, ...). Every run
is a child process "longhaul train" in OUT/<condition>/seed<k> (its log
beside it), so a run only depends on the config; an interrupted study
resumes its runs, and finished runs are not run again. key=value arguments
override the config in every run (e.g. run.max_steps=30 for a short study).
It then writes OUT/summary.md and OUT/summary.json (success of the first and
last --window steps per condition, mean and 95% t interval over seeds;
paired differences), one mean learning curve per condition in
OUT/curves/<condition>/metrics.jsonl and their overlay OUT/compare.png (the
same as longhaul plot --compare OUT/curves/*).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.overrides = args
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			o.bin = bin
			return runSummaries(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "base config (default: the embedded examples/recall.yaml)")
	f.StringVar(&o.out, "out", "runs/summaries", "study directory")
	f.StringVar(&o.conditions, "conditions", "", "comma-separated conditions to run (names or letters; default all)")
	f.IntVar(&o.seeds, "seeds", 3, "seeds per condition")
	f.Uint64Var(&o.firstSeed, "first-seed", 1, "run.seed of the first seed")
	f.IntVar(&o.jobs, "jobs", 1, "runs at once (results do not depend on it: runs are deterministic)")
	f.IntVar(&o.window, "window", 10, "steps averaged for the start and final success")
	f.BoolVar(&o.plot, "plot", true, "draw OUT/compare.png")
	return cmd
}

// studyRun is one run of the study.
type studyRun struct {
	cond     condition
	seed     uint64
	dir      string
	args     []string
	maxSteps int
}

func runSummaries(ctx context.Context, o summariesOptions, out, logw io.Writer) error {
	if o.seeds < 1 || o.jobs < 1 || o.window < 1 {
		return fmt.Errorf("--seeds, --jobs and --window must be ≥ 1")
	}
	conds, err := pickConditions(o.conditions)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	cfgPath, err := studyConfig(o)
	if err != nil {
		return err
	}
	var runs []studyRun
	for _, c := range conds {
		for k := range o.seeds {
			seed := o.firstSeed + uint64(k)
			ov := append(append([]string{fmt.Sprintf("run.seed=%d", seed)}, c.Overrides...), o.overrides...)
			cfg, _, err := loadConfig(cfgPath, ov)
			if err != nil {
				return fmt.Errorf("condition %s: %w", c.Name, err)
			}
			dir := filepath.Join(o.out, c.Name, fmt.Sprintf("seed%d", seed))
			args := append([]string{"train", "--config", cfgPath, "--run-dir", dir, "--no-progress", "--progress-every", "60s"}, ov...)
			runs = append(runs, studyRun{cond: c, seed: seed, dir: dir, args: args, maxSteps: cfg.Run.MaxSteps})
		}
	}
	results, err := runAll(ctx, o, runs, logw)
	if err != nil {
		return err
	}
	return report(o, conds, runs, results, out)
}

// studyConfig returns the base config's path: --config, or the embedded
// example written into the study directory (the runs read a file).
func studyConfig(o summariesOptions) (string, error) {
	if o.config != "" {
		return filepath.Abs(o.config)
	}
	path := filepath.Join(o.out, "recall.yaml")
	if old, err := os.ReadFile(path); err == nil {
		if !bytes.Equal(old, examples.Recall) {
			return "", fmt.Errorf("%s differs from the embedded examples/recall.yaml: a study of another config lives in %s; use another --out, or --config %s", path, o.out, path)
		}
		return filepath.Abs(path)
	}
	if err := os.WriteFile(path, examples.Recall, 0o644); err != nil {
		return "", err
	}
	return filepath.Abs(path)
}

// runAll runs every unfinished run, jobs at a time, and returns their
// costs by run directory (read back from the cost file of runs finished
// earlier).
func runAll(ctx context.Context, o summariesOptions, runs []studyRun, logw io.Writer) (map[string]runCost, error) {
	logw = &lockedWriter{w: logw} // the workers' progress lines
	var (
		mu    sync.Mutex
		costs = map[string]runCost{}
		errs  []error
		wg    sync.WaitGroup
		queue = make(chan studyRun)
	)
	for range o.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range queue {
				c, err := runOne(ctx, o, r, logw)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					costs[r.dir] = c
				}
				mu.Unlock()
			}
		}()
	}
	for _, r := range runs {
		select {
		case queue <- r:
		case <-ctx.Done():
		}
	}
	close(queue)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("study interrupted (run it again to resume): %w", err)
	}
	return costs, errors.Join(errs...)
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// runCost is a run's cost, kept beside it as <dir>.cost.json.
type runCost struct {
	CPUS  float64 `json:"cpu_s"`
	WallS float64 `json:"wall_s"`
}

// runOne runs r to the end unless its metrics already reach max_steps.
func runOne(ctx context.Context, o summariesOptions, r studyRun, logw io.Writer) (runCost, error) {
	costPath := r.dir + ".cost.json"
	if steps, err := metrics.Read(filepath.Join(r.dir, runner.MetricsFile)); err == nil && len(steps) > 0 &&
		steps[len(steps)-1].Step >= int64(r.maxSteps) {
		var c runCost
		if b, err := os.ReadFile(costPath); err == nil {
			_ = json.Unmarshal(b, &c) // a missing or bad cost file counts 0
		}
		fmt.Fprintf(logw, "bench summaries: %s seed %d: done before, skipped\n", r.cond.Name, r.seed)
		return c, nil
	}
	if err := os.MkdirAll(filepath.Dir(r.dir), 0o755); err != nil {
		return runCost{}, err
	}
	log, err := os.OpenFile(r.dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return runCost{}, err
	}
	defer log.Close()
	fmt.Fprintf(logw, "bench summaries: %s seed %d: %s %s\n", r.cond.Name, r.seed, o.bin, strings.Join(r.args, " "))
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, o.bin, r.args...)
	cmd.Stdout, cmd.Stderr = log, log
	if o.env != nil {
		cmd.Env = append(os.Environ(), o.env...)
	}
	if err := cmd.Run(); err != nil {
		return runCost{}, fmt.Errorf("%s seed %d: %w (log: %s.log)", r.cond.Name, r.seed, err, r.dir)
	}
	c := runCost{CPUS: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds(), WallS: time.Since(t0).Seconds()}
	if b, err := json.Marshal(c); err == nil {
		_ = os.WriteFile(costPath, b, 0o644) // the cost is a report, not a result
	}
	fmt.Fprintf(logw, "bench summaries: %s seed %d: done in %.0f s (%.0f CPU-s)\n", r.cond.Name, r.seed, c.WallS, c.CPUS)
	return c, nil
}

// report reads every run's metrics and writes the study's outputs.
func report(o summariesOptions, conds []condition, runs []studyRun, costs map[string]runCost, out io.Writer) error {
	var results []runResult
	curves := map[string][][]metrics.Step{}
	for _, r := range runs {
		steps, err := metrics.Read(filepath.Join(r.dir, runner.MetricsFile))
		if err != nil {
			return fmt.Errorf("%s seed %d: %w", r.cond.Name, r.seed, err)
		}
		start, final, rew := summarizeRun(steps, o.window)
		c := costs[r.dir]
		results = append(results, runResult{Condition: r.cond.Name, Seed: r.seed, Steps: len(steps), Start: start, Final: final,
			FinalRew: rew, CPUS: c.CPUS, WallS: c.WallS})
		curves[r.cond.Name] = append(curves[r.cond.Name], steps)
	}
	rep := analyse(conds, results, o.window)
	var md bytes.Buffer
	rep.writeMarkdown(&md)
	if err := os.WriteFile(filepath.Join(o.out, "summary.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "summary.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var plotRuns []metrics.Run
	for _, c := range conds {
		mean := meanCurve(curves[c.Name])
		dir := filepath.Join(o.out, "curves", c.Name)
		if err := writeCurve(dir, mean); err != nil {
			return err
		}
		plotRuns = append(plotRuns, metrics.Run{Name: c.Name, Steps: mean})
	}
	png := filepath.Join(o.out, "compare.png")
	if !o.plot {
		png = "(no plot)"
	} else if err := metrics.Compare(plotRuns, png); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\nwritten: %s, %s, %s\n", md.Bytes(), filepath.Join(o.out, "summary.md"),
		filepath.Join(o.out, "summary.json"), png)
	return err
}

// writeCurve writes steps as dir/metrics.jsonl, replacing an older one.
func writeCurve(dir string, steps []metrics.Step) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, runner.MetricsFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	w, err := metrics.Create(path)
	if err != nil {
		return err
	}
	for _, s := range steps {
		if err := w.Write(s); err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}
