package env_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/longhaul-rl/longhaul/env"
)

func TestRegistry(t *testing.T) {
	r := env.Builtin()
	if diff := cmp.Diff([]string{"guess", "ledger", "recall"}, r.Names()); diff != "" {
		t.Fatal(diff)
	}
	if _, err := r.New("nope", nil); !errors.Is(err, env.ErrUnknown) {
		t.Fatalf("err %v", err)
	}
	if _, err := r.New("ledger", json.RawMessage(`{"turns":0}`)); !errors.Is(err, env.ErrBadParams) {
		t.Fatalf("err %v", err)
	}
	if _, err := r.New("ledger", json.RawMessage(`{"trns":3}`)); !errors.Is(err, env.ErrBadParams) {
		t.Fatalf("unknown field accepted: %v", err)
	}
	if err := r.Register(env.LedgerDefinition()); err == nil {
		t.Fatal("double registration accepted")
	}
}

func TestTasksDeterministicAndJSON(t *testing.T) {
	r := env.Builtin()
	for _, name := range r.Names() {
		a, err := r.Tasks(name, nil, 11, 20)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := r.Tasks(name, nil, 11, 20)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Fatalf("%s: tasks not deterministic: %s", name, diff)
		}
		c, _ := r.Tasks(name, nil, 12, 20)
		if cmp.Equal(a, c) {
			t.Fatalf("%s: seed does not change tasks", name)
		}
		ids := map[string]bool{}
		for _, task := range a {
			ids[task.ID] = true
			line, err := json.Marshal(task)
			if err != nil {
				t.Fatal(err)
			}
			var back env.Task
			if err := json.Unmarshal(line, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(task, back); diff != "" {
				t.Fatalf("JSON round trip: %s", diff)
			}
		}
		if len(ids) != 20 {
			t.Fatalf("%s: duplicate task ids", name)
		}
	}
}

// TestLedgerEpisode: one wrong answer ends the episode by default
// (stop_on_error) and is only scored wrong with stop_on_error off.
func TestLedgerEpisode(t *testing.T) {
	for _, stop := range []bool{true, false} {
		t.Run(fmt.Sprintf("stop_on_error=%v", stop), func(t *testing.T) { testLedgerEpisode(t, stop) })
	}
}

func testLedgerEpisode(t *testing.T, stop bool) {
	ctx := context.Background()
	params := json.RawMessage(fmt.Sprintf(`{"turns":4,"stop_on_error":%v}`, stop))
	r := env.Builtin()
	task, _ := r.Task("ledger", params, 1, 0)
	var lt env.LedgerTask
	if err := json.Unmarshal(task.Params, &lt); err != nil {
		t.Fatal(err)
	}
	e, _ := r.New("ledger", params)
	obs, err := e.Reset(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	if obs != task.Prompt || obs != "start "+strconv.Itoa(lt.Start)+" "+signed(lt.Deltas[0]) {
		t.Fatalf("first message %q", obs)
	}
	answers := env.LedgerAnswers(lt)
	var total float64
	last := 3
	if stop {
		last = 2
	}
	for i, a := range answers[:last+1] {
		if i == 2 {
			a = "x" // one wrong answer
		}
		res, err := e.Step(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		total += res.Reward
		if res.Done != (i == last) {
			t.Fatalf("turn %d done=%v", i, res.Done)
		}
		if !res.Done && res.Observation != signed(lt.Deltas[i+1]) {
			t.Fatalf("turn %d observation %q", i, res.Observation)
		}
		if res.Done && res.Success {
			t.Fatal("success with a wrong answer")
		}
	}
	if want := map[bool]float64{true: 0.5, false: 0.75}[stop]; total != want {
		t.Fatalf("reward %v", total)
	}
	if _, err := e.Step(ctx, "1"); err == nil {
		t.Fatal("step after the end accepted")
	}
}

func signed(d int) string {
	if d >= 0 {
		return "+" + strconv.Itoa(d)
	}
	return strconv.Itoa(d)
}

// TestSnapshotRestore: a restored environment continues exactly like the
// original, for every built-in environment and every step.
func TestSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	r := env.Builtin()
	actions := map[string][]string{"ledger": {"1", "2", "3", "4", "5", "6"}, "guess": {"8", "4", "2", "9", "1"}}
	// Arbitrary answers are mostly wrong: keep the ledger episode going.
	params := map[string]json.RawMessage{"ledger": json.RawMessage(`{"stop_on_error":false}`)}
	for _, name := range r.Names() {
		task, _ := r.Task(name, nil, 5, 3)
		for cut := 0; cut < len(actions[name]); cut++ {
			a, _ := r.New(name, params[name])
			if _, err := a.Reset(ctx, task, 0); err != nil {
				t.Fatal(err)
			}
			for _, act := range actions[name][:cut] {
				if _, err := a.Step(ctx, act); err != nil {
					t.Fatal(err)
				}
			}
			state, err := a.(env.Snapshotter).Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := r.New(name, params[name])
			if err := b.(env.Snapshotter).Restore(ctx, state); err != nil {
				t.Fatal(err)
			}
			for _, act := range actions[name][cut:] {
				ra, erra := a.Step(ctx, act)
				rb, errb := b.Step(ctx, act)
				if (erra == nil) != (errb == nil) || !cmp.Equal(ra, rb) {
					t.Fatalf("%s cut %d: %v/%v vs %v/%v", name, cut, ra, erra, rb, errb)
				}
				if ra.Done {
					break
				}
			}
		}
	}
}

func TestGuess(t *testing.T) {
	ctx := context.Background()
	e, _ := env.Builtin().New("guess", nil)
	task := env.Task{ID: "g", Env: "guess", Params: json.RawMessage(`{"size":16,"secret":11}`)}
	if obs, err := e.Reset(ctx, task, 0); err != nil || obs != "guess 0-15" {
		t.Fatalf("%q %v", obs, err)
	}
	for _, step := range []struct{ a, obs string }{{"7", "higher"}, {"13", "lower"}, {"zz", "?"}, {"11", "correct"}} {
		res, err := e.Step(ctx, step.a)
		if err != nil || res.Observation != step.obs {
			t.Fatalf("%q: %+v %v", step.a, res, err)
		}
		if step.obs == "correct" && (!res.Done || !res.Success || res.Reward != 1) {
			t.Fatalf("%+v", res)
		}
	}
	if _, err := e.Reset(ctx, env.Task{Params: json.RawMessage(`{"size":4,"secret":9}`)}, 0); !errors.Is(err, env.ErrBadParams) {
		t.Fatalf("err %v", err)
	}
}
