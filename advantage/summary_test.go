package advantage_test

import (
	"errors"
	"testing"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
)

// spanSeg is a 10-token segment with the given sampled spans (mask 1 where a
// span is not masked).
func spanSeg(spans ...segment.Span) segment.Segment {
	s := segment.Segment{Tokens: make([]int32, 10), Mask: make([]uint8, 10), Logprobs: make([]float32, 10), Spans: spans}
	for _, sp := range spans {
		for j := sp.Start; j < sp.End; j++ {
			if !sp.Masked {
				s.Mask[j] = 1
			}
		}
	}
	return s
}

// TestSummaryCredit checks what summary tokens get under each rule: the
// rollout's advantage like every other token (rollout), that value times
// the group's other trainable tokens over its summary tokens (separate),
// and nothing where segment building masked them.
func TestSummaryCredit(t *testing.T) {
	group := []advantage.Rollout{
		{ID: runlog.RolloutID{Member: 0}, Reward: 1, Segments: []segment.Segment{
			spanSeg(segment.Span{Start: 0, End: 4}, segment.Span{Start: 4, End: 6, Summary: true})}},
		{ID: runlog.RolloutID{Member: 1}, Reward: 0, Segments: []segment.Segment{
			spanSeg(segment.Span{Start: 0, End: 2}, segment.Span{Start: 2, End: 4, Summary: true},
				segment.Span{Start: 4, End: 6, Summary: true, Masked: true})}},
		// A failed member's tokens count for nothing.
		{ID: runlog.RolloutID{Member: 2}, Failed: true, Segments: []segment.Segment{
			spanSeg(segment.Span{Start: 0, End: 9, Summary: true})}},
	}
	// Trainable: 6 + 4 (the masked span is out) = 10, of which summary 2 + 2:
	// separate scales summary tokens by (10-4)/4.
	const scale = 1.5
	for _, tc := range []struct {
		rule string
		sum  float64
	}{{"", 1}, {advantage.SummaryLikeRest, 1}, {advantage.SummarySeparate, scale}} {
		g, err := advantage.Compute(advantage.Config{SummaryCredit: tc.rule}, group)
		if err != nil {
			t.Fatal(err)
		}
		for m, want := range [][]float64{
			{1, 1, 1, 1, tc.sum, tc.sum, 0, 0, 0, 0},
			{1, 1, tc.sum, tc.sum, 0, 0, 0, 0, 0, 0},
		} {
			adv := g.Rollouts[m].Advantage
			got := g.Rollouts[m].Rows[0].Advantages
			for j := range want {
				if !near(float64(got[j]), want[j]*adv) {
					t.Fatalf("rule %q member %d: advantages %v, want %v × %v", tc.rule, m, got, want, adv)
				}
			}
		}
		if len(g.Rollouts[2].Rows) != 0 {
			t.Fatalf("rule %q: the failed member has rows", tc.rule)
		}
	}
	// Rows, the package's helper, keeps one value for every trainable token.
	rows := advantage.Rows(group[0].Segments, 2)
	for j, v := range rows[0].Advantages[:6] {
		if v != 2 {
			t.Fatalf("Rows: token %d has %v", j, v)
		}
	}
	if _, err := advantage.Compute(advantage.Config{SummaryCredit: "future"}, group); !errors.Is(err, advantage.ErrConfig) {
		t.Fatalf("unknown rule: err %v", err)
	}
}

// TestSeparateWithoutSummaries checks that separate is broadcast when no
// summary was written (nothing to rebalance).
func TestSeparateWithoutSummaries(t *testing.T) {
	group := []advantage.Rollout{
		{Reward: 1, Segments: []segment.Segment{spanSeg(segment.Span{Start: 0, End: 4})}},
		{Reward: 0, Segments: []segment.Segment{spanSeg(segment.Span{Start: 0, End: 4})}},
	}
	g, err := advantage.Compute(advantage.Config{SummaryCredit: advantage.SummarySeparate}, group)
	if err != nil {
		t.Fatal(err)
	}
	if a := g.Rollouts[0].Rows[0].Advantages; !near(float64(a[0]), g.Rollouts[0].Advantage) {
		t.Fatalf("advantages %v", a)
	}
}
