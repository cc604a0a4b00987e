package model

import (
	"math"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// layerKV is one layer's keys and values, k and v (K, T, hd) for a cache
// of T positions: the KV cache in generation and the saved keys/values in
// training. The cache also keeps the keys transposed, kt, so a decode
// step's scores are multiply-add chains over contiguous keys. kt is
// blocked: kv head g, then blocks of ktBlock positions, each (hd, ktBlock)
// (index g·hd·ktLen(T) + ktAt(hd, j, p)). A plain (hd, T) layout put a
// head's hd key rows T·4 bytes apart, which at T 256 maps them onto 4 of
// L1's 64 sets: every decode step missed L1 on every key line.
type layerKV struct{ k, v, kt []float32 }

// kvCache is a sequence's keys and values for up to T positions.
type kvCache struct {
	T int
	l []layerKV
}

// ktBlock is the positions per block of the transposed keys: two vectors
// of the widest path (2×16 lanes), so a kernel's chains stay in one block.
const ktBlock = 32

// ktLen is the positions a head's blocked keys hold: T rounded up to whole
// blocks (lanes past T are read as padding, never used).
func ktLen(T int) int { return (T + ktBlock - 1) / ktBlock * ktBlock }

// ktAt is the offset of key component p at position j in a head's blocked
// transposed keys.
func ktAt(hd, j, p int) int { return (j/ktBlock)*hd*ktBlock + p*ktBlock + j%ktBlock }

func newKV(c Config, T int, transposed bool) *kvCache {
	n := T * c.KVHeads * c.HeadDim
	per := 2 * n
	if transposed {
		per += ktLen(T) * c.KVHeads * c.HeadDim
	}
	buf := make([]float32, per*c.Layers)
	kv := &kvCache{T: T, l: make([]layerKV, c.Layers)}
	for l := range kv.l {
		b := buf[l*per : (l+1)*per]
		kv.l[l] = layerKV{k: b[:n:n], v: b[n : 2*n : 2*n]}
		if transposed {
			kv.l[l].kt = b[2*n:]
		}
	}
	return kv
}

// layerActs are what one block's forward keeps for its backward (T rows;
// row r is position p0+r). An inference workspace has one set shared by
// every layer.
type layerActs struct {
	x, ln1       []float32 // (T, d) block input and its norm
	rstd1        []float32 // (T)
	qraw, kraw   []float32 // (T, H·hd), (T, K·hd) projections (+bias), before q/k norm
	qrstd, krstd []float32 // (T·H), (T·K) q/k norm (qwen3)
	q            []float32 // (H, T, hd) queries after norm and rope
	probs        []float32 // training: H heads' attention probabilities of a batch, block layout
	att          []float32 // (T, H·hd) heads merged
	x2, ln2      []float32 // (T, d)
	rstd2        []float32 // (T)
	gate, up     []float32 // (T, F)
	sig, act     []float32 // (T, F)
}

// workspace is one shard's activations and gradient scratch for one
// sequence of up to T tokens, allocated once and reused (llm.c style).
type workspace struct {
	T      int  // rows allocated
	train  bool // per-layer activations and the backward's buffers
	layers []layerActs
	kv     *kvCache  // training's keys and values (T positions)
	vr     []float32 // (T, K·hd) value rows
	xf     []float32 // (T, d) final residual
	lnf    []float32 // (T, d)
	rstdf  []float32
	logits []float32 // (rows, V), grown on demand
	qn, kn []float32 // (T, H·hd), (T, K·hd) normed q/k scratch
	hout   []float32 // (H, T, hd)
	e      []float32 // (V)
	iprobs []float32 // H × attnBlock·ctx: forward's attention probabilities, one block at a time

	// backward
	dlogits, dx, dln, datt []float32
	dhout, dq, dk, dv, dp  []float32
	dqn, dkn, dvr          []float32
	dqraw, dkraw           []float32
	dgate, dup, dact       []float32
	grad                   []float32
	g                      params
	// training computes the head only on the rows that predict a trained
	// token; sel and dsel are those rows of lnf and of its gradient
	sel, dsel []float32 // (T, d)
	b         batch

	// par > 1 spreads forward's products (row blocks, kern's Par forms)
	// and attention heads over that many goroutines: for a prefill the
	// other shard has no work for. Row and head splits leave every value's
	// arithmetic unchanged.
	par int
}

// workspace returns shard's workspace, grown to n rows (and to training's
// buffers with train).
func (m *Model) workspace(shard, n int, train bool) *workspace {
	ws := m.ws[shard]
	if ws != nil && ws.T >= n && (ws.train || !train) {
		return ws
	}
	T := n
	if ws != nil {
		T = max(T, ws.T)
		train = train || ws.train
	}
	if !train {
		// inference workspaces serve every prompt length up to the
		// context: size them once
		T = max(T, min(m.ctx, 256))
	}
	ws = m.newWorkspace(T, train)
	m.ws[shard] = ws
	return ws
}

func (m *Model) newWorkspace(T int, train bool) *workspace {
	c := m.cfg
	d, H, K, hd, f, V := c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.Hidden, c.Vocab
	q, kv := H*hd, K*hd
	ws := &workspace{T: T, train: train, layers: make([]layerActs, c.Layers)}
	mk := func(n int) []float32 { return make([]float32, n) }
	acts := func() layerActs {
		return layerActs{
			x: mk(T * d), ln1: mk(T * d), rstd1: mk(T), qraw: mk(T * q), kraw: mk(T * kv),
			qrstd: mk(T * H), krstd: mk(T * K), q: mk(T * q), att: mk(T * q), x2: mk(T * d), ln2: mk(T * d),
			rstd2: mk(T), gate: mk(T * f), up: mk(T * f), sig: mk(T * f), act: mk(T * f),
		}
	}
	if train {
		for l := range ws.layers {
			ws.layers[l] = acts() // probs: growProbs
		}
		ws.kv = newKV(c, T, false)
	} else {
		// one set of activations for every layer (nothing is kept for a
		// backward): what a long prefill of a big model needs
		a := acts()
		for l := range ws.layers {
			ws.layers[l] = a
		}
	}
	ws.xf, ws.lnf, ws.rstdf = mk(T*d), mk(T*d), mk(T)
	ws.qn, ws.kn, ws.hout, ws.e, ws.vr = mk(T*q), mk(T*kv), mk(T*q), mk(V), mk(T*kv)
	if train {
		ws.dlogits, ws.dx, ws.dln, ws.datt = mk(T*V), mk(T*d), mk(T*d), mk(T*q)
		ws.dhout, ws.dq, ws.dk, ws.dv, ws.dp = mk(T*q), mk(T*q), mk(T*kv), mk(T*kv), mk(attnBlock*T)
		ws.dqn, ws.dkn, ws.dvr, ws.dqraw, ws.dkraw = mk(T*q), mk(T*kv), mk(T*kv), mk(T*q), mk(T*kv)
		ws.dgate, ws.dup, ws.dact = mk(T*f), mk(T*f), mk(T*f)
		ws.sel, ws.dsel = mk(T*d), mk(T*d)
		ws.grad = mk(numParams(m.specs))
		ws.g = bindSlab(ws.grad, c, m.specs)
	}
	return ws
}

// logitsRows returns the workspace's logits buffer grown to n rows.
func (ws *workspace) logitsRows(n, V int) []float32 {
	if len(ws.logits) < n*V {
		ws.logits = make([]float32, n*V)
	}
	return ws.logits[:n*V]
}

// qkv projects rows ln (n, d) into qraw, kraw and v-rows vr, applies the
// q/k norms (qwen3) and returns the normed q and k rows (qn, kn).
func (m *Model) qkv(lp *layerParams, ln, qraw, kraw, vr, qrstd, krstd, qn, kn []float32, n, par int) ([]float32, []float32) {
	c := m.cfg
	d, hd, q, kv := c.Dim, c.HeadDim, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	linForward(qraw, ln, lp.wq, lp.bq, n, d, q, false, par)
	linForward(kraw, ln, lp.wk, lp.bk, n, d, kv, false, par)
	linForward(vr, ln, lp.wv, lp.bv, n, d, kv, false, par)
	if lp.qnorm == nil {
		return qraw, kraw
	}
	eps := float32(c.NormEps)
	rmsnormForward(qn, qrstd, qraw, lp.qnorm, n*c.Heads, hd, eps)
	rmsnormForward(kn, krstd, kraw, lp.knorm, n*c.KVHeads, hd, eps)
	return qn, kn
}

// mlp runs out += down(silu(gate(ln))·up(ln)) for n rows of ln.
func (m *Model) mlp(lp *layerParams, out, ln, gate, up, sig, act []float32, n, par int) {
	d, f := m.cfg.Dim, m.cfg.Hidden
	linForward(gate, ln, lp.wgate, nil, n, d, f, false, par)
	linForward(up, ln, lp.wup, nil, n, d, f, false, par)
	swigluForward(act[:n*f], sig, gate[:n*f], up)
	linForward(out, act, lp.wdown, nil, n, f, d, true, par)
}

// ropeRow splits row r of the projected queries, keys and values (qn, kn,
// vr) into heads at position pos, queries and keys rotated (RoPE): query
// head h to row r of q's T-row block for h, key and value head g to row kr
// of k's and v's kT-row blocks for g. Prefill and training share it, so
// both store the same rotated values.
func (m *Model) ropeRow(q, k, v, qn, kn, vr []float32, r, pos, T, kr, kT int) {
	c := m.cfg
	H, K, hd := c.Heads, c.KVHeads, c.HeadDim
	half, qw, kvw := hd/2, H*hd, K*hd
	cs, sn := m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half]
	for h := range H {
		dst := q[(h*T+r)*hd : (h*T+r+1)*hd]
		copy(dst, qn[r*qw+h*hd:])
		ropeForward(dst, cs, sn)
	}
	for g := range K {
		dst := k[(g*kT+kr)*hd : (g*kT+kr+1)*hd]
		copy(dst, kn[r*kvw+g*hd:])
		ropeForward(dst, cs, sn)
		copy(v[(g*kT+kr)*hd:(g*kT+kr+1)*hd], vr[r*kvw+g*hd:])
	}
}

// forward runs positions p0..p0+len(toks)−1 of one sequence (inference:
// prefill, Logprobs). kv holds the keys and values of positions < p0 and
// receives the new ones. It leaves the logits in ws.logits: every row's;
// with lastOnly only the last row's (in row 0). Its per-row arithmetic is forwardBatch's
// (training's), so the sampler's logprobs are the trainer's.
func (m *Model) forward(ws *workspace, toks []int32, p0 int, kv *kvCache, lastOnly bool) {
	c := m.cfg
	n, d, H, K, hd, T := len(toks), c.Dim, c.Heads, c.KVHeads, c.HeadDim, ws.T
	rep, q, kT := H/K, H*hd, kv.T
	scale := float32(1 / math.Sqrt(float64(hd)))
	eps := float32(c.NormEps)
	par := ws.par
	x := ws.layers[0].x
	for r, t := range toks {
		m.p.embed.row(x[r*d:], int(t), d)
	}
	for l := range c.Layers {
		a, lp, lkv := &ws.layers[l], &m.p.layers[l], &kv.l[l]
		rmsnormForward(a.ln1, a.rstd1, a.x, lp.ln1, n, d, eps)
		qn, kn := m.qkv(lp, a.ln1, a.qraw, a.kraw, ws.vr, a.qrstd, a.krstd, ws.qn, ws.kn, n, par)
		// split heads: q into the workspace, k and v into the store
		for r := range n {
			m.ropeRow(a.q, lkv.k, lkv.v, qn, kn, ws.vr, r, p0+r, T, p0+r, kT)
		}
		ps := attnBlock * m.ctx
		if len(ws.iprobs) < H*ps {
			ws.iprobs = make([]float32, H*ps)
		}
		heads := func(h0, h1 int) {
			for h := h0; h < h1; h++ {
				g := h / rep
				attnForward(ws.hout[h*T*hd:], ws.iprobs[h*ps:], a.q[h*T*hd:], lkv.k[g*kT*hd:], lkv.v[g*kT*hd:], p0, n, hd, scale, false)
			}
		}
		if par > 1 {
			kern.Fork(par, func(i int) { heads(i*H/par, (i+1)*H/par) })
		} else {
			heads(0, H)
		}
		for r := range n {
			for h := range H {
				copy(a.att[r*q+h*hd:r*q+(h+1)*hd], ws.hout[(h*T+r)*hd:])
			}
		}
		copy(a.x2[:n*d], a.x[:n*d])
		linForward(a.x2, a.att, lp.wo, lp.bo, n, q, d, true, par)
		rmsnormForward(a.ln2, a.rstd2, a.x2, lp.ln2, n, d, eps)
		next := ws.xf
		if l+1 < c.Layers {
			next = ws.layers[l+1].x
		}
		copy(next[:n*d], a.x2[:n*d])
		m.mlp(lp, next, a.ln2, a.gate, a.up, a.sig, a.act, n, par)
	}
	r0 := 0
	if lastOnly {
		r0 = n - 1
	}
	rmsnormForward(ws.lnf, ws.rstdf, ws.xf[r0*d:], m.p.norm, n-r0, d, eps)
	linForward(ws.logitsRows(n-r0, c.Vocab), ws.lnf, m.p.head, nil, n-r0, d, c.Vocab, false, par)
}
