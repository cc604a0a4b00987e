// Package ctlconfig is the controller's typed configuration: only the
// settings the controller reads, as plain Go values with no yaml tags.
// config/packages.go, the one file that maps YAML keys to package
// configs, builds it (config.(*Config).Controller); the controller
// re-exports it as controller.Config. It lives in its own leaf package so
// that the config package can build it without importing the controller.
//
// Section and field names follow the YAML sections they come from
// (Run.MaxLag is run.max_lag), so a message can name the key and a reader
// finds it.
package ctlconfig

import (
	"encoding/json"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/segment"
)

// Config is what the controller is configured with.
type Config struct {
	Run            Run
	Shuffle        bool // data.shuffle
	GRPO           GRPO
	RolloutFailure RolloutFailure
	Checkpointing  Checkpointing
	// SnapshotIntervalS is rollout_checkpointing.snapshot_attempt_interval_s,
	// 0 when rollout_checkpointing.enabled is false.
	SnapshotIntervalS float64
	// EnvName is env.name (the environment of a task that names none);
	// EnvParams is env.params as JSON (nil when empty).
	EnvName   string
	EnvParams json.RawMessage
	Rollout   Rollout
	Sampling  Sampling
	// Compaction, Segment and Advantage are the package configs of
	// compaction.*, compaction.on_undeclared_break and grpo.estimator/credit.
	Compaction compaction.Config
	Segment    segment.Config
	Advantage  advantage.Config
	// History and TemplateKwargs are tokenizer.history and
	// tokenizer.template_kwargs.
	History        string
	TemplateKwargs map[string]any
	// Digest is the canonical digest of the whole run config, recorded in
	// RunStarted.
	Digest [32]byte
}

// Run is run.*.
type Run struct {
	Seed      uint64
	Mode      string // deterministic | throughput
	MaxSteps  int
	MaxEpochs int
	MaxLag    int
	LogEvery  int
	// Overlap: in deterministic mode, train step k beside the rounds of
	// k+1..k+lag and commit it after them (run.overlap resolved).
	Overlap bool
}

// Throughput reports whether run.mode is throughput.
func (r Run) Throughput() bool { return r.Mode == "throughput" }

// GRPO is the part of grpo.* the controller reads.
type GRPO struct {
	NumPromptsPerStep       int
	NumGenerationsPerPrompt int
	MicrobatchTokens        int
}

// RolloutFailure is rollout_failure.* (max_outage_s belongs to the
// generator client, not here).
type RolloutFailure struct {
	MaxInfraAttempts             int
	MaxDataAttempts              int
	BackoffBaseS                 float64
	BackoffCapS                  float64
	MaxSkippedPrompts            int
	MaxConsecutiveDroppedPrompts int
	MinStepBatchFraction         float64
	OnDroppedPrompt              string // retry | shrink | replace
	MaxGroupRetries              int
	RetryDelaySteps              int
	StallTimeoutS                float64 // 0: no watchdog
	StallAction                  string  // warn | abort
	CallTimeoutS                 float64
	RolloutTimeoutS              float64
}

// Checkpointing is checkpointing.*.
type Checkpointing struct {
	Enabled        bool
	Dir            string
	SavePeriod     int
	KeepLastK      int
	KeepTopK       int
	Metric         string
	HigherIsBetter bool
}

// Rollout is rollout.*.
type Rollout struct {
	MaxTurns            int
	MaxTokensPerRollout int
	ContextBudget       int
	MaxResamples        int
}

// Sampling is sampling.*.
type Sampling struct {
	Temperature      float64
	TopP             float64
	TopK             int
	MaxTokensPerCall int
}
