package crashtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/internal/race"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// Learning with an external agent that uses tools on a real chat
// template: examples/qwen3-guess-agent.yaml (the guess task, 0-7 in four
// guesses, played by examples/agents/guess_tool_agent.py through a
// guess(n) tool) on a tiny random Qwen3 with the real tokenizer. Measures,
// over the run's logged calls and its metrics: the share of calls whose
// reply is a well-formed tool call (the hermes parser reads one) and the
// success rate (the agent found the number). Baseline: the same model and
// config without the warm start, one RL step. The thresholds:
const (
	agentBeforeMax    = 0.05 // the untrained model writes no tool call and finds nothing
	agentCallsAfter   = 0.5  // share of the trained run's calls that are tool calls (measured 0.79)
	agentSuccessAfter = 0.1  // mean success rate over the trained run's 3 RL steps (measured 0.29: 0.19, 0.25, 0.44)
)

// agentConfig is the example config with the agent run by this python.
func agentConfig(t *testing.T, py string) (cfg string, overrides []string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	return filepath.Join(root, "examples", "qwen3-guess-agent.yaml"), []string{
		"env.command=[" + py + ", " + filepath.Join(root, "examples", "agents", "guess_tool_agent.py") + "]",
		"warmstart.data=" + filepath.Join(root, "examples", "agents", "guess-tool-demos.jsonl")}
}

// toolCallShare is the share of a run's logged calls whose sampled reply
// the hermes parser reads as at least one tool call.
func toolCallShare(t *testing.T, dir, modelDir string) (share float64, calls int) {
	t.Helper()
	tok, err := hf.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	parser, _ := toolcall.New("hermes")
	stop := tok.StopTokens()
	ctx := context.Background()
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	withCall := 0
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		if fc, ok := ev.(runlog.CallFinished); ok {
			s := fc.Sampled
			if len(s) > 0 && slices.Contains(stop, s[len(s)-1]) {
				s = s[:len(s)-1]
			}
			calls++
			if len(parser.Parse(tok.Decode(s)).Message.ToolCalls) > 0 {
				withCall++
			}
		}
		return nil
	})
	if err != nil || calls == 0 {
		t.Fatalf("%s: %d calls, %v", dir, calls, err)
	}
	return float64(withCall) / float64(calls), calls
}

// TestHFAgentTools is the agent-with-tools path on a real chat template,
// in four parts that share one trained model:
//   - learns: examples/qwen3-guess-agent.yaml (warm start on the
//     tool-call demonstrations, then GRPO) against the untrained
//     baseline, by the thresholds above;
//   - node-sdk: `longhaul serve --model` on the trained weights, driven by
//     the official OpenAI Node SDK (test/node/hfmodel.mjs): the model's
//     own tool calls come back as tool_calls, streamed and not;
//   - source-server: tokenizer.source server against `serve --model`
//     equals tokenizer.source local (serverRendering);
//   - killed: the agent's run SIGKILLed and resumed equals the
//     uninterrupted one (agentKilled).
//
// The last two start from the trained weights (no warm start), so the
// model writes tool calls from the first call and the agent sends them
// back with their results for the template to render.
// LONGHAUL_HF_AGENT_MODEL=DIR (a trained run's weights directory) skips
// the training and runs the other parts on DIR.
func TestHFAgentTools(t *testing.T) {
	if race.Enabled {
		t.Skip("trains for minutes: run without -race (.ci/steps/20-serve-model.sh)")
	}
	bin, modelDir := tinyQwen3(t, "LONGHAUL_HF_AGENT")
	cfg, common := agentConfig(t, python(t))
	trained, work := "", t.TempDir() // the parent's: a subtest's own goes when it ends
	if dir := os.Getenv("LONGHAUL_HF_AGENT_MODEL"); dir != "" {
		trained = dir // a model trained before (a run's weights/): the other parts only
	} else {
		t.Run("learns", func(t *testing.T) { trained = agentLearns(t, bin, cfg, modelDir, work, common) })
	}
	if trained == "" {
		t.Fatal("no trained model: the rest needs one")
	}
	t.Run("node-sdk", func(t *testing.T) { nodeSDKOnModel(t, bin, trained) })
	small := append(slices.Clone(common), "model.path="+trained, "warmstart.enabled=false", "run.mode=deterministic",
		"run.max_steps=2", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2")
	t.Run("source-server", func(t *testing.T) { serverRendering(t, bin, cfg, trained, small) })
	t.Run("killed", func(t *testing.T) { agentKilled(t, bin, cfg, trained, small) })
}

// agentLearns trains the example from modelDir and its untrained
// baseline in work, checks the thresholds, and returns the trained
// weights' directory (the run's published HF export).
func agentLearns(t *testing.T, bin, cfg, modelDir, work string, common []string) string {
	common = append(slices.Clone(common), "model.path="+modelDir)
	run := func(name string, args ...string) (string, []metrics.Step) {
		dir := filepath.Join(work, name)
		t0 := time.Now()
		train(t, bin, cfg, dir, append(slices.Clone(common), args...)...)
		steps, err := metrics.Read(filepath.Join(dir, "metrics.jsonl"))
		if err != nil || len(steps) == 0 {
			t.Fatalf("%s: metrics: %d steps, %v", name, len(steps), err)
		}
		t.Logf("%s: %v", name, time.Since(t0).Round(time.Second))
		return dir, steps
	}
	beforeDir, before := run("before", "warmstart.enabled=false", "run.max_steps=1")
	afterDir, after := run("after")
	callsBefore, n0 := toolCallShare(t, beforeDir, modelDir)
	callsAfter, n1 := toolCallShare(t, afterDir, modelDir)
	var success float64
	curve := make([]float64, len(after))
	for i, s := range after {
		curve[i] = s.SuccessRate
		success += s.SuccessRate / float64(len(after))
	}
	t.Logf("tool calls: untrained %.3f of %d calls, trained %.3f of %d; success: untrained %.3f, trained per RL step %v (mean %.3f)",
		callsBefore, n0, callsAfter, n1, before[0].SuccessRate, curve, success)
	if callsBefore > agentBeforeMax || before[0].SuccessRate > agentBeforeMax {
		t.Fatalf("the untrained model already calls the tool (%.3f) or succeeds (%.3f): the task shows no learning", callsBefore, before[0].SuccessRate)
	}
	if callsAfter < agentCallsAfter || success < agentSuccessAfter {
		t.Fatalf("after training: tool calls %.3f (want ≥ %.2f), success %.3f (want ≥ %.2f)", callsAfter, agentCallsAfter, success, agentSuccessAfter)
	}
	return filepath.Join(afterDir, "weights")
}

// nodeSDKOnModel serves dir with `longhaul serve --model` and runs
// test/node/hfmodel.mjs against it with the official OpenAI Node SDK.
func nodeSDKOnModel(t *testing.T, bin, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	_, file, _, _ := runtime.Caller(0)
	nodeDir := filepath.Join(filepath.Dir(file), "..", "..", "test", "node")
	if err == nil {
		_, err = os.Stat(filepath.Join(nodeDir, "node_modules", "openai"))
	}
	if err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_NODE") != "" {
			t.Fatalf("node or test/node/node_modules missing: %v", err)
		}
		t.Logf("the Node SDK part is skipped: %v (run npm ci in test/node)", err)
		return
	}
	port := proctest.FreePort(t)
	serveProc(t, bin, port, "serve", "--model", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(nodeDir, "hfmodel.mjs"))
	cmd.Env = append(os.Environ(), fmt.Sprintf("LONGHAUL_HF_URL=http://127.0.0.1:%d", port), "LONGHAUL_HF_MODEL="+filepath.Base(dir))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("node hfmodel.mjs:\n%s", out.String())
	if err != nil {
		t.Fatalf("the Node SDK against serve --model: %v", err)
	}
}

// agentKilled: `longhaul train` with the tool agent from the trained
// model, SIGKILLed at crash points and at random moments and resumed
// after each kill, ends with the same logged calls, trained prompts and
// weights as an uninterrupted run: the resumed agents' calls, tool calls
// and their echoes included, were answered from the log.
func agentKilled(t *testing.T, bin, cfg, modelDir string, overrides []string) {
	var log bytes.Buffer
	work := t.TempDir()
	res, err := Run(context.Background(), Options{Binary: bin, Config: cfg, Kills: 3, Seed: 11, Dir: work, Log: &log,
		Overrides: append(slices.Clone(overrides), "rollout_checkpointing.enabled=true", "rollout_checkpointing.snapshot_attempt_interval_s=0.2")})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Kills) < 3 || res.Reference.Calls == 0 {
		t.Fatalf("%d kills, %d calls", len(res.Kills), res.Reference.Calls)
	}
	if !res.Identical {
		t.Fatalf("resumed run differs from the uninterrupted one: %s", res.Difference)
	}
	share, _ := toolCallShare(t, filepath.Join(work, "reference"), modelDir)
	t.Logf("%d calls (%.2f of them tool calls), identical after %d kills", res.Reference.Calls, share, len(res.Kills))
	if share == 0 {
		t.Fatal("the model wrote no tool call: the replay of tool calls was not exercised")
	}
}
