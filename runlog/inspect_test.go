package runlog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/longhaul-rl/longhaul/failure"
)

func TestInspect(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("RUNLOG_INSPECT_DIR"); d != "" {
		dir = d // keep the run directory to try the CLI on
	}
	l := openLog(t, dir, Options{})
	g0, g1 := NewGroupID(testSeed, 0, 0), NewGroupID(testSeed, 0, 1)
	r0 := RolloutID{g0, 0}
	prompt, _ := bytetok.Render([]lhtok.Message{{Role: lhtok.RoleUser, Content: "hi"}}, true)
	sample := append(bytetok.Encode("yo"), bytetok.End)
	mustAppend(t, l, RunStarted{Seed: testSeed, Mode: "deterministic"},
		PromptAdmitted{Cursor: 0, PromptID: "p0", Group: g0, Size: 1},
		PromptAdmitted{Cursor: 1, PromptID: "p1", Group: g1, Size: 1})
	mustAppend(t, l, AttemptStarted{Rollout: r0, Attempt: 1, Seed: 5})
	mustAppend(t, l, RolloutFailed{Rollout: r0, Attempt: 1, Class: failure.Infra, Reason: "503"})
	mustAppend(t, l, AttemptStarted{Rollout: r0, Attempt: 2, Seed: 6})
	mustAppend(t, l, CallFinished{Rollout: r0, Attempt: 2, Call: 0, PromptSuffix: prompt, Sampled: sample, Logprobs: make([]float32, len(sample)), Finish: FinishStop, Selected: true})
	mustAppend(t, l, EnvStep{Rollout: r0, Attempt: 2, Turn: 0, Action: "yo", Observation: "ok", Reward: 1, Done: true})
	mustAppend(t, l, Compaction{Rollout: r0, Attempt: 2, Boundary: 0, AfterCall: 0, Policy: "recency", Lineage: []Lineage{{0, OpKept}, {1, OpDropped}}})
	mustAppend(t, l, CallFinished{Rollout: r0, Attempt: 2, Call: 1, PromptSuffix: []int32{bytetok.BOS}, Sampled: sample, Logprobs: make([]float32, len(sample)), Finish: FinishStop, Selected: true})
	mustAppend(t, l, RolloutSealed{Rollout: r0, Attempt: 2, Outcome: OutcomeCompleted, Reward: 1, Success: true}, GroupCommitted{Group: g0})
	mustAppend(t, l, StepTrained{Step: 1, Groups: []GroupID{g0}, Version: 1})
	mustAppend(t, l, CheckpointDurable{Step: 1, Version: 1, Path: "ckpt/step-1"})
	if _, err := l.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Close()
	os.MkdirAll(filepath.Join(dir, "weights"), 0o755)
	os.WriteFile(filepath.Join(dir, weightsFile), []byte("weights"), 0o644)

	rep, err := Inspect(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"step", "version", "trained", "calls_generated", "weights_sha256", "counts", "groups", "rollouts", "last_snapshot", "last_checkpoint"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	sum := sha256.Sum256([]byte("weights"))
	if rep.Step != 1 || rep.Version != 1 || rep.CallsGenerated != 2 || rep.WeightsSHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("report: %s", b)
	}
	tr := m["trained"].([]any)[0].(map[string]any)
	if tr["step"].(float64) != 1 || tr["prompt_ids"].([]any)[0] != "p0" || tr["group_ids"].([]any)[0] != g0.String() {
		t.Fatalf("trained entry: %v", tr)
	}
	if rep.Groups["trained"] != 1 || rep.Groups["open"] != 1 || rep.Rollouts["sealed"] != 1 || rep.Rollouts["pending"] != 1 || rep.Counts["CallFinished"] != 2 {
		t.Fatalf("counts: %s", b)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Log("\n" + text.String())

	rr, err := InspectRollout(context.Background(), dir, r0)
	if err != nil {
		t.Fatal(err)
	}
	rr.Decode(bytetok.Tok{})
	if len(rr.Calls) != 2 || rr.Calls[0].Prompt != bytetok.Decode(prompt) || rr.Calls[0].Sampled != "yo<|end|>" || rr.Calls[1].Segment != 1 ||
		len(rr.Failures) != 1 || rr.Failures[0].Class != failure.Infra || len(rr.Compactions) != 1 || len(rr.EnvSteps) != 1 || len(rr.Attempts) != 2 {
		b, _ := json.MarshalIndent(rr, "", " ")
		t.Fatalf("rollout report: %s", b)
	}
	text.Reset()
	rr.WriteText(&text)
	if !strings.Contains(text.String(), "compaction 0 by recency") {
		t.Fatalf("text: %s", text.String())
	}
	t.Log("\n" + text.String())
	if _, err := InspectRollout(context.Background(), dir, RolloutID{g0, 5}); err == nil {
		t.Fatal("unknown rollout accepted")
	}
}
