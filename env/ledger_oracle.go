package env

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
)

// ErrOracle is returned when the ledger oracle cannot read its context.
var ErrOracle = errors.New("env: ledger oracle cannot read the context")

// LedgerAnswer is the balance an action states: the text after its last
// "=" (an answer may show its work, "7-2=5"), trimmed.
func LedgerAnswer(action string) string {
	if i := strings.LastIndexByte(action, '='); i >= 0 {
		action = action[i+1:]
	}
	return strings.TrimSpace(action)
}

// LedgerOracle is the scripted ledger agent. It reads only its context,
// the way a model would, and answers the last delta with its work shown:
// "b+d=r", where b is the last known balance (the most recent assistant
// answer or summary before the last user message, or the task's start) and
// r = (b+d) mod 10. Asked to summarise (the last user message is
// summaryRequest), it replies with the balance it carries forward. It
// succeeds exactly when compaction keeps the most recent answer.
func LedgerOracle(msgs []lhtok.Message, summaryRequest string) (string, error) {
	// A generation prompt ends with an empty assistant turn: drop it.
	if n := len(msgs); n > 0 && msgs[n-1].Role == lhtok.RoleAssistant && msgs[n-1].Content == "" {
		msgs = msgs[:n-1]
	}
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == lhtok.RoleUser {
			last = i
			break
		}
	}
	if last < 0 {
		return "", ErrOracle
	}
	if summaryRequest != "" && msgs[last].Content == summaryRequest {
		b, err := ledgerBalanceBefore(msgs, len(msgs))
		return strconv.Itoa(b), err
	}
	var b, d int
	var err error
	if f := strings.Fields(msgs[last].Content); len(f) == 3 && f[0] == "start" {
		b, d, err = startAndDelta(f)
	} else {
		if d, err = strconv.Atoi(msgs[last].Content); err == nil {
			b, err = ledgerBalanceBefore(msgs, last)
		}
	}
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrOracle, err)
	}
	return fmt.Sprintf("%d%+d=%d", b, d, mod10(b+d)), nil
}

func startAndDelta(f []string) (int, int, error) {
	s, err1 := strconv.Atoi(f[1])
	d, err2 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("task %q: %w", strings.Join(f, " "), err)
	}
	return s, d, nil
}

// ledgerBalanceBefore returns the last balance stated before message end:
// an assistant answer, a summary, or the task's start plus first delta.
func ledgerBalanceBefore(msgs []lhtok.Message, end int) (int, error) {
	for i := end - 1; i >= 0; i-- {
		m := msgs[i]
		switch m.Role {
		case lhtok.RoleAssistant, lhtok.RoleSummary:
			if b, err := strconv.Atoi(LedgerAnswer(m.Content)); err == nil {
				return b, nil
			}
		case lhtok.RoleUser:
			if f := strings.Fields(m.Content); len(f) == 3 && f[0] == "start" {
				s, d, err := startAndDelta(f)
				return mod10(s + d), err
			}
		}
	}
	return 0, fmt.Errorf("no balance before message %d", end)
}
