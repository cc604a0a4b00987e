package rollout

import (
	"context"
	"log/slog"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/runlog"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bridge"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// Limits end a rollout. Zero means no limit.
type Limits struct {
	MaxTurns         int // environment steps; ends with max_turns
	MaxTokensPerCall int // max new tokens of one call (required > 0)
	// ContextBudget is the most tokens a call may see: a call whose prompt
	// plus MaxTokensPerCall exceeds it is not made and the rollout ends with
	// max_tokens.
	ContextBudget    int
	MaxSampledTokens int // sampled tokens over the whole rollout; ends with max_tokens
}

// Sampling are the generator settings of every call.
type Sampling struct {
	Temperature float32
	TopP        float32
	TopK        int
}

// Spec is everything one attempt at a rollout needs.
type Spec struct {
	Seed    uint64 // the run seed
	Rollout runlog.RolloutID
	Attempt uint32
	Task    env.Task
	// EnvSeed is passed to Reset; derive it per group (e.g.
	// rng.Derive(seed, "env", group)) so every member sees one episode.
	EnvSeed   uint64
	NewEnv    func(ctx context.Context) (env.Environment, error)
	Generator gen.Generator
	Recorder  Recorder
	// StageSeal lets Run return with the seal staged, not yet durable,
	// when it stages its records (a Stager recorder and an env.InProcess
	// environment): the caller then settles the recorder (Stager.Settle)
	// before anything outside the process acts on the result. The
	// controller settles a step's groups together (one fsync, not one
	// per rollout).
	StageSeal bool

	System          string // optional system message
	ObservationRole string // role of environment observations; default user
	Limits          Limits
	Sampling        Sampling
	Compaction      compaction.Config
	// Policy overrides Compaction.New() (a user-defined policy); the trigger
	// still comes from Compaction.
	Policy compaction.Policy

	Validator    Validator
	MaxResamples int // rejected candidates resampled up to this many times
	// Parse turns sampled tokens into the action; default: the text of the
	// byte tokens, trimmed.
	Parse  func(sampled []int32) string
	Logger *slog.Logger
	// Chat renders the conversation; nil is DefaultChat. A Chat that
	// renders by appending (tokenizer.Appender: the byte template, the
	// embedded model's) builds the context message by message; any other
	// drives the rollout through the bridge (tokenizer/bridge,
	// chatloop.go): each prompt is the previous prompt + the sampled
	// tokens + the rendered new messages.
	Chat lhtok.Chat
	// History is tokenizer.history for a bridged Chat (default append).
	History bridge.History
	// Render carries the tools and template kwargs of a bridged Chat.
	Render lhtok.RenderOptions
	// ToolParser reads a bridged Chat's replies into messages (tool
	// calls, reasoning); nil parses no tool calls.
	ToolParser toolcall.Parser
}

// DefaultChat is the chat template of a Spec without one: longhaul's byte
// tokenizer and template, the built-in model's.
var DefaultChat lhtok.Appender = bytetok.Chat{}

// Result is how a rollout ended.
type Result struct {
	Outcome     string // runlog.Outcome*
	Reward      float64
	Success     bool
	Turns       int
	Calls       int // calls made over all attempts, rejected ones included
	Compactions int
	Replayed    int // prior events consumed
}
