package llama

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/model/kern"
)

// genSeq is one request's decoding state: its KV cache holds, per layer,
// k and v as (K, cap, hd).
type genSeq struct {
	req     *model.SampleRequest
	res     *model.SampleResult
	k, v    [][]float32
	cap     int
	pos     int
	pending int32
	logits  []float32
	r       *rand.Rand
	sc      model.Sampler
}

// decodeBuf is one shard's buffers for a decode step of up to B rows.
type decodeBuf struct {
	B                       int
	x, ln, qraw, kraw, vr   []float32
	qn, kn, qrstd, krstd    []float32
	rstd, att, q, probs     []float32
	gate, up, sig, act, lgt []float32
	tmp                     []float32 // the packed head's halves (B × V), made when first needed
}

func (m *Model) newDecodeBuf(B int) *decodeBuf {
	c := m.cfg
	d, q, kv, f := c.Dim, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim, c.Hidden
	mk := func(n int) []float32 { return make([]float32, n) }
	return &decodeBuf{B: B, x: mk(B * d), ln: mk(B * d), qraw: mk(B * q), kraw: mk(B * kv), vr: mk(B * kv),
		qn: mk(B * q), kn: mk(B * kv), qrstd: mk(B * c.Heads), krstd: mk(B * c.KVHeads), rstd: mk(B),
		att: mk(B * q), q: mk(q), probs: mk(m.ctx), gate: mk(B * f), up: mk(B * f), sig: mk(B * f), act: mk(B * f),
		lgt: mk(B * c.Vocab)}
}

// Generate samples a completion for each request (model.SampleRequest
// semantics: temperature ≤ 0 greedy, top-k/top-p, stop tokens included,
// MaxTokens ≤ 0 = until the context is full). Logprobs are log-softmax of
// the raw logits, the trainer's quantity, and equal Logprobs bit for bit:
// prefill is the training forward and each decode step is the same layer
// functions on one row per sequence, whose kern chains are the same.
func (m *Model) Generate(ctx context.Context, reqs []model.SampleRequest) ([]model.SampleResult, error) {
	c := m.cfg
	for i := range reqs {
		if err := m.checkTokens(reqs[i].Prompt); err != nil {
			return nil, fmt.Errorf("llama: generate: request %d: %w", i, err)
		}
	}
	res := make([]model.SampleResult, len(reqs))
	seqs := make([]*genSeq, len(reqs))
	cost := make([]int, len(reqs))
	for i := range reqs {
		n := m.ctx - len(reqs[i].Prompt)
		if reqs[i].MaxTokens > 0 {
			n = min(n, reqs[i].MaxTokens)
		}
		cost[i] = len(reqs[i].Prompt) + n
		seqs[i] = &genSeq{req: &reqs[i], res: &res[i], cap: cost[i], r: rand.New(rng.NewPCG(reqs[i].Seed)),
			logits: make([]float32, c.Vocab), pos: len(reqs[i].Prompt)}
		res[i].Tokens, res[i].Logprobs = make([]int32, 0, n), make([]float32, 0, n)
	}
	split := splitShards(cost)
	var errs [nShards]error
	// with one request the other shard is idle: lend it to the head
	m.decodeSplit = len(reqs) == 1
	steps := 0
	for i := range reqs {
		steps = max(steps, cost[i]-len(reqs[i].Prompt)-1)
	}
	pm := packHeadMinSteps
	if m.packMin != 0 {
		pm = m.packMin
	}
	m.packHead(steps, pm)
	runShards(func(sh int) {
		lo, hi := split[sh][0], split[sh][1]
		if lo < hi {
			errs[sh] = m.generateShard(ctx, sh, seqs[lo:hi])
		}
	})
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("llama: generate: %w", err)
		}
	}
	return res, nil
}

func (m *Model) generateShard(ctx context.Context, sh int, seqs []*genSeq) error {
	c := m.cfg
	K, hd := c.KVHeads, c.HeadDim
	for _, s := range seqs {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := s.req.Prompt
		ws := m.workspace(sh, len(p), false)
		m.forward(ws, p, true, nil)
		copy(s.logits, ws.logits[:c.Vocab])
		s.k, s.v = make([][]float32, c.Layers), make([][]float32, c.Layers)
		for l := range c.Layers {
			s.k[l], s.v[l] = make([]float32, K*s.cap*hd), make([]float32, K*s.cap*hd)
			a := &ws.layers[l]
			for g := range K {
				copy(s.k[l][g*s.cap*hd:(g*s.cap+len(p))*hd], a.k[g*ws.T*hd:])
				copy(s.v[l][g*s.cap*hd:(g*s.cap+len(p))*hd], a.v[g*ws.T*hd:])
			}
		}
	}
	buf := m.newDecodeBuf(len(seqs))
	active := make([]*genSeq, 0, len(seqs))
	for _, s := range seqs {
		if s.pos < s.cap {
			active = append(active, s)
		} else {
			s.res.Finish = model.FinishLength
		}
	}
	for len(active) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		next := active[:0:0]
		for _, s := range active {
			tok, lp := s.sample()
			s.res.Tokens = append(s.res.Tokens, tok)
			s.res.Logprobs = append(s.res.Logprobs, lp)
			switch {
			case isStop(tok, s.req.Stop):
				s.res.Finish = model.FinishStop
			case s.pos+1 >= s.cap:
				s.res.Finish = model.FinishLength
			default:
				s.pending = tok
				next = append(next, s)
			}
		}
		active = next
		if len(active) > 0 {
			m.decodeStep(buf, active)
		}
	}
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

// decodeStep feeds each sequence's pending token at its position and
// leaves the next logits in s.logits.
func (m *Model) decodeStep(b *decodeBuf, seqs []*genSeq) {
	c := m.cfg
	B, d, H, hd, V := len(seqs), c.Dim, c.Heads, c.HeadDim, c.Vocab
	half, rep, q, kvw := hd/2, c.Heads/c.KVHeads, H*hd, c.KVHeads*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	eps := float32(c.NormEps)
	for i, s := range seqs {
		copy(b.x[i*d:(i+1)*d], m.p.embed[int(s.pending)*d:])
	}
	for l := range c.Layers {
		lp := &m.p.layers[l]
		rmsnormForward(b.ln, b.rstd, b.x, lp.ln1, B, d, eps)
		qn, kn := m.qkv(lp, b.ln, b.qraw, b.kraw, b.vr, b.qrstd, b.krstd, b.qn, b.kn, B)
		for i, s := range seqs {
			pos := s.pos
			cs, sn := m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half]
			for g := range c.KVHeads {
				kd := s.k[l][(g*s.cap+pos)*hd : (g*s.cap+pos+1)*hd]
				copy(kd, kn[i*kvw+g*hd:])
				ropeForward(kd, cs, sn)
				copy(s.v[l][(g*s.cap+pos)*hd:(g*s.cap+pos+1)*hd], b.vr[i*kvw+g*hd:])
			}
			for h := range H {
				qh := b.q[h*hd : (h+1)*hd]
				copy(qh, qn[i*q+h*hd:])
				ropeForward(qh, cs, sn)
				g := h / rep
				nk := pos + 1
				sc := b.probs[:nk]
				kern.MatMulNT(sc, qh, s.k[l][g*s.cap*hd:], 1, hd, nk, false)
				softmaxCausal(sc, nk, scale)
				kern.MatMul(b.att[i*q+h*hd:i*q+(h+1)*hd], sc, s.v[l][g*s.cap*hd:], 1, nk, hd, false)
			}
		}
		linForward(b.x, b.att, lp.wo, lp.bo, B, q, d, true)
		rmsnormForward(b.ln, b.rstd, b.x, lp.ln2, B, d, eps)
		m.mlp(lp, b.x, b.ln, b.gate, b.up, b.sig, b.act, B)
	}
	rmsnormForward(b.ln, b.rstd, b.x, m.p.norm, B, d, eps)
	m.headProduct(b, B, B == 1 && m.decodeSplit)
	for i, s := range seqs {
		copy(s.logits, b.lgt[i*V:(i+1)*V])
		s.pos++
	}
}

// sample draws the next token and returns it with its logprob under the
// raw (temperature 1, unfiltered) distribution: model's sampler.
func (s *genSeq) sample() (int32, float32) {
	q := s.req
	return s.sc.Sample(s.logits, q.Temperature, q.TopK, q.TopP, s.r)
}
