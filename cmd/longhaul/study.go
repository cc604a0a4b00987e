package main

// The summary study's analysis: per run the success rate at the start and
// at the end of RL from its metrics.jsonl, per condition the mean over
// seeds with a 95% Student-t interval, paired differences between
// conditions (the same seed is the same warm start and the same tasks),
// and a Markdown table. `longhaul bench summaries` (bench_summaries.go)
// runs the conditions and calls this.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/longhaul-rl/longhaul/metrics"
)

// condition is one arm of the study: a name and the config overrides that
// make it from the base config.
type condition struct {
	Name      string   `json:"name"`
	What      string   `json:"what"`
	Overrides []string `json:"overrides"`
}

// studyConditions are the five arms of docs/results.md: equal context
// budget (the base config's) for (a) to (d), equal steps for all.
var studyConditions = []condition{
	{"a-recency", "recency compaction, no summary (head and pending observation kept)",
		[]string{"compaction.policy=recency", "compaction.keep_last_turns=0"}},
	{"b-masked", "the policy's summaries, their tokens out of the loss (untrained summarizer)",
		[]string{"grpo.summary_credit=masked"}},
	{"c-rollout", "the policy's summaries trained with the rollout's advantage",
		[]string{"grpo.summary_credit=rollout"}},
	{"d-separate", "the policy's summaries trained with FoldAct's separated loss weight",
		[]string{"grpo.summary_credit=separate"}},
	{"e-full", "no compaction, a context that holds the whole episode (upper bound)",
		[]string{"compaction.enabled=false", "rollout.context_budget=128"}},
}

// runResult is one run's figures.
type runResult struct {
	Condition string  `json:"condition"`
	Seed      uint64  `json:"seed"`
	Steps     int     `json:"steps"`
	Start     float64 `json:"start_success"` // mean success of the first window steps (the warm start's policy)
	Final     float64 `json:"final_success"` // mean success of the last window steps
	FinalRew  float64 `json:"final_reward"`
	CPUS      float64 `json:"cpu_s"`  // user + system CPU seconds of the run's process (0 if not run by this invocation and not recorded)
	WallS     float64 `json:"wall_s"` // its wall-clock seconds
}

// summarizeRun reads a run's steps: the success of the first and last
// window steps (the whole run if shorter).
func summarizeRun(steps []metrics.Step, window int) (start, final, finalRew float64) {
	if len(steps) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	w := min(window, len(steps))
	for _, s := range steps[:w] {
		start += s.SuccessRate
	}
	for _, s := range steps[len(steps)-w:] {
		final += s.SuccessRate
		finalRew += s.RewardMean
	}
	return start / float64(w), final / float64(w), finalRew / float64(w)
}

// interval is a mean with its 95% Student-t half-width over n values.
type interval struct {
	Mean float64 `json:"mean"`
	Half float64 `json:"half_width"` // NaN when n < 2
	N    int     `json:"n"`
}

// MarshalJSON writes an undefined half-width (one value) as null: JSON
// has no NaN.
func (iv interval) MarshalJSON() ([]byte, error) {
	num := func(x float64) any {
		if math.IsNaN(x) {
			return nil
		}
		return x
	}
	return json.Marshal(struct {
		Mean any `json:"mean"`
		Half any `json:"half_width"`
		N    int `json:"n"`
	}{num(iv.Mean), num(iv.Half), iv.N})
}

func (iv interval) String() string {
	if math.IsNaN(iv.Half) {
		return fmt.Sprintf("%.1f", 100*iv.Mean)
	}
	return fmt.Sprintf("%.1f ± %.1f", 100*iv.Mean, 100*iv.Half)
}

// t975 is the 0.975 quantile of Student's t with df degrees of freedom
// (df 1..30; the normal quantile beyond).
func t975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df >= 1 && df <= len(table) {
		return table[df-1]
	}
	return 1.960
}

// meanCI is the mean of xs and its 95% t interval.
func meanCI(xs []float64) interval {
	n := len(xs)
	if n == 0 {
		return interval{Mean: math.NaN(), Half: math.NaN()}
	}
	var m float64
	for _, x := range xs {
		m += x
	}
	m /= float64(n)
	if n < 2 {
		return interval{Mean: m, Half: math.NaN(), N: n}
	}
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	sd := math.Sqrt(ss / float64(n-1))
	return interval{Mean: m, Half: t975(n-1) * sd / math.Sqrt(float64(n)), N: n}
}

// studyReport is what the bench writes to summary.json.
type studyReport struct {
	Conditions []condition         `json:"conditions"`
	Runs       []runResult         `json:"runs"`
	Start      map[string]interval `json:"start_success"`
	Final      map[string]interval `json:"final_success"`
	Paired     map[string]interval `json:"paired_final_difference"` // "c-rollout - b-masked" etc., over seeds run in both
	GapClosed  map[string]float64  `json:"gap_closed"`              // (x - a) / (e - a) of the means, for the summary arms
	CPUS       float64             `json:"cpu_s"`
	WallS      float64             `json:"wall_s"`
	Window     int                 `json:"window"`
	perSeed    map[string]map[uint64]float64
}

// analyse aggregates runs by condition.
func analyse(conds []condition, runs []runResult, window int) studyReport {
	r := studyReport{Conditions: conds, Runs: runs, Window: window, Start: map[string]interval{}, Final: map[string]interval{},
		Paired: map[string]interval{}, GapClosed: map[string]float64{}, perSeed: map[string]map[uint64]float64{}}
	for _, c := range conds {
		var st, fi []float64
		r.perSeed[c.Name] = map[uint64]float64{}
		for _, x := range runs {
			if x.Condition == c.Name && !math.IsNaN(x.Final) {
				st, fi = append(st, x.Start), append(fi, x.Final)
				r.perSeed[c.Name][x.Seed] = x.Final
			}
		}
		r.Start[c.Name], r.Final[c.Name] = meanCI(st), meanCI(fi)
	}
	for _, x := range runs {
		r.CPUS += x.CPUS
		r.WallS += x.WallS
	}
	pairs := [][2]string{{"c-rollout", "b-masked"}, {"d-separate", "b-masked"}, {"d-separate", "c-rollout"}, {"c-rollout", "a-recency"}}
	for _, p := range pairs {
		var d []float64
		for seed, x := range r.perSeed[p[0]] {
			if y, ok := r.perSeed[p[1]][seed]; ok {
				d = append(d, x-y)
			}
		}
		if len(d) > 0 {
			r.Paired[p[0]+" - "+p[1]] = meanCI(d)
		}
	}
	a, e := r.Final["a-recency"], r.Final["e-full"]
	if a.N > 0 && e.N > 0 && e.Mean != a.Mean {
		for _, name := range []string{"b-masked", "c-rollout", "d-separate"} {
			if x := r.Final[name]; x.N > 0 {
				r.GapClosed[name] = (x.Mean - a.Mean) / (e.Mean - a.Mean)
			}
		}
	}
	return r
}

// writeMarkdown prints the study's table.
func (r studyReport) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "| condition | seeds | success, first %d steps (%%) | success, last %d steps (%%) | gap (a)→(e) closed |\n", r.Window, r.Window)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for _, c := range r.Conditions {
		gap := ""
		if g, ok := r.GapClosed[c.Name]; ok {
			gap = fmt.Sprintf("%.0f%%", 100*g)
		}
		fmt.Fprintf(w, "| %s: %s | %d | %s | **%s** | %s |\n", c.Name, c.What, r.Final[c.Name].N, r.Start[c.Name], r.Final[c.Name], gap)
	}
	keys := make([]string, 0, len(r.Paired))
	for k := range r.Paired {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > 0 {
		fmt.Fprintln(w, "\nPaired differences of final success over seeds (same seed: same warm start, same tasks), points with 95% t intervals:")
		fmt.Fprintln(w)
		for _, k := range keys {
			fmt.Fprintf(w, "- %s: %s\n", k, r.Paired[k])
		}
	}
	fmt.Fprintf(w, "\nCost: %.0f CPU-seconds (%.1f CPU-minutes) over %d runs, %.0f s of wall clock summed over runs.\n",
		r.CPUS, r.CPUS/60, len(r.Runs), r.WallS)
}

// meanCurve averages the runs' steps step by step (the steps all runs
// have), so that `longhaul plot --compare` overlays one curve per
// condition.
func meanCurve(runs [][]metrics.Step) []metrics.Step {
	n := math.MaxInt
	for _, r := range runs {
		n = min(n, len(r))
	}
	if len(runs) == 0 || n == 0 {
		return nil
	}
	out := make([]metrics.Step, n)
	k := float64(len(runs))
	for i := range out {
		o := &out[i]
		o.Step = runs[0][i].Step
		for _, r := range runs {
			s := r[i]
			o.SuccessRate += s.SuccessRate / k
			o.RewardMean += s.RewardMean / k
			o.Loss += s.Loss / k
			o.GradNorm += s.GradNorm / k
			o.Entropy += s.Entropy / k
			o.KLSampler += s.KLSampler / k
			o.KLRef += s.KLRef / k
			o.CompactionsPerRollout += s.CompactionsPerRollout / k
			o.SegmentsPerRollout += s.SegmentsPerRollout / k
			o.GenTokensPerSecond += s.GenTokensPerSecond / k
			o.ClipLowFrac += s.ClipLowFrac / k
			o.ClipHighFrac += s.ClipHighFrac / k
			o.LogprobAbsDiff += s.LogprobAbsDiff / k
			o.ElapsedSeconds += s.ElapsedSeconds / k
		}
	}
	return out
}

// pickConditions returns the conditions named in list (comma-separated;
// empty: all), by full name or by letter.
func pickConditions(list string) ([]condition, error) {
	if strings.TrimSpace(list) == "" {
		return studyConditions, nil
	}
	var out []condition
	for _, want := range strings.Split(list, ",") {
		want = strings.TrimSpace(want)
		i := slices.IndexFunc(studyConditions, func(c condition) bool {
			return c.Name == want || strings.HasPrefix(c.Name, want+"-")
		})
		if i < 0 {
			names := make([]string, len(studyConditions))
			for j, c := range studyConditions {
				names[j] = c.Name
			}
			return nil, fmt.Errorf("--conditions: unknown condition %q (want some of %s)", want, strings.Join(names, ", "))
		}
		out = append(out, studyConditions[i])
	}
	return out, nil
}
