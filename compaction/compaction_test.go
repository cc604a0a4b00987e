package compaction_test

import (
	"testing"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/google/go-cmp/cmp"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/runlog"
)

// msg is a message as it sits in a rollout's context: with its tokens
// (the byte template's rendering).
func msg(t *testing.T, role string, text string) compaction.Message {
	t.Helper()
	m := compaction.NewMessage(role, text)
	toks, err := bytetok.AppendMessage(nil, lhtok.Message{Role: role, Content: text})
	if err != nil {
		t.Fatal(err)
	}
	m.Tokens = toks
	return m
}

// conversation: system, task, then three turns with tool output, ending
// with a pending observation.
func conversation(t *testing.T) []compaction.Message {
	return []compaction.Message{
		msg(t, lhtok.RoleSystem, "sys"),       // 0
		msg(t, lhtok.RoleUser, "task"),        // 1
		msg(t, lhtok.RoleAssistant, "call a"), // 2
		msg(t, lhtok.RoleTool, "out a"),       // 3
		msg(t, lhtok.RoleAssistant, "call b"), // 4
		msg(t, lhtok.RoleTool, "out b"),       // 5
		msg(t, lhtok.RoleAssistant, "call c"), // 6
		msg(t, lhtok.RoleTool, "out c"),       // 7
		msg(t, lhtok.RoleUser, "next?"),       // 8 (pending, same turn)
	}
}

type view struct {
	Roles   []string
	Content []string
	Ops     []runlog.LineageOp
	Changed bool
}

func show(r compaction.Result) view {
	v := view{Changed: r.Changed}
	for _, m := range r.Messages {
		v.Roles = append(v.Roles, m.Role)
		v.Content = append(v.Content, m.Content)
	}
	for i, l := range r.Lineage {
		if int(l.Message) != i {
			panic("lineage out of order")
		}
		v.Ops = append(v.Ops, l.Op)
	}
	return v
}

const (
	K = runlog.OpKept
	D = runlog.OpDropped
	R = runlog.OpReplaced
	S = runlog.OpSummarized
)

func TestRecency(t *testing.T) {
	p, err := compaction.Config{Policy: "recency", KeepTurns: 2}.New()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Compact(conversation(t))
	if err != nil {
		t.Fatal(err)
	}
	want := view{
		Roles:   []string{"system", "user", "assistant", "tool", "assistant", "tool", "user"},
		Content: []string{"sys", "task", "call b", "out b", "call c", "out c", "next?"},
		Ops:     []runlog.LineageOp{K, K, D, D, K, K, K, K, K},
		Changed: true,
	}
	if diff := cmp.Diff(want, show(res)); diff != "" {
		t.Fatal(diff)
	}
	// Kept messages carry their exact tokens.
	if diff := cmp.Diff(conversation(t)[4].Tokens, res.Messages[2].Tokens); diff != "" {
		t.Fatal(diff)
	}
	// Keeping more turns than there are changes nothing.
	res, _ = compaction.Recency{KeepTurns: 5}.Compact(conversation(t))
	if res.Changed || len(res.Messages) != 9 {
		t.Fatalf("%+v", show(res))
	}
	// KeepTurns 0 keeps only what the next call answers.
	res, _ = compaction.Recency{KeepTurns: 0}.Compact(conversation(t))
	if diff := cmp.Diff([]string{"sys", "task", "out c", "next?"}, show(res).Content); diff != "" {
		t.Fatal(diff)
	}
}

func TestElideToolOutput(t *testing.T) {
	p, err := compaction.Config{Policy: "elide_tool_output", KeepTurns: 1}.New()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Compact(conversation(t))
	if err != nil {
		t.Fatal(err)
	}
	want := view{
		Roles:   []string{"system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "user"},
		Content: []string{"sys", "task", "call a", compaction.DefaultElideMarker, "call b", compaction.DefaultElideMarker, "call c", "out c", "next?"},
		Ops:     []runlog.LineageOp{K, K, K, R, K, R, K, K, K},
		Changed: true,
	}
	if diff := cmp.Diff(want, show(res)); diff != "" {
		t.Fatal(diff)
	}
	// Eliding again changes nothing: the markers are already there.
	again, _ := p.Compact(res.Messages)
	if again.Changed {
		t.Fatal("second elision changed the context")
	}
}

func TestSummarize(t *testing.T) {
	p, err := compaction.Config{Policy: "summarize"}.New()
	if err != nil {
		t.Fatal(err)
	}
	sp, ok := p.(compaction.Summarizer)
	if !ok || sp.SummaryRequest() != compaction.DefaultSummaryRequest {
		t.Fatal("summarize is not a Summarizer")
	}
	res, err := sp.Fold(conversation(t), "did a, b, c")
	if err != nil {
		t.Fatal(err)
	}
	want := view{
		Roles:   []string{"system", "user", "summary", "tool", "user"},
		Content: []string{"sys", "task", "did a, b, c", "out c", "next?"},
		Ops:     []runlog.LineageOp{K, K, S, S, S, S, S, K, K, D, D},
		Changed: true,
	}
	if diff := cmp.Diff(want, show(res)); diff != "" {
		t.Fatal(diff)
	}
	if res.Messages[2].Tokens != nil {
		t.Fatalf("the summary carries tokens %v: the rollout renders a written message with the run's template", res.Messages[2].Tokens)
	}
}

func TestThresholdPerGroup(t *testing.T) {
	c := compaction.Config{Policy: "recency", Threshold: 50}
	if c.ThresholdFor(1, 7) != 50 {
		t.Fatal("fixed threshold")
	}
	c.ThresholdMin, c.ThresholdMax = 40, 60
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for g := range runlog.GroupID(200) {
		th := c.ThresholdFor(1, g)
		if th < 40 || th > 60 {
			t.Fatalf("group %d: threshold %d out of range", g, th)
		}
		if th != c.ThresholdFor(1, g) {
			t.Fatal("not deterministic")
		}
		seen[th] = true
	}
	if len(seen) < 15 {
		t.Fatalf("only %d distinct thresholds over 200 groups", len(seen))
	}
	// Fixed values: a change in the derivation changes resumed runs.
	got := []int{c.ThresholdFor(1, 0), c.ThresholdFor(1, 1), c.ThresholdFor(2, 0)}
	t.Logf("thresholds %v", got)
	if got[0] == got[1] && got[1] == got[2] {
		t.Fatal("draws do not depend on seed or group")
	}
	for _, bad := range []compaction.Config{
		{Policy: "recency", ThresholdMin: 60, ThresholdMax: 40},
		{Policy: "nope"},
		{Policy: "recency", KeepTurns: -1},
	} {
		if bad.Validate() == nil {
			t.Fatalf("%+v validated", bad)
		}
	}
}
