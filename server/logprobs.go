package server

import (
	"context"
	"fmt"
	"math"
	"sort"
)

// top_logprobs and prompt_logprobs: the alternatives a response lists come
// from one teacher-forced forward of the served model over prompt and
// completion (Backend.Scorer), run under the same read lock as the
// generation, so they are the distribution of the weights that sampled.
// The sampled token's own logprob stays the generator's (it is what RL
// trains on); the forward's value for it agrees to float rounding (the
// server tests check 1e-4).

// tokenLP is one token of a distribution: its id, log-softmax of the raw
// logits (temperature 1, before top-k/top-p, as vLLM's default
// raw_logprobs) and 1-based rank (1 = most likely).
type tokenLP struct {
	id   int32
	lp   float32
	rank int
}

// position is the scored distribution at one position: the token that
// stands there and the n most likely tokens, most likely first.
type position struct {
	self tokenLP
	top  []tokenLP
}

// scoreRow reads one logits row: the log-softmax of tok, its rank, and the
// n most likely tokens (ties broken by the lower id, so the list is
// deterministic).
func scoreRow(row []float32, tok int32, n int) position {
	mx := math.Inf(-1)
	for _, x := range row {
		mx = math.Max(mx, float64(x))
	}
	var sum float64
	for _, x := range row {
		sum += math.Exp(float64(x) - mx)
	}
	lse := mx + math.Log(sum)
	lp := func(i int) float32 { return float32(float64(row[i]) - lse) }
	p := position{self: tokenLP{id: tok, lp: lp(int(tok)), rank: 1}}
	own := row[tok]
	for i, x := range row {
		if x > own || (x == own && int32(i) < tok) {
			p.self.rank++
		}
	}
	if n <= 0 {
		return p
	}
	// The n best by insertion: n ≤ maxTopLogprobs, so O(V·n) is a few
	// passes' worth.
	best := make([]int, 0, n+1)
	better := func(a, b int) bool { return row[a] > row[b] || (row[a] == row[b] && a < b) }
	for i := range row {
		if len(best) == n && !better(i, best[n-1]) {
			continue
		}
		k := sort.Search(len(best), func(j int) bool { return better(i, best[j]) })
		best = append(best, 0)
		copy(best[k+1:], best[k:])
		best[k] = i
		if len(best) > n {
			best = best[:n]
		}
	}
	p.top = make([]tokenLP, len(best))
	for r, i := range best {
		p.top[r] = tokenLP{id: int32(i), lp: lp(i), rank: r + 1}
	}
	return p
}

// scoreSeq scores positions [from, len(toks)) of toks: entry k is the
// distribution of toks[from+k] given toks[:from+k]. from ≥ 1.
func scoreSeq(ctx context.Context, sc Scorer, toks []int32, from, n, vocab int) ([]position, error) {
	if from < 1 || from > len(toks) {
		return nil, fmt.Errorf("score: position %d outside [1, %d]", from, len(toks))
	}
	if from == len(toks) {
		return nil, nil
	}
	logits, err := sc.Logits(ctx, toks[:len(toks)-1])
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	if len(logits) != (len(toks)-1)*vocab {
		return nil, fmt.Errorf("score: %d logits for %d positions of vocab %d", len(logits), len(toks)-1, vocab)
	}
	out := make([]position, 0, len(toks)-from)
	for t := from; t < len(toks); t++ {
		out = append(out, scoreRow(logits[(t-1)*vocab:t*vocab], toks[t], n))
	}
	return out, nil
}

// annotate fills the choices' per-token alternatives (p.topN) and the
// prompts' logprobs (p.promptN ≥ 0), one forward per choice (its prompt
// rows serve prompt_logprobs too) or per prompt when only those are asked.
// The caller holds the server's read lock.
func (s *Server) annotate(ctx context.Context, prompts [][]int32, cs []choice, p params) ([][]position, error) {
	if p.topN <= 0 && p.promptN < 0 {
		return nil, nil
	}
	if s.be.Scorer == nil {
		return nil, fmt.Errorf("score: the backend has no scorer") // validate refused this already
	}
	vocab := s.vocabSize()
	var promptLPs [][]position
	if p.promptN >= 0 {
		promptLPs = make([][]position, len(prompts))
	}
	n := max(p.topN, p.promptN)
	for i := range cs {
		c := &cs[i]
		pr := prompts[c.prompt]
		needPrompt := promptLPs != nil && promptLPs[c.prompt] == nil
		if p.topN <= 0 && !needPrompt {
			continue
		}
		seq := append(append(make([]int32, 0, len(pr)+len(c.tokens)), pr...), c.tokens...)
		from := len(pr)
		if needPrompt {
			from = 1
		}
		if p.topN <= 0 {
			seq = seq[:len(pr)]
		}
		pos, err := scoreSeq(ctx, s.be.Scorer, seq, from, n, vocab)
		if err != nil {
			return nil, err
		}
		if needPrompt {
			k := len(pr) - 1
			promptLPs[c.prompt] = trimTop(pos[:k], p.promptN)
			pos = pos[k:]
		}
		if p.topN > 0 {
			c.top = trimTop(pos, p.topN)
			for k := range c.top {
				// The generator's value is the sampled token's logprob
				// everywhere it is listed, so a response never states two.
				c.top[k].self.lp = c.logprobs[k]
				for j := range c.top[k].top {
					if c.top[k].top[j].id == c.tokens[k] {
						c.top[k].top[j].lp = c.logprobs[k]
					}
				}
			}
		}
	}
	return promptLPs, nil
}

// trimTop keeps n alternatives per position (the scoring pass took the
// larger of top_logprobs and prompt_logprobs). It copies, so trimming one
// use never shortens another's.
func trimTop(ps []position, n int) []position {
	out := make([]position, len(ps))
	for i, p := range ps {
		out[i] = position{self: p.self, top: append([]tokenLP{}, p.top[:min(n, len(p.top))]...)}
	}
	return out
}

// vllmLogprob is vLLM's Logprob: one entry of a prompt_logprobs dict.
type vllmLogprobEntry struct {
	Logprob      float32 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// promptLogprobsJSON is vLLM's prompt_logprobs: null for the first prompt
// token (nothing predicts it), then a dict from token id to Logprob
// holding the prompt token and the n most likely ones.
func (s *Server) promptLogprobsJSON(prompt []int32, ps []position, asIDs bool) []map[string]vllmLogprobEntry {
	out := make([]map[string]vllmLogprobEntry, len(prompt))
	for k, p := range ps {
		m := make(map[string]vllmLogprobEntry, len(p.top)+1)
		for _, e := range append([]tokenLP{p.self}, p.top...) {
			m[fmt.Sprint(e.id)] = vllmLogprobEntry{Logprob: e.lp, Rank: e.rank, DecodedToken: s.tokenString(e.id, asIDs)}
		}
		out[k+1] = m
	}
	return out
}
