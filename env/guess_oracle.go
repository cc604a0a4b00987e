package env

import (
	"fmt"
	"strconv"
	"strings"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
)

// GuessOracle is the scripted guess agent: binary search. It reads only
// its context: the range from the first user message ("guess 0-7"), then
// each of its own guesses with the answer that followed ("higher",
// "lower"), and guesses the middle of what is left.
func GuessOracle(msgs []lhtok.Message) (string, error) {
	if n := len(msgs); n > 0 && msgs[n-1].Role == lhtok.RoleAssistant && msgs[n-1].Content == "" {
		msgs = msgs[:n-1] // the generation prompt's empty assistant turn
	}
	if len(msgs) == 0 || msgs[0].Role != lhtok.RoleUser {
		return "", fmt.Errorf("%w: no first user message", ErrOracle)
	}
	var lo, hi int
	if _, err := fmt.Sscanf(msgs[0].Content, "guess %d-%d", &lo, &hi); err != nil {
		return "", fmt.Errorf("%w: first message %q: %v", ErrOracle, msgs[0].Content, err)
	}
	for i := 1; i+1 < len(msgs); i += 2 {
		g, err := strconv.Atoi(strings.TrimSpace(msgs[i].Content))
		if msgs[i].Role != lhtok.RoleAssistant || msgs[i+1].Role != lhtok.RoleUser || err != nil {
			return "", fmt.Errorf("%w: turn %d is not a guess and its answer", ErrOracle, i)
		}
		switch msgs[i+1].Content {
		case "higher":
			lo = max(lo, g+1)
		case "lower":
			hi = min(hi, g-1)
		default:
			return "", fmt.Errorf("%w: answer %q", ErrOracle, msgs[i+1].Content)
		}
	}
	if lo > hi {
		return "", fmt.Errorf("%w: the answers leave no number", ErrOracle)
	}
	return strconv.Itoa((lo + hi) / 2), nil
}
