package rollout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/internal/race"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/env/httpenv"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// pagesEnv is a message-level environment with two tools: read(page)
// answers a page's text as a tool message, answer(code) ends the episode.
// It records every assistant message it receives, as received.
type pagesEnv struct {
	mu   *sync.Mutex
	seen *[]env.Message
}

var pagesTools = []env.Tool{
	{Type: "function", Function: env.FunctionSpec{Name: "read", Description: "Read one page of the notebook.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"page":{"type":"integer"}},"required":["page"]}`)}},
	{Type: "function", Function: env.FunctionSpec{Name: "answer", Description: "Give the code.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}`)}},
}

const pagesFirst = "Find the code in the notebook and answer it."

func (e pagesEnv) Reset(ctx context.Context, task env.Task, seed uint64) (string, error) {
	return "", fmt.Errorf("pagesEnv speaks messages only")
}
func (e pagesEnv) Step(ctx context.Context, action string) (env.StepResult, error) {
	return env.StepResult{}, fmt.Errorf("pagesEnv speaks messages only")
}
func (e pagesEnv) Close(context.Context) error { return nil }

func (e pagesEnv) ResetMessages(ctx context.Context, task env.Task, seed uint64) ([]env.Message, []env.Tool, error) {
	return []env.Message{{Role: "user", Content: pagesFirst}}, pagesTools, nil
}

func (e pagesEnv) StepMessage(ctx context.Context, msg env.Message) (env.MessageResult, error) {
	if !env.IsReplay(ctx) {
		e.mu.Lock()
		*e.seen = append(*e.seen, msg)
		e.mu.Unlock()
	}
	var res env.MessageResult
	if len(msg.ToolCallErrors) > 0 {
		res.Messages = append(res.Messages, env.Message{Role: "user", Content: "Your tool call was malformed: " + strings.Join(msg.ToolCallErrors, "; ")})
	}
	for _, c := range msg.ToolCalls {
		var args struct {
			Page int    `json:"page"`
			Code string `json:"code"`
		}
		_ = json.Unmarshal([]byte(c.Function.Arguments), &args)
		out := ""
		switch c.Function.Name {
		case "read":
			out = fmt.Sprintf("page %d: %s", args.Page, map[int]string{1: "nothing here", 2: "the code is 4711"}[args.Page])
		case "answer":
			res.Done, res.Success = true, args.Code == "4711"
			if res.Success {
				res.Reward = 1
			}
			out = "answered"
		default:
			out = "no such tool: " + c.Function.Name
		}
		res.Messages = append(res.Messages, env.Message{Role: "tool", ToolCallID: c.ID, Name: c.Function.Name, Content: out})
	}
	if len(res.Messages) == 0 {
		res.Messages = []env.Message{{Role: "user", Content: "Call a tool."}}
	}
	return res, nil
}

// The replies of the Qwen3 tool rollout: a call, a malformed call, a call
// to an unknown tool, a call, the answer.
var pagesReplies = []string{
	"<tool_call>\n{\"name\": \"read\", \"arguments\": {\"page\": 1}}\n</tool_call>",
	"<tool_call>\n{\"name\": \"read\", \"arguments\": {\"page\": 2}\n</tool_call>",
	"Let me look.\n<tool_call>\n{\"name\": \"peek\", \"arguments\": {}}\n</tool_call>",
	"<tool_call>\n{\"name\": \"read\", \"arguments\": {\"page\": 2}}\n</tool_call>",
	"<tool_call>\n{\"name\": \"answer\", \"arguments\": {\"code\": \"4711\"}}\n</tool_call>",
}

// A Qwen3 rollout over a message-level HTTP environment: the
// environment's tools reach the template's tools argument, sampled
// <tool_call> blocks reach the environment as structured calls (a
// malformed one as ToolCallErrors it answers), tool results come back as
// tool messages, and every prompt is the official @huggingface/jinja
// render of the conversation with the same tools, token for token. A
// resume from every cut of the log reproduces it without stepping the
// environment twice.
func TestQwen3ToolRolloutOverHTTP(t *testing.T) {
	if race.Enabled {
		t.Skip("Qwen3 tokenizer work for tens of seconds under -race: run without it (.ci/steps/14-hfrun.sh does)")
	}
	c := qwen3(t)
	ctx := context.Background()
	var mu sync.Mutex
	var seen []env.Message
	reg := env.NewRegistry()
	if err := reg.Register(env.Definition{Name: "pages", New: func(json.RawMessage) (env.Environment, error) {
		return pagesEnv{mu: &mu, seen: &seen}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(httpenv.NewServer(reg, nil))
	defer ts.Close()
	parser, _ := toolcall.New("hermes")
	mk := func(rec rollout.Recorder) rollout.Spec {
		return rollout.Spec{Seed: 1, Rollout: runlog.RolloutID{Group: 2, Member: 0}, Attempt: 1,
			Task:      env.Task{ID: "p0", Env: "pages"},
			NewEnv:    func(context.Context) (env.Environment, error) { return httpenv.New(ts.URL, "pages", nil), nil },
			Generator: &qwenGen{tok: c.Tok, replies: pagesReplies}, Recorder: rec,
			Limits: rollout.Limits{MaxTurns: 8, MaxTokensPerCall: 64},
			System: "You read notebooks.", Chat: c, ToolParser: parser}
	}
	rec := &scripted.Recorder{}
	res, err := rollout.Run(ctx, mk(rec), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != runlog.OutcomeCompleted || res.Reward != 1 || !res.Success || res.Turns != len(pagesReplies) {
		t.Fatalf("result %+v", res)
	}
	// The environment received structured calls.
	if len(seen) != len(pagesReplies) {
		t.Fatalf("environment saw %d messages, want %d", len(seen), len(pagesReplies))
	}
	if tc := seen[0].ToolCalls; len(tc) != 1 || tc[0].Function.Name != "read" || tc[0].Function.Arguments != `{"page": 1}` || tc[0].ID != "call_0_0" || seen[0].Content != "" {
		t.Fatalf("first call reached the environment as %+v", seen[0])
	}
	if len(seen[1].ToolCalls) != 0 || len(seen[1].ToolCallErrors) != 1 || seen[1].Content != pagesReplies[1] {
		t.Fatalf("malformed call reached the environment as %+v", seen[1])
	}
	if tc := seen[2].ToolCalls; len(tc) != 1 || tc[0].Function.Name != "peek" || seen[2].Content != "Let me look." {
		t.Fatalf("unknown tool reached the environment as %+v", seen[2])
	}

	// Every prompt is the reference render of the conversation so far.
	evs := rec.Events()
	msgs := []lhtok.Message{{Role: "system", Content: "You read notebooks."}, {Role: "user", Content: pagesFirst}}
	var convs [][]lhtok.Message
	var prompts [][]int32
	var prev []int32
	for _, ev := range evs {
		switch e := ev.(type) {
		case runlog.CallFinished:
			p := append(slices.Clone(prev[:e.PromptPrefix]), e.PromptSuffix...)
			prompts, convs = append(prompts, p), append(convs, slices.Clone(msgs))
			prev = append(p, e.Sampled...)
		case runlog.EnvStep:
			var a env.Message
			if err := json.Unmarshal([]byte(e.Action), &a); err != nil {
				t.Fatalf("turn %d: action %q is not a message: %v", e.Turn, e.Action, err)
			}
			am := lhtok.Message{Role: "assistant", Content: a.Content}
			for _, tc := range a.ToolCalls {
				am.ToolCalls = append(am.ToolCalls, lhtok.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)})
			}
			msgs = append(msgs, am)
			var obs []env.Message
			if e.Observation != "" {
				if err := json.Unmarshal([]byte(e.Observation), &obs); err != nil {
					t.Fatal(err)
				}
			}
			for _, o := range obs {
				msgs = append(msgs, lhtok.Message{Role: o.Role, Content: o.Content, ToolCallID: o.ToolCallID, Name: o.Name})
			}
		}
	}
	var tools []json.RawMessage
	for _, tl := range pagesTools {
		b, _ := json.Marshal(tl)
		tools = append(tools, b)
	}
	type req struct {
		Messages            []chat.WireMessage `json:"messages"`
		Tools               []json.RawMessage  `json:"tools"`
		AddGenerationPrompt bool               `json:"add_generation_prompt"`
	}
	var reqs []req
	for _, m := range convs {
		reqs = append(reqs, req{Messages: c.Template.(*chat.Template).Wire(m), Tools: tools, AddGenerationPrompt: true})
	}
	var texts []string
	var ids [][]int32
	nodeRef(t, reqs, &texts, "template", "qwen3")
	nodeRef(t, reqs, &ids, "chat", "qwen3")
	for i, p := range prompts {
		if got := c.Tok.Decode(p); got != texts[i] {
			t.Fatalf("call %d: prompt text is not the reference render:\n got %q\nwant %q", i, got, texts[i])
		}
		if !slices.Equal(p, ids[i]) {
			t.Fatalf("call %d: prompt tokens differ from the reference render + encode", i)
		}
	}
	if !strings.Contains(texts[0], `"name": "read"`) || !strings.Contains(texts[len(texts)-1], "<tool_response>\npage 2: the code is 4711\n</tool_response>") {
		t.Fatalf("the reference render lacks the tools or tool results:\n%s", texts[len(texts)-1])
	}

	// Resume from every cut (on the same server, as after a kill -9 of
	// the trainer): the same events, and no step's effect happens twice
	// (the server answers repeated keys from its store; a fresh instance
	// is brought forward by replay, which records nothing).
	for cut := 1; cut < len(evs); cut++ {
		rec2 := &scripted.Recorder{}
		for _, ev := range evs[:cut] {
			_ = rec2.Record(ctx, ev)
		}
		s := mk(rec2)
		g := s.Generator.(*qwenGen)
		for _, ev := range evs[:cut] {
			if _, ok := ev.(runlog.CallFinished); ok {
				g.n++
			}
		}
		if _, err := rollout.Run(ctx, s, evs[:cut]); err != nil {
			t.Fatalf("resume at %d: %v", cut, err)
		}
		got := rec2.Events()
		if len(got) != len(evs) {
			t.Fatalf("resume at %d: %d events, want %d", cut, len(got), len(evs))
		}
		for i := range got {
			if fmt.Sprint(got[i]) != fmt.Sprint(evs[i]) {
				t.Fatalf("resume at %d: event %d differs:\n got %v\nwant %v", cut, i, got[i], evs[i])
			}
		}
		if len(seen) != len(pagesReplies) {
			t.Fatalf("resume at %d: environment applied %d steps in all, want %d (each once)", cut, len(seen), len(pagesReplies))
		}
	}
}

// nodeRef runs test/tokenizers/ref.mjs (the official JavaScript
// reference, installed by .ci/steps/13-setup.sh).
func nodeRef(t *testing.T, in, out any, args ...string) {
	t.Helper()
	root, _ := filepath.Abs("../test/tokenizers")
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") != "" {
			t.Fatal("node is required")
		}
		t.Skip("node is not installed")
	}
	data, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"ref.mjs"}, args...)...)
	cmd.Dir, cmd.Stdin = root, bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("node ref.mjs %v: %v\n%s", args, err, stderr.String())
	}
	if err := json.Unmarshal(res, out); err != nil {
		t.Fatalf("node ref.mjs %v: %v", args, err)
	}
}
