package model

import (
	"context"
	"fmt"
)

// Logprobs returns, for each sequence, the log-probability of token i given
// tokens[:i] (log-softmax of the raw logits, temperature 1); entry 0 is 0.
func (m *Model) Logprobs(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	cost := make([]int, len(seqs))
	for i, s := range seqs {
		if err := m.checkTokens(s); err != nil {
			return nil, fmt.Errorf("sequence %d: %w", i, err)
		}
		cost[i] = len(s)
	}
	out := make([][]float32, len(seqs))
	split := splitShards(cost)
	var errs [nShards]error
	runShards(func(s int) {
		lo, hi := split[s][0], split[s][1]
		for i := lo; i < hi; i++ {
			if err := ctx.Err(); err != nil {
				errs[s] = err
				return
			}
			toks := seqs[i]
			ws := m.workspace(s, len(toks), false)
			kv := m.scratchKV(s, len(toks))
			m.forward(ws, toks, 0, kv, false)
			lps := make([]float32, len(toks))
			V := m.cfg.Vocab
			for t := 1; t < len(toks); t++ {
				row := ws.logits[(t-1)*V : t*V]
				lse, _ := logSumExp(row, ws.e)
				lps[t] = row[toks[t]] - lse
			}
			out[i] = lps
		}
	})
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("model: logprobs: %w", err)
		}
	}
	return out, nil
}

// Logits returns the raw next-token logits of every position of one
// sequence, (len(toks), V) row-major: row t scores token t+1. It is the
// training forward, for tools and cross-checks (bench/, the server's
// top_logprobs).
func (m *Model) Logits(toks []int32) ([]float32, error) {
	if err := m.checkTokens(toks); err != nil {
		return nil, err
	}
	ws := m.workspace(0, len(toks), false)
	m.forward(ws, toks, 0, m.scratchKV(0, len(toks)), false)
	return append([]float32(nil), ws.logits[:len(toks)*m.cfg.Vocab]...), nil
}

// scratchKV is a shard's keys and values for a whole-sequence forward of
// n tokens outside training (no transposed keys).
func (m *Model) scratchKV(shard, n int) *kvCache {
	ws := m.ws[shard]
	if ws.kv == nil || ws.kv.T < n {
		ws.kv = newKV(m.cfg, max(n, ws.T), false)
	}
	return ws.kv
}
