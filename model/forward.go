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
	probs        []float32 // training: H × T·T attention probabilities, block layout; else H × attnBlock·ctx
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

	// backward
	dlogits, dx, dln, datt []float32
	dhout, dq, dk, dv, dp  []float32
	dqn, dkn, dvr          []float32
	dqraw, dkraw           []float32
	dgate, dup, dact       []float32
	grad                   []float32
	g                      params
	// training computes the head only on the rows that predict a trained
	// token (rows); sel and dsel are those rows of lnf and of its gradient
	rows      []int32
	sel, dsel []float32 // (T, d)

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
			ws.layers[l] = acts()
			ws.layers[l].probs = mk(H * T * T)
		}
		ws.kv = newKV(c, T, false)
	} else {
		// one set of activations for every layer (nothing is kept for a
		// backward): what a long prefill of a big model needs
		a := acts()
		a.probs = mk(H * attnBlock * m.ctx)
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
		ws.sel, ws.dsel, ws.rows = mk(T*d), mk(T*d), make([]int32, 0, T)
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

// forward runs positions p0..p0+len(toks)−1 of one sequence. kv holds the
// keys and values of positions < p0 and receives the new ones. It leaves
// the logits in ws.logits: every row's; with lastOnly only the last row's
// (in row 0); with rows non-nil, row i is position rows[i]'s.
//
// The head is most of a step's work with a large vocabulary (V × d
// multiply-adds per row, three times in training), and a training row whose
// next token is not trained has a zero gradient, so training passes only
// the trained rows: every other number is the same as with all rows (the
// rows left out only ever added exact zeros to a sum).
func (m *Model) forward(ws *workspace, toks []int32, p0 int, kv *kvCache, lastOnly bool, rows []int32) {
	c := m.cfg
	n, d, H, K, hd, T := len(toks), c.Dim, c.Heads, c.KVHeads, c.HeadDim, ws.T
	half, rep, q, kvw, kT := hd/2, H/K, H*hd, K*hd, kv.T
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
			pos := p0 + r
			cs, sn := m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half]
			for h := range H {
				dst := a.q[(h*T+r)*hd : (h*T+r+1)*hd]
				copy(dst, qn[r*q+h*hd:])
				ropeForward(dst, cs, sn)
			}
			for g := range K {
				dst := lkv.k[(g*kT+pos)*hd : (g*kT+pos+1)*hd]
				copy(dst, kn[r*kvw+g*hd:])
				ropeForward(dst, cs, sn)
				copy(lkv.v[(g*kT+pos)*hd:(g*kT+pos+1)*hd], ws.vr[r*kvw+g*hd:])
			}
		}
		ps := attnBlock * m.ctx
		if ws.train {
			ps = T * T
		}
		heads := func(h0, h1 int) {
			for h := h0; h < h1; h++ {
				g := h / rep
				attnForward(ws.hout[h*T*hd:], a.probs[h*ps:], a.q[h*T*hd:], lkv.k[g*kT*hd:], lkv.v[g*kT*hd:], p0, n, hd, scale, ws.train)
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
	src, nr := ws.lnf, n-r0
	if rows != nil {
		for i, r := range rows {
			copy(ws.sel[i*d:(i+1)*d], ws.lnf[int(r)*d:])
		}
		src, nr = ws.sel, len(rows)
	}
	linForward(ws.logitsRows(nr, c.Vocab), src, m.p.head, nil, nr, d, c.Vocab, false, par)
}

// backward back-propagates ws.dlogits (one row per ws.rows entry) through
// the forward just run on toks (from position 0, keys and values in
// ws.kv) with those rows, accumulating parameter gradients into ws.grad.
func (m *Model) backward(ws *workspace, toks []int32) {
	c := m.cfg
	n, d, H, K, hd, f, T, V := len(toks), c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.Hidden, ws.T, c.Vocab
	half, rep, q, kvw := hd/2, c.Heads/c.KVHeads, H*hd, K*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	p, g := &m.p, &ws.g

	nr := len(ws.rows)
	kern.MatMul(ws.dsel, ws.dlogits, p.head.f, nr, V, d, false)
	kern.MatMulTN(g.head.f, ws.dlogits, ws.sel, V, nr, d, true)
	clear(ws.dln[:n*d])
	for i, r := range ws.rows {
		copy(ws.dln[int(r)*d:(int(r)+1)*d], ws.dsel[i*d:])
	}
	clear(ws.dx[:n*d])
	rmsnormBackward(ws.dx, g.norm, ws.dln, ws.xf, ws.rstdf, p.norm, n, d)

	for l := c.Layers - 1; l >= 0; l-- {
		a, lp, gl, lkv := &ws.layers[l], &p.layers[l], &g.layers[l], &ws.kv.l[l]
		// MLP: out = x2 + down(silu(gate)·up), gate/up = proj(ln2)
		linBackward(ws.dact, gl.wdown.f, nil, ws.dx, a.act, lp.wdown.f, n, f, d, false)
		swigluBackward(ws.dgate[:n*f], ws.dup, ws.dact, a.gate[:n*f], a.up, a.sig)
		linBackward(ws.dln, gl.wgate.f, nil, ws.dgate, a.ln2, lp.wgate.f, n, d, f, false)
		linBackward(ws.dln, gl.wup.f, nil, ws.dup, a.ln2, lp.wup.f, n, d, f, true)
		rmsnormBackward(ws.dx, gl.ln2, ws.dln, a.x2, a.rstd2, lp.ln2, n, d)

		// attention: x2 = x + o_proj(att)
		linBackward(ws.datt, gl.wo.f, gl.bo, ws.dx, a.att, lp.wo.f, n, q, d, false)
		for r := range n {
			for h := range H {
				copy(ws.dhout[(h*T+r)*hd:(h*T+r+1)*hd], ws.datt[r*q+h*hd:])
			}
		}
		clear(ws.dk)
		clear(ws.dv)
		for h := range H {
			o, gk := h*T*hd, (h/rep)*T*hd
			attnBackward(ws.dq[o:], ws.dk[gk:], ws.dv[gk:], ws.dp, ws.dhout[o:], a.probs[h*T*T:], a.q[o:], lkv.k[gk:], lkv.v[gk:], n, hd, scale)
		}
		for r := range n {
			cs, sn := m.cos[r*half:(r+1)*half], m.sin[r*half:(r+1)*half]
			for h := range H {
				dst := ws.dqn[r*q+h*hd : r*q+(h+1)*hd]
				copy(dst, ws.dq[(h*T+r)*hd:])
				ropeBackward(dst, cs, sn)
			}
			for gi := range K {
				dst := ws.dkn[r*kvw+gi*hd : r*kvw+(gi+1)*hd]
				copy(dst, ws.dk[(gi*T+r)*hd:])
				ropeBackward(dst, cs, sn)
				copy(ws.dvr[r*kvw+gi*hd:r*kvw+(gi+1)*hd], ws.dv[(gi*T+r)*hd:])
			}
		}
		dqr, dkr := ws.dqn, ws.dkn
		if lp.qnorm != nil {
			dqr, dkr = ws.dqraw, ws.dkraw
			clear(dqr[:n*q])
			clear(dkr[:n*kvw])
			rmsnormBackward(dqr, gl.qnorm, ws.dqn, a.qraw, a.qrstd, lp.qnorm, n*H, hd)
			rmsnormBackward(dkr, gl.knorm, ws.dkn, a.kraw, a.krstd, lp.knorm, n*K, hd)
		}
		linBackward(ws.dln, gl.wq.f, gl.bq, dqr, a.ln1, lp.wq.f, n, d, q, false)
		linBackward(ws.dln, gl.wk.f, gl.bk, dkr, a.ln1, lp.wk.f, n, d, kvw, true)
		linBackward(ws.dln, gl.wv.f, gl.bv, ws.dvr, a.ln1, lp.wv.f, n, d, kvw, true)
		rmsnormBackward(ws.dx, gl.ln1, ws.dln, a.x, a.rstd1, lp.ln1, n, d)
	}
	for r, t := range toks {
		dst := g.embed.f[int(t)*d : (int(t)+1)*d]
		for i, v := range ws.dx[r*d : (r+1)*d] {
			dst[i] += v
		}
	}
}
