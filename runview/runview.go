// Package runview is what `longhaul inspect` shows of rollouts: a list
// with filters, and one rollout's segments as the training rows the
// trainer got (or would get), with advantages and per-token logprobs. It
// reads a run directory only (the log read-only, config.yaml), so it is
// safe while a run is going.
package runview

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
)

// Filter selects rollouts; zero values select all.
type Filter struct {
	Status    string // pending, running, failed or sealed
	Compacted bool   // at least one compaction
	Failed    bool   // failed at least once (retried or not)
	Step      int64  // trained in step Step, or admitted for it when not trained yet; 0: any
}

// Row is one rollout in the list.
type Row struct {
	ID          string  `json:"id"`
	PromptID    string  `json:"prompt_id"`
	Group       string  `json:"group_status"`
	Step        int64   `json:"step"` // the step that trained it, or the one it is admitted for
	Trained     bool    `json:"trained"`
	Status      string  `json:"status"`
	Reward      float64 `json:"reward"`
	Success     bool    `json:"success"`
	Calls       int     `json:"calls"`
	Segments    uint32  `json:"segments"`
	Compactions uint32  `json:"compactions"`
	Failures    uint32  `json:"failures"`
	Outcome     string  `json:"outcome,omitempty"`
}

// match reports whether f selects rollout m of a group of step step.
func (f Filter) match(m *runlog.Rollout, step int64) bool {
	switch {
	case f.Step != 0 && step != f.Step,
		f.Status != "" && m.Status.String() != f.Status,
		f.Compacted && m.Compactions == 0,
		f.Failed && m.Failures == 0:
		return false
	}
	return true
}

var statuses = []string{"pending", "running", "failed", "sealed"}

// List returns the rollouts of dir that f selects, in admission order.
func List(ctx context.Context, dir string, f Filter) ([]Row, error) {
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		return nil, fmt.Errorf("--status %q: want one of %v", f.Status, statuses)
	}
	s, _, err := runlog.ReadRollouts(ctx, dir, nil)
	if err != nil {
		return nil, err
	}
	var out []Row
	for _, gid := range s.Order {
		g := s.Groups[gid]
		step, trained := g.ForStep, g.Status == runlog.GroupStatusTrained
		if trained {
			step = g.Step
		}
		for _, m := range g.Members {
			if !f.match(m, step) {
				continue
			}
			segs := uint32(0)
			if len(m.Calls) > 0 {
				segs = m.Segment + 1
			}
			out = append(out, Row{ID: m.ID.String(), PromptID: g.PromptID, Group: g.Status.String(), Step: step, Trained: trained,
				Status: m.Status.String(), Reward: m.Reward, Success: m.Success, Calls: len(m.Calls), Segments: segs,
				Compactions: m.Compactions, Failures: m.Failures, Outcome: m.Outcome})
		}
	}
	return out, nil
}

// SegmentRow is one segment as a training row.
type SegmentRow struct {
	Index     int       `json:"index"`
	Start     string    `json:"start"` // what started it (first call, compaction, ...)
	FirstCall uint32    `json:"first_call"`
	LastCall  uint32    `json:"last_call"`
	Tokens    int       `json:"tokens"`
	Trainable int       `json:"trainable"`
	Masked    bool      `json:"masked"`
	Advantage float64   `json:"advantage"` // given to every trainable token
	PerToken  []TokenAt `json:"per_token,omitempty"`
}

// TokenAt is one position of a row.
type TokenAt struct {
	Pos       int     `json:"pos"`
	Token     int32   `json:"token"`
	Trainable bool    `json:"trainable"`
	Logprob   float32 `json:"logprob"`   // the sampler's, at trainable tokens
	Advantage float32 `json:"advantage"` // at trainable tokens
}

// Rows is a rollout's training view.
type Rows struct {
	ID        string       `json:"id"`
	Status    string       `json:"status"`
	Reward    float64      `json:"reward"`
	GroupMean float64      `json:"group_mean"`
	GroupStd  float64      `json:"group_std"`
	Advantage float64      `json:"advantage"`
	Segments  []SegmentRow `json:"segments"`
}

// ErrNotSealed: a rollout's rows exist only once its group's rewards do.
var ErrNotSealed = errors.New("not every member of the group is sealed yet, so there are no advantages")

// TrainingRows builds the rows of rollout id as the controller does: the
// group's segments, advantages by the run's estimator and credit rule.
// tokens adds the per-token table.
func TrainingRows(ctx context.Context, dir string, id runlog.RolloutID, tokens bool) (*Rows, error) {
	cfg, err := config.Load(filepath.Join(dir, "config.yaml"))
	if err != nil {
		return nil, err
	}
	s, evs, err := runlog.ReadRollouts(ctx, dir, func(r runlog.RolloutID) bool { return r.Group == id.Group })
	if err != nil {
		return nil, err
	}
	g := s.Groups[id.Group]
	if g == nil || int(id.Member) >= len(g.Members) {
		return nil, unknown(s, id, dir)
	}
	scfg := cfg.SegmentConfig()
	members := make([]advantage.Rollout, len(g.Members))
	var mine []segment.Segment
	for i, m := range g.Members {
		if m.Status != runlog.StatusSealed {
			return nil, fmt.Errorf("rollout %s: member %s is %s: %w", id, m.ID, m.Status, ErrNotSealed)
		}
		calls, bounds := rollout.Trace(evs[m.ID], m.ID)
		segs, _, err := segment.Build(calls, bounds, scfg)
		if err != nil {
			return nil, fmt.Errorf("rollout %s: %w", m.ID, err)
		}
		members[i] = advantage.Rollout{ID: m.ID, Reward: m.Reward, Segments: segs}
		if m.ID == id {
			mine = segs
		}
	}
	ag, err := advantage.Compute(cfg.AdvantageConfig(), members)
	if err != nil {
		return nil, err
	}
	a := ag.Rollouts[id.Member]
	out := &Rows{ID: id.String(), Status: g.Members[id.Member].Status.String(), Reward: g.Members[id.Member].Reward,
		GroupMean: ag.Mean, GroupStd: ag.Std, Advantage: a.Advantage}
	for i, sg := range mine {
		sr := SegmentRow{Index: sg.Index, Start: sg.Start, FirstCall: sg.FirstCall, LastCall: sg.LastCall,
			Tokens: len(sg.Tokens), Trainable: sg.Trainable(), Masked: sg.Masked}
		if i < len(a.Rows) {
			row := a.Rows[i]
			for k, m := range row.Mask {
				if m != 0 {
					sr.Advantage = float64(row.Advantages[k])
					break
				}
			}
			if tokens {
				for k, t := range row.Tokens {
					ta := TokenAt{Pos: k, Token: t, Trainable: row.Mask[k] != 0}
					if ta.Trainable {
						ta.Logprob, ta.Advantage = row.OldLogprobs[k], row.Advantages[k]
					}
					sr.PerToken = append(sr.PerToken, ta)
				}
			}
		}
		out.Segments = append(out.Segments, sr)
	}
	return out, nil
}

// unknown says why id names no rollout, with what the run has.
func unknown(s *runlog.State, id runlog.RolloutID, dir string) error {
	g := s.Groups[id.Group]
	if g == nil {
		if len(s.Order) == 0 {
			return fmt.Errorf("rollout %s: run %s has no groups yet", id, dir)
		}
		return fmt.Errorf("rollout %s: no group %s in run %s (it has %d groups, %s to %s; `longhaul inspect %s --rollouts` lists them)",
			id, id.Group, dir, len(s.Order), s.Order[0], s.Order[len(s.Order)-1], dir)
	}
	return fmt.Errorf("rollout %s: group %s has members 0 to %d", id, id.Group, len(g.Members)-1)
}

// Check reports whether id names a rollout of dir, with a readable error.
func Check(ctx context.Context, dir string, id runlog.RolloutID) error {
	if _, err := os.Stat(filepath.Join(dir, "runlog")); err != nil {
		return fmt.Errorf("%s is not a run directory (no runlog/)", dir)
	}
	s, _, err := runlog.ReadRollouts(ctx, dir, nil)
	if err != nil {
		return err
	}
	if g := s.Groups[id.Group]; g == nil || int(id.Member) >= len(g.Members) {
		return unknown(s, id, dir)
	}
	return nil
}
