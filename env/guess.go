package env

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/longhaul-rl/longhaul/internal/rng"
)

// Guess is number guessing: the first message gives the range ("guess
// 0-15"), the agent replies a number, and the environment answers
// "higher", "lower" or "correct". The interval must be carried forward from
// the feedback, which is what a compacted context has to preserve. Reward
// is 1 for finding the number within the guess budget.
type Guess struct {
	cfg  GuessConfig
	st   guessState
	open bool
}

// GuessConfig holds the environment params of "guess".
type GuessConfig struct {
	Size       int `json:"size"`        // the secret is in [0, size)
	MaxGuesses int `json:"max_guesses"` // episode ends (unsolved) after this many guesses
}

// DefaultGuessConfig is the shipped setting: binary search needs at most 4
// guesses over 16 numbers, so 6 leaves slack for a learning agent.
func DefaultGuessConfig() GuessConfig { return GuessConfig{Size: 16, MaxGuesses: 6} }

// GuessTask is a guess task's params.
type GuessTask struct {
	Size   int `json:"size"`
	Secret int `json:"secret"`
}

type guessState struct {
	Task    GuessTask `json:"task"`
	Guesses int       `json:"guesses"`
	Max     int       `json:"max"`
}

// GuessDefinition registers "guess".
func GuessDefinition() Definition {
	return Definition{
		Name: "guess",
		New: func(p json.RawMessage) (Environment, error) {
			cfg, err := guessConfig(p)
			if err != nil {
				return nil, err
			}
			return &Guess{cfg: cfg}, nil
		},
		Task: func(p json.RawMessage, seed uint64, index int) (Task, error) {
			cfg, err := guessConfig(p)
			if err != nil {
				return Task{}, err
			}
			gt := cfg.draw(rng.Derive(seed, "task/guess", uint64(index)))
			raw, err := json.Marshal(gt)
			if err != nil {
				return Task{}, err
			}
			return Task{ID: fmt.Sprintf("guess-%05d", index), Env: "guess", Prompt: gt.first(), Params: raw}, nil
		},
	}
}

func guessConfig(p json.RawMessage) (GuessConfig, error) {
	cfg := DefaultGuessConfig()
	if err := decodeParams(p, &cfg); err != nil {
		return cfg, err
	}
	if cfg.Size < 2 || cfg.MaxGuesses < 1 {
		return cfg, fmt.Errorf("%w: guess needs size >= 2 and max_guesses >= 1, got %+v", ErrBadParams, cfg)
	}
	return cfg, nil
}

func (c GuessConfig) draw(seed uint64) GuessTask {
	return GuessTask{Size: c.Size, Secret: rng.Stream(seed, "guess").IntN(c.Size)}
}

func (gt GuessTask) first() string { return fmt.Sprintf("guess 0-%d", gt.Size-1) }

// Reset starts the episode of task; with empty task params the secret is
// drawn from seed.
func (g *Guess) Reset(_ context.Context, task Task, seed uint64) (string, error) {
	var gt GuessTask
	if len(task.Params) == 0 {
		gt = g.cfg.draw(seed)
	} else if err := decodeParams(task.Params, &gt); err != nil {
		return "", err
	}
	if gt.Size < 2 || gt.Secret < 0 || gt.Secret >= gt.Size {
		return "", fmt.Errorf("%w: guess task %+v", ErrBadParams, gt)
	}
	g.st = guessState{Task: gt, Max: g.cfg.MaxGuesses}
	g.open = true
	return gt.first(), nil
}

// Step answers one guess. A reply that is not a number counts as a guess
// and gets "?".
func (g *Guess) Step(_ context.Context, action string) (StepResult, error) {
	if !g.open {
		return StepResult{}, fmt.Errorf("env: guess: step without an open episode")
	}
	st := &g.st
	if st.Guesses >= st.Max {
		return StepResult{}, fmt.Errorf("env: guess: step after the episode ended")
	}
	st.Guesses++
	n, err := strconv.Atoi(strings.TrimSpace(action))
	var res StepResult
	switch {
	case err != nil:
		res.Observation = "?"
	case n == st.Task.Secret:
		return StepResult{Observation: "correct", Reward: 1, Done: true, Success: true}, nil
	case n < st.Task.Secret:
		res.Observation = "higher"
	default:
		res.Observation = "lower"
	}
	if st.Guesses >= st.Max {
		res.Done = true
	}
	return res, nil
}

// Close ends the episode.
// InProcess implements InProcess: the episode lives in memory only.
func (*Guess) InProcess() {}

func (g *Guess) Close(context.Context) error { g.open = false; return nil }

// Snapshot returns the episode state as JSON.
func (g *Guess) Snapshot(context.Context) ([]byte, error) {
	if !g.open {
		return nil, fmt.Errorf("env: guess: snapshot without an open episode")
	}
	return json.Marshal(g.st)
}

// Restore sets the episode state from a Snapshot.
func (g *Guess) Restore(_ context.Context, state []byte) error {
	var st guessState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("env: guess: restore: %w", err)
	}
	g.st, g.open = st, true
	return nil
}
