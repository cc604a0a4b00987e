package threeproc

import (
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/metrics"
)

// Learning across the three processes: examples/qwen3-guess.yaml (guess
// over 0-7 in four guesses; a warm start on the binary-search oracle, then
// GRPO) on a tiny Qwen3 (1 layer, hidden 32, the real Qwen3 tokenizer;
// smaller than TestHFModelLearns' 2 x 64 so that the PyTorch trainer's
// CPU steps fit CI), warmstart.lr 1e-2 for it. The warm start goes through the trainer protocol
// (/v1/warm_step) into the PyTorch trainer, its weights reach `longhaul
// serve --model` at version 0, then GRPO. The same config in one process
// (Go trainer and sampler) runs alongside.
const (
	learnBeforeMax = 0.05 // success of the untrained model (one step, no warm start)
	learnAfterMin  = 0.5  // mean success of the last learnLast steps, trained
	learnTolerance = 0.25 // |three-process - in-process| of that mean
	learnLast      = 3
)

// learnArgs: qwen3-guess.yaml with a warm-start learning rate for the
// smaller model; a group whose rollout the chat bridge cannot continue
// (a half-trained model's turn the template re-renders differently) is
// replaced, in both runs alike, and a few more of them are allowed.
var learnArgs = []string{"warmstart.lr=1e-2", "rollout_failure.max_skipped_prompts=64",
	"rollout_failure.backoff_base_s=0.1", "rollout_failure.backoff_cap_s=0.5"}

// The PyTorch trainer's flags for qwen3-guess.yaml's optimizer and loss
// (its optim section over docs/config.md's defaults).
var learnFlags = []string{"--threads", "2", "--device", "cpu", "--lr", "1e-3", "--min-lr", "0.0001", "--warmup-steps", "2",
	"--total-steps", "5", "--schedule", "constant", "--weight-decay", "0", "--beta1", "0.9", "--beta2", "0.99", "--eps", "1e-8",
	"--grad-clip", "1", "--clip-low", "0.2", "--clip-high", "0.28", "--norm", "token_mean", "--log-level", "WARNING"}

func TestThreeProcessesLearn(t *testing.T) {
	py, tokDir, bin := need(t)
	work := t.TempDir()
	s := setup{py: py, bin: bin, model: filepath.Join(work, "qwen3-tiny"), cfg: filepath.Join(root(), "examples", "qwen3-guess.yaml"),
		args: learnArgs, flags: learnFlags}
	s.limit = 8 * time.Minute
	if out, err := exec.Command(bin, "init-model", "--family", "qwen3", "--layers", "1", "--hidden", "32", "--heads", "2",
		"--kv-heads", "1", "--tokenizer", tokDir, "--out", s.model).CombinedOutput(); err != nil {
		t.Fatalf("init-model: %v\n%s", err, out)
	}
	inproc := filepath.Join(work, "runs", "inprocess")
	inprocErr := make(chan error, 1)
	t0 := time.Now()
	var inTook time.Duration
	go func() {
		out, err := exec.Command(bin, append([]string{"train", "--config", s.cfg, "--run-dir", inproc, "--no-progress", "--log-level", "warn",
			"model.path=" + s.model}, s.args...)...).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("in-process run: %w\n%s", err, out)
		}
		inTook = time.Since(t0)
		inprocErr <- err
	}()

	untrained := s
	untrained.args = append(append([]string{}, s.args...), "warmstart.enabled=false", "run.max_steps=1")
	_, tookU := untrained.runThree(t, filepath.Join(work, "runs", "untrained"), nil)
	before := readMetrics(t, filepath.Join(work, "runs", "untrained"))[0]

	three := filepath.Join(work, "runs", "trained")
	_, took := s.runThree(t, three, nil)
	if err := <-inprocErr; err != nil {
		t.Fatal(err)
	}
	a, b := readMetrics(t, three), readMetrics(t, inproc)
	if len(a) != 5 || len(b) != 5 {
		t.Fatalf("steps: three-process %d, in-process %d, want 5", len(a), len(b))
	}
	curve := func(ms []metrics.Step) (string, float64) {
		var parts []string
		var last float64
		for i, m := range ms {
			parts = append(parts, fmt.Sprintf("%.2f", m.SuccessRate))
			if i >= len(ms)-learnLast {
				last += m.SuccessRate / learnLast
			}
		}
		return strings.Join(parts, " "), last
	}
	ca, la := curve(a)
	cb, lb := curve(b)
	t.Logf("untrained (three-process, 1 step, %s): success %.3f, reward %.3f", tookU.Round(time.Second), before.SuccessRate, before.RewardMean)
	t.Logf("three-process (%s): success per step %s; last %d %.3f", took.Round(time.Second), ca, learnLast, la)
	t.Logf("in-process    (%s): success per step %s; last %d %.3f", inTook.Round(time.Second), cb, learnLast, lb)
	if before.SuccessRate > learnBeforeMax {
		t.Fatalf("the untrained model succeeded in %.3f of its rollouts (> %.2f): the task is too easy to show learning", before.SuccessRate, learnBeforeMax)
	}
	if la < learnAfterMin {
		t.Fatalf("three-process run: success %.3f after training (< %.2f)", la, learnAfterMin)
	}
	if d := math.Abs(la - lb); d > learnTolerance {
		t.Fatalf("three-process %.3f and in-process %.3f differ by %.3f (> %.2f)", la, lb, d, learnTolerance)
	}
}
