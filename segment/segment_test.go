package segment_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
)

var rid = runlog.RolloutID{Group: 3, Member: 2}

// calls turns full prompts into the log's delta form, the way the rollout
// loop records them: PromptPrefix is the common prefix with the previous
// selected call's prompt + sample, or 0 where rewrite is set.
type callSpec struct {
	prompt   string // rendered with tokens: see toks
	sampled  string
	rejected bool
	rewrite  bool
	version  int64
}

// toks renders a compact notation: '^' BOS, 'U' user, 'A' assistant,
// 'S' summary, '.' end, other bytes as themselves.
func toks(s string) []int32 {
	out := make([]int32, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '^':
			out = append(out, bytetok.BOS)
		case 'U':
			out = append(out, bytetok.User)
		case 'A':
			out = append(out, bytetok.Assistant)
		case 'S':
			out = append(out, bytetok.Summary)
		case '.':
			out = append(out, bytetok.End)
		default:
			out = append(out, int32(s[i]))
		}
	}
	return out
}

func mkCalls(specs ...callSpec) []runlog.CallFinished {
	var prev []int32
	var out []runlog.CallFinished
	for i, s := range specs {
		p, smp := toks(s.prompt), toks(s.sampled)
		n := 0
		if !s.rewrite && prev != nil {
			for n < len(prev) && n < len(p) && prev[n] == p[n] {
				n++
			}
		}
		lp := make([]float32, len(smp))
		for j := range lp {
			lp[j] = -float32(i+1) / 10
		}
		out = append(out, runlog.CallFinished{Rollout: rid, Attempt: 1, Call: uint32(i), PromptPrefix: uint32(n),
			PromptSuffix: p[n:], Sampled: smp, Logprobs: lp, Finish: runlog.FinishStop, Version: s.version, Selected: !s.rejected})
		if !s.rejected {
			prev = append(slices.Clone(p), smp...)
		}
	}
	return out
}

func boundary(i, after uint32) runlog.Compaction {
	return runlog.Compaction{Rollout: rid, Attempt: 1, Boundary: i, AfterCall: after, Policy: "recency"}
}

type golden struct {
	Start    string
	Tokens   string
	Mask     string // '1' / '0' per token
	Logprobs []float32
	Spans    []segment.Span
}

func summarize(segs []segment.Segment) []golden {
	var out []golden
	for _, s := range segs {
		var m strings.Builder
		for _, b := range s.Mask {
			m.WriteByte('0' + b)
		}
		out = append(out, golden{Start: s.Start, Tokens: bytetok.Decode(s.Tokens), Mask: m.String(), Logprobs: s.Logprobs, Spans: s.Spans})
	}
	return out
}

func TestPlainAppend(t *testing.T) {
	calls := mkCalls(
		callSpec{prompt: "^Uhi.A", sampled: "ok.", version: 1},
		callSpec{prompt: "^Uhi.Aok.Umore.A", sampled: "x.", version: 2},
		callSpec{prompt: "^Uhi.Aok.Umore.Ax.UA", sampled: "no", rejected: true, version: 2},
		callSpec{prompt: "^Uhi.Aok.Umore.Ax.UA", sampled: "y.", version: 3},
	)
	segs, st, err := segment.Build(calls, nil, segment.Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := []golden{{
		Start:    segment.StartFirst,
		Tokens:   "<|bos|><|user|>hi<|end|><|assistant|>ok<|end|><|user|>more<|end|><|assistant|>x<|end|><|user|><|assistant|>y<|end|>",
		Mask:     "0000001110000000110011",
		Logprobs: []float32{0, 0, 0, 0, 0, 0, -.1, -.1, -.1, 0, 0, 0, 0, 0, 0, 0, -.2, -.2, 0, 0, -.4, -.4},
		Spans:    []segment.Span{{Start: 6, End: 9, Call: 0, Version: 1}, {Start: 16, End: 18, Call: 1, Version: 2}, {Start: 20, End: 22, Call: 3, Version: 3}},
	}}
	if diff := cmp.Diff(want, summarize(segs)); diff != "" {
		t.Fatalf("(-want +got)\n%s", diff)
	}
	if st.Rejected != 1 || st.Segments != 1 || st.Sampled != 7 || st.Trainable != 7 {
		t.Fatalf("stats %+v", st)
	}
	if v := segs[0].Versions(); v[6] != 1 || v[21] != 3 || v[0] != -1 {
		t.Fatalf("versions %v", v)
	}
}

func compacted() []runlog.CallFinished {
	return mkCalls(
		callSpec{prompt: "^Ut.A", sampled: "1."},
		callSpec{prompt: "^Ut.A1.U+2.A", sampled: "3."},
		callSpec{prompt: "^Ut.A3.U+4.A", sampled: "7.", rewrite: true},
		callSpec{prompt: "^Ut.A3.U+4.A7.U-1.A", sampled: "6."},
	)
}

func TestCompaction(t *testing.T) {
	segs, st, err := segment.Build(compacted(), []runlog.Compaction{boundary(0, 1)}, segment.Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := []golden{
		{Start: segment.StartFirst, Tokens: "<|bos|><|user|>t<|end|><|assistant|>1<|end|><|user|>+2<|end|><|assistant|>3<|end|>",
			Mask: "00000110000011", Logprobs: []float32{0, 0, 0, 0, 0, -.1, -.1, 0, 0, 0, 0, 0, -.2, -.2},
			Spans: []segment.Span{{Start: 5, End: 7, Call: 0}, {Start: 12, End: 14, Call: 1}}},
		{Start: segment.StartDeclared, Tokens: "<|bos|><|user|>t<|end|><|assistant|>3<|end|><|user|>+4<|end|><|assistant|>7<|end|><|user|>-1<|end|><|assistant|>6<|end|>",
			Mask: "000000000000110000011", Logprobs: []float32{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -.3, -.3, 0, 0, 0, 0, 0, -.4, -.4},
			Spans: []segment.Span{{Start: 12, End: 14, Call: 2}, {Start: 19, End: 21, Call: 3}}},
	}
	if diff := cmp.Diff(want, summarize(segs)); diff != "" {
		t.Fatalf("(-want +got)\n%s", diff)
	}
	if st.Declared != 1 || st.Segments != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Segments do not overlap in memory: appending to one leaves the next.
	_ = append(segs[0].Tokens, 999)
	if segs[1].Tokens[0] != bytetok.BOS {
		t.Fatal("segments share writable memory")
	}
}

func TestUndeclaredBreak(t *testing.T) {
	_, _, err := segment.Build(compacted(), nil, segment.Config{DiffWindow: 4, Tokenizer: bytetok.Tok{}})
	var be *segment.BreakError
	if !errors.As(err, &be) || !errors.Is(err, segment.ErrUndeclaredBreak) {
		t.Fatalf("err %v", err)
	}
	want := `segment: rollout 3/2 call 2: prefix break without a declared boundary: first difference at token 5 (context 14 tokens, prompt 12); from token 1:
  context: "…<|user|>t<|end|><|assistant|>1<|end|><|user|>+…"
  prompt:  "…<|user|>t<|end|><|assistant|>3<|end|><|user|>+…"`
	if err.Error() != want {
		t.Fatalf("error text:\n%s\nwant:\n%s", err, want)
	}
	if be.Pos != 5 || be.Call != 2 {
		t.Fatalf("%+v", be)
	}
}

// TestUndeclaredBreakWithoutTokenizer: with no tokenizer in the config the
// error shows the token ids, the same tokens the run's tokenizer renders.
func TestUndeclaredBreakWithoutTokenizer(t *testing.T) {
	_, _, err := segment.Build(compacted(), nil, segment.Config{DiffWindow: 4})
	var be *segment.BreakError
	if !errors.As(err, &be) {
		t.Fatalf("err %v", err)
	}
	_, _, err = segment.Build(compacted(), nil, segment.Config{DiffWindow: 4, Tokenizer: bytetok.Tok{}})
	var text *segment.BreakError
	if !errors.As(err, &text) {
		t.Fatalf("err %v", err)
	}
	for _, c := range []struct{ ids, text string }{{be.Context, text.Context}, {be.Prompt, text.Prompt}} {
		inner, pre := strings.CutPrefix(c.ids, "…[")
		inner, post := strings.CutSuffix(inner, "]…")
		if !pre || !post {
			t.Fatalf("ids %q: want …[id id …]…", c.ids)
		}
		var ids []int32
		for _, f := range strings.Fields(inner) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("ids %q: %v", c.ids, err)
			}
			ids = append(ids, int32(n))
		}
		var tok bytetok.Tok
		if got := "…" + tok.Decode(ids) + "…"; got != c.text {
			t.Fatalf("ids %q decode to %q, the tokenizer's rendering is %q", c.ids, got, c.text)
		}
	}
}

func TestUndeclaredBreakModes(t *testing.T) {
	for _, mode := range []string{segment.OnBreakSplit, segment.OnBreakMask} {
		segs, st, err := segment.Build(compacted(), nil, segment.Config{OnUndeclaredBreak: mode})
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) != 2 || st.Undeclared != 1 || segs[1].Start != segment.StartUndeclared {
			t.Fatalf("%s: %d segments, %+v", mode, len(segs), st)
		}
		wantTrain := 8
		if mode == segment.OnBreakMask {
			wantTrain = 4
			if !segs[1].Masked || slices.Contains(segs[1].Mask, 1) {
				t.Fatalf("mask: second segment trainable")
			}
		}
		if st.Trainable != wantTrain {
			t.Fatalf("%s: trainable %d", mode, st.Trainable)
		}
	}
}

func TestDeclaredBoundaryWithoutBreak(t *testing.T) {
	calls := mkCalls(
		callSpec{prompt: "^Ut.A", sampled: "1."},
		callSpec{prompt: "^Ut.A1.U+2.A", sampled: "3."},
	)
	_, _, err := segment.Build(calls, []runlog.Compaction{boundary(0, 0)}, segment.Config{})
	if !errors.Is(err, segment.ErrBoundaryWithoutBreak) {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(err.Error(), "boundary 0 (recency, after call 0) but call 1 extends the previous context exactly") {
		t.Fatalf("text %q", err)
	}
	// A rewrite stored whole (PromptPrefix 0) that in fact extends the
	// context is a continuation, not a break.
	calls = mkCalls(
		callSpec{prompt: "^Ut.A", sampled: "1."},
		callSpec{prompt: "^Ut.A1.U+2.A", sampled: "3.", rewrite: true},
	)
	segs, _, err := segment.Build(calls, nil, segment.Config{})
	if err != nil || len(segs) != 1 {
		t.Fatalf("%d segments, err %v", len(segs), err)
	}
	// A boundary after the last call is ignored (the rollout ended first).
	if _, _, err := segment.Build(calls, []runlog.Compaction{boundary(0, 1)}, segment.Config{}); err != nil {
		t.Fatal(err)
	}
}

func TestContractErrors(t *testing.T) {
	calls := compacted()
	calls[1].Logprobs = calls[1].Logprobs[:1]
	if _, _, err := segment.Build(calls, nil, segment.Config{}); !errors.Is(err, segment.ErrContract) {
		t.Fatalf("err %v", err)
	}
	calls = compacted()
	calls[1].PromptPrefix = 1000
	if _, _, err := segment.Build(calls, nil, segment.Config{}); !errors.Is(err, segment.ErrContract) {
		t.Fatalf("err %v", err)
	}
}

// TestTrainableTokensProperty: over random rollouts with random
// compactions and rejections, the trainable tokens of all segments are
// exactly the sampled tokens of the selected calls, each once, in order.
func TestTrainableTokensProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		calls, bounds := randomRollout(t)
		segs, st, err := segment.Build(calls, bounds, segment.Config{})
		if err != nil {
			t.Fatal(err)
		}
		var want, got [][]int32
		var wantIDs, gotIDs []uint32
		for _, c := range calls {
			if c.Selected {
				want = append(want, c.Sampled)
				wantIDs = append(wantIDs, c.Call)
			}
		}
		masked := 0
		for _, s := range segs {
			if len(s.Tokens) != len(s.Mask) || len(s.Tokens) != len(s.Logprobs) {
				t.Fatal("ragged segment")
			}
			covered := make([]bool, len(s.Tokens))
			for _, sp := range s.Spans {
				got = append(got, s.Tokens[sp.Start:sp.End])
				gotIDs = append(gotIDs, sp.Call)
				for i := sp.Start; i < sp.End; i++ {
					covered[i] = true
				}
			}
			for i, m := range s.Mask {
				if (m == 1) != covered[i] {
					t.Fatalf("mask at %d = %d, covered %v", i, m, covered[i])
				}
				if m == 1 {
					masked++
				}
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("sampled tokens differ (-want +got)\n%s", diff)
		}
		if !slices.Equal(wantIDs, gotIDs) || masked != st.Sampled || st.Trainable != masked {
			t.Fatalf("ids %v vs %v, masked %d, stats %+v", wantIDs, gotIDs, masked, st)
		}
		if st.Segments != st.Declared+1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// randomRollout simulates the loop: contexts grow by appending, rejected
// samples leave the context alone, and a compaction rewrites the context
// to a proper prefix plus fresh tokens that differ right after it.
func randomRollout(t *rapid.T) ([]runlog.CallFinished, []runlog.Compaction) {
	tok := rapid.Int32Range(0, bytetok.VocabSize-1)
	seq := func(label string, lo, hi int) []int32 { return rapid.SliceOfN(tok, lo, hi).Draw(t, label) }
	n := rapid.IntRange(1, 30).Draw(t, "calls")
	ctx := append([]int32{bytetok.BOS}, seq("task", 0, 20)...)
	var prev []int32
	var calls []runlog.CallFinished
	var bounds []runlog.Compaction
	rewrite := false
	for i := range n {
		if i > 0 && calls[i-1].Selected && rapid.IntRange(0, 4).Draw(t, "compact") == 0 {
			keep := rapid.IntRange(0, len(ctx)-1).Draw(t, "keep")
			diff := (ctx[keep] + 1 + rapid.Int32Range(0, bytetok.VocabSize-2).Draw(t, "diff")) % bytetok.VocabSize
			ctx = append(append(slices.Clone(ctx[:keep]), diff), seq("fresh", 0, 10)...)
			bounds = append(bounds, runlog.Compaction{Rollout: rid, Boundary: uint32(len(bounds)), AfterCall: calls[len(calls)-1].Call})
			rewrite = true
		} else if i > 0 {
			ctx = append(ctx, seq("obs", 0, 6)...)
		}
		p := 0
		if !rewrite && prev != nil {
			p = len(prev) // the context extends prev by construction
		} else if rewrite && rapid.Bool().Draw(t, "storePrefix") {
			// A recorder may also store the shared prefix of a rewrite.
			for p < len(prev) && p < len(ctx) && prev[p] == ctx[p] {
				p++
			}
		}
		smp := seq("sampled", 1, 8)
		lp := make([]float32, len(smp))
		selected := rapid.IntRange(0, 5).Draw(t, "reject") != 0 || i == n-1
		calls = append(calls, runlog.CallFinished{Rollout: rid, Call: uint32(i), PromptPrefix: uint32(p),
			PromptSuffix: slices.Clone(ctx[p:]), Sampled: smp, Logprobs: lp, Selected: selected})
		if selected {
			ctx = append(slices.Clone(ctx), smp...)
			prev = ctx
			rewrite = false
		}
	}
	return calls, bounds
}
