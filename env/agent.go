package env

import (
	"context"
	"errors"
)

// Agent is an environment that is its own agent: an external program
// (env.kind agent) that asks for model calls while it runs. The rollout
// loop does not step it; it calls Drive, answering every model call
// through call, which renders, samples (or replays from the log) and
// records the call. Reset and Step of an Agent are not used.
type Agent interface {
	Environment
	Drive(ctx context.Context, task Task, call AgentCallFunc) (AgentResult, error)
}

// AgentCallFunc answers one model call of an agent.
type AgentCallFunc func(ctx context.Context, c AgentCall) (AgentReply, error)

// AgentCall is one chat request of an agent.
type AgentCall struct {
	Messages []Message
	// Tools are the request's function tools: the chat template renders
	// them, and the reply is parsed for calls to them.
	Tools []Tool
	// Compacted is the agent's declaration that it rewrote its context
	// since its previous call (header X-Longhaul-Compaction): a declared
	// compaction boundary rather than an undeclared prefix break.
	Compacted bool
}

// AgentReply is the sampled answer: its text (special tokens dropped;
// without the tool calls under a real chat template), the tool calls the
// tool parser read from it, token counts and finish reason (stop | length
// | tool_calls).
type AgentReply struct {
	Text             string
	ToolCalls        []ToolCall
	PromptTokens     int
	CompletionTokens int
	Finish           string
}

// AgentResult is how the agent ended: the reward it posted.
type AgentResult struct {
	Reward  float64
	Success bool
}

// ErrAgentLimit is matched by a call refused because the rollout reached
// a limit (turns, tokens, context): the agent is told, and the rollout is
// sealed with the limit's outcome when the agent exits.
var ErrAgentLimit = errors.New("env: rollout limit reached")
