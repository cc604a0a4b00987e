package segment_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
)

// summarized is a rollout whose call 2 writes a summary that a summarize
// compaction folds into the context of call 3.
func summarized() ([]runlog.CallFinished, runlog.Compaction) {
	calls := mkCalls(
		callSpec{prompt: "^Ut.A", sampled: "ok."},
		callSpec{prompt: "^Ut.Aok.Ua3.A", sampled: "ok."},
		callSpec{prompt: "^Ut.Aok.Ua3.Aok.Ub4.Usummarize.A", sampled: "a3."},
		callSpec{prompt: "^Ut.Sa3.Ub4.A", sampled: "ok.", rewrite: true},
	)
	b := runlog.Compaction{Rollout: rid, Attempt: 1, Boundary: 0, AfterCall: 2, Policy: "summarize",
		Lineage: []runlog.Lineage{{Message: 0, Op: runlog.OpKept}, {Message: 1, Op: runlog.OpSummarized},
			{Message: 2, Op: runlog.OpSummarized}, {Message: 3, Op: runlog.OpSummarized}, {Message: 4, Op: runlog.OpKept},
			{Message: 5, Op: runlog.OpDropped}, {Message: 6, Op: runlog.OpDropped}}}
	return calls, b
}

// TestSummaryCalls checks that the call before a summarizing boundary is
// marked as a summary call, that MaskSummaries takes exactly its tokens
// out of the loss, and that a boundary that folds nothing into a summary
// (recency) marks no call.
func TestSummaryCalls(t *testing.T) {
	calls, b := summarized()
	spans := func(masked bool) [][]segment.Span {
		return [][]segment.Span{
			{{Start: 5, End: 8, Call: 0}, {Start: 13, End: 16, Call: 1}, {Start: 32, End: 35, Call: 2, Summary: true, Masked: masked}},
			{{Start: 13, End: 16, Call: 3}},
		}
	}
	for _, mask := range []bool{false, true} {
		segs, st, err := segment.Build(calls, []runlog.Compaction{b}, segment.Config{MaskSummaries: mask})
		if err != nil {
			t.Fatal(err)
		}
		var got [][]segment.Span
		for _, s := range segs {
			got = append(got, s.Spans)
		}
		if diff := cmp.Diff(spans(mask), got); diff != "" {
			t.Fatalf("mask %v: spans (-want +got)\n%s", mask, diff)
		}
		wantTrain, wantSum := 12, 3
		if mask {
			wantTrain, wantSum = 9, 0
		}
		if st.Summaries != 1 || st.Summary != 3 || st.Sampled != 12 || st.Trainable != wantTrain {
			t.Fatalf("mask %v: stats %+v", mask, st)
		}
		if n := segs[0].Trainable() + segs[1].Trainable(); n != wantTrain {
			t.Fatalf("mask %v: Trainable() sums to %d, want %d", mask, n, wantTrain)
		}
		if n := segs[0].SummaryTokens(); n != wantSum {
			t.Fatalf("mask %v: SummaryTokens() = %d, want %d", mask, n, wantSum)
		}
		want := uint8(1)
		if mask {
			want = 0
		}
		for i := 32; i < 35; i++ {
			if segs[0].Mask[i] != want {
				t.Fatalf("mask %v: summary token %d has mask %d, want %d", mask, i, segs[0].Mask[i], want)
			}
		}
		// Every other sampled token keeps its mask: the rest is still trained.
		for _, i := range []int{5, 6, 7, 13, 14, 15} {
			if segs[0].Mask[i] != 1 {
				t.Fatalf("mask %v: action token %d masked", mask, i)
			}
		}
		if segs[1].Mask[13] != 1 {
			t.Fatalf("mask %v: the call after the summary is masked", mask)
		}
	}
	// The same break declared by a policy that summarizes nothing.
	b.Policy = "recency"
	for i := range b.Lineage {
		if b.Lineage[i].Op == runlog.OpSummarized {
			b.Lineage[i].Op = runlog.OpDropped
		}
	}
	segs, st, err := segment.Build(calls, []runlog.Compaction{b}, segment.Config{MaskSummaries: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Summaries != 0 || st.Trainable != 12 || segs[0].Spans[2].Summary || segs[0].Spans[2].Masked {
		t.Fatalf("recency boundary: stats %+v, span %+v", st, segs[0].Spans[2])
	}
}
