package config

import (
	"testing"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/segment"
)

// TestPackageConfigs checks that each YAML key reaches the package field
// it names, through the one mapping file (packages.go).
func TestPackageConfigs(t *testing.T) {
	c := Default()
	if err := c.ApplyOverrides([]string{"compaction.enabled=true", "compaction.policy=recency",
		"compaction.keep_last_turns=3", "compaction.trigger_tokens=777", "compaction.on_undeclared_break=error",
		"grpo.estimator=rloo", "grpo.credit=broadcast"}); err != nil {
		t.Fatal(err)
	}
	c.Compaction.TriggerRange = []int{100, 200}
	if got, want := c.CompactionConfig(), (compaction.Config{Policy: "recency", KeepTurns: 3, Threshold: 777,
		ThresholdMin: 100, ThresholdMax: 200}); got != want {
		t.Errorf("CompactionConfig() = %+v, want %+v", got, want)
	}
	if got := c.SegmentConfig(); got != (segment.Config{OnUndeclaredBreak: "error"}) {
		t.Errorf("SegmentConfig() = %+v", got)
	}
	if got := c.AdvantageConfig(); got != (advantage.Config{Estimator: "rloo", Credit: "broadcast"}) {
		t.Errorf("AdvantageConfig() = %+v", got)
	}
	c.Compaction.Enabled = false
	if got := c.CompactionConfig(); got != (compaction.Config{}) {
		t.Errorf("disabled compaction maps to %+v, want the zero config", got)
	}
}
