package env

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/longhaul-rl/longhaul/internal/rng"
)

// Recall is the summary task. Letters arrive a few per observation
// ("qKz") over more turns than the context budget holds; the uppercase
// ones are the codes to remember, the lowercase ones distractors. After
// the last observation the environment asks "?" and the agent must answer
// the codes in the order they arrived ("KM"). The codes arrive early
// (env.params tracked_within), so by the question every one of them has
// been compacted away, and the agent can answer only if the summaries it
// wrote carried them forward. Observations are acknowledged with any
// reply (the environment ignores it). Reward is the codes answered over
// the length of the answer (or of the right one, if longer); success is
// the exact answer.
//
// Each fact is one token of the byte tokenizer, so keeping one is a
// single attention hop (find it, copy it): a 0.4M-parameter model learns
// that in a short warm start, where key-value facts ("A7", the value
// found by the key) needed an induction circuit it did not form in 1,500
// steps (docs/results.md).
type Recall struct {
	cfg  RecallConfig
	st   recallState
	open bool
}

// RecallTaskMessage is the first message of every episode, and
// RecallQuestion the last observation.
const (
	RecallTaskMessage = "recall"
	RecallQuestion    = "?"
)

// Demonstration summarizers (env.params demo_summary): what the oracle's
// summaries keep, and so what the warm start teaches a summary to be.
const (
	RecallDemoRandom  = "random"  // demo_keep letters drawn from those in the context: a summarizer that does not know what matters
	RecallDemoRecent  = "recent"  // the last demo_keep letters seen
	RecallDemoTracked = "tracked" // the codes (uppercase): the summarizer the task rewards
)

// RecallConfig holds the environment params of "recall": the difficulty
// knobs and the demonstration summarizer.
type RecallConfig struct {
	Turns   int `json:"turns"`    // observations before the question
	PerTurn int `json:"per_turn"` // letters per observation
	Tracked int `json:"tracked"`  // codes (uppercase letters) per episode
	// TrackedWithin puts the codes in the first N observations (0:
	// anywhere), so that they are compacted away before the question.
	TrackedWithin int `json:"tracked_within"`
	// DemoSummary, DemoKeep and DemoTracked configure the oracle's
	// summaries (the warm start's demonstrations); the environment itself
	// ignores them. A fraction DemoTracked of the summaries keep the codes
	// (tracked), the others keep DemoKeep letters chosen by DemoSummary.
	DemoSummary string  `json:"demo_summary"`
	DemoKeep    int     `json:"demo_keep"`
	DemoTracked float64 `json:"demo_tracked"`
}

// DefaultRecallConfig is the shipped setting (examples/recall.yaml).
func DefaultRecallConfig() RecallConfig {
	return RecallConfig{Turns: 6, PerTurn: 2, Tracked: 1, TrackedWithin: 3, DemoSummary: RecallDemoRecent, DemoKeep: 3, DemoTracked: 0.5}
}

// RecallTask is a recall task's params: the whole episode.
type RecallTask struct {
	Turns []string `json:"turns"` // the letters of each observation
}

type recallState struct {
	Task RecallTask `json:"task"`
	Step int        `json:"step"` // replies taken so far
}

// RecallDefinition registers "recall".
func RecallDefinition() Definition {
	var configs paramsMemo[RecallConfig]
	return Definition{
		Name: "recall",
		New: func(p json.RawMessage) (Environment, error) {
			cfg, err := configs.get(p, recallConfig)
			if err != nil {
				return nil, err
			}
			return &Recall{cfg: cfg}, nil
		},
		Task: func(p json.RawMessage, seed uint64, index int) (Task, error) {
			cfg, err := recallConfig(p)
			if err != nil {
				return Task{}, err
			}
			raw, err := json.Marshal(cfg.draw(rng.Derive(seed, "task/recall", uint64(index))))
			if err != nil {
				return Task{}, err
			}
			return Task{ID: fmt.Sprintf("recall-%05d", index), Env: "recall", Prompt: RecallTaskMessage, Params: raw}, nil
		},
		Oracle: RecallOracle,
	}
}

func recallConfig(p json.RawMessage) (RecallConfig, error) {
	cfg := DefaultRecallConfig()
	if err := decodeParams(p, &cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.validate()
}

func (c RecallConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: recall: "+format, append([]any{ErrBadParams}, args...)...)
	}
	switch {
	case c.Turns < 1 || c.PerTurn < 1:
		return bad("turns and per_turn must be ≥ 1, got %d and %d", c.Turns, c.PerTurn)
	case c.Tracked < 1 || c.Tracked > 26:
		return bad("tracked must be in [1, 26], got %d", c.Tracked)
	case c.TrackedWithin < 0 || c.TrackedWithin > c.Turns:
		return bad("tracked_within must be in [0, turns=%d], got %d", c.Turns, c.TrackedWithin)
	case c.Tracked > c.slots():
		return bad("tracked (%d) must fit in the first %d observations of %d letters", c.Tracked, c.within(), c.PerTurn)
	case c.Turns*c.PerTurn-c.Tracked > 26:
		return bad("at most 26 distractors (turns × per_turn − tracked), got %d", c.Turns*c.PerTurn-c.Tracked)
	case c.DemoKeep < 1:
		return bad("demo_keep must be ≥ 1, got %d", c.DemoKeep)
	case !(c.DemoTracked >= 0 && c.DemoTracked <= 1):
		return bad("demo_tracked must be in [0, 1], got %g", c.DemoTracked)
	}
	switch c.DemoSummary {
	case RecallDemoRandom, RecallDemoRecent, RecallDemoTracked:
	default:
		return bad("demo_summary must be one of random, recent, tracked, got %q", c.DemoSummary)
	}
	return nil
}

func (c RecallConfig) within() int {
	if c.TrackedWithin == 0 {
		return c.Turns
	}
	return c.TrackedWithin
}

// slots is the number of letter positions codes may take.
func (c RecallConfig) slots() int { return c.within() * c.PerTurn }

// draw makes one episode: distinct codes in random early slots and
// distinct distractors everywhere else.
func (c RecallConfig) draw(seed uint64) RecallTask {
	r := rng.Stream(seed, "recall")
	codes := map[int]bool{}
	for _, s := range r.Perm(c.slots())[:c.Tracked] {
		codes[s] = true
	}
	upper, lower := r.Perm(26), r.Perm(26)
	turns := make([][]byte, c.Turns)
	nu, nl := 0, 0
	for s := range c.Turns * c.PerTurn {
		var b byte
		if codes[s] {
			b, nu = 'A'+byte(upper[nu]), nu+1
		} else {
			b, nl = 'a'+byte(lower[nl]), nl+1
		}
		turns[s/c.PerTurn] = append(turns[s/c.PerTurn], b)
	}
	rt := RecallTask{Turns: make([]string, c.Turns)}
	for i, t := range turns {
		rt.Turns[i] = string(t)
	}
	return rt
}

// RecallAnswer is the right answer to task's question: its codes in the
// order they arrived.
func RecallAnswer(rt RecallTask) string {
	var b strings.Builder
	for _, t := range rt.Turns {
		for i := range len(t) {
			if isCode(t[i]) {
				b.WriteByte(t[i])
			}
		}
	}
	return b.String()
}

func isCode(c byte) bool { return 'A' <= c && c <= 'Z' }

// Reset starts the episode of task; with empty task params the episode is
// drawn from seed.
func (e *Recall) Reset(_ context.Context, task Task, seed uint64) (string, error) {
	var rt RecallTask
	if len(task.Params) == 0 {
		rt = e.cfg.draw(seed)
	} else if err := decodeParams(task.Params, &rt); err != nil {
		return "", err
	}
	if len(rt.Turns) == 0 || RecallAnswer(rt) == "" {
		return "", fmt.Errorf("%w: recall task needs observations and at least one code (uppercase letter)", ErrBadParams)
	}
	e.st, e.open = recallState{Task: rt}, true
	return RecallTaskMessage, nil
}

// Step takes one reply: an acknowledgement of the last observation (any
// text), or after the question the answer.
func (e *Recall) Step(_ context.Context, action string) (StepResult, error) {
	if !e.open {
		return StepResult{}, fmt.Errorf("env: recall: step without an open episode")
	}
	st := &e.st
	n := len(st.Task.Turns)
	switch k := st.Step; {
	case k < n: // an acknowledgement: the next letters
		st.Step++
		return StepResult{Observation: st.Task.Turns[k]}, nil
	case k == n:
		st.Step++
		return StepResult{Observation: RecallQuestion}, nil
	case k == n+1: // the answer
		st.Step++
		want, got := RecallAnswer(st.Task), strings.TrimSpace(action)
		return StepResult{Done: true, Success: got == want, Reward: recallReward(want, got)}, nil
	}
	return StepResult{}, fmt.Errorf("env: recall: step after the episode ended")
}

// recallReward is the codes of want found in got over the longer of the
// two: each code remembered counts, and padding an answer with guesses
// costs what it could win.
func recallReward(want, got string) float64 {
	n := 0
	for i := range len(want) {
		if strings.IndexByte(got, want[i]) >= 0 {
			n++
		}
	}
	return float64(n) / float64(max(len(want), len(got)))
}

// InProcess implements InProcess: the episode lives in memory only.
func (*Recall) InProcess() {}

// Close ends the episode.
func (e *Recall) Close(context.Context) error { e.open = false; return nil }

// Snapshot returns the episode state as JSON.
func (e *Recall) Snapshot(context.Context) ([]byte, error) {
	if !e.open {
		return nil, fmt.Errorf("env: recall: snapshot without an open episode")
	}
	return json.Marshal(e.st)
}

// Restore sets the episode state from a Snapshot.
func (e *Recall) Restore(_ context.Context, state []byte) error {
	var st recallState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("env: recall: restore: %w", err)
	}
	if st.Step < 0 || st.Step > len(st.Task.Turns)+2 {
		return fmt.Errorf("env: recall: restore: step %d out of range", st.Step)
	}
	e.st, e.open = st, true
	return nil
}
