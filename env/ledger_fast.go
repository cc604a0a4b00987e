package env

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
)

// The ledger's per-rollout costs: every rollout builds an environment
// from the run's params and resets it from its task's params, and
// decoding those with encoding/json cost about twenty allocations a
// rollout (more than a call's whole budget). The fast paths below give
// the same values for the forms json.Marshal writes and fall back to
// decodeParams for anything else, so what is accepted or refused does
// not change.

// paramsMemo remembers the last params it decoded: a run builds every
// environment from the same params. Safe for concurrent use.
type paramsMemo[T any] struct {
	mu  sync.Mutex
	raw []byte
	v   T
	ok  bool
}

func (m *paramsMemo[T]) get(p json.RawMessage, decode func(json.RawMessage) (T, error)) (T, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ok && bytes.Equal(m.raw, p) {
		return m.v, nil
	}
	v, err := decode(p)
	if err != nil {
		return v, err
	}
	m.raw, m.v, m.ok = bytes.Clone(p), v, true
	return v, nil
}

// decodeLedgerTask decodes a task's params: json.Marshal's form of a
// LedgerTask with deltas directly, anything else with decodeParams.
func decodeLedgerTask(p json.RawMessage) (LedgerTask, error) {
	if lt, ok := parseLedgerTask(p); ok {
		return lt, nil
	}
	var lt LedgerTask
	err := decodeParams(p, &lt)
	return lt, err
}

// parseLedgerTask reads exactly {"start":N,"deltas":[N,...]} (no spaces,
// plain integers of at most 9 digits); ok is false for any other input.
func parseLedgerTask(p []byte) (lt LedgerTask, ok bool) {
	rest, ok := bytes.CutPrefix(p, []byte(`{"start":`))
	if !ok {
		return lt, false
	}
	if lt.Start, rest, ok = parseInt(rest); !ok {
		return lt, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"deltas":[`)); !ok {
		return lt, false
	}
	lt.Deltas = make([]int, 0, bytes.Count(rest, []byte{','})+1)
	for {
		var d int
		if d, rest, ok = parseInt(rest); !ok || len(rest) == 0 {
			return lt, false
		}
		lt.Deltas = append(lt.Deltas, d)
		if rest[0] == ']' {
			return lt, string(rest[1:]) == "}"
		}
		if rest[0] != ',' {
			return lt, false
		}
		rest = rest[1:]
	}
}

// parseInt reads an integer as json.Marshal writes one: an optional
// minus, no leading zero, at most 9 digits (so it cannot overflow).
func parseInt(p []byte) (int, []byte, bool) {
	i := 0
	if i < len(p) && p[i] == '-' {
		i++
	}
	j := i
	for j < len(p) && p[j] >= '0' && p[j] <= '9' {
		j++
	}
	digits := p[i:j]
	if len(digits) == 0 || len(digits) > 9 || (digits[0] == '0' && (len(digits) > 1 || i > 0)) {
		return 0, p, false
	}
	n, err := strconv.Atoi(string(p[:j]))
	return n, p[j:], err == nil
}

// first is the task message: fmt.Sprintf("start %d %+d", Start, Deltas[0]).
func (lt LedgerTask) first() string {
	return "start " + strconv.Itoa(lt.Start) + " " + signed(lt.Deltas[0])
}
