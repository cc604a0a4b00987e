package config

// This file is the one place where YAML keys become the configs of the
// packages that do the work: those packages take plain Go structs (no
// yaml tags, no knowledge of the file's layout), and every caller
// (controller, warm start, demos, run inspection) maps through here, so a
// key is renamed in one file.

import (
	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/compaction"
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

// SegmentConfig maps compaction.on_undeclared_break to segment building.
func (c *Config) SegmentConfig() segment.Config {
	return segment.Config{OnUndeclaredBreak: c.Compaction.OnUndeclaredBreak}
}

// AdvantageConfig maps grpo.estimator and grpo.credit.
func (c *Config) AdvantageConfig() advantage.Config {
	return advantage.Config{Estimator: c.GRPO.Estimator, Credit: c.GRPO.Credit}
}
