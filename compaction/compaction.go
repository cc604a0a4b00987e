// Package compaction rewrites a rollout's context when it grows too long.
// A policy maps the current message list to a new one and says what
// happened to every old message (lineage), so each compaction can be logged
// as a declared boundary (runlog.Compaction) and the segment builder can
// tell a legitimate prefix break from a bug.
//
// Messages carry their exact tokens: a kept message is carried over token
// for token, never re-rendered from text, so the compacted context is made
// of the very tokens the model saw (and sampled).
package compaction

import (
	"errors"
	"fmt"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/runlog"
)

// Message is one message of a rollout's context.
type Message struct {
	Role    string // a tokenizer.Role* name
	Content string
	// Tokens is the message exactly as it appears in the context (under
	// the byte template: role marker, content, end marker; an assistant
	// message's content tokens are the sampled tokens themselves). A
	// message a policy writes has none: the rollout renders it with the
	// run's chat template.
	Tokens []int32
}

// NewMessage is a message a policy writes from text (never a sampled
// one); the rollout renders its tokens.
func NewMessage(role, content string) Message { return Message{Role: role, Content: content} }

// Result is a compaction plan: the new message list and the fate of every
// old message. Changed is false when the policy had nothing to do; then no
// boundary is declared.
type Result struct {
	Messages []Message
	Lineage  []runlog.Lineage
	Changed  bool
}

// Policy rewrites a context. Compact must be deterministic: a resumed
// rollout recomputes it and checks it against the logged boundary.
type Policy interface {
	Name() string
	Compact(msgs []Message) (Result, error)
}

// Summarizer is a policy that needs the policy model to write a summary:
// the loop appends a user message with SummaryRequest, samples the reply as
// an ordinary (trainable) call, and passes its text to Fold. Its Compact is
// not used.
type Summarizer interface {
	Policy
	SummaryRequest() string
	Fold(msgs []Message, summary string) (Result, error)
}

// Policy names.
const (
	PolicyNone      = "none"
	PolicyRecency   = "recency"
	PolicyElideTool = "elide_tool_output"
	PolicySummarize = "summarize"
)

// Defaults.
const (
	DefaultElideMarker    = "[tool output elided]"
	DefaultSummaryRequest = "summarize"
)

// ErrConfig wraps configuration errors.
var ErrConfig = errors.New("compaction: bad config")

// Config selects a policy and its trigger (config section `compaction`).
type Config struct {
	Policy    string `json:"policy"`     // none (or empty), recency, elide_tool_output, summarize
	KeepTurns int    `json:"keep_turns"` // recency/elide: turns kept verbatim
	// Threshold triggers a compaction before a call whose prompt has at
	// least this many tokens; 0 never triggers.
	Threshold int `json:"threshold"`
	// ThresholdMin/Max, when Max > 0, replace Threshold by a draw from
	// [Min, Max] made once per group from (seed, "compaction", group), so the
	// members of a group share one threshold and stay comparable.
	ThresholdMin  int    `json:"threshold_min"`
	ThresholdMax  int    `json:"threshold_max"`
	Marker        string `json:"marker"`         // elide: replacement text
	SummaryPrompt string `json:"summary_prompt"` // summarize: the request message
}

// Enabled reports whether the config names a policy.
func (c Config) Enabled() bool { return c.Policy != "" && c.Policy != PolicyNone }

// Validate checks the config.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if c.KeepTurns < 0 {
		return fmt.Errorf("%w: keep_turns %d < 0", ErrConfig, c.KeepTurns)
	}
	if c.ThresholdMax > 0 && (c.ThresholdMin <= 0 || c.ThresholdMin > c.ThresholdMax) {
		return fmt.Errorf("%w: threshold range [%d, %d]", ErrConfig, c.ThresholdMin, c.ThresholdMax)
	}
	if c.ThresholdMax == 0 && c.Threshold < 0 {
		return fmt.Errorf("%w: threshold %d < 0", ErrConfig, c.Threshold)
	}
	_, err := c.New()
	return err
}

// New builds the policy; nil (and no error) when compaction is off.
func (c Config) New() (Policy, error) {
	switch c.Policy {
	case "", PolicyNone:
		return nil, nil
	case PolicyRecency:
		return Recency{KeepTurns: c.KeepTurns}, nil
	case PolicyElideTool:
		m := c.Marker
		if m == "" {
			m = DefaultElideMarker
		}
		return ElideToolOutput{KeepTurns: c.KeepTurns, Marker: m}, nil
	case PolicySummarize:
		r := c.SummaryPrompt
		if r == "" {
			r = DefaultSummaryRequest
		}
		return Summarize{Request: r}, nil
	}
	return nil, fmt.Errorf("%w: unknown policy %q", ErrConfig, c.Policy)
}

// ThresholdFor returns the trigger threshold of a group: Threshold, or the
// group's seeded draw from [ThresholdMin, ThresholdMax].
func (c Config) ThresholdFor(seed uint64, group runlog.GroupID) int {
	if c.ThresholdMax <= 0 {
		return c.Threshold
	}
	span := c.ThresholdMax - c.ThresholdMin + 1
	return c.ThresholdMin + rng.Stream(seed, "compaction", uint64(group)).IntN(span)
}

// headLen is the number of leading messages every policy keeps: the
// system messages and the first user message (the task).
func headLen(msgs []Message) int {
	i := 0
	for i < len(msgs) && msgs[i].Role == lhtok.RoleSystem {
		i++
	}
	if i < len(msgs) && msgs[i].Role == lhtok.RoleUser {
		i++
	}
	return i
}

// isTurnStart reports whether message i starts a turn after the head. A
// turn is an assistant message and the messages after it up to the next
// assistant message; messages between the head and the first assistant
// message form a turn of their own.
func isTurnStart(msgs []Message, head, i int) bool {
	return i == head || msgs[i].Role == lhtok.RoleAssistant
}

// keepFrom returns the index of the first message of the last k turns; the
// messages after the last assistant message (observations the next call
// answers) are always kept. It scans back from the end, so a compaction
// allocates no list of turn starts.
func keepFrom(msgs []Message, head, k int) int {
	seen := 0
	for i := len(msgs) - 1; i >= head; i-- {
		if !isTurnStart(msgs, head, i) {
			continue
		}
		if k < 1 {
			// Keep only the pending observations.
			if msgs[i].Role == lhtok.RoleAssistant {
				return i + 1
			}
			return i
		}
		if seen++; seen == k {
			return i
		}
	}
	if seen == 0 {
		return len(msgs) // no turn after the head
	}
	return head // fewer than k turns
}

// Recency keeps the head (system + task) and the last KeepTurns turns.
type Recency struct{ KeepTurns int }

// Name implements Policy.
func (Recency) Name() string { return PolicyRecency }

// Compact implements Policy.
func (p Recency) Compact(msgs []Message) (Result, error) {
	head := headLen(msgs)
	from := keepFrom(msgs, head, p.KeepTurns)
	// Room for the old count: the loop appends the next turns' messages
	// to the result without regrowing it.
	res := Result{Messages: make([]Message, 0, len(msgs)), Lineage: make([]runlog.Lineage, len(msgs))}
	for i, m := range msgs {
		op := runlog.OpKept
		if i >= head && i < from {
			op = runlog.OpDropped
			res.Changed = true
		} else {
			res.Messages = append(res.Messages, m)
		}
		res.Lineage[i] = runlog.Lineage{Message: uint32(i), Op: op}
	}
	return res, nil
}

// ElideToolOutput replaces the content of tool messages older than the
// last KeepTurns turns with Marker.
type ElideToolOutput struct {
	KeepTurns int
	Marker    string
}

// Name implements Policy.
func (ElideToolOutput) Name() string { return PolicyElideTool }

// Compact implements Policy.
func (p ElideToolOutput) Compact(msgs []Message) (Result, error) {
	head := headLen(msgs)
	from := keepFrom(msgs, head, p.KeepTurns)
	marker := NewMessage(lhtok.RoleTool, p.Marker)
	res := Result{Messages: make([]Message, 0, len(msgs)), Lineage: make([]runlog.Lineage, len(msgs))}
	for i, m := range msgs {
		op := runlog.OpKept
		if i >= head && i < from && m.Role == lhtok.RoleTool && m.Content != p.Marker {
			op, m = runlog.OpReplaced, marker
			res.Changed = true
		}
		res.Messages = append(res.Messages, m)
		res.Lineage[i] = runlog.Lineage{Message: uint32(i), Op: op}
	}
	return res, nil
}

// Summarize asks the policy model for a summary and replaces every turn
// with it: the new context is the head, a SUMMARY message, and the pending
// observations (the messages after the last assistant message, which the
// next call must answer).
type Summarize struct{ Request string }

// Name implements Policy.
func (Summarize) Name() string { return PolicySummarize }

// Compact implements Policy; Summarize needs a summary, see Fold.
func (Summarize) Compact([]Message) (Result, error) {
	return Result{}, fmt.Errorf("compaction: summarize needs a summary call (use Fold)")
}

// SummaryRequest implements Summarizer.
func (p Summarize) SummaryRequest() string { return p.Request }

// Fold implements Summarizer. msgs is the context before the summary
// request; lineage covers it, plus the request and the summary reply (as
// indices len(msgs) and len(msgs)+1, both dropped: the reply's text lives
// on as the SUMMARY message).
func (p Summarize) Fold(msgs []Message, summary string) (Result, error) {
	head := headLen(msgs)
	from := keepFrom(msgs, head, 0)
	sm := NewMessage(lhtok.RoleSummary, summary)
	res := Result{Messages: make([]Message, 0, head+1+len(msgs)-from), Lineage: make([]runlog.Lineage, 0, len(msgs)+2), Changed: true}
	res.Messages = append(res.Messages, msgs[:head]...)
	res.Messages = append(res.Messages, sm)
	res.Messages = append(res.Messages, msgs[from:]...)
	for i := range msgs {
		op := runlog.OpKept
		if i >= head && i < from {
			op = runlog.OpSummarized
		}
		res.Lineage = append(res.Lineage, runlog.Lineage{Message: uint32(i), Op: op})
	}
	res.Lineage = append(res.Lineage,
		runlog.Lineage{Message: uint32(len(msgs)), Op: runlog.OpDropped},
		runlog.Lineage{Message: uint32(len(msgs) + 1), Op: runlog.OpDropped})
	return res, nil
}
