package model

import (
	"math"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// Training packs a shard's sequences into one set of rows: every product
// that treats rows independently (the projections, the MLP, the head) runs
// once over all of them, and the weight gradients' products (dW += dyᵀ·x)
// take every row of the shard in one call. Only attention and rope see the
// sequences apart. The bits are those of one sequence at a time: a row's
// products do not depend on the other rows, and a weight gradient's chain
// over the rows, sequence after sequence, is the chain the per-sequence
// calls continued with acc (kern's contract: a k-split with acc is one
// chain). The tied embedding, which the head's gradient and the token
// lookups' both add to, takes them sequence by sequence as before. What it
// buys is big products: at a sequence of 50-128 rows the
// kernels spent much of their time packing the weights and moving the
// gradient tiles in and out.

// batch is a shard's packed sequences: packed row off[i]+t is position t
// of sequence i.
type batch struct {
	toks [][]int32
	off  []int // len(toks)+1 row offsets
	n    int   // rows
	// sel are the packed rows whose next token is trained (in sequence
	// order), selSeq and selT their sequence and the position of that token
	sel          []int32
	selSeq, selT []int32
	poff         []int // per sequence: its probabilities' offset in a head's share
	pper         int   // floats of probabilities per head
}

// reset empties b for reuse.
func (b *batch) reset() {
	b.toks, b.off, b.sel, b.selSeq, b.selT, b.poff = b.toks[:0], append(b.off[:0], 0), b.sel[:0], b.selSeq[:0], b.selT[:0], b.poff[:0]
	b.n, b.pper = 0, 0
}

// add appends sequence s (index i of the step) with its trained rows.
func (b *batch) add(s *Sequence, i int) {
	b.toks = append(b.toks, s.Tokens)
	for t, k := range s.Mask[1:] {
		if k != 0 {
			b.sel = append(b.sel, int32(b.n+t))
			b.selSeq = append(b.selSeq, int32(i))
			b.selT = append(b.selT, int32(t+1))
		}
	}
	n := len(s.Tokens)
	b.poff = append(b.poff, b.pper)
	for r0 := 0; r0 < n; r0 += attnBlock {
		r1 := min(r0+attnBlock, n)
		b.pper += (r1 - r0) * r1
	}
	b.n += n
	b.off = append(b.off, b.n)
}

// grow makes the training workspace hold b.
func (ws *workspace) growProbs(H, pper int) {
	for l := range ws.layers {
		if a := &ws.layers[l]; len(a.probs) < H*pper {
			a.probs = make([]float32, H*pper)
		}
	}
}

// forwardBatch runs b's sequences (each from position 0) on a training
// workspace of at least b.n rows, keeping what backwardBatch needs, and
// leaves the logits of the selected rows in ws.logits (row i: b.sel[i]).
func (m *Model) forwardBatch(ws *workspace, b *batch) {
	c := m.cfg
	n, d, H, K, hd, T := b.n, c.Dim, c.Heads, c.KVHeads, c.HeadDim, ws.T
	rep, q := H/K, H*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	eps := float32(c.NormEps)
	ws.growProbs(H, b.pper)
	x := ws.layers[0].x
	for i, toks := range b.toks {
		for r, t := range toks {
			m.p.embed.row(x[(b.off[i]+r)*d:], int(t), d)
		}
	}
	for l := range c.Layers {
		a, lp, lkv := &ws.layers[l], &m.p.layers[l], &ws.kv.l[l]
		rmsnormForward(a.ln1, a.rstd1, a.x, lp.ln1, n, d, eps)
		qn, kn := m.qkv(lp, a.ln1, a.qraw, a.kraw, ws.vr, a.qrstd, a.krstd, ws.qn, ws.kn, n, 1)
		for i, toks := range b.toks {
			o := b.off[i]
			for pos := range toks {
				m.ropeRow(a.q, lkv.k, lkv.v, qn, kn, ws.vr, o+pos, pos, T, o+pos, T)
			}
			for h := range H {
				g, at := h/rep, (h*T+o)*hd
				attnForward(ws.hout[at:], a.probs[h*b.pper+b.poff[i]:], a.q[at:], lkv.k[(g*T+o)*hd:], lkv.v[(g*T+o)*hd:],
					0, len(toks), hd, scale, true)
			}
		}
		for r := range n {
			for h := range H {
				copy(a.att[r*q+h*hd:r*q+(h+1)*hd], ws.hout[(h*T+r)*hd:])
			}
		}
		copy(a.x2[:n*d], a.x[:n*d])
		linForward(a.x2, a.att, lp.wo, lp.bo, n, q, d, true, 1)
		rmsnormForward(a.ln2, a.rstd2, a.x2, lp.ln2, n, d, eps)
		next := ws.xf
		if l+1 < c.Layers {
			next = ws.layers[l+1].x
		}
		copy(next[:n*d], a.x2[:n*d])
		m.mlp(lp, next, a.ln2, a.gate, a.up, a.sig, a.act, n, 1)
	}
	rmsnormForward(ws.lnf, ws.rstdf, ws.xf, m.p.norm, n, d, eps)
	for i, r := range b.sel {
		copy(ws.sel[i*d:(i+1)*d], ws.lnf[int(r)*d:])
	}
	linForward(ws.logitsRows(len(b.sel), c.Vocab), ws.sel, m.p.head, nil, len(b.sel), d, c.Vocab, false, 1)
}

// backwardBatch back-propagates ws.dlogits (one row per b.sel entry)
// through the forwardBatch just run on b, accumulating parameter gradients
// into ws.grad.
func (m *Model) backwardBatch(ws *workspace, b *batch) {
	c := m.cfg
	n, d, H, K, hd, f, T, V := b.n, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.Hidden, ws.T, c.Vocab
	half, rep, q, kvw := hd/2, c.Heads/c.KVHeads, H*hd, K*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	p, g := &m.p, &ws.g

	nr := len(b.sel)
	kern.MatMul(ws.dsel, ws.dlogits, p.head.f, nr, V, d, false)
	clear(ws.dln[:n*d])
	for i, r := range b.sel {
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
		clear(ws.dk[:K*T*hd])
		clear(ws.dv[:K*T*hd])
		for i, toks := range b.toks {
			o := b.off[i]
			for h := range H {
				at, gk := (h*T+o)*hd, ((h/rep)*T+o)*hd
				attnBackward(ws.dq[at:], ws.dk[gk:], ws.dv[gk:], ws.dp, ws.dhout[at:], a.probs[h*b.pper+b.poff[i]:], a.q[at:],
					lkv.k[gk:], lkv.v[gk:], len(toks), hd, scale)
			}
			for pos := range toks {
				r := o + pos
				cs, sn := m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half]
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
	// The head's weight gradient, and the embedding's: for a tied head
	// both add into one tensor, sequence by sequence in the order one
	// sequence at a time gave (its head rows, then its tokens), so a
	// batch's bits are those of the sequences alone.
	if !c.Tied {
		kern.MatMulTN(g.head.f, ws.dlogits, ws.sel, V, nr, d, true)
	}
	s0 := 0
	for i, toks := range b.toks {
		if c.Tied {
			s1 := s0
			for s1 < nr && int(b.sel[s1]) < b.off[i+1] {
				s1++
			}
			if s1 > s0 {
				kern.MatMulTN(g.head.f, ws.dlogits[s0*V:], ws.sel[s0*d:], V, s1-s0, d, true)
			}
			s0 = s1
		}
		for pos, t := range toks {
			dst := g.embed.f[int(t)*d : (int(t)+1)*d]
			for j, v := range ws.dx[(b.off[i]+pos)*d : (b.off[i]+pos+1)*d] {
				dst[j] += v
			}
		}
	}
}
