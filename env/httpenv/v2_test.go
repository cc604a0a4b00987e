package httpenv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/env/httpenv"
	"github.com/longhaul-rl/longhaul/failure"
)

// lookupEnv is a message-level environment with two tools and a side
// effect: every non-replayed step is counted by key.
type lookupEnv struct {
	fx    *sync.Map // key -> *int (effects)
	notes []string
}

var lookupTools = []env.Tool{
	{Type: "function", Function: env.FunctionSpec{Name: "note", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}},
	{Type: "function", Function: env.FunctionSpec{Name: "answer", Parameters: json.RawMessage(`{"type":"object","properties":{"value":{"type":"integer"}}}`)}},
}

func (e *lookupEnv) Reset(ctx context.Context, t env.Task, seed uint64) (string, error) {
	return "", errors.New("lookupEnv speaks messages only")
}
func (e *lookupEnv) Step(ctx context.Context, a string) (env.StepResult, error) {
	return env.StepResult{}, errors.New("lookupEnv speaks messages only")
}
func (e *lookupEnv) Close(context.Context) error { return nil }

func (e *lookupEnv) ResetMessages(ctx context.Context, t env.Task, seed uint64) ([]env.Message, []env.Tool, error) {
	e.notes = nil
	return []env.Message{{Role: "user", Content: "note things, then answer 42"}}, lookupTools, nil
}

func (e *lookupEnv) StepMessage(ctx context.Context, m env.Message) (env.MessageResult, error) {
	if !env.IsReplay(ctx) {
		k, _ := env.KeyOf(ctx)
		n, _ := e.fx.LoadOrStore(k.String(), new(int))
		*n.(*int)++
	}
	var res env.MessageResult
	if len(m.ToolCalls) == 0 {
		res.Messages = []env.Message{{Role: "user", Content: "call a tool"}}
		return res, nil
	}
	c := m.ToolCalls[0]
	var args map[string]any
	json.Unmarshal([]byte(c.Function.Arguments), &args)
	switch c.Function.Name {
	case "note":
		e.notes = append(e.notes, fmt.Sprint(args["text"]))
		res.Messages = []env.Message{{Role: "tool", ToolCallID: c.ID, Name: "note", Content: "notes: " + strings.Join(e.notes, ",")}}
	case "answer":
		res.Done, res.Success, res.Reward = true, args["value"] == float64(42), 1
	default:
		res.Messages = []env.Message{{Role: "tool", ToolCallID: c.ID, Content: "error: no tool " + c.Function.Name}}
	}
	return res, nil
}

func lookupServer(t *testing.T) (*sync.Map, string) {
	t.Helper()
	fx := &sync.Map{}
	reg := env.NewRegistry()
	reg.Register(env.Definition{Name: "lookup", New: func(json.RawMessage) (env.Environment, error) { return &lookupEnv{fx: fx}, nil }})
	ts := httptest.NewServer(httpenv.NewServer(reg, nil))
	t.Cleanup(ts.Close)
	return fx, ts.URL
}

func keyed(step int) context.Context {
	return env.WithKey(env.WithRun(context.Background(), "run1"), env.Key{Rollout: "g1-0", Attempt: 1, Step: step})
}

// TestMessageProtocol: reset returns messages and tools; the text action
// becomes a tool call; the reply's tool messages come back.
func TestMessageProtocol(t *testing.T) {
	_, url := lookupServer(t)
	c := httpenv.New(url, "lookup", nil)
	msgs, tools, err := c.ResetMessages(keyed(-1), env.Task{ID: "t"}, 1)
	if err != nil || len(msgs) != 1 || len(tools) != 2 || tools[0].Function.Name != "note" {
		t.Fatalf("reset: %v %+v %+v", err, msgs, tools)
	}
	c2 := httpenv.New(url, "lookup", nil)
	obs, err := c2.Reset(keyed(-1), env.Task{ID: "t"}, 1)
	if err != nil || obs != "tools: note(text) answer(value)\nnote things, then answer 42" {
		t.Fatalf("text reset: %q %v", obs, err)
	}
	res, err := c2.Step(keyed(0), "note apples")
	if err != nil || res.Observation != "notes: apples" {
		t.Fatalf("step: %+v %v", res, err)
	}
	res, err = c2.Step(keyed(1), `answer {"value": 42}`)
	if err != nil || !res.Done || !res.Success {
		t.Fatalf("answer: %+v %v", res, err)
	}
}

// TestRepeatedKeyOnce: a step repeated with its key, on the same session
// or on a fresh one (a resumed rollout), gets the stored answer, moves the
// fresh session to the state after it, and has its effect once.
func TestRepeatedKeyOnce(t *testing.T) {
	fx, url := lookupServer(t)
	a := httpenv.New(url, "lookup", nil)
	a.Reset(keyed(-1), env.Task{ID: "t"}, 1)
	first, err := a.Step(keyed(0), "note x")
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.Step(keyed(0), "note x")
	if err != nil || again.Observation != first.Observation {
		t.Fatalf("same session: %+v %v", again, err)
	}
	// A fresh session replays key 0, then takes step 1 live: its state
	// must include step 0's note.
	b := httpenv.New(url, "lookup", nil)
	b.Reset(keyed(-1), env.Task{ID: "t"}, 1)
	if r, err := b.Step(keyed(0), "note x"); err != nil || r.Observation != "notes: x" {
		t.Fatalf("replayed step: %+v %v", r, err)
	}
	r, err := b.Step(keyed(1), "note y")
	if err != nil || r.Observation != "notes: x,y" {
		t.Fatalf("step after a replay: %+v %v (the fresh session did not catch up)", r, err)
	}
	n := 0
	fx.Range(func(k, v any) bool {
		n++
		if *v.(*int) != 1 {
			t.Errorf("key %v: %d effects", k, *v.(*int))
		}
		return true
	})
	if n != 2 {
		t.Fatalf("%d keys had effects, want 2", n)
	}
}

// TestVersion1Client: a client of the first protocol version (no version,
// no key, no message) gets the first version's replies.
func TestVersion1Client(t *testing.T) {
	_, ts := server(t)
	post := func(path, body string) map[string]any {
		resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return out
	}
	rep := post("/reset", `{"env":"ledger","params":{"stop_on_error":false},"task":{"id":"t","env":"ledger","params":{"start":3,"deltas":[4,-2]}},"seed":1}`)
	if _, ok := rep["messages"]; ok || rep["observation"] == "" || rep["id"] == "" {
		t.Fatalf("v1 reset reply: %v", rep)
	}
	step := post("/step", fmt.Sprintf(`{"id":%q,"action":"7"}`, rep["id"]))
	if _, ok := step["messages"]; ok {
		t.Fatalf("v1 step reply has messages: %v", step)
	}
	if _, ok := step["reward"]; !ok {
		t.Fatalf("v1 step reply: %v", step)
	}
}

// TestBadReplies: replies that break the message protocol are data
// failures naming what is wrong.
func TestBadReplies(t *testing.T) {
	for _, tc := range []struct{ name, reset, step, want string }{
		{"tool without name", `{"id":"s","version":2,"messages":[],"tools":[{"type":"function","function":{}}]}`, ``, "no function name"},
		{"unknown tool", `{"id":"s","version":2,"messages":[],"tools":[{"type":"function","function":{"name":"note"}}]}`,
			`{"messages":[{"role":"tool","tool_call_id":"call_0","name":"delete_all","content":"ok"}]}`, "unknown tool"},
		{"unmade call", `{"id":"s","version":2,"messages":[],"tools":[{"type":"function","function":{"name":"note"}}]}`,
			`{"messages":[{"role":"tool","tool_call_id":"call_9","name":"note","content":"ok"}]}`, "did not make"},
		{"bad role", `{"id":"s","version":2,"messages":[],"tools":[{"type":"function","function":{"name":"note"}}]}`,
			`{"messages":[{"role":"assistant","content":"I am the agent now"}]}`, "role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/reset" {
					io.WriteString(w, tc.reset)
				} else {
					io.WriteString(w, tc.step)
				}
			}))
			defer ts.Close()
			c := httpenv.New(ts.URL, "x", nil)
			_, err := c.Reset(keyed(-1), env.Task{}, 0)
			if err == nil {
				_, err = c.Step(keyed(0), "note hi")
			}
			var f *failure.Failure
			if !errors.As(err, &f) || f.Class != failure.Data || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a data failure with %q", err, tc.want)
			}
		})
	}
}

// TestSessionSlots: Slots bounds open sessions; Close gives a slot back.
func TestSessionSlots(t *testing.T) {
	_, ts := server(t)
	slots := make(chan struct{}, 1)
	task := env.Task{ID: "t", Env: "ledger", Params: json.RawMessage(`{"start":1,"deltas":[1]}`)}
	a, b := httpenv.New(ts.URL, "ledger", nil), httpenv.New(ts.URL, "ledger", nil)
	a.Slots, b.Slots = slots, slots
	if _, err := a.Reset(context.Background(), task, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50_000_000)
	defer cancel()
	if _, err := b.Reset(ctx, task, 0); err == nil || !strings.Contains(err.Error(), "env.max_sessions 1") {
		t.Fatalf("second session while the slot is taken: %v", err)
	}
	a.Close(context.Background())
	if _, err := b.Reset(context.Background(), task, 0); err != nil {
		t.Fatalf("after close: %v", err)
	}
	b.Close(context.Background())
	if len(slots) != 0 {
		t.Fatalf("%d slots held after close", len(slots))
	}
}
