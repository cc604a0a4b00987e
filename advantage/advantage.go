// Package advantage computes advantages per rollout (the logical level:
// one reward, one advantage per group member) and then hands each
// rollout's advantage to every trainable token of each of its segments
// (the physical level) by a credit rule. Statistics are never recomputed
// after the fan-out, so a rollout split into many segments by compaction
// weighs in the group exactly like one that was not.
package advantage

import (
	"errors"
	"fmt"
	"math"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
	"github.com/longhaul-rl/longhaul/train"
)

// Estimators (config `advantage.estimator`).
const (
	GRPO   = "grpo"    // (r - mean) / (std + eps), population std over the group
	DrGRPO = "dr_grpo" // r - mean: Dr.GRPO drops the std normalisation
	RLOO   = "rloo"    // r - mean of the other members (leave-one-out)
)

// Credit rules (config `advantage.credit`).
const (
	// Broadcast gives every trainable token the rollout's advantage A.
	Broadcast = "broadcast"
	// Divide gives every trainable token A/K, K = the rollout's segments
	// with trainable tokens: each segment carries an equal share.
	Divide = "divide"
	// CountNormalized gives every trainable token A·N̄/N, N = the rollout's
	// trainable tokens and N̄ their mean over the group's valid rollouts:
	// under a token-mean loss every rollout then weighs the same whatever
	// its length, at the scale of Broadcast for an average-length rollout.
	CountNormalized = "count_normalized"
)

// Summary credit rules (config `grpo.summary_credit`): what the tokens of
// summary calls get, beside the credit rule of the rest. Masking summaries
// out of the loss is segment building's (segment.Config.MaskSummaries);
// here masked spans simply get nothing.
const (
	// SummaryLikeRest gives summary tokens what every other token of the
	// rollout gets under the credit rule (the rollout's advantage under
	// broadcast).
	SummaryLikeRest = "rollout"
	// SummarySeparate scales the summary tokens' value by Nₐ/Nₛ, the
	// group's other trainable tokens over its summary tokens: under a
	// token-mean loss the summary tokens then weigh as much in the
	// gradient as all the other tokens together, however few they are.
	// This is the separated loss of FoldAct (arXiv 2512.22733), which
	// normalizes summary and action tokens on their own against the
	// "gradient dilution" of summaries that are a small share of a
	// rollout's tokens.
	SummarySeparate = "separate"
)

// DefaultEps is GRPO's std floor.
const DefaultEps = 1e-6

// Config selects the estimator and credit rule.
type Config struct {
	Estimator string  `json:"estimator"` // default grpo
	Credit    string  `json:"credit"`    // default broadcast
	Eps       float64 `json:"eps"`       // GRPO std floor; default DefaultEps
	// SummaryCredit is the rule for the tokens of summary calls; default
	// SummaryLikeRest.
	SummaryCredit string `json:"summary_credit"`
}

// ErrConfig wraps configuration errors.
var ErrConfig = errors.New("advantage: bad config")

func (c Config) norm() (Config, error) {
	if c.Estimator == "" {
		c.Estimator = GRPO
	}
	if c.Credit == "" {
		c.Credit = Broadcast
	}
	if c.Eps == 0 {
		c.Eps = DefaultEps
	}
	if c.SummaryCredit == "" {
		c.SummaryCredit = SummaryLikeRest
	}
	switch c.SummaryCredit {
	case SummaryLikeRest, SummarySeparate:
	default:
		return c, fmt.Errorf("%w: unknown summary credit rule %q", ErrConfig, c.SummaryCredit)
	}
	switch c.Estimator {
	case GRPO, DrGRPO, RLOO:
	default:
		return c, fmt.Errorf("%w: unknown estimator %q", ErrConfig, c.Estimator)
	}
	switch c.Credit {
	case Broadcast, Divide, CountNormalized:
	default:
		return c, fmt.Errorf("%w: unknown credit rule %q", ErrConfig, c.Credit)
	}
	return c, nil
}

// Rollout is one member of a group as the estimator sees it.
type Rollout struct {
	ID       runlog.RolloutID
	Reward   float64
	Failed   bool // failed for good: becomes a masked placeholder
	Segments []segment.Segment
}

// Assigned is one member's advantage and training rows.
type Assigned struct {
	ID        runlog.RolloutID
	Advantage float64
	// Placeholder marks a failed member: it keeps the group at its size G,
	// is excluded from the mean and std, gets advantage 0 and has no rows
	// (nothing of it is trained or computed).
	Placeholder bool
	Rows        []train.Row // one per segment, sharing the segment's slices
}

// Group is a group's result; Rollouts is in input order.
type Group struct {
	Rollouts []Assigned
	Valid    int // members in the statistics
	Mean     float64
	Std      float64
}

// Estimate returns the advantage of each reward; members with valid[i]
// false get 0 and are left out of the statistics (valid may be nil: all).
func Estimate(cfg Config, rewards []float64, valid []bool) (adv []float64, mean, std float64, err error) {
	if cfg, err = cfg.norm(); err != nil {
		return nil, 0, 0, err
	}
	ok := func(i int) bool { return valid == nil || valid[i] }
	n, sum := 0, 0.0
	for i, r := range rewards {
		if !ok(i) {
			continue
		}
		if math.IsNaN(r) || math.IsInf(r, 0) {
			return nil, 0, 0, fmt.Errorf("advantage: member %d has reward %v", i, r)
		}
		n++
		sum += r
	}
	adv = make([]float64, len(rewards))
	if n == 0 {
		return adv, 0, 0, nil
	}
	mean = sum / float64(n)
	ss := 0.0
	for i, r := range rewards {
		if ok(i) {
			ss += (r - mean) * (r - mean)
		}
	}
	std = math.Sqrt(ss / float64(n))
	for i, r := range rewards {
		if !ok(i) {
			continue
		}
		switch cfg.Estimator {
		case GRPO:
			adv[i] = (r - mean) / (std + cfg.Eps)
		case DrGRPO:
			adv[i] = r - mean
		case RLOO:
			if n > 1 {
				adv[i] = r - (sum-r)/float64(n-1)
			}
		}
	}
	return adv, mean, std, nil
}

// Compute estimates the group's advantages and assigns them to the
// trainable tokens of every segment by the credit rule.
func Compute(cfg Config, group []Rollout) (Group, error) {
	cfg, err := cfg.norm()
	if err != nil {
		return Group{}, err
	}
	rewards := make([]float64, len(group))
	valid := make([]bool, len(group))
	for i, r := range group {
		rewards[i], valid[i] = r.Reward, !r.Failed
	}
	adv, mean, std, err := Estimate(cfg, rewards, valid)
	if err != nil {
		return Group{}, err
	}
	g := Group{Rollouts: make([]Assigned, len(group)), Mean: mean, Std: std}
	sumScale := float32(1)
	if cfg.SummaryCredit == SummarySeparate {
		sumScale = separateScale(group, valid)
	}
	var meanTok float64
	if cfg.Credit == CountNormalized {
		n := 0
		for i := range group {
			if t := trainable(group[i].Segments); valid[i] && t > 0 {
				meanTok += float64(t)
				n++
			}
		}
		if n > 0 {
			meanTok /= float64(n)
		}
	}
	for i := range group {
		r := &group[i]
		a := Assigned{ID: r.ID, Placeholder: r.Failed}
		if !r.Failed {
			g.Valid++
			a.Advantage = adv[i]
			tok := adv[i]
			switch cfg.Credit {
			case Divide:
				if k := trainableSegments(r.Segments); k > 0 {
					tok /= float64(k)
				}
			case CountNormalized:
				if t := trainable(r.Segments); t > 0 {
					tok *= meanTok / float64(t)
				}
			}
			a.Rows = rows(r.Segments, float32(tok), sumScale)
		}
		g.Rollouts[i] = a
	}
	return g, nil
}

// Rows gives adv to every trainable token of segs, with one allocation
// for all the advantage arrays.
func Rows(segs []segment.Segment, adv float32) []train.Row { return rows(segs, adv, 1) }

// rows is Rows with the summary spans' value scaled by sumScale.
func rows(segs []segment.Segment, adv, sumScale float32) []train.Row {
	n := 0
	for i := range segs {
		n += len(segs[i].Tokens)
	}
	buf := make([]float32, n)
	rows := make([]train.Row, len(segs))
	for i := range segs {
		s := &segs[i]
		a := buf[:len(s.Tokens):len(s.Tokens)]
		buf = buf[len(s.Tokens):]
		if adv != 0 && !s.Masked {
			for _, sp := range s.Spans {
				if sp.Masked {
					continue
				}
				v := adv
				if sp.Summary {
					v *= sumScale
				}
				for j := sp.Start; j < sp.End; j++ {
					a[j] = v
				}
			}
		}
		rows[i] = train.Row{Tokens: s.Tokens, Mask: s.Mask, Advantages: a, OldLogprobs: s.Logprobs}
	}
	return rows
}

// separateScale is SummarySeparate's factor Nₐ/Nₛ over the group's valid
// members: 1 when either count is 0 (nothing to balance).
func separateScale(group []Rollout, valid []bool) float32 {
	var all, sum int
	for i := range group {
		if !valid[i] {
			continue
		}
		all += trainable(group[i].Segments)
		for j := range group[i].Segments {
			sum += group[i].Segments[j].SummaryTokens()
		}
	}
	if sum == 0 || all == sum {
		return 1
	}
	return float32(all-sum) / float32(sum)
}

func trainable(segs []segment.Segment) int {
	n := 0
	for i := range segs {
		n += segs[i].Trainable()
	}
	return n
}

func trainableSegments(segs []segment.Segment) int {
	k := 0
	for i := range segs {
		if segs[i].Trainable() > 0 {
			k++
		}
	}
	return k
}
