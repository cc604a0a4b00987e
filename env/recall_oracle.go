package env

import (
	"encoding/json"
	"hash/fnv"
	"slices"

	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/tokenizer"
)

// RecallOracle returns the scripted recall agent of params (env.params),
// the writer of the warm start's demonstrations. It reads only its
// context, the way a model would: it acknowledges observations with "ok",
// answers the question with the codes (uppercase letters) in its context
// in order, and asked to summarise (the last user message is
// summaryRequest) writes a summary: with probability demo_tracked the
// codes in its context, else demo_keep letters of it chosen by
// demo_summary. Its random choices are drawn from a hash of the context,
// so a replayed demonstration is the same demonstration.
func RecallOracle(params json.RawMessage, summaryRequest string) (func([]tokenizer.Message) (string, error), error) {
	cfg, err := recallConfig(params)
	if err != nil {
		return nil, err
	}
	return func(msgs []tokenizer.Message) (string, error) {
		if n := len(msgs); n > 0 && msgs[n-1].Role == tokenizer.RoleAssistant && msgs[n-1].Content == "" {
			msgs = msgs[:n-1] // the generation prompt's empty assistant turn
		}
		last := -1
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == tokenizer.RoleUser {
				last = i
				break
			}
		}
		if last < 0 {
			return "", ErrOracle
		}
		switch q := msgs[last].Content; {
		case summaryRequest != "" && q == summaryRequest:
			return string(cfg.summarize(recallLetters(msgs, summaryRequest), contextSeed(msgs))), nil
		case q == RecallQuestion:
			letters := recallLetters(msgs, summaryRequest)
			return string(slices.DeleteFunc(letters, func(c byte) bool { return !isCode(c) })), nil
		}
		return "ok", nil
	}, nil
}

// recallLetters lists the letters of the observations and summaries in
// msgs after the task message, in order of first appearance; user messages equal to request
// (the summary request) are not observations.
func recallLetters(msgs []tokenizer.Message, request string) []byte {
	var out []byte
	for i, m := range msgs {
		if i == 0 || (m.Role != tokenizer.RoleUser && m.Role != tokenizer.RoleSummary) ||
			(m.Role == tokenizer.RoleUser && m.Content == request) {
			continue
		}
		for _, c := range []byte(m.Content) {
			// Letters are distinct within an episode; a summary and the
			// pending observation it was written beside may both hold one.
			if ('a' <= c && c <= 'z' || isCode(c)) && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// summarize picks the letters a demonstration summary keeps, in the order
// they appear in the context.
func (c RecallConfig) summarize(letters []byte, seed uint64) []byte {
	k := c.DemoKeep
	mode := c.DemoSummary
	if c.DemoTracked > 0 && rng.Stream(seed, "tracked").Float64() < c.DemoTracked {
		mode = RecallDemoTracked
	}
	switch mode {
	case RecallDemoTracked:
		letters = slices.DeleteFunc(letters, func(b byte) bool { return !isCode(b) })
		return letters[:min(k, len(letters))]
	case RecallDemoRecent:
		return letters[max(0, len(letters)-k):]
	}
	if len(letters) <= k {
		return letters
	}
	pick := rng.Stream(seed, "summary").Perm(len(letters))[:k]
	slices.Sort(pick)
	out := make([]byte, k)
	for i, p := range pick {
		out[i] = letters[p]
	}
	return out
}

// contextSeed hashes the conversation: the oracle's random choices are a
// function of what it sees.
func contextSeed(msgs []tokenizer.Message) uint64 {
	h := fnv.New64a()
	for _, m := range msgs {
		h.Write([]byte(m.Role))
		h.Write([]byte{0})
		h.Write([]byte(m.Content))
		h.Write([]byte{0})
	}
	return h.Sum64()
}
