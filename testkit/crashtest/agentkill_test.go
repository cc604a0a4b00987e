package crashtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestAgentKilledRunEqualsUninterrupted: with env.kind agent (the example
// Python agent started per rollout), `longhaul train` SIGKILLed at crash
// points and at random moments and resumed after each kill ends with the
// same logged calls, trained prompts and weights as an uninterrupted run:
// the resumed agents' calls were answered from the log, and only calls
// past it were generated (Summary.Calls counts generated calls). The agent
// offers a function tool and streams every other call (--tools
// --stream-odd): streamed answers and tool calls are replayed from the
// log like plain ones.
func TestAgentKilledRunEqualsUninterrupted(t *testing.T) {
	bin := binary(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3: the example agent cannot run")
	}
	_, file, _, _ := runtime.Caller(0)
	agent := filepath.Join(filepath.Dir(file), "..", "..", "examples", "agents", "ledger_agent.py")
	var log bytes.Buffer
	res, err := Run(context.Background(), Options{Binary: bin, Config: tinyConfig(t), Kills: 3, Seed: 5, Dir: t.TempDir(), Log: &log,
		Overrides: []string{"env.kind=agent", "env.command=[" + py + ", " + agent + ", --tools, --stream-odd]", "compaction.on_undeclared_break=split",
			"warmstart.enabled=false", "run.max_steps=3", "grpo.num_prompts_per_step=2"}})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Kills) < 3 {
		t.Fatalf("only %d kills landed", len(res.Kills))
	}
	if !res.Identical {
		t.Fatalf("resumed run differs from the uninterrupted one: %s", res.Difference)
	}
	if res.Reference.Calls == 0 {
		t.Fatalf("reference made no calls: %+v", res.Reference)
	}
	t.Logf("%d calls, identical after %d kills", res.Reference.Calls, len(res.Kills))
}

// TestNodeStreamingAgentKilledRun: the same with an agent written with the
// official OpenAI Node SDK that streams every call (include_usage) and
// offers a tool (test/node/agent_stream.mjs; it fails on a malformed
// stream): SIGKILLed and resumed, the run ends with the same logged calls
// and weights as an uninterrupted one.
func TestNodeStreamingAgentKilledRun(t *testing.T) {
	bin := binary(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "test", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skip("test/node/node_modules missing: run npm ci in test/node")
	}
	var log bytes.Buffer
	res, err := Run(context.Background(), Options{Binary: bin, Config: tinyConfig(t), Kills: 2, Seed: 7, Dir: t.TempDir(), Log: &log,
		Overrides: []string{"env.kind=agent", "env.command=[" + node + ", " + filepath.Join(dir, "agent_stream.mjs") + "]",
			"compaction.on_undeclared_break=split", "warmstart.enabled=false", "run.max_steps=2", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2"}})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Kills) < 2 || res.Reference.Calls == 0 {
		t.Fatalf("%d kills, %d calls", len(res.Kills), res.Reference.Calls)
	}
	if !res.Identical {
		t.Fatalf("resumed run differs from the uninterrupted one: %s", res.Difference)
	}
	t.Logf("%d calls, identical after %d kills", res.Reference.Calls, len(res.Kills))
}
