// Package batch packs training rows into microbatches by a token budget
// and keeps the logical counts (groups, rollouts: what the learning-rate
// schedule and metrics count) apart from the physical ones (rows, tokens,
// padding: what the trainer computes).
package batch

import (
	"fmt"
	"slices"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/train"
)

// Counts describes a packed batch.
type Counts struct {
	// Logical.
	Groups       int
	Rollouts     int // members with rows or placeholders, i.e. G per group
	Placeholders int // failed members: counted, never computed
	// Physical.
	Rows         int
	Tokens       int // real tokens over all rows
	Trainable    int // tokens with Mask 1
	Padding      int // pad tokens if each microbatch is padded to its longest row
	Microbatches int
	Oversize     int // rows longer than the budget, each alone in a microbatch
}

// Pack flattens the groups' rows (group, member, segment order) into a
// train.Batch and partitions them into microbatches whose padded size
// (rows × longest row) is at most budget tokens. Rows are placed longest
// first, which keeps padding low; the order is deterministic. budget <= 0
// gives one microbatch (Batch.Microbatches nil).
func Pack(loss string, groups []advantage.Group, budget int) (train.Batch, Counts, error) {
	var c Counts
	b := train.Batch{Loss: loss}
	for _, g := range groups {
		c.Groups++
		for _, r := range g.Rollouts {
			c.Rollouts++
			if r.Placeholder {
				c.Placeholders++
			}
			for _, row := range r.Rows {
				if len(row.Mask) != len(row.Tokens) || len(row.Advantages) != len(row.Tokens) || len(row.OldLogprobs) != len(row.Tokens) {
					return train.Batch{}, Counts{}, fmt.Errorf("batch: row of rollout %d/%d has mismatched lengths", r.ID.Group, r.ID.Member)
				}
				b.Rows = append(b.Rows, row)
				c.Tokens += len(row.Tokens)
				for _, m := range row.Mask {
					c.Trainable += int(m)
				}
			}
		}
	}
	c.Rows = len(b.Rows)
	if c.Rows == 0 {
		return b, c, nil
	}
	if budget <= 0 {
		longest := 0
		for _, r := range b.Rows {
			longest = max(longest, len(r.Tokens))
		}
		c.Padding = longest*c.Rows - c.Tokens
		c.Microbatches = 1
		return b, c, nil
	}
	order := make([]int, c.Rows)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return len(b.Rows[y].Tokens) - len(b.Rows[x].Tokens) })
	var mb []int
	longest, sum := 0, 0
	flush := func() {
		if len(mb) > 0 {
			b.Microbatches = append(b.Microbatches, mb)
			c.Padding += longest*len(mb) - sum
		}
		mb, longest, sum = nil, 0, 0
	}
	for _, i := range order {
		n := len(b.Rows[i].Tokens)
		if n > budget {
			flush()
			c.Oversize++
			mb, longest, sum = []int{i}, n, n
			flush()
			continue
		}
		if len(mb) > 0 && max(longest, n)*(len(mb)+1) > budget {
			flush()
		}
		mb = append(mb, i)
		longest, sum = max(longest, n), sum+n
	}
	flush()
	c.Microbatches = len(b.Microbatches)
	return b, c, nil
}
