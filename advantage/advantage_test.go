package advantage_test

import (
	"errors"
	"math"
	"testing"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-5 }

func TestEstimators(t *testing.T) {
	r := []float64{1, 0, 0.5, 0.5}
	for _, tc := range []struct {
		est  string
		want []float64
	}{
		// mean 0.5, population std sqrt(0.125)
		{advantage.GRPO, []float64{0.5 / math.Sqrt(0.125), -0.5 / math.Sqrt(0.125), 0, 0}},
		{advantage.DrGRPO, []float64{0.5, -0.5, 0, 0}},
		{advantage.RLOO, []float64{1 - 1.0/3, 0 - 2.0/3, 0, 0}},
	} {
		adv, mean, _, err := advantage.Estimate(advantage.Config{Estimator: tc.est}, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if mean != 0.5 {
			t.Fatalf("mean %v", mean)
		}
		for i := range adv {
			if !near(adv[i], tc.want[i]) {
				t.Fatalf("%s: adv %v, want %v", tc.est, adv, tc.want)
			}
		}
	}
	// Equal rewards give zero advantage (no NaN from std 0).
	adv, _, _, _ := advantage.Estimate(advantage.Config{}, []float64{1, 1, 1}, nil)
	for _, a := range adv {
		if a != 0 {
			t.Fatalf("adv %v", adv)
		}
	}
	if _, _, _, err := advantage.Estimate(advantage.Config{Estimator: "ppo"}, r, nil); !errors.Is(err, advantage.ErrConfig) {
		t.Fatalf("err %v", err)
	}
}

// seg makes a segment with n trainable tokens among 2n.
func seg(n int) segment.Segment {
	s := segment.Segment{Tokens: make([]int32, 2*n), Mask: make([]uint8, 2*n), Logprobs: make([]float32, 2*n)}
	for i := n; i < 2*n; i++ {
		s.Mask[i] = 1
	}
	s.Spans = []segment.Span{{Start: n, End: 2 * n}}
	return s
}

func TestFailedMemberIsPlaceholder(t *testing.T) {
	group := []advantage.Rollout{
		{ID: runlog.RolloutID{Member: 0}, Reward: 1, Segments: []segment.Segment{seg(2)}},
		{ID: runlog.RolloutID{Member: 1}, Reward: 0, Segments: []segment.Segment{seg(2)}},
		{ID: runlog.RolloutID{Member: 2}, Reward: 100, Failed: true},
	}
	g, err := advantage.Compute(advantage.Config{Estimator: advantage.DrGRPO}, group)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Rollouts) != 3 || g.Valid != 2 || g.Mean != 0.5 {
		t.Fatalf("%+v", g)
	}
	p := g.Rollouts[2]
	if !p.Placeholder || p.Advantage != 0 || p.Rows != nil {
		t.Fatalf("placeholder %+v", p)
	}
	if g.Rollouts[0].Advantage != 0.5 || g.Rollouts[1].Advantage != -0.5 {
		t.Fatalf("%+v", g.Rollouts)
	}
}

func TestCreditRules(t *testing.T) {
	// Member 0: reward 1, three segments (2, 2 and 4 trainable tokens);
	// member 1: reward 0, one segment of 8. Dr.GRPO: A = +0.5 / -0.5.
	group := []advantage.Rollout{
		{Reward: 1, Segments: []segment.Segment{seg(2), seg(2), seg(4)}},
		{Reward: 0, Segments: []segment.Segment{seg(8)}},
	}
	for _, tc := range []struct {
		credit string
		m0, m1 float32 // per-token advantage of each member
	}{
		{advantage.Broadcast, 0.5, -0.5},
		{advantage.Divide, 0.5 / 3, -0.5},
		{advantage.CountNormalized, 0.5 * 8 / 8, -0.5 * 8 / 8}, // both have 8 trainable tokens
	} {
		g, err := advantage.Compute(advantage.Config{Estimator: advantage.DrGRPO, Credit: tc.credit}, group)
		if err != nil {
			t.Fatal(err)
		}
		for m, want := range []float32{tc.m0, tc.m1} {
			for _, row := range g.Rollouts[m].Rows {
				for i, a := range row.Advantages {
					w := float32(0)
					if row.Mask[i] == 1 {
						w = want
					}
					if math.Abs(float64(a-w)) > 1e-6 {
						t.Fatalf("%s member %d token %d: %v, want %v", tc.credit, m, i, a, w)
					}
				}
			}
		}
		if g.Rollouts[0].Advantage != 0.5 {
			t.Fatalf("logical advantage changed by credit: %v", g.Rollouts[0].Advantage)
		}
	}
	// count_normalized with unequal lengths: total credit per rollout is A·N̄.
	group[1].Segments = []segment.Segment{seg(24)}
	g, _ := advantage.Compute(advantage.Config{Estimator: advantage.DrGRPO, Credit: advantage.CountNormalized}, group)
	sum := func(m int) float64 {
		s := 0.0
		for _, row := range g.Rollouts[m].Rows {
			for _, a := range row.Advantages {
				s += float64(a)
			}
		}
		return s
	}
	if !near(sum(0), 0.5*16) || !near(sum(1), -0.5*16) {
		t.Fatalf("sums %v %v", sum(0), sum(1))
	}
}
