package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/model/kern"
)

// SampleRequest is one completion request.
type SampleRequest struct {
	Prompt      []int32 // at least one token, at most Context
	MaxTokens   int     // new tokens at most; ≤ 0 means until the context is full
	Temperature float32 // 0 (or less) means greedy
	TopP        float32 // nucleus mass; 0 or ≥ 1 disables
	TopK        int     // keep the K most likely tokens; 0 disables
	Stop        []int32 // sampling one of these ends the completion (it is included)
	Seed        uint64  // the request's random stream; same request, same tokens
}

// SampleResult is one completion.
type SampleResult struct {
	Tokens   []int32
	Logprobs []float32 // log-softmax of the raw logits (temperature 1, before top-p/top-k) at each sampled token
	Finish   string    // FinishStop or FinishLength
}

// Finish reasons.
const (
	FinishStop   = "stop"   // a stop token was sampled
	FinishLength = "length" // MaxTokens reached or the context is full
)

// maxPooledKV bounds the KV caches a model and its clones keep between
// Generate calls (each is about 3·L·T·K·hd floats).
const maxPooledKV = 64

// genSeq is one request's decoding state.
type genSeq struct {
	req     *SampleRequest
	res     *SampleResult
	kv      *kvCache
	need    int       // positions the request may fill: prompt + completion
	pos     int       // positions held in kv
	pending int32     // token to feed at pos on the next decode step
	logits  []float32 // (V) logits for position pos
	r       *rand.Rand
	sc      sampler
	done    bool
}

// decodeWS is one shard's buffers for a decode step of B sequences.
type decodeWS struct {
	B            int
	x, ln, att   []float32 // (B, d), (B, d), (B, H·hd)
	qkv          []float32 // (B, H·hd + 2·K·hd): rows [q | k | v]
	qn           []float32 // (H·hd + K·hd) one row's normed q and k (qwen3)
	nrstd        []float32 // (H + K)
	rstd         []float32 // (B)
	h, sig, act  []float32 // (B, 2F) rows [gate | up], (B, F), (B, F)
	logits       []float32 // (B, V)
	probs        []float32 // (H, probStride(ctx)) one row's attention scores/probabilities per head
	active, next []*genSeq
	mode         decodeMode // how this call reads the weights (decodeWeights)
	par          int        // > 1: each product's columns over this many cores (one decode for the whole call)
}

func (m *Model) decodeWS(shard, B int) *decodeWS {
	c := m.cfg
	dw := m.dec[shard]
	if dw == nil {
		q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
		dw = &decodeWS{probs: make([]float32, c.Heads*probStride(m.ctx)), qn: make([]float32, q+kv),
			nrstd: make([]float32, c.Heads+c.KVHeads)}
		m.dec[shard] = dw
	}
	if dw.B < B {
		d, f, q, kv := c.Dim, c.Hidden, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
		dw.B = B
		dw.x, dw.ln, dw.att = make([]float32, B*d), make([]float32, B*d), make([]float32, B*q)
		dw.qkv = make([]float32, B*(q+2*kv))
		dw.rstd = make([]float32, B)
		dw.h, dw.sig, dw.act = make([]float32, B*2*f), make([]float32, B*f), make([]float32, B*f)
		dw.logits = make([]float32, B*c.Vocab)
	}
	return dw
}

// Generate samples a completion for each request, in order. Requests whose
// prompts share a prefix (the G members of a group) compute it once: each
// prompt's keys/values are copied from the earlier request sharing the
// longest prefix, and only the rest is prefilled. Across calls, the prefix
// cache (prefixcache.go) does the same with the sequences earlier calls of
// the same weights computed. Sampling is batched over nShards shards of the
// requests. Not safe for concurrent use.
func (m *Model) Generate(ctx context.Context, reqs []SampleRequest) ([]SampleResult, error) {
	return m.generate(ctx, reqs, -1)
}

// Lanes is how many GenerateOn calls may run at once: one per core, or 1
// for a model too big for decode's copies, whose every decode step streams
// the weights from memory and needs both cores' bandwidth (its Generate
// splits each product's columns over the cores).
func (m *Model) Lanes() int {
	if !m.decodeCopies() {
		return 1
	}
	return nShards
}

// GenerateOn is Generate on one lane (one core, lane in [0, Lanes())): the
// whole call runs on the calling goroutine with that lane's buffers, so a
// call on each lane can run at once, each starting when its requests are
// ready instead of waiting for the other's slowest row. A request gets the
// same tokens and logprob bits as from Generate. Safe for concurrent use
// with GenerateOn on other lanes, not with any other method.
func (m *Model) GenerateOn(ctx context.Context, lane int, reqs []SampleRequest) ([]SampleResult, error) {
	if lane < 0 || lane >= nShards {
		return nil, fmt.Errorf("model: generate: lane %d outside [0,%d)", lane, nShards)
	}
	return m.generate(ctx, reqs, lane)
}

// prepareGenerate readies what every call of these weights shares (the
// transposed decode weights, decode.go) and returns their prefix-cache key.
func (m *Model) prepareGenerate() uint64 {
	m.prep.Lock()
	defer m.prep.Unlock()
	m.transposeDecode()
	return m.prefixKey()
}

// generate is Generate over both shards when lane < 0, else on that lane.
func (m *Model) generate(ctx context.Context, reqs []SampleRequest, lane int) ([]SampleResult, error) {
	c := m.cfg
	for i := range reqs {
		if err := m.checkTokens(reqs[i].Prompt); err != nil {
			return nil, fmt.Errorf("model: generate: request %d: %w", i, err)
		}
	}
	key := m.prepareGenerate()
	res := make([]SampleResult, len(reqs))
	seqs := make([]*genSeq, len(reqs))
	for i := range reqs {
		n := m.ctx - len(reqs[i].Prompt)
		if reqs[i].MaxTokens > 0 {
			n = min(n, reqs[i].MaxTokens)
		}
		seqs[i] = &genSeq{req: &reqs[i], res: &res[i], logits: make([]float32, c.Vocab), r: rand.New(rng.NewPCG(reqs[i].Seed)),
			need: len(reqs[i].Prompt) + n}
	}
	kept := false
	defer func() {
		if !kept {
			m.kv.putAll(seqs)
		}
	}()

	// prefix sharing: parent[i] is the earliest earlier request with the
	// longest common prefix; shared[i] positions are copied from it.
	parent := make([]int, len(reqs))
	shared := make([]int, len(reqs))
	for i := range reqs {
		parent[i] = -1
		pi := reqs[i].Prompt
		for j := 0; j < i; j++ {
			pj := reqs[j].Prompt
			l := lcp(pi, pj)
			if l == len(pi) && len(pj) == len(pi) { // identical: nothing to prefill
				parent[i], shared[i] = j, l
				break
			}
			if l > shared[i] {
				parent[i], shared[i] = j, l
			}
		}
		if shared[i] == len(pi) && len(reqs[parent[i]].Prompt) != len(pi) {
			shared[i]-- // a strict prefix: recompute its last position for its logits
		}
		if shared[i] == 0 {
			parent[i] = -1
		}
	}
	// the prefix cache: a request covered at least as far by a sequence an
	// earlier call computed starts from it instead (a root)
	fromCache := m.kv.seed(key, seqs, parent, shared, m.kvShape(), m.ctx)
	// Prefill runs level by level of the prefix trees (roots, then the
	// requests whose parent is a root, ...), each level's requests spread
	// over the shards by prefill tokens, longest first: a lone group's
	// members are computed on both cores once its root is done. A request
	// computes the same bits on any shard.
	level := make([]int, len(reqs))
	levels := 1
	for i := range reqs {
		if parent[i] >= 0 {
			level[i] = level[parent[i]] + 1
			levels = max(levels, level[i]+1)
		}
	}
	pcost := func(i int) int { return len(reqs[i].Prompt) - shared[i] }
	shardOf := make([]int, len(reqs))
	byLevel := make([][]int, levels)
	for i := range reqs {
		byLevel[level[i]] = append(byLevel[level[i]], i)
	}
	for _, idx := range byLevel {
		order := slices.Clone(idx)
		slices.SortStableFunc(order, func(a, b int) int { return pcost(b) - pcost(a) })
		var load [nShards]int
		for _, i := range order {
			best := 0
			for s := 1; s < nShards; s++ {
				if load[s] < load[best] {
					best = s
				}
			}
			shardOf[i] = best
			load[best] += pcost(i)
		}
	}
	var prefilled int
	var prefillShards [nShards]int
	for i := range reqs {
		prefilled += pcost(i)
		prefillShards[shardOf[i]] += pcost(i)
	}
	var errs [nShards]error
	if lane >= 0 {
		// one lane: every level in order on its own workspace
		prefillShards = [nShards]int{}
		prefillShards[lane] = prefilled
		errs[0] = m.prefillLane(ctx, lane, seqs, byLevel, parent, shared)
	} else {
		m.prefillOnShards(ctx, seqs, byLevel, shardOf, parent, shared, &errs)
	}
	m.prep.Lock()
	m.prefilled, m.prefillShards, m.fromCache = prefilled, prefillShards, fromCache
	m.prep.Unlock()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("model: generate: %w", err)
		}
	}

	// decode: contiguous shards balanced by the most tokens each may take
	cost := make([]int, len(seqs))
	for i, s := range seqs {
		cost[i] = s.need - len(s.req.Prompt)
	}
	mode := m.decodeWeights(cost, lane)
	if lane >= 0 || mode == decodeInPlace {
		// one decode loop: on the lane, or (a model too big for copies:
		// every step streams the weights) over all rows at once with each
		// product's columns split over the cores, so the weights are read
		// once per step, not once per shard
		sh, par := lane, 1
		if lane < 0 {
			sh, par = 0, nShards
		}
		dw := m.decodeWS(sh, len(seqs))
		dw.mode, dw.par = mode, par
		if err := m.decode(ctx, dw, seqs); err != nil {
			return nil, fmt.Errorf("model: generate: %w", err)
		}
	} else {
		split := splitShards(cost)
		runShards(func(sh int) {
			lo, hi := split[sh][0], split[sh][1]
			if lo < hi {
				dw := m.decodeWS(sh, hi-lo)
				dw.mode, dw.par = mode, 1
				errs[sh] = m.decode(ctx, dw, seqs[lo:hi])
			}
		})
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("model: generate: %w", err)
			}
		}
	}
	m.kv.keep(key, seqs, m.kvShape())
	kept = true
	return res, nil
}

// prefillLane prefills every request on one lane's workspace, level by
// level.
func (m *Model) prefillLane(ctx context.Context, lane int, seqs []*genSeq, byLevel [][]int, parent, shared []int) error {
	for _, idx := range byLevel {
		for _, i := range idx {
			if err := m.prefill(ctx, lane, 1, seqs, i, parent[i], shared[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// prefillOnShards prefills level by level over both shards (shardOf), a
// level of one request on both cores at once.
func (m *Model) prefillOnShards(ctx context.Context, seqs []*genSeq, byLevel [][]int, shardOf, parent, shared []int, errs *[nShards]error) {
	for _, idx := range byLevel {
		if len(idx) == 1 {
			// a lone request (the root of a single group): its products and
			// heads go over both cores instead of leaving one idle
			errs[0] = m.prefill(ctx, 0, nShards, seqs, idx[0], parent[idx[0]], shared[idx[0]])
			if errs[0] != nil {
				break
			}
			continue
		}
		runShards(func(sh int) {
			for _, i := range idx {
				if shardOf[i] != sh {
					continue
				}
				if errs[sh] = m.prefill(ctx, sh, 1, seqs, i, parent[i], shared[i]); errs[sh] != nil {
					return
				}
			}
		})
		if slices.ContainsFunc(errs[:], func(e error) bool { return e != nil }) {
			break
		}
	}
}

// prefill computes request i's prompt past the shared positions it copies
// from its parent (or, parent −1, already holds from the prefix cache) on
// shard sh's workspace (its products over par cores), leaving its
// next-token logits in seqs[i].
func (m *Model) prefill(ctx context.Context, sh, par int, seqs []*genSeq, i, parent, shared int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := m.cfg
	s := seqs[i]
	p := s.req.Prompt
	if parent >= 0 {
		copyKV(s.kv, seqs[parent].kv, shared, m.kvShape())
	}
	if shared == len(p) {
		copy(s.logits, seqs[parent].logits)
	} else {
		ws := m.workspace(sh, len(p)-shared, false)
		ws.par = par
		m.forward(ws, p[shared:], shared, s.kv, true)
		ws.par = 0
		copy(s.logits, ws.logits[:c.Vocab])
		transposeKeys(s.kv, shared, len(p), m.kvShape())
	}
	s.pos = len(p)
	return nil
}

func lcp(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// kvDims is what the KV-cache helpers need of the config.
type kvDims struct{ K, hd int }

func (m *Model) kvShape() kvDims { return kvDims{m.cfg.KVHeads, m.cfg.HeadDim} }

// copyKV copies positions [0, n) of every layer and kv head (the
// transposed keys in whole blocks: positions past n are overwritten before
// they are read); the caches may differ in size.
func copyKV(dst, src *kvCache, n int, c kvDims) {
	hd := c.hd
	dl, sl := ktLen(dst.T), ktLen(src.T)
	nb := min((n+ktBlock-1)/ktBlock*ktBlock, dl, sl) * hd
	for l := range dst.l {
		d, s := &dst.l[l], &src.l[l]
		for g := range c.K {
			do, so := g*dst.T*hd, g*src.T*hd
			copy(d.k[do:do+n*hd], s.k[so:so+n*hd])
			copy(d.v[do:do+n*hd], s.v[so:so+n*hd])
			copy(d.kt[g*hd*dl:g*hd*dl+nb], s.kt[g*hd*sl:g*hd*sl+nb])
		}
	}
}

// transposeKeys fills kt from k for positions [p0, p1).
func transposeKeys(kv *kvCache, p0, p1 int, c kvDims) {
	eachKeyRow(kv, p0, p1, c, func(row, kt []float32, pos int) {
		for p, v := range row {
			kt[ktAt(len(row), pos, p)] = v
		}
	})
}

// eachKeyRow calls f with the key row of every layer and kv head at each
// position of [p0, p1), and the head's blocked transposed keys.
func eachKeyRow(kv *kvCache, p0, p1 int, c kvDims, f func(row, kt []float32, pos int)) {
	T, hd := kv.T, c.hd
	tl := ktLen(T)
	for l := range kv.l {
		lk := &kv.l[l]
		for g := range c.K {
			kt := lk.kt[g*hd*tl : (g+1)*hd*tl]
			for pos := p0; pos < p1; pos++ {
				f(lk.k[(g*T+pos)*hd:(g*T+pos+1)*hd], kt, pos)
			}
		}
	}
}

// decode samples every sequence to completion, one batched step at a time.
func (m *Model) decode(ctx context.Context, dw *decodeWS, seqs []*genSeq) error {
	c := m.cfg
	active := dw.active[:0]
	for _, s := range seqs {
		if s.pos >= m.ctx {
			s.res.Finish = FinishLength // a full prompt leaves no room
			continue
		}
		n := s.need - s.pos
		s.res.Tokens = make([]int32, 0, n)
		s.res.Logprobs = make([]float32, 0, n)
		active = append(active, s)
	}
	for len(active) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		next := dw.next[:0]
		for _, s := range active {
			tok, lp := s.sample(c.Vocab)
			s.res.Tokens = append(s.res.Tokens, tok)
			s.res.Logprobs = append(s.res.Logprobs, lp)
			switch {
			case isStop(tok, s.req.Stop):
				s.res.Finish = FinishStop
			case len(s.res.Tokens) == s.req.MaxTokens, s.pos+1 >= m.ctx:
				s.res.Finish = FinishLength
			default:
				s.pending = tok
				next = append(next, s)
			}
		}
		active, dw.next = next, active
		if len(active) > 0 {
			m.decodeStep(dw, active)
		}
	}
	dw.active = active
	return nil
}

func isStop(t int32, stop []int32) bool {
	for _, s := range stop {
		if t == s {
			return true
		}
	}
	return false
}

// sample draws the next token from s.logits and returns it with its
// logprob under the raw (temperature 1, unfiltered) distribution, which is
// what the trainer computes.
func (s *genSeq) sample(V int) (int32, float32) {
	row := s.logits
	if len(s.sc.e) < V {
		s.sc.e = make([]float32, V)
	}
	lse, _ := logSumExp(row, s.sc.e)
	var tok int32
	if q := s.req; q.Temperature <= 0 {
		tok = argmax(row)
	} else {
		tok = s.sc.draw(row, s.sc.e, q.Temperature, q.TopK, q.TopP, s.r)
	}
	return tok, row[tok] - lse
}

func argmax(row []float32) int32 {
	best := 0
	for j, v := range row {
		if v > row[best] {
			best = j
		}
	}
	return int32(best)
}

// sampler is per-request scratch for filtered sampling (no per-token
// allocation after the first).
type sampler struct {
	idx []int32
	w   []float32
	lg  []float32
	e   []float32 // logSumExp scratch: exp(logit − max)
}

func (sc *sampler) Len() int      { return len(sc.idx) }
func (sc *sampler) Swap(i, j int) { sc.idx[i], sc.idx[j] = sc.idx[j], sc.idx[i] }

// Less orders by logit, descending, then by id: a total order, so the
// result does not depend on the sort algorithm.
func (sc *sampler) Less(i, j int) bool {
	a, b := sc.idx[i], sc.idx[j]
	if sc.lg[a] != sc.lg[b] {
		return sc.lg[a] > sc.lg[b]
	}
	return a < b
}

// draw samples from softmax(row/temp) restricted by top-k and top-p; e is
// exp(row − max), which is the weight vector itself at temperature 1.
func (sc *sampler) draw(row, e []float32, temp float32, topK int, topP float32, r *rand.Rand) int32 {
	V := len(row)
	if cap(sc.w) < V {
		sc.w = make([]float32, V)
		sc.idx = make([]int32, V)
	}
	w := e[:V]
	if temp != 1 {
		w = sc.w[:V]
		mx := row[argmax(row)]
		invT := 1 / temp
		for j, v := range row {
			w[j] = (v - mx) * invT
		}
		kern.ExpInPlace(w)
	}
	var total float64
	for _, x := range w {
		total += float64(x)
	}
	filter := (topK > 0 && topK < V) || (topP > 0 && topP < 1)
	if !filter {
		u := r.Float64() * total
		var acc float64
		for j, x := range w {
			acc += float64(x)
			if u < acc {
				return int32(j)
			}
		}
		return int32(V - 1)
	}
	sc.idx = sc.idx[:V]
	for j := range sc.idx {
		sc.idx[j] = int32(j)
	}
	sc.lg = row
	sort.Sort(sc)
	keep := V
	if topK > 0 && topK < V {
		keep = topK
	}
	if topP > 0 && topP < 1 {
		var kt float64
		for _, j := range sc.idx[:keep] {
			kt += float64(w[j])
		}
		var acc float64
		for k, j := range sc.idx[:keep] {
			acc += float64(w[j])
			if acc >= float64(topP)*kt {
				keep = k + 1
				break
			}
		}
	}
	var kt float64
	for _, j := range sc.idx[:keep] {
		kt += float64(w[j])
	}
	u := r.Float64() * kt
	var acc float64
	for _, j := range sc.idx[:keep] {
		acc += float64(w[j])
		if u < acc {
			sc.lg = nil
			return j
		}
	}
	sc.lg = nil
	return sc.idx[keep-1]
}
