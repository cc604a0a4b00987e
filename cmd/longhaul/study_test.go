package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/race"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runner"
)

// cliChildEnv makes the test binary run the longhaul CLI (TestMain);
// fakeTrainEnv makes it a fake `longhaul train` (fakeTrain).
const (
	cliChildEnv  = "LONGHAUL_CLI_CHILD"
	fakeTrainEnv = "LONGHAUL_FAKE_TRAIN"
)

// fakeTrain is a stand-in for `longhaul train --run-dir DIR ...
// run.seed=K`: it trains nothing and writes two metrics rows whose success
// is 0.1·K, so that the bench's process handling, skipping and report run
// in milliseconds (and under -race, where real children take minutes).
func fakeTrain(args []string) {
	var dir string
	var seed float64
	for i, a := range args {
		if a == "--run-dir" && i+1 < len(args) {
			dir = args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "run.seed="); ok {
			fmt.Sscan(v, &seed)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		panic(err)
	}
	w, err := metrics.Create(filepath.Join(dir, runner.MetricsFile))
	if err != nil {
		panic(err)
	}
	for step := int64(1); step <= 2; step++ {
		if err := w.Write(metrics.Step{Step: step, SuccessRate: seed / 10}); err != nil {
			panic(err)
		}
	}
	w.Close()
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestMeanCI checks the interval against a hand computation: 3 values,
// sd 0.1, t(0.975, 2) = 4.303.
func TestMeanCI(t *testing.T) {
	iv := meanCI([]float64{0.4, 0.5, 0.6})
	if !near(iv.Mean, 0.5) || !near(iv.Half, 4.303*0.1/math.Sqrt(3)) || iv.N != 3 {
		t.Fatalf("%+v", iv)
	}
	if iv := meanCI([]float64{0.7}); !near(iv.Mean, 0.7) || !math.IsNaN(iv.Half) {
		t.Fatalf("one value: %+v", iv)
	}
	if got := iv.String(); got != "50.0 ± 24.8" {
		t.Fatalf("String() = %q", got)
	}
	if b, err := json.Marshal(meanCI([]float64{0.7})); err != nil || string(b) != `{"mean":0.7,"half_width":null,"n":1}` {
		t.Fatalf("JSON of one value: %s, %v", b, err)
	}
	if t975(100) != 1.960 || t975(1) != 12.706 {
		t.Fatal("t quantiles")
	}
}

func steps(success ...float64) []metrics.Step {
	out := make([]metrics.Step, len(success))
	for i, s := range success {
		out[i] = metrics.Step{Step: int64(i + 1), SuccessRate: s, RewardMean: s / 2}
	}
	return out
}

// TestAnalyse checks the per-run windows, the per-condition intervals,
// the paired differences (only seeds run in both arms) and the gap closed.
func TestAnalyse(t *testing.T) {
	start, final, rew := summarizeRun(steps(0.1, 0.2, 0.5, 0.9, 1.0), 2)
	if !near(start, 0.15) || !near(final, 0.95) || !near(rew, 0.475) {
		t.Fatalf("window: %v %v %v", start, final, rew)
	}
	if s, _, _ := summarizeRun(steps(0.3), 10); !near(s, 0.3) {
		t.Fatalf("short run: %v", s)
	}
	runs := []runResult{
		{Condition: "a-recency", Seed: 1, Final: 0}, {Condition: "a-recency", Seed: 2, Final: 0},
		{Condition: "b-masked", Seed: 1, Final: 0.3}, {Condition: "b-masked", Seed: 2, Final: 0.4},
		{Condition: "c-rollout", Seed: 1, Final: 0.8}, {Condition: "c-rollout", Seed: 2, Final: 0.7},
		{Condition: "c-rollout", Seed: 3, Final: 0.9, CPUS: 5},
		{Condition: "e-full", Seed: 1, Final: 1}, {Condition: "e-full", Seed: 2, Final: 1},
	}
	r := analyse(studyConditions, runs, 10)
	if f := r.Final["c-rollout"]; !near(f.Mean, 0.8) || f.N != 3 {
		t.Fatalf("c final %+v", f)
	}
	// Seeds 1 and 2 in both: differences 0.5 and 0.3.
	if d := r.Paired["c-rollout - b-masked"]; !near(d.Mean, 0.4) || d.N != 2 {
		t.Fatalf("paired %+v", d)
	}
	if g := r.GapClosed["c-rollout"]; !near(g, 0.8) {
		t.Fatalf("gap closed %v", g)
	}
	if r.Final["d-separate"].N != 0 || r.CPUS != 5 {
		t.Fatalf("d %+v, cpu %v", r.Final["d-separate"], r.CPUS)
	}
	var md bytes.Buffer
	r.writeMarkdown(&md)
	for _, want := range []string{"| c-rollout: ", "**80.0 ± ", "| 80% |", "- c-rollout - b-masked: 40.0 ± "} {
		if !strings.Contains(md.String(), want) {
			t.Fatalf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

func TestPickConditionsAndMeanCurve(t *testing.T) {
	cs, err := pickConditions("c, a-recency,e")
	if err != nil || len(cs) != 3 || cs[0].Name != "c-rollout" || cs[1].Name != "a-recency" || cs[2].Name != "e-full" {
		t.Fatalf("%v %v", cs, err)
	}
	if _, err := pickConditions("c,zz"); err == nil || !strings.Contains(err.Error(), `"zz"`) {
		t.Fatalf("err %v", err)
	}
	m := meanCurve([][]metrics.Step{steps(0, 0.5, 1), steps(1, 0.5)})
	if len(m) != 2 || !near(m[0].SuccessRate, 0.5) || !near(m[1].RewardMean, 0.25) || m[1].Step != 2 {
		t.Fatalf("%+v", m)
	}
}

// TestBenchSummaries runs a tiny study end to end: every run is a real
// `longhaul train` child (the test binary playing the CLI), and the report
// is built from their metrics files. A second invocation finds every run
// done and runs nothing.
func TestBenchSummaries(t *testing.T) {
	if testing.Short() || race.Enabled {
		t.Skip("runs training processes (minutes under -race; TestBenchProcesses covers the bench's concurrency there)")
	}
	dir := t.TempDir()
	o := summariesOptions{out: filepath.Join(dir, "study"), conditions: "a,b,e", seeds: 2, firstSeed: 1, jobs: 2, window: 2, plot: true,
		bin: os.Args[0], env: []string{cliChildEnv + "=1"},
		overrides: []string{"run.max_steps=2", "optim.warmup_steps=0", "warmstart.steps=2", "warmstart.batch_size=2", "grpo.num_prompts_per_step=2",
			"grpo.num_generations_per_prompt=2", "model.dim=16", "model.hidden=32", "model.heads=2", "model.layers=1"}}
	var out, logs bytes.Buffer
	if err := runSummaries(context.Background(), o, &out, &logs); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	var rep studyReport
	b, err := os.ReadFile(filepath.Join(o.out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 6 || len(rep.Conditions) != 3 || rep.Final["b-masked"].N != 2 || rep.CPUS <= 0 {
		t.Fatalf("report: %d runs, %d conditions, %+v, cpu %v", len(rep.Runs), len(rep.Conditions), rep.Final, rep.CPUS)
	}
	for _, r := range rep.Runs {
		if r.Steps != 2 {
			t.Fatalf("run %s seed %d has %d steps", r.Condition, r.Seed, r.Steps)
		}
	}
	// The arms differ as configured: recency compacts without summaries,
	// e-full never compacts.
	for cond, want := range map[string]func(float64) bool{
		"a-recency": func(c float64) bool { return c > 0 }, "e-full": func(c float64) bool { return c == 0 },
	} {
		st, err := metrics.Read(filepath.Join(o.out, cond, "seed1", runner.MetricsFile))
		if err != nil || !want(st[0].CompactionsPerRollout) {
			t.Fatalf("%s: compactions %v, %v", cond, st, err)
		}
	}
	for _, f := range []string{"summary.md", "compare.png", "curves/b-masked/metrics.jsonl"} {
		if _, err := os.Stat(filepath.Join(o.out, f)); err != nil {
			t.Fatal(err)
		}
	}
	logs.Reset()
	if err := runSummaries(context.Background(), o, &out, &logs); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "done before, skipped"); n != 6 {
		t.Fatalf("second run skipped %d of 6:\n%s", n, logs.String())
	}
}

// TestBenchProcesses runs the bench's process handling with a fake train
// child (fakeTrain: no training, two metrics rows) and no plot (drawing it
// takes 20 s under -race; TestBenchSummaries draws one): runs at once,
// their logs and costs, the report from their metrics files, and a second
// invocation that runs nothing. It is the -race check of the workers.
func TestBenchProcesses(t *testing.T) {
	o := summariesOptions{out: filepath.Join(t.TempDir(), "study"), conditions: "b,c", seeds: 2, firstSeed: 3, jobs: 3, window: 1,
		bin: os.Args[0], env: []string{fakeTrainEnv + "=1"}, overrides: []string{"run.max_steps=2", "optim.warmup_steps=0"}}
	var out, logs bytes.Buffer
	if err := runSummaries(context.Background(), o, &out, &logs); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	if n := strings.Count(logs.String(), ": done in "); n != 4 {
		t.Fatalf("%d runs done, want 4:\n%s", n, logs.String())
	}
	b, err := os.ReadFile(filepath.Join(o.out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep studyReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	// Seeds 3 and 4: final success 0.3 and 0.4 in every condition.
	if f := rep.Final["b-masked"]; !near(f.Mean, 0.35) || f.N != 2 {
		t.Fatalf("b-masked %+v", f)
	}
	if d := rep.Paired["c-rollout - b-masked"]; !near(d.Mean, 0) || d.N != 2 {
		t.Fatalf("paired %+v", d)
	}
	for _, r := range rep.Runs {
		if r.WallS <= 0 {
			t.Fatalf("run %s seed %d: no cost recorded", r.Condition, r.Seed)
		}
	}
	logs.Reset()
	if err := runSummaries(context.Background(), o, &out, &logs); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "done before, skipped"); n != 4 {
		t.Fatalf("second invocation skipped %d of 4:\n%s", n, logs.String())
	}
	// A run that stopped short is run again (train resumes its directory).
	short := filepath.Join(o.out, "b-masked", "seed3", runner.MetricsFile)
	if err := os.WriteFile(short, []byte(`{"step":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	if err := runSummaries(context.Background(), o, &out, &logs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "b-masked seed 3: done in") || strings.Count(logs.String(), "done before, skipped") != 3 {
		t.Fatalf("the short run was not run again:\n%s", logs.String())
	}
}
