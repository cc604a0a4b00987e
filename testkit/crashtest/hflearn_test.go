package crashtest

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/race"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// Learning with an HF model: `longhaul train --config
// examples/qwen3-guess.yaml model.path=DIR` on a tiny random Qwen3 (2
// layers, hidden 64, the real Qwen3 tokenizer and its 151,669-token
// vocabulary) made by `longhaul init-model`. The task is guess (binary
// search over 0-7, four guesses); the warm start plays the binary-search
// oracle through the Qwen3 template, then GRPO runs. Before: the same model
// and config without the warm start, one step, in process. After: the
// warm start and GRPO with generation by `longhaul serve --model DIR` (the
// issue's path: generator.kind openai). The thresholds:
const (
	hfLearnBeforeMax = 0.05 // success rate of the untrained model (it never writes a number)
	hfLearnAfterMin  = 0.5  // mean success rate over the last hfLearnLast RL steps
	hfLearnLast      = 3
	hfLearnSteps     = 5 // run.max_steps in examples/qwen3-guess.yaml
)

func TestHFModelLearns(t *testing.T) {
	if race.Enabled {
		t.Skip("trains for minutes: run without -race (.ci/steps/14-hflearn.sh)")
	}
	bin, modelDir := tinyQwen3(t, "LONGHAUL_HF_LEARN") // .ci/steps/14-hflearn.sh sets it
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cfg := filepath.Join(root, "examples", "qwen3-guess.yaml")
	port := proctest.FreePort(t) // longhaul serve --model's, for the trained run
	run := func(name string, args ...string) []metrics.Step {
		dir := filepath.Join(t.TempDir(), name)
		train(t, bin, cfg, dir, append([]string{"model.path=" + modelDir}, args...)...)
		if name == "after" {
			// the trained run went through the server: it answered
			// completions and was brought to every version
			served, version := serverStats(t, port)
			t.Logf("longhaul serve --model answered %d completions, serves version %d", served, version)
			if served == 0 || version != hfLearnSteps {
				t.Fatalf("the run did not generate through longhaul serve --model: %d completions, version %d (want %d)", served, version, hfLearnSteps)
			}
		}
		steps, err := metrics.Read(filepath.Join(dir, "metrics.jsonl"))
		if err != nil || len(steps) == 0 {
			t.Fatalf("%s: metrics: %d steps, %v", name, len(steps), err)
		}
		return steps
	}
	before := run("before", "warmstart.enabled=false", "run.max_steps=1")[0]
	// The path: the embedded trainer in `longhaul train`,
	// generation by `longhaul serve --model DIR` (its own process, the
	// same directory and tokenizer) over the OpenAI API; each version is
	// exported as an HF directory that the server reloads.
	serveProc(t, bin, port, "serve", "--model", modelDir)
	after := run("after", "generator.kind=openai", fmt.Sprintf("generator.urls=http://127.0.0.1:%d/v1", port))
	var last float64
	for _, s := range after[len(after)-hfLearnLast:] {
		last += s.SuccessRate / hfLearnLast
	}
	curve := make([]float64, len(after))
	for i, s := range after {
		curve[i] = s.SuccessRate
	}
	t.Logf("success: untrained %.3f (reward %.3f); after the warm start, per RL step %v; last %d steps %.3f",
		before.SuccessRate, before.RewardMean, curve, hfLearnLast, last)
	if before.SuccessRate > hfLearnBeforeMax {
		t.Fatalf("the untrained model succeeded in %.3f of its rollouts (> %.2f): the task is too easy to show learning", before.SuccessRate, hfLearnBeforeMax)
	}
	if last < hfLearnAfterMin {
		t.Fatalf("after training the success rate is %.3f (< %.2f)", last, hfLearnAfterMin)
	}
}
