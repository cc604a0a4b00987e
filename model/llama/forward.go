package llama

import (
	"math"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// layerActs are what one block's forward keeps for its backward (T rows).
type layerActs struct {
	x, ln1       []float32 // (T, d) block input and its norm
	rstd1        []float32 // (T)
	qraw, kraw   []float32 // (T, H·hd), (T, K·hd) projections (+bias), before q/k norm
	qrstd, krstd []float32 // (T·H), (T·K) q/k norm (qwen3)
	q            []float32 // (H, T, hd) queries after norm and rope
	k, v         []float32 // (K, T, hd) keys after norm and rope, values
	probs        []float32 // H × T·T attention probabilities, block layout
	att          []float32 // (T, H·hd) heads merged
	x2, ln2      []float32 // (T, d)
	rstd2        []float32 // (T)
	gate, up     []float32 // (T, F)
	sig, act     []float32 // (T, F)
}

// workspace is one shard's activations and gradient scratch for one
// sequence of up to T tokens, allocated once and reused (llm.c style).
type workspace struct {
	T       int // rows allocated
	train   int // 1: inference buffers, 2: also the backward's
	layers  []layerActs
	vr      []float32 // (T, K·hd) value rows scratch
	xf, lnf []float32 // (T, d)
	rstdf   []float32
	logits  []float32 // (T, V)
	qn, kn  []float32 // (T, H·hd), (T, K·hd) normed q/k scratch
	hout    []float32 // (H, T, hd)
	e       []float32 // (V)

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
}

func (m *Model) workspace(shard, n int, train bool) *workspace {
	ws := m.ws[shard]
	want := 1
	if train {
		want = 2
	}
	if ws != nil && ws.T >= n && ws.train >= want {
		return ws
	}
	T := n
	if ws != nil {
		T = max(T, ws.T)
		want = max(want, ws.train)
	}
	ws = newWorkspace(m.cfg, m.specs, T, want == 2)
	m.ws[shard] = ws
	return ws
}

func newWorkspace(c Config, specs []tensorSpec, T int, train bool) *workspace {
	d, H, K, hd, f, V := c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.Hidden, c.Vocab
	q, kv := H*hd, K*hd
	ws := &workspace{T: T, train: 1, layers: make([]layerActs, c.Layers)}
	mk := func(n int) []float32 { return make([]float32, n) }
	var shared []float32
	if !train { // inference: one probability buffer serves every layer
		shared = mk(H * T * T)
	}
	for l := range ws.layers {
		a := layerActs{
			x: mk(T * d), ln1: mk(T * d), rstd1: mk(T), qraw: mk(T * q), kraw: mk(T * kv),
			qrstd: mk(T * H), krstd: mk(T * K), q: mk(T * q), k: mk(T * kv), v: mk(T * kv),
			att: mk(T * q), x2: mk(T * d), ln2: mk(T * d), rstd2: mk(T),
			gate: mk(T * f), up: mk(T * f), sig: mk(T * f), act: mk(T * f), probs: shared,
		}
		if train {
			a.probs = mk(H * T * T)
		}
		ws.layers[l] = a
	}
	ws.xf, ws.lnf, ws.rstdf, ws.logits = mk(T*d), mk(T*d), mk(T), mk(T*V)
	ws.qn, ws.kn, ws.hout, ws.e, ws.vr = mk(T*q), mk(T*kv), mk(T*q), mk(V), mk(T*kv)
	if train {
		ws.train = 2
		ws.dlogits, ws.dx, ws.dln, ws.datt = mk(T*V), mk(T*d), mk(T*d), mk(T*q)
		ws.dhout, ws.dq, ws.dk, ws.dv, ws.dp = mk(T*q), mk(T*q), mk(T*kv), mk(T*kv), mk(attnBlock*T)
		ws.dqn, ws.dkn, ws.dvr, ws.dqraw, ws.dkraw = mk(T*q), mk(T*kv), mk(T*kv), mk(T*q), mk(T*kv)
		ws.dgate, ws.dup, ws.dact = mk(T*f), mk(T*f), mk(T*f)
		ws.sel, ws.dsel, ws.rows = mk(T*d), mk(T*d), make([]int32, 0, T)
		ws.grad = mk(numParams(specs))
		ws.g = bind(ws.grad, c, specs)
	}
	return ws
}

// qkv projects rows ln (n, d) into qraw, kraw and v-rows vr, applies the
// q/k norms (qwen3) and returns the normed q and k rows (qn, kn). It is
// shared by the training forward and the decode step.
func (m *Model) qkv(lp *layerParams, ln, qraw, kraw, vr, qrstd, krstd, qn, kn []float32, n int) ([]float32, []float32) {
	c := m.cfg
	d, hd, q, kv := c.Dim, c.HeadDim, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	linForward(qraw, ln, lp.wq, lp.bq, n, d, q, false)
	linForward(kraw, ln, lp.wk, lp.bk, n, d, kv, false)
	linForward(vr, ln, lp.wv, lp.bv, n, d, kv, false)
	if lp.qnorm == nil {
		return qraw, kraw
	}
	eps := float32(c.NormEps)
	rmsnormForward(qn, qrstd, qraw, lp.qnorm, n*c.Heads, hd, eps)
	rmsnormForward(kn, krstd, kraw, lp.knorm, n*c.KVHeads, hd, eps)
	return qn, kn
}

// mlp runs out += down(silu(gate(ln))·up(ln)) for n rows of ln.
func (m *Model) mlp(lp *layerParams, out, ln, gate, up, sig, act []float32, n int) {
	d, f := m.cfg.Dim, m.cfg.Hidden
	linForward(gate, ln, lp.wgate, nil, n, d, f, false)
	linForward(up, ln, lp.wup, nil, n, d, f, false)
	swigluForward(act[:n*f], sig, gate[:n*f], up)
	linForward(out, act, lp.wdown, nil, n, f, d, true)
}

// forward runs one whole sequence (positions 0..n−1) and leaves every
// row's logits in ws.logits (only the last row's, in row 0, with lastOnly;
// with rows non-nil, position rows[i]'s in row i). The keys and values stay
// in ws.layers[l].k/v for a KV cache to copy.
//
// The head is most of a step's work with a large vocabulary (151,936 ×
// d multiply-adds per row, three times in training), and a training row
// whose next token is not trained has a zero gradient, so training passes
// only the trained rows: every other number is the same as with all rows
// (the rows left out only ever added exact zeros to a sum).
func (m *Model) forward(ws *workspace, toks []int32, lastOnly bool, rows []int32) {
	c := m.cfg
	n, d, H, K, hd, T := len(toks), c.Dim, c.Heads, c.KVHeads, c.HeadDim, ws.T
	half, rep, q, kvw := hd/2, c.Heads/c.KVHeads, H*hd, K*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	eps := float32(c.NormEps)
	x := ws.layers[0].x
	for r, t := range toks {
		copy(x[r*d:(r+1)*d], m.p.embed[int(t)*d:(int(t)+1)*d])
	}
	for l := range c.Layers {
		a, lp := &ws.layers[l], &m.p.layers[l]
		rmsnormForward(a.ln1, a.rstd1, a.x, lp.ln1, n, d, eps)
		vr := ws.vr
		qn, kn := m.qkv(lp, a.ln1, a.qraw, a.kraw, vr, a.qrstd, a.krstd, ws.qn, ws.kn, n)
		for r := range n {
			cs, sn := m.cos[r*half:(r+1)*half], m.sin[r*half:(r+1)*half]
			for h := range H {
				dst := a.q[(h*T+r)*hd : (h*T+r+1)*hd]
				copy(dst, qn[r*q+h*hd:])
				ropeForward(dst, cs, sn)
			}
			for g := range K {
				dst := a.k[(g*T+r)*hd : (g*T+r+1)*hd]
				copy(dst, kn[r*kvw+g*hd:])
				ropeForward(dst, cs, sn)
				copy(a.v[(g*T+r)*hd:(g*T+r+1)*hd], vr[r*kvw+g*hd:])
			}
		}
		for h := range H {
			g := h / rep
			attnForward(ws.hout[h*T*hd:], a.probs[h*T*T:], a.q[h*T*hd:], a.k[g*T*hd:], a.v[g*T*hd:], 0, n, hd, scale)
		}
		for r := range n {
			for h := range H {
				copy(a.att[r*q+h*hd:r*q+(h+1)*hd], ws.hout[(h*T+r)*hd:])
			}
		}
		copy(a.x2[:n*d], a.x[:n*d])
		linForward(a.x2, a.att, lp.wo, lp.bo, n, q, d, true)
		rmsnormForward(a.ln2, a.rstd2, a.x2, lp.ln2, n, d, eps)
		next := ws.xf
		if l+1 < c.Layers {
			next = ws.layers[l+1].x
		}
		copy(next[:n*d], a.x2[:n*d])
		m.mlp(lp, next, a.ln2, a.gate, a.up, a.sig, a.act, n)
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
	kern.MatMulNT(ws.logits, src, m.p.head, nr, d, c.Vocab, false)
}

// backward back-propagates ws.dlogits (one row per ws.rows entry) through
// the forward just run on toks with those rows, accumulating parameter
// gradients into ws.grad.
func (m *Model) backward(ws *workspace, toks []int32) {
	c := m.cfg
	n, d, H, K, hd, f, T, V := len(toks), c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.Hidden, ws.T, c.Vocab
	half, rep, q, kvw := hd/2, c.Heads/c.KVHeads, H*hd, K*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	p, g := &m.p, &ws.g

	nr := len(ws.rows)
	kern.MatMul(ws.dsel, ws.dlogits, p.head, nr, V, d, false)
	kern.MatMulTN(g.head, ws.dlogits, ws.sel, V, nr, d, true)
	clear(ws.dln[:n*d])
	for i, r := range ws.rows {
		copy(ws.dln[int(r)*d:(int(r)+1)*d], ws.dsel[i*d:])
	}
	clear(ws.dx[:n*d])
	rmsnormBackward(ws.dx, g.norm, ws.dln, ws.xf, ws.rstdf, p.norm, n, d)

	for l := c.Layers - 1; l >= 0; l-- {
		a, lp, gl := &ws.layers[l], &p.layers[l], &g.layers[l]
		// MLP: out = x2 + down(silu(gate)·up), gate/up = proj(ln2)
		linBackward(ws.dact, gl.wdown, nil, ws.dx, a.act, lp.wdown, n, f, d, false)
		swigluBackward(ws.dgate[:n*f], ws.dup, ws.dact, a.gate[:n*f], a.up, a.sig)
		linBackward(ws.dln, gl.wgate, nil, ws.dgate, a.ln2, lp.wgate, n, d, f, false)
		linBackward(ws.dln, gl.wup, nil, ws.dup, a.ln2, lp.wup, n, d, f, true)
		rmsnormBackward(ws.dx, gl.ln2, ws.dln, a.x2, a.rstd2, lp.ln2, n, d)

		// attention: x2 = x + o_proj(att)
		linBackward(ws.datt, gl.wo, gl.bo, ws.dx, a.att, lp.wo, n, q, d, false)
		for r := range n {
			for h := range H {
				copy(ws.dhout[(h*T+r)*hd:(h*T+r+1)*hd], ws.datt[r*q+h*hd:])
			}
		}
		clear(ws.dk)
		clear(ws.dv)
		for h := range H {
			o, gk := h*T*hd, (h/rep)*T*hd
			attnBackward(ws.dq[o:], ws.dk[gk:], ws.dv[gk:], ws.dp, ws.dhout[o:], a.probs[h*T*T:], a.q[o:], a.k[gk:], a.v[gk:], n, hd, scale)
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
		linBackward(ws.dln, gl.wq, gl.bq, dqr, a.ln1, lp.wq, n, d, q, false)
		linBackward(ws.dln, gl.wk, gl.bk, dkr, a.ln1, lp.wk, n, d, kvw, true)
		linBackward(ws.dln, gl.wv, gl.bv, ws.dvr, a.ln1, lp.wv, n, d, kvw, true)
		rmsnormBackward(ws.dx, gl.ln1, ws.dln, a.x, a.rstd1, lp.ln1, n, d)
	}
	for r, t := range toks {
		dst := g.embed[int(t)*d : (int(t)+1)*d]
		for i, v := range ws.dx[r*d : (r+1)*d] {
			dst[i] += v
		}
	}
}
