package controller

// This file holds what a run that stopped on its failure limits says
// about going on: the config key to change and the command that resumes
// with it (a resume refuses a changed key unless --allow-config-change
// names it).

import (
	"fmt"
	"math"
	"strconv"

	"github.com/longhaul-rl/longhaul/runlog"
)

// resumeWith is the command line that resumes the run with key=value.
func (c *Controller) resumeWith(key, value string) string {
	dir := c.o.RunDir
	if dir == "" {
		dir = "RUN_DIR"
	}
	return fmt.Sprintf("`longhaul train --run-dir %s --allow-config-change %s %s=%s`", dir, key, key, value)
}

// capHint says how to go on past a run-wide drop cap now at n.
func (c *Controller) capHint(key string, n int) string {
	return fmt.Sprintf("; to go on, resume with a larger cap: %s (each drop is logged; fix the cause first if it is a bug)",
		c.resumeWith("rollout_failure."+key, strconv.Itoa(n)))
}

// shrinkHint says how to go on past min_step_batch_fraction at step k,
// which kept `left` groups of the `dropped` ones it admitted.
func (c *Controller) shrinkHint(k int64, left int, all []*runlog.Group) string {
	P := c.cfg.GRPO.NumPromptsPerStep
	var hints []string
	if left > 0 {
		// The largest fraction that lets this step train what it has.
		f := math.Floor(float64(left)/float64(P)*1000) / 1000
		hints = append(hints, "train the step on what is left: "+c.resumeWith("rollout_failure.min_step_batch_fraction", strconv.FormatFloat(f, 'g', -1, 64)))
	}
	ownDropped := false
	for _, g := range all {
		ownDropped = ownDropped || (g.AdmittedFor == k && g.Status == runlog.GroupStatusDropped && g.Replaces == 0)
	}
	if ownDropped && c.cfg.RolloutFailure.OnDroppedPrompt != "replace" {
		hints = append(hints, "or give each dropped prompt a spare from the data: "+c.resumeWith("rollout_failure.on_dropped_prompt", "replace"))
	}
	s := "; the groups were dropped after their attempts ran out (rollout_failure.max_infra_attempts, max_data_attempts, max_group_retries; `longhaul inspect RUN_DIR` lists them)"
	if len(hints) == 0 {
		return s + "; no config change lets this step train: start a new run with larger attempt limits"
	}
	for i, h := range hints {
		if i == 0 {
			s += "; to go on, " + h
		} else {
			s += ", " + h
		}
	}
	return s
}
