package config

// This file is the one place where YAML keys become the configs of the
// packages that do the work: those packages take plain Go structs (no
// yaml tags, no knowledge of the file's layout), and every caller
// (controller, warm start, demos, run inspection) maps through here, so a
// key is renamed in one file. The controller takes only its own typed
// config (Controller), never the whole *Config.

import (
	"encoding/json"
	"fmt"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/controller/ctlconfig"
	"github.com/longhaul-rl/longhaul/segment"
)

// CompactionConfig maps compaction.* to the policy's config (the zero
// config, no compaction, when compaction.enabled is false).
func (c *Config) CompactionConfig() compaction.Config {
	if !c.Compaction.Enabled {
		return compaction.Config{}
	}
	cc := compaction.Config{Policy: c.Compaction.Policy, KeepTurns: c.Compaction.KeepLastTurns,
		Threshold: c.Compaction.TriggerTokens}
	if r := c.Compaction.TriggerRange; len(r) == 2 && r[1] > 0 {
		cc.ThresholdMin, cc.ThresholdMax = r[0], r[1]
	}
	return cc
}

// SegmentConfig maps compaction.on_undeclared_break, and grpo.summary_credit
// masked (summary tokens out of the loss), to segment building.
func (c *Config) SegmentConfig() segment.Config {
	return segment.Config{OnUndeclaredBreak: c.Compaction.OnUndeclaredBreak,
		MaskSummaries: c.GRPO.SummaryCredit == "masked"}
}

// DemoSegmentConfig is the warm start's segment building: demonstrations
// are supervised whole, their summaries included, whatever
// grpo.summary_credit says (masking is a rule of RL credit; a warm start
// that skipped the summaries would leave a policy that cannot write one).
func (c *Config) DemoSegmentConfig() segment.Config {
	sc := c.SegmentConfig()
	sc.MaskSummaries = false
	return sc
}

// AdvantageConfig maps grpo.estimator, grpo.credit and grpo.summary_credit
// (masked is segment building's; summary tokens then have no credit to
// get).
func (c *Config) AdvantageConfig() advantage.Config {
	sc := advantage.SummaryLikeRest
	if c.GRPO.SummaryCredit == "separate" {
		sc = advantage.SummarySeparate
	}
	return advantage.Config{Estimator: c.GRPO.Estimator, Credit: c.GRPO.Credit, SummaryCredit: sc}
}

// EnvParamsJSON is env.params as JSON (nil when empty), as every
// environment of the run is made with.
func (c *Config) EnvParamsJSON() (json.RawMessage, error) {
	if len(c.Env.Params) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(c.Env.Params)
	if err != nil {
		return nil, fmt.Errorf("env.params: %w", err)
	}
	return b, nil
}

// Controller maps the keys the controller reads to its typed config.
func (c *Config) Controller() (ctlconfig.Config, error) {
	params, err := c.EnvParamsJSON()
	if err != nil {
		return ctlconfig.Config{}, err
	}
	rf := c.RolloutFailure
	snap := 0.0
	if c.RolloutCheckpointing.Enabled {
		snap = c.RolloutCheckpointing.SnapshotAttemptIntervalS
	}
	return ctlconfig.Config{
		Run: ctlconfig.Run{Seed: c.Run.Seed, Mode: c.Run.Mode, MaxSteps: c.Run.MaxSteps, MaxEpochs: c.Run.MaxEpochs,
			MaxLag: c.Run.MaxLag, LogEvery: c.Run.LogEvery, Overlap: c.overlap()},
		Shuffle: c.Data.Shuffle,
		GRPO: ctlconfig.GRPO{NumPromptsPerStep: c.GRPO.NumPromptsPerStep, NumGenerationsPerPrompt: c.GRPO.NumGenerationsPerPrompt,
			MicrobatchTokens: c.GRPO.MicrobatchTokens},
		RolloutFailure: ctlconfig.RolloutFailure{MaxInfraAttempts: rf.MaxInfraAttempts, MaxDataAttempts: rf.MaxDataAttempts,
			BackoffBaseS: rf.BackoffBaseS, BackoffCapS: rf.BackoffCapS, MaxSkippedPrompts: rf.MaxSkippedPrompts,
			MaxConsecutiveDroppedPrompts: rf.MaxConsecutiveDroppedPrompts, MinStepBatchFraction: rf.MinStepBatchFraction,
			OnDroppedPrompt: rf.OnDroppedPrompt, MaxGroupRetries: rf.MaxGroupRetries, RetryDelaySteps: rf.RetryDelaySteps,
			StallTimeoutS: rf.StallTimeoutS, StallAction: rf.StallAction, CallTimeoutS: rf.CallTimeoutS,
			RolloutTimeoutS: rf.RolloutTimeoutS},
		Checkpointing: ctlconfig.Checkpointing{Enabled: c.Checkpointing.Enabled, Dir: c.Checkpointing.Dir,
			SavePeriod: c.Checkpointing.SavePeriod, KeepLastK: c.Checkpointing.KeepLastK, KeepTopK: c.Checkpointing.KeepTopK,
			Metric: c.Checkpointing.Metric, HigherIsBetter: c.Checkpointing.HigherIsBetter},
		SnapshotIntervalS: snap,
		EnvName:           c.Env.Name,
		EnvParams:         params,
		Rollout: ctlconfig.Rollout{MaxTurns: c.Rollout.MaxTurns, MaxTokensPerRollout: c.Rollout.MaxTokensPerRollout,
			ContextBudget: c.Rollout.ContextBudget, MaxResamples: c.Rollout.MaxResamples},
		Sampling: ctlconfig.Sampling{Temperature: c.Sampling.Temperature, TopP: c.Sampling.TopP, TopK: c.Sampling.TopK,
			MaxTokensPerCall: c.Sampling.MaxTokensPerCall},
		Compaction:     c.CompactionConfig(),
		Segment:        c.SegmentConfig(),
		Advantage:      c.AdvantageConfig(),
		History:        c.Tokenizer.History,
		TemplateKwargs: c.Tokenizer.TemplateKwargs,
		Digest:         Digest(c),
	}, nil
}

// overlap resolves run.overlap: auto overlaps training and generation
// when they run in different processes (a remote trainer, OpenAI-compatible
// servers); the embedded pair shares the same cores, where the overlap
// measured more CPU than the idle time it fills (docs/architecture.md).
func (c *Config) overlap() bool {
	switch c.Run.Overlap {
	case "on":
		return true
	case "auto":
		return c.Trainer.Kind == "remote" || c.Generator.Kind == "openai"
	}
	return false
}
