package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// Validate checks every key and the rules between keys, and reports all
// violations at once (errors.Join of *KeyError), each naming its key.
func (c *Config) Validate() error {
	v := &validator{}
	v.enums(c)

	r := c.Run
	v.min("run.max_steps", r.MaxSteps, 1)
	v.min("run.max_epochs", r.MaxEpochs, 0)
	v.min("run.max_lag", r.MaxLag, 0)
	v.min("run.log_every", r.LogEvery, 1)

	d := c.Data
	if d.Source == "jsonl" && d.Path == "" {
		v.failf("data.path", "must be set when data.source is jsonl")
	}
	if d.Source == "builtin" {
		v.min("data.num_prompts", d.NumPrompts, 1)
	}

	c.validateTokenizer(v)
	st := c.Store
	v.positive("store.sync_interval_s", st.SyncIntervalS)
	v.min("store.local_cache_mb", st.LocalCacheMB, 0)
	v.positive("store.lease_s", st.LeaseS)
	v.positive("store.log_chunk_mb", st.LogChunkMB)
	v.positive("store.final_sync_timeout_s", st.FinalSyncTimeoutS)
	if st.RunDir != "" && strings.HasPrefix(st.RunDir, "s3:") && !strings.HasPrefix(st.RunDir, "s3://") {
		v.failf("store.run_dir", "want s3://BUCKET/PREFIX, got %q", st.RunDir)
	}
	v.nonEmpty("env.name", c.Env.Name)
	v.env(c)
	// The digest hashes params as JSON; YAML allows keys JSON does not.
	if _, err := json.Marshal(c.Env.Params); err != nil {
		v.failf("env.params", "must have string keys at every level: %w", err)
	}

	m := c.Model
	v.min("model.layers", m.Layers, 1)
	v.min("model.dim", m.Dim, 1)
	v.min("model.heads", m.Heads, 1)
	if m.Heads >= 1 && m.Dim >= 1 && m.Dim%m.Heads != 0 {
		v.failf("model.heads", "must divide model.dim (%d), got %d", m.Dim, m.Heads)
	}
	if m.Positions == "rope" && m.Heads >= 1 && m.Dim%m.Heads == 0 && (m.Dim/m.Heads)%2 != 0 {
		v.failf("model.dim", "rope needs an even head width (model.dim / model.heads), got %d", m.Dim/m.Heads)
	}
	v.min("model.hidden", m.Hidden, 1)
	v.min("model.context", m.Context, 2)

	g := c.GRPO
	v.min("grpo.num_prompts_per_step", g.NumPromptsPerStep, 1)
	v.min("grpo.num_generations_per_prompt", g.NumGenerationsPerPrompt, 2)
	if g.MicrobatchTokens < m.Context {
		v.failf("grpo.microbatch_tokens", "must hold one full row (≥ model.context = %d), got %d", m.Context, g.MicrobatchTokens)
	}

	l := c.Loss
	v.rangeF("loss.clip_low", l.ClipLow, 0, 1, false)
	v.minF("loss.clip_high", l.ClipHigh, 0)
	v.minF("loss.kl_coef", l.KLCoef, 0)
	if l.KLCoef > 0 {
		// The losses take reference logprobs per token, but no run supplies
		// them yet (there is no reference policy): refuse up front rather
		// than fail at step 1.
		v.failf("loss.kl_coef", "a KL penalty needs reference-policy logprobs, which runs do not compute yet; use 0, got %g", l.KLCoef)
	}

	o := c.Optim
	v.positive("optim.lr", o.LR)
	v.minF("optim.min_lr", o.MinLR, 0)
	if o.MinLR > o.LR {
		v.failf("optim.min_lr", "must be ≤ optim.lr (%g), got %g", o.LR, o.MinLR)
	}
	v.min("optim.warmup_steps", o.WarmupSteps, 0)
	if o.Schedule == "cosine" && r.MaxSteps >= 1 && o.WarmupSteps >= 0 && r.MaxSteps <= o.WarmupSteps {
		// The cosine decays over the steps after the warm-up: with none
		// left it has no length, which the trainer would find at step 1.
		v.failf("run.max_steps", "must be > optim.warmup_steps (%d) when optim.schedule is cosine (the decay runs over the steps after the warm-up), got %d; raise run.max_steps, lower optim.warmup_steps or use optim.schedule=constant", o.WarmupSteps, r.MaxSteps)
	}
	v.minF("optim.weight_decay", o.WeightDecay, 0)
	v.rangeF("optim.beta1", o.Beta1, 0, 1, false)
	v.rangeF("optim.beta2", o.Beta2, 0, 1, false)
	v.positive("optim.eps", o.Eps)
	v.minF("optim.grad_clip", o.GradClip, 0)

	s := c.Sampling
	v.minF("sampling.temperature", s.Temperature, 0)
	if !(s.TopP > 0 && s.TopP <= 1) {
		v.failf("sampling.top_p", "must be in (0, 1], got %g", s.TopP)
	}
	v.min("sampling.top_k", s.TopK, 0)
	v.min("sampling.max_tokens_per_call", s.MaxTokensPerCall, 1)

	ro := c.Rollout
	v.min("rollout.max_turns", ro.MaxTurns, 1)
	v.min("rollout.max_tokens_per_rollout", ro.MaxTokensPerRollout, 1)
	v.min("rollout.context_budget", ro.ContextBudget, 1)
	if ro.ContextBudget > m.Context {
		v.failf("rollout.context_budget", "must be ≤ model.context (%d), got %d", m.Context, ro.ContextBudget)
	}
	if s.MaxTokensPerCall >= ro.ContextBudget && ro.ContextBudget >= 1 {
		v.failf("sampling.max_tokens_per_call", "must be < rollout.context_budget (%d), got %d", ro.ContextBudget, s.MaxTokensPerCall)
	}
	v.min("rollout.max_resamples", ro.MaxResamples, 0)

	cp := c.Compaction
	if cp.Enabled {
		v.min("compaction.trigger_tokens", cp.TriggerTokens, 1)
		if cp.TriggerTokens >= ro.ContextBudget {
			v.failf("compaction.trigger_tokens", "must be < rollout.context_budget (%d), got %d", ro.ContextBudget, cp.TriggerTokens)
		}
	}
	switch tr := cp.TriggerRange; {
	case len(tr) != 2:
		v.failf("compaction.trigger_range", "must be [0, 0] or [lo, hi], got %v", tr)
	case tr[0] == 0 && tr[1] == 0:
	case cp.Enabled && !(1 <= tr[0] && tr[0] <= tr[1] && tr[1] < ro.ContextBudget):
		v.failf("compaction.trigger_range", "must be [0, 0] or 1 ≤ lo ≤ hi < rollout.context_budget (%d), got %v", ro.ContextBudget, tr)
	}
	v.min("compaction.keep_last_turns", cp.KeepLastTurns, 0)

	w := c.Warmstart
	if w.Enabled {
		v.min("warmstart.steps", w.Steps, 1)
		v.min("warmstart.batch_size", w.BatchSize, 1)
		v.positive("warmstart.lr", w.LR)
	}

	ck := c.Checkpointing
	if ck.Enabled {
		v.nonEmpty("checkpointing.dir", ck.Dir)
		v.min("checkpointing.save_period", ck.SavePeriod, 1)
	}
	v.min("checkpointing.keep_last_k", ck.KeepLastK, 0)
	v.min("checkpointing.keep_top_k", ck.KeepTopK, 0)
	if ck.KeepTopK > 0 {
		v.nonEmpty("checkpointing.metric", ck.Metric)
	}

	rc := c.RolloutCheckpointing
	if rc.Enabled {
		v.positive("rollout_checkpointing.snapshot_attempt_interval_s", rc.SnapshotAttemptIntervalS)
		v.min("rollout_checkpointing.keep_latest_k", rc.KeepLatestK, 1)
	}

	f := c.RolloutFailure
	v.min("rollout_failure.max_infra_attempts", f.MaxInfraAttempts, 1)
	v.min("rollout_failure.max_data_attempts", f.MaxDataAttempts, 1)
	v.minF("rollout_failure.backoff_base_s", f.BackoffBaseS, 0)
	if f.BackoffCapS < f.BackoffBaseS {
		v.failf("rollout_failure.backoff_cap_s", "must be ≥ rollout_failure.backoff_base_s (%g), got %g", f.BackoffBaseS, f.BackoffCapS)
	}
	v.min("rollout_failure.max_skipped_prompts", f.MaxSkippedPrompts, 0)
	v.min("rollout_failure.max_consecutive_dropped_prompts", f.MaxConsecutiveDroppedPrompts, 0)
	v.min("rollout_failure.max_group_retries", f.MaxGroupRetries, 0)
	v.min("rollout_failure.retry_delay_steps", f.RetryDelaySteps, 1)
	v.rangeF("rollout_failure.min_step_batch_fraction", f.MinStepBatchFraction, 0, 1, true)
	v.minF("rollout_failure.stall_timeout_s", f.StallTimeoutS, 0)
	v.positive("rollout_failure.call_timeout_s", f.CallTimeoutS)
	v.positive("rollout_failure.max_outage_s", f.MaxOutageS)
	if f.RolloutTimeoutS < f.CallTimeoutS {
		v.failf("rollout_failure.rollout_timeout_s", "must be ≥ rollout_failure.call_timeout_s (%g), got %g", f.CallTimeoutS, f.RolloutTimeoutS)
	}

	gen := c.Generator
	if gen.Kind == "openai" && len(gen.URLs) == 0 {
		v.failf("generator.urls", "must list at least one server when generator.kind is openai")
	}
	for _, u := range gen.URLs {
		v.url("generator.urls", u)
	}
	v.min("generator.prefix_cache_mib", gen.PrefixCacheMiB, 0)
	if !pyIdent.MatchString(gen.ReloadMethod) {
		v.failf("generator.reload_method", "must be a Python method name (letters, digits, _), got %q", gen.ReloadMethod)
	}
	if c.Trainer.Kind == "remote" {
		if c.Trainer.URL == "" {
			v.failf("trainer.url", "must be set when trainer.kind is remote")
		} else {
			v.url("trainer.url", c.Trainer.URL)
		}
	}
	return errors.Join(v.errs...)
}

// pyIdent is a Python identifier (ASCII): the method /collective_rpc names.
var pyIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

type validator struct{ errs []error }

func (v *validator) failf(key, format string, args ...any) {
	v.errs = append(v.errs, &KeyError{Key: key, Err: fmt.Errorf(format, args...)})
}

func (v *validator) min(key string, x, lo int) {
	if x < lo {
		v.failf(key, "must be ≥ %d, got %d", lo, x)
	}
}

func (v *validator) minF(key string, x, lo float64) {
	if !(x >= lo) {
		v.failf(key, "must be ≥ %g, got %g", lo, x)
	}
}

func (v *validator) positive(key string, x float64) {
	if !(x > 0) {
		v.failf(key, "must be > 0, got %g", x)
	}
}

// rangeF checks lo ≤ x < hi, or lo ≤ x ≤ hi when closed.
func (v *validator) rangeF(key string, x, lo, hi float64, closed bool) {
	if closed && !(x >= lo && x <= hi) {
		v.failf(key, "must be in [%g, %g], got %g", lo, hi, x)
	}
	if !closed && !(x >= lo && x < hi) {
		v.failf(key, "must be in [%g, %g), got %g", lo, hi, x)
	}
}

func (v *validator) nonEmpty(key, s string) {
	if s == "" {
		v.failf(key, "must not be empty")
	}
}

func (v *validator) url(key, s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.failf(key, "want an http(s) URL, got %q", s)
	}
}

// enums checks every key with an `enum` tag, and that every number is
// finite (NaN would slip past the range checks otherwise).
func (v *validator) enums(c *Config) {
	for _, f := range leaves(reflect.ValueOf(c).Elem(), "") {
		switch f.value.Kind() {
		case reflect.String:
			if f.enum != nil && !slices.Contains(f.enum, f.value.String()) {
				v.failf(f.path, "must be one of %s, got %q", strings.Join(f.enum, ", "), f.value.String())
			}
		case reflect.Float64:
			if x := f.value.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
				v.failf(f.path, "must be finite, got %g", x)
			}
		}
	}
}
