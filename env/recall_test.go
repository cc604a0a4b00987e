package env_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// TestRecallTasks checks the drawn episodes: the configured shape, codes
// only in the first tracked_within observations, every letter distinct.
func TestRecallTasks(t *testing.T) {
	params := json.RawMessage(`{"turns":5,"per_turn":3,"tracked":2,"tracked_within":2}`)
	tasks, err := env.Builtin().Tasks("recall", params, 3, 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		var rt env.RecallTask
		if err := json.Unmarshal(task.Params, &rt); err != nil {
			t.Fatal(err)
		}
		if len(rt.Turns) != 5 {
			t.Fatalf("%s: %d observations", task.ID, len(rt.Turns))
		}
		seen := map[rune]bool{}
		for i, obs := range rt.Turns {
			if len(obs) != 3 {
				t.Fatalf("%s: observation %q", task.ID, obs)
			}
			for _, c := range obs {
				if seen[c] {
					t.Fatalf("%s: letter %c twice", task.ID, c)
				}
				seen[c] = true
				if c >= 'A' && c <= 'Z' && i >= 2 {
					t.Fatalf("%s: code %c in observation %d, after tracked_within", task.ID, c, i)
				}
			}
		}
		if a := env.RecallAnswer(rt); len(a) != 2 || strings.ToUpper(a) != a {
			t.Fatalf("%s: answer %q", task.ID, a)
		}
	}
}

// TestRecallEpisode plays one episode by hand: the observations in order,
// the question, and the answer's reward and success.
func TestRecallEpisode(t *testing.T) {
	ctx := context.Background()
	task := env.Task{Env: "recall", Params: json.RawMessage(`{"turns":["qK","zb","Mx"]}`)}
	for _, tc := range []struct {
		answer  string
		reward  float64
		success bool
	}{
		{"KM", 1, true}, {" KM ", 1, true}, {"MK", 1, false}, {"K", 0.5, false},
		{"KMab", 0.5, false}, {"", 0, false}, {"xy", 0, false},
	} {
		e, err := env.Builtin().New("recall", nil)
		if err != nil {
			t.Fatal(err)
		}
		first, err := e.Reset(ctx, task, 0)
		if err != nil || first != env.RecallTaskMessage {
			t.Fatalf("reset: %q, %v", first, err)
		}
		var obs []string
		for range 4 {
			res, err := e.Step(ctx, "ok")
			if err != nil || res.Done || res.Reward != 0 {
				t.Fatalf("step: %+v, %v", res, err)
			}
			obs = append(obs, res.Observation)
		}
		if got := strings.Join(obs, ","); got != "qK,zb,Mx,?" {
			t.Fatalf("observations %s", got)
		}
		res, err := e.Step(ctx, tc.answer)
		if err != nil || !res.Done || res.Reward != tc.reward || res.Success != tc.success {
			t.Fatalf("answer %q: %+v, %v; want reward %v success %v", tc.answer, res, err, tc.reward, tc.success)
		}
		if _, err := e.Step(ctx, "more"); err == nil {
			t.Fatal("step after the end accepted")
		}
	}
}

// TestRecallSnapshot restores a mid-episode snapshot into a fresh
// environment and checks that both go on alike.
func TestRecallSnapshot(t *testing.T) {
	ctx := context.Background()
	tasks, err := env.Builtin().Tasks("recall", nil, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := env.Builtin().New("recall", nil)
	if _, err := a.Reset(ctx, tasks[0], 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := a.Step(ctx, "ok"); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := a.(env.Snapshotter).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := env.Builtin().New("recall", nil)
	if err := b.(env.Snapshotter).Restore(ctx, snap); err != nil {
		t.Fatal(err)
	}
	for {
		ra, errA := a.Step(ctx, "ok")
		rb, errB := b.Step(ctx, "ok")
		if (errA == nil) != (errB == nil) || ra.Observation != rb.Observation || ra.Done != rb.Done {
			t.Fatalf("diverged: %+v %v / %+v %v", ra, errA, rb, errB)
		}
		if ra.Done {
			break
		}
	}
	if err := b.(env.Snapshotter).Restore(ctx, []byte(`{"task":{"turns":["a"]},"step":9}`)); err == nil {
		t.Fatal("out-of-range snapshot accepted")
	}
}

// TestRecallParams checks that bad knobs are refused with the knob named.
func TestRecallParams(t *testing.T) {
	for params, want := range map[string]string{
		`{"turns":0}`:                "turns",
		`{"tracked":0}`:              "tracked",
		`{"tracked_within":9}`:       "tracked_within",
		`{"per_turn":9}`:             "distractors",
		`{"demo_summary":"best"}`:    "demo_summary",
		`{"demo_keep":0}`:            "demo_keep",
		`{"trackd":1}`:               "trackd",
		`{"tracked":7,"per_turn":1}`: "tracked (7)",
	} {
		_, err := env.Builtin().New("recall", json.RawMessage(params))
		if !errors.Is(err, env.ErrBadParams) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want ErrBadParams naming %q", params, err, want)
		}
	}
}

// recallRun plays the recall oracle of params through the rollout loop
// with compaction cc and the given context budget.
func recallRun(t *testing.T, params string, cc compaction.Config, budget, i int) rollout.Result {
	t.Helper()
	reg := env.Builtin()
	raw := json.RawMessage(params)
	task, err := reg.Task("recall", raw, 5, i)
	if err != nil {
		t.Fatal(err)
	}
	def, _ := reg.Lookup("recall")
	oracle, err := def.Oracle(raw, compaction.DefaultSummaryRequest)
	if err != nil {
		t.Fatal(err)
	}
	g := &scripted.Func{Reply: func(req gen.Request) (string, error) { return oracle(bytetok.Parse(req.Prompt)) }}
	res, err := rollout.Run(context.Background(), rollout.Spec{Seed: 5, Rollout: runlog.RolloutID{Group: runlog.GroupID(i)},
		Task: task, NewEnv: func(context.Context) (env.Environment, error) { return reg.New("recall", raw) },
		Generator: g, Recorder: &scripted.Recorder{}, ObservationRole: tokenizer.RoleUser,
		Limits:     rollout.Limits{MaxTurns: 20, MaxTokensPerCall: 5, ContextBudget: budget},
		Compaction: cc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRecallNeedsSummaries shows what the task is built to show, with the
// shipped knobs (the defaults, examples/recall.yaml) and the scripted
// oracle: at the 62-token budget a summarizer that keeps the codes solves
// every episode, the demonstrations' mix (half the summaries keep the
// codes, half the last letters) about a third, recency compaction none,
// and without compaction the episode does not fit; with a context that
// holds it all, no summary is needed.
func TestRecallNeedsSummaries(t *testing.T) {
	summarize := compaction.Config{Policy: compaction.PolicySummarize, Threshold: 36}
	recency := compaction.Config{Policy: compaction.PolicyRecency, Threshold: 36}
	const n = 60
	count := func(params string, cc compaction.Config, budget int) (success, compacted int) {
		for i := range n {
			res := recallRun(t, params, cc, budget, i)
			if res.Success {
				success++
			}
			if res.Compactions > 0 {
				compacted++
			}
		}
		return success, compacted
	}
	if s, c := count(`{"demo_summary":"tracked","demo_tracked":0}`, summarize, 62); s != n || c != n {
		t.Errorf("summaries that keep the codes: %d of %d solved, %d compacted", s, n, c)
	}
	if s, c := count(`{}`, summarize, 62); s < n/6 || s > n/2 || c != n {
		t.Errorf("the demonstrations' summaries: %d of %d solved (want a sixth to a half), %d compacted", s, n, c)
	} else {
		t.Logf("the demonstrations' summaries solve %d of %d", s, n)
	}
	if s, c := count(`{"demo_summary":"recent","demo_tracked":0}`, summarize, 62); s != 0 || c != n {
		t.Errorf("summaries of the last letters: %d of %d solved (want none), %d compacted", s, n, c)
	}
	if s, c := count(`{}`, recency, 62); s != 0 || c != n {
		t.Errorf("recency: %d of %d solved (want none), %d compacted", s, n, c)
	}
	if s, _ := count(`{}`, compaction.Config{}, 62); s != 0 {
		t.Errorf("no compaction at 62 tokens: %d of %d solved, want none (it does not fit)", s, n)
	}
	if s, _ := count(`{}`, compaction.Config{}, 128); s != n {
		t.Errorf("no compaction at 128 tokens: %d of %d solved, want all", s, n)
	}
}
