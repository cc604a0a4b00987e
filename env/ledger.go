package env

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/longhaul-rl/longhaul/internal/rng"
)

// Ledger is the compaction task: the first message gives a start digit and
// the first delta ("start 3 +4"), every later user message one more delta
// ("-2"), and after each the agent must answer the running balance mod 10
// as one digit ("7"). The episode is longer than the shipped context
// budget, and each answer depends on every delta before it, so the agent
// can only succeed if compaction keeps the most recent answer; the deltas
// that produced it may be dropped. Reward per step is 1/turns for a correct
// digit, so a rollout's reward is the fraction answered correctly (a dense
// signal); success means every answer was right.
type Ledger struct {
	cfg  LedgerConfig
	st   ledgerState
	open bool
	// snaps is the buffer snapshots are cut from: appended to only, so a
	// snapshot handed out (and kept in the run log's cache) never
	// changes, and an episode's snapshots cost an allocation or two
	// instead of one each.
	snaps []byte
}

// The shipped rollout settings for ledger (docs/rollouts.md). An episode
// of 12 turns needs 7t+7 prompt tokens at turn t, so without compaction turn
// 8 no longer fits the budget; recency compaction at the threshold fires
// twice and keeps the context under 60 tokens.
const (
	LedgerContextBudget    = 64
	LedgerMaxTokensPerCall = 6
	LedgerCompactThreshold = 45
	LedgerKeepTurns        = 1
)

// LedgerConfig holds the environment params of "ledger".
type LedgerConfig struct {
	Turns    int `json:"turns"`     // deltas (= answers) per episode
	MaxDelta int `json:"max_delta"` // deltas are drawn from ±1..±MaxDelta
	// StopOnError ends the episode at the first wrong balance. Every later
	// answer would build on the wrong one, so without it a rollout's later,
	// correctly computed answers are scored wrong and a broadcast advantage
	// pushes sound arithmetic down; stopping keeps the reward (the fraction
	// of the ledger kept right) an honest signal.
	StopOnError bool `json:"stop_on_error"`
}

// DefaultLedgerConfig is the shipped setting.
// A tiny model learns ±1..±3 arithmetic from a short warm start; ±9 keeps
// it on a loss plateau for minutes (docs/results.md).
func DefaultLedgerConfig() LedgerConfig {
	return LedgerConfig{Turns: 12, MaxDelta: 3, StopOnError: true}
}

// LedgerTask is a ledger task's params: the whole episode.
type LedgerTask struct {
	Start  int   `json:"start"`
	Deltas []int `json:"deltas"`
}

type ledgerState struct {
	Task    LedgerTask `json:"task"`
	Turn    int        `json:"turn"`    // deltas answered so far
	Balance int        `json:"balance"` // true balance mod 10 after Turn deltas
	Correct int        `json:"correct"`
}

// LedgerDefinition registers "ledger".
func LedgerDefinition() Definition {
	var configs paramsMemo[LedgerConfig] // every rollout of a run passes the same params
	return Definition{
		Name: "ledger",
		New: func(p json.RawMessage) (Environment, error) {
			cfg, err := configs.get(p, ledgerConfig)
			if err != nil {
				return nil, err
			}
			return &Ledger{cfg: cfg}, nil
		},
		Task: func(p json.RawMessage, seed uint64, index int) (Task, error) {
			cfg, err := ledgerConfig(p)
			if err != nil {
				return Task{}, err
			}
			lt := cfg.draw(rng.Derive(seed, "task/ledger", uint64(index)))
			raw, err := json.Marshal(lt)
			if err != nil {
				return Task{}, err
			}
			return Task{ID: fmt.Sprintf("ledger-%05d", index), Env: "ledger", Prompt: lt.first(), Params: raw}, nil
		},
	}
}

func ledgerConfig(p json.RawMessage) (LedgerConfig, error) {
	cfg := DefaultLedgerConfig()
	if err := decodeParams(p, &cfg); err != nil {
		return cfg, err
	}
	if cfg.Turns < 1 || cfg.MaxDelta < 1 || cfg.MaxDelta > 9 {
		return cfg, fmt.Errorf("%w: ledger needs turns >= 1 and 1 <= max_delta <= 9, got %+v", ErrBadParams, cfg)
	}
	return cfg, nil
}

func (c LedgerConfig) draw(seed uint64) LedgerTask {
	r := rng.Stream(seed, "ledger")
	lt := LedgerTask{Start: r.IntN(10), Deltas: make([]int, c.Turns)}
	for i := range lt.Deltas {
		d := 1 + r.IntN(c.MaxDelta)
		if r.IntN(2) == 0 {
			d = -d
		}
		lt.Deltas[i] = d
	}
	return lt
}

func mod10(x int) int { return ((x % 10) + 10) % 10 }

// LedgerAnswers returns the correct answer of every turn of a task: what a
// scripted oracle agent replies.
func LedgerAnswers(lt LedgerTask) []string {
	out := make([]string, len(lt.Deltas))
	b := lt.Start
	for i, d := range lt.Deltas {
		b = mod10(b + d)
		out[i] = strconv.Itoa(b)
	}
	return out
}

// Reset starts the episode of task; with empty task params the episode is
// drawn from seed.
func (l *Ledger) Reset(_ context.Context, task Task, seed uint64) (string, error) {
	var lt LedgerTask
	var err error
	if len(task.Params) == 0 {
		lt = l.cfg.draw(seed)
	} else if lt, err = decodeLedgerTask(task.Params); err != nil {
		return "", err
	}
	if len(lt.Deltas) == 0 {
		return "", fmt.Errorf("%w: ledger task has no deltas", ErrBadParams)
	}
	l.st = ledgerState{Task: lt, Balance: mod10(lt.Start)}
	l.open = true
	return lt.first(), nil
}

// Step scores one answer.
func (l *Ledger) Step(_ context.Context, action string) (StepResult, error) {
	if !l.open {
		return StepResult{}, fmt.Errorf("env: ledger: step without an open episode")
	}
	st := &l.st
	n := len(st.Task.Deltas)
	if st.Turn >= n {
		return StepResult{}, fmt.Errorf("env: ledger: step after the episode ended")
	}
	st.Balance = mod10(st.Balance + st.Task.Deltas[st.Turn])
	st.Turn++
	res := StepResult{}
	correct := LedgerAnswer(action) == strconv.Itoa(st.Balance)
	if correct {
		st.Correct++
		res.Reward = 1 / float64(n)
	}
	if st.Turn == n || (!correct && l.cfg.StopOnError) {
		l.st.Turn = n // the episode is over either way
		res.Done = true
		res.Success = st.Correct == n
		return res, nil
	}
	res.Observation = signed(st.Task.Deltas[st.Turn])
	return res, nil
}

// signedDigits are "%+d" of -9..9, the deltas max_delta allows: an
// observation costs no allocation.
var signedDigits = [...]string{"-9", "-8", "-7", "-6", "-5", "-4", "-3", "-2", "-1", "+0",
	"+1", "+2", "+3", "+4", "+5", "+6", "+7", "+8", "+9"}

// signed is fmt.Sprintf("%+d", d).
func signed(d int) string {
	if d >= -9 && d <= 9 {
		return signedDigits[d+9]
	}
	return fmt.Sprintf("%+d", d)
}

// Close ends the episode.
// InProcess implements InProcess: the episode lives in memory only.
func (*Ledger) InProcess() {}

func (l *Ledger) Close(context.Context) error { l.open = false; return nil }

// Snapshot returns the episode state as JSON.
func (l *Ledger) Snapshot(context.Context) ([]byte, error) {
	if !l.open {
		return nil, fmt.Errorf("env: ledger: snapshot without an open episode")
	}
	if need := 64 + 4*len(l.st.Task.Deltas); cap(l.snaps)-len(l.snaps) < need {
		l.snaps = make([]byte, 0, max(1024, 8*need))
	}
	start := len(l.snaps)
	l.snaps = l.st.appendJSON(l.snaps)
	return l.snaps[start:len(l.snaps):len(l.snaps)], nil
}

// appendJSON appends json.Marshal(st)'s bytes (TestLedgerSnapshotJSON
// holds them equal) without reflection: one allocation per step instead
// of two and a pass over the type.
func (st *ledgerState) appendJSON(b []byte) []byte {
	b = append(b, `{"task":{"start":`...)
	b = strconv.AppendInt(b, int64(st.Task.Start), 10)
	b = append(b, `,"deltas":`...)
	if st.Task.Deltas == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, d := range st.Task.Deltas {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, ']')
	}
	b = append(b, `},"turn":`...)
	b = strconv.AppendInt(b, int64(st.Turn), 10)
	b = append(b, `,"balance":`...)
	b = strconv.AppendInt(b, int64(st.Balance), 10)
	b = append(b, `,"correct":`...)
	b = strconv.AppendInt(b, int64(st.Correct), 10)
	return append(b, '}')
}

// Restore sets the episode state from a Snapshot.
func (l *Ledger) Restore(_ context.Context, state []byte) error {
	var st ledgerState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("env: ledger: restore: %w", err)
	}
	if st.Turn < 0 || st.Turn > len(st.Task.Deltas) {
		return fmt.Errorf("env: ledger: restore: turn %d out of range", st.Turn)
	}
	l.st, l.open = st, true
	return nil
}
