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
	if got := c.AdvantageConfig(); got != (advantage.Config{Estimator: "rloo", Credit: "broadcast", SummaryCredit: advantage.SummaryLikeRest}) {
		t.Errorf("AdvantageConfig() = %+v", got)
	}
	// grpo.summary_credit: masked is segment building's mask, separate the
	// advantage package's scale.
	for _, tc := range []struct {
		value string
		mask  bool
		rule  string
	}{{"rollout", false, advantage.SummaryLikeRest}, {"masked", true, advantage.SummaryLikeRest}, {"separate", false, advantage.SummarySeparate}} {
		if err := c.ApplyOverrides([]string{"grpo.summary_credit=" + tc.value}); err != nil {
			t.Fatal(err)
		}
		if got := c.SegmentConfig().MaskSummaries; got != tc.mask {
			t.Errorf("summary_credit %s: MaskSummaries = %v, want %v", tc.value, got, tc.mask)
		}
		if got := c.AdvantageConfig().SummaryCredit; got != tc.rule {
			t.Errorf("summary_credit %s: SummaryCredit = %q, want %q", tc.value, got, tc.rule)
		}
		// The warm start trains summaries whatever the RL rule.
		if d := c.DemoSegmentConfig(); d.MaskSummaries || d.OnUndeclaredBreak != "error" {
			t.Errorf("summary_credit %s: DemoSegmentConfig() = %+v", tc.value, d)
		}
	}
	c.Compaction.Enabled = false
	if got := c.CompactionConfig(); got != (compaction.Config{}) {
		t.Errorf("disabled compaction maps to %+v, want the zero config", got)
	}
}

// TestControllerConfig checks that the keys the controller reads reach its
// typed config through the one mapping file.
func TestControllerConfig(t *testing.T) {
	c := Default()
	if err := c.ApplyOverrides([]string{"run.seed=7", "run.mode=throughput", "run.max_steps=11", "run.max_epochs=3",
		"run.max_lag=2", "run.log_every=5", "data.shuffle=false", "grpo.num_prompts_per_step=6",
		"grpo.num_generations_per_prompt=4", "grpo.microbatch_tokens=999", "rollout_failure.max_infra_attempts=9",
		"rollout_failure.max_data_attempts=8", "rollout_failure.retry_delay_steps=3", "rollout_failure.stall_timeout_s=12",
		"rollout_failure.call_timeout_s=13", "rollout_failure.rollout_timeout_s=14", "rollout_failure.on_dropped_prompt=replace",
		"checkpointing.save_period=7", "checkpointing.dir=ck", "rollout_checkpointing.snapshot_attempt_interval_s=4",
		"env.name=guess", "env.params.x=1", "rollout.max_turns=5", "sampling.top_k=3", "tokenizer.history=rerender"}); err != nil {
		t.Fatal(err)
	}
	cc, err := c.Controller()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key       string
		got, want any
	}{
		{"run.seed", cc.Run.Seed, uint64(7)}, {"run.mode", cc.Run.Mode, "throughput"}, {"run.max_steps", cc.Run.MaxSteps, 11},
		{"run.max_epochs", cc.Run.MaxEpochs, 3}, {"run.max_lag", cc.Run.MaxLag, 2}, {"run.log_every", cc.Run.LogEvery, 5},
		{"data.shuffle", cc.Shuffle, false}, {"grpo.num_prompts_per_step", cc.GRPO.NumPromptsPerStep, 6},
		{"grpo.num_generations_per_prompt", cc.GRPO.NumGenerationsPerPrompt, 4}, {"grpo.microbatch_tokens", cc.GRPO.MicrobatchTokens, 999},
		{"rollout_failure.max_infra_attempts", cc.RolloutFailure.MaxInfraAttempts, 9},
		{"rollout_failure.max_data_attempts", cc.RolloutFailure.MaxDataAttempts, 8},
		{"rollout_failure.retry_delay_steps", cc.RolloutFailure.RetryDelaySteps, 3},
		{"rollout_failure.stall_timeout_s", cc.RolloutFailure.StallTimeoutS, 12.0},
		{"rollout_failure.call_timeout_s", cc.RolloutFailure.CallTimeoutS, 13.0},
		{"rollout_failure.rollout_timeout_s", cc.RolloutFailure.RolloutTimeoutS, 14.0},
		{"rollout_failure.on_dropped_prompt", cc.RolloutFailure.OnDroppedPrompt, "replace"},
		{"checkpointing.save_period", cc.Checkpointing.SavePeriod, 7}, {"checkpointing.dir", cc.Checkpointing.Dir, "ck"},
		{"rollout_checkpointing.snapshot_attempt_interval_s", cc.SnapshotIntervalS, 4.0},
		{"env.name", cc.EnvName, "guess"}, {"env.params", string(cc.EnvParams), `{"x":1}`},
		{"rollout.max_turns", cc.Rollout.MaxTurns, 5}, {"sampling.top_k", cc.Sampling.TopK, 3},
		{"tokenizer.history", cc.History, "rerender"}, {"digest", cc.Digest, Digest(c)},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: controller config has %v, want %v", tc.key, tc.got, tc.want)
		}
	}
	c.RolloutCheckpointing.Enabled = false
	if cc, _ := c.Controller(); cc.SnapshotIntervalS != 0 {
		t.Errorf("rollout_checkpointing.enabled=false maps to a snapshot interval of %gs", cc.SnapshotIntervalS)
	}
}

// TestOverlapResolves: run.overlap auto overlaps only when trainer and
// generator run in other processes; on and off are what they say.
func TestOverlapResolves(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want bool
	}{
		{nil, false},
		{[]string{"run.overlap=on"}, true},
		{[]string{"trainer.kind=remote", "trainer.url=http://127.0.0.1:1"}, true},
		{[]string{"trainer.kind=remote", "trainer.url=http://127.0.0.1:1", "run.overlap=off"}, false},
		{[]string{"generator.kind=openai", "generator.urls=[http://127.0.0.1:1]"}, true},
	} {
		c := Default()
		if err := c.ApplyOverrides(tc.set); err != nil {
			t.Fatal(err)
		}
		cc, err := c.Controller()
		if err != nil {
			t.Fatal(err)
		}
		if cc.Run.Overlap != tc.want {
			t.Errorf("%v: overlap %v, want %v", tc.set, cc.Run.Overlap, tc.want)
		}
	}
}
