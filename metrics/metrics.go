// Package metrics writes the per-step metrics.jsonl of a run and draws its
// learning curve.
package metrics

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
	GenCPUSeconds       float64 `json:"gen_cpu_s"` // the process's CPU time (all threads) while generating: gen_cpu_s / gen_s is the cores the phase kept busy
	TrainSeconds        float64 `json:"train_s"`
	StepSeconds         float64 `json:"step_s"`
	ElapsedSeconds      float64 `json:"elapsed_s"`
	GenTokensPerSecond  float64 `json:"gen_tokens_per_s"`

	// GRPO diagnostics (docs/observability.md). Lengths are per rollout:
	// prompt = the first call's prompt, completion = tokens the policy
	// sampled over all calls, rollout = tokens of all its segments.
	PromptLenMean     float64 `json:"prompt_len_mean"`
	PromptLenMax      int     `json:"prompt_len_max"`
	CompletionLenMean float64 `json:"completion_len_mean"`
	CompletionLenMax  int     `json:"completion_len_max"`
	RolloutLenMean    float64 `json:"rollout_len_mean"`
	RolloutLenMax     int     `json:"rollout_len_max"`
	TokensPerSegment  float64 `json:"tokens_per_segment"`
	ZeroVarGroupFrac  float64 `json:"zero_var_group_frac"` // groups whose rewards are all equal (no signal)
	RecoveredGroups   int     `json:"recovered_groups"`    // groups with a member that failed and was retried to a seal
	RecoveredRollouts int     `json:"recovered_rollouts"`  // rollouts that failed at least once, then sealed
	Entropy           float64 `json:"entropy"`             // from the trainer (train.Diagnostics)
	KLSampler         float64 `json:"kl_sampler"`
	KLRef             float64 `json:"kl_ref"`
	ClipLowFrac       float64 `json:"clip_low_frac"`
	ClipHighFrac      float64 `json:"clip_high_frac"`
	LogprobAbsDiff    float64 `json:"logprob_abs_diff"`
	RatioP05          float64 `json:"ratio_p05"`
	RatioP50          float64 `json:"ratio_p50"`
	RatioP95          float64 `json:"ratio_p95"`
	RatioMax          float64 `json:"ratio_max"`
	// Rebuilt marks a row computed again from the run log after the
	// file lost it: the figures only the trainer or the clock knew are zero.
	Rebuilt bool `json:"rebuilt,omitempty"`
}
