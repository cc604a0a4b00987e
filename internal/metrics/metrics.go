// Package metrics writes the per-step metrics.jsonl of a run and draws its
// learning curve.
package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Step is one line of metrics.jsonl. Logical counts (groups, rollouts) and
// physical counts (rows, tokens) are kept apart on purpose.
type Step struct {
	Step                  int64   `json:"step"`
	Version               int64   `json:"version"`
	RewardMean            float64 `json:"reward_mean"`
	RewardStd             float64 `json:"reward_std"`
	SuccessRate           float64 `json:"success_rate"`
	Groups                int     `json:"groups"`
	Rollouts              int     `json:"rollouts"`
	SegmentsPerRollout    float64 `json:"segments_per_rollout"`
	CompactionsPerRollout float64 `json:"compactions_per_rollout"`
	CompactedFraction     float64 `json:"compacted_fraction"` // rollouts with at least one compaction
	TurnsPerRollout       float64 `json:"turns_per_rollout"`
	Rows                  int     `json:"rows"`
	TrainTokens           int     `json:"train_tokens"`
	PaddingTokens         int     `json:"padding_tokens"`
	GeneratedTokens       int     `json:"generated_tokens"`
	PromptTokens          int     `json:"prompt_tokens"`
	Calls                 int     `json:"calls"`
	Loss                  float64 `json:"loss"`
	GradNorm              float64 `json:"grad_norm"`
	LR                    float64 `json:"lr"`
	ClipFrac              float64 `json:"clip_frac"`
	StalenessMean         float64 `json:"staleness_mean"` // trainer version minus generating version, averaged over calls
	StalenessMax          int64   `json:"staleness_max"`
	Regenerated           int     `json:"regenerated"`  // throughput mode: stale members generated again as new attempts
	Dropped               int     `json:"dropped"`      // groups of this step dropped (a member used up its attempts)
	Replaced              int     `json:"replaced"`     // groups of this step that are spares for dropped ones
	LateResults           int     `json:"late_results"` // results of fenced (older) attempts, discarded
	// Retried groups (rollout_failure.on_dropped_prompt: retry): how many
	// trained groups were retried, and the generated tokens per rollout of
	// retried, first-try and dropped groups. Recovered work is longer on
	// average (a member that failed ran longer); these show the bias.
	Recovered           int     `json:"recovered"`
	RecoveredTokensMean float64 `json:"recovered_tokens_mean"`
	FreshTokensMean     float64 `json:"fresh_tokens_mean"`
	DroppedTokensMean   float64 `json:"dropped_tokens_mean"`
	GenSeconds          float64 `json:"gen_s"`
	TrainSeconds        float64 `json:"train_s"`
	StepSeconds         float64 `json:"step_s"`
	ElapsedSeconds      float64 `json:"elapsed_s"`
	GenTokensPerSecond  float64 `json:"gen_tokens_per_s"`
}

// Writer appends steps to a metrics.jsonl file.
type Writer struct {
	f *os.File
}

// Create opens path for appending (a resumed run continues the file).
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &Writer{f: f}, nil
}

// Write appends one step as a JSON line.
func (w *Writer) Write(s Step) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if _, err := w.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// Read parses a metrics.jsonl file. When a resumed run wrote a step twice,
// the later line wins, so the result has one entry per step, in step order.
func Read(path string) ([]Step, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer f.Close()
	return parse(path, f)
}

func parse(name string, r io.Reader) ([]Step, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	byStep := map[int64]int{}
	var out []Step
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var s Step
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("metrics: %s:%d: %w", name, line, err)
		}
		if i, ok := byStep[s.Step]; ok {
			out[i] = s
			continue
		}
		byStep[s.Step] = len(out)
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: %s: %w", name, err)
	}
	// Steps are appended in order; a resume may rewrite a suffix, which the
	// map above folds back in place, so out stays ordered.
	return out, nil
}
