package model

import (
	"math"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// Layer functions, one forward/backward pair each, over flat row-major
// []float32 with explicit dims (n rows, d features; hs head size). Backward
// functions accumulate parameter gradients (+=) and say whether they
// accumulate or overwrite activation gradients.
//
// Scalar arithmetic writes float32(a*b) wherever a product feeds a sum: the
// conversion forbids the compiler from fusing it into an FMA (which it may
// do at GOAMD64=v3), so the bits do not depend on the build's GOAMD64.

// attnBlock is the query-row block of the causal attention: a block of rows
// [r0, r1) attends to keys [0, p0+r1), which halves the work of a full
// T×T product. The masked tail of each row is an exact zero, so its chain
// equals the decode step's shorter one.
const attnBlock = 32

// embedForward: x[r] = wte[toks[r]] (+ wpe[p0+r]).
// x is (n, d), wte is (V, d), wpe is (ctx, d) or nil.
func embedForward(x []float32, toks []int32, wte, wpe []float32, p0, d int) {
	for r, t := range toks {
		row := x[r*d : (r+1)*d]
		copy(row, wte[int(t)*d:(int(t)+1)*d])
		if wpe != nil {
			pe := wpe[(p0+r)*d : (p0+r+1)*d]
			for i := range row {
				row[i] += pe[i]
			}
		}
	}
}

// embedBackward accumulates dwte (and dwpe) from dx (n, d), in row order.
func embedBackward(dwte, dwpe, dx []float32, toks []int32, p0, d int) {
	for r, t := range toks {
		g := dx[r*d : (r+1)*d]
		dst := dwte[int(t)*d : (int(t)+1)*d]
		for i := range g {
			dst[i] += g[i]
		}
		if dwpe != nil {
			dp := dwpe[(p0+r)*d : (p0+r+1)*d]
			for i := range g {
				dp[i] += g[i]
			}
		}
	}
}

// rmsnormForward: out = x · rstd · g with rstd = 1/sqrt(mean(x²)+eps), per row.
// x and out are (n, d); rstd is (n); g is (d).
// https://arxiv.org/abs/1910.07467
func rmsnormForward(out, rstd, x, g []float32, n, d int, eps float32) {
	for r := 0; r < n; r++ {
		xr := x[r*d : (r+1)*d]
		or := out[r*d : (r+1)*d]
		g := g[:d]
		ss := dotLanes(xr, xr)
		s := float32(1 / math.Sqrt(float64(ss/float32(d)+eps)))
		rstd[r] = s
		for i, v := range xr {
			or[i] = float32(v*s) * g[i]
		}
	}
}

// rmsnormBackward accumulates dx (+=) and dg from dout.
//
//	dx_j = rstd·g_j·dy_j − x_j·rstd³·(1/d)·Σ_i g_i·dy_i·x_i
//	dg_i += dy_i·x_i·rstd
func rmsnormBackward(dx, dg, dout, x, rstd, g []float32, n, d int) {
	for r := 0; r < n; r++ {
		xr := x[r*d : (r+1)*d]
		dy := dout[r*d : (r+1)*d]
		dxr := dx[r*d : (r+1)*d]
		g, dg := g[:d], dg[:d]
		s := rstd[r]
		dot := dot3Lanes(g, dy, xr)
		// term 2 coefficient: rstd³·dot/d
		c := float32(float32(float32(s*s)*s)*dot) / float32(d)
		rmsnormBackRow(dxr, dg, dy, xr, g, s, c)
	}
}

// rmsnormBackRowRef: dg += (dy·x)·s;  dx += (s·g)·dy − x·c.
func rmsnormBackRowRef(dx, dg, dy, x, g []float32, s, c float32) {
	n := len(x)
	dx, dg, dy, g = dx[:n], dg[:n], dy[:n], g[:n]
	for i, xi := range x {
		dg[i] += float32(dy[i]*xi) * s
		dx[i] += float32(float32(s*g[i])*dy[i]) - float32(xi*c)
	}
}

// ropeTables returns cos and sin of pos·θ^(−2i/hs), each (ctx, hs/2).
func ropeTables(ctx, hs int, theta float64) (cos, sin []float32) {
	half := hs / 2
	cos = make([]float32, ctx*half)
	sin = make([]float32, ctx*half)
	for p := 0; p < ctx; p++ {
		for i := 0; i < half; i++ {
			a := float64(p) * math.Pow(theta, -float64(2*i)/float64(hs))
			cos[p*half+i] = float32(math.Cos(a))
			sin[p*half+i] = float32(math.Sin(a))
		}
	}
	return cos, sin
}

// ropeForward rotates one head row (hs) in place by the tables of its
// position (cos, sin: hs/2), pairing i with i+hs/2 (the "rotate_half" form).
func ropeForward(x, cos, sin []float32) {
	half := len(cos)
	a, b := x[:half], x[half:2*half]
	sin = sin[:half]
	for i, c := range cos {
		x0, x1, sn := a[i], b[i], sin[i]
		a[i] = float32(x0*c) - float32(x1*sn)
		b[i] = float32(x1*c) + float32(x0*sn)
	}
}

// ropeBackward applies the transposed rotation to a gradient row in place.
func ropeBackward(dx, cos, sin []float32) {
	half := len(cos)
	a, b := dx[:half], dx[half:2*half]
	sin = sin[:half]
	for i, c := range cos {
		d0, d1, sn := a[i], b[i], sin[i]
		a[i] = float32(d0*c) + float32(d1*sn)
		b[i] = float32(d1*c) - float32(d0*sn)
	}
}

// softmaxCausal turns one row of raw scores into probabilities over its
// first valid entries (scaled by scale); the rest become exact zeros.
func softmaxCausal(row []float32, valid int, scale float32) {
	v := row[:valid]
	mx := scaleMax(v, scale)
	addScalar(v, -mx)
	kern.ExpInPlace(v)
	kern.Scale(v, 1/sumLanes(v))
	clear(row[valid:])
}

// attnForward is causal attention for one head. Query rows are positions
// p0..p0+n-1; q and out are (n, hs); k and v hold positions 0..p0+n-1 as
// (≥p0+n, hs). probs receives the probabilities, block by block (each block
// (r1−r0, p0+r1)), for the backward pass. The decode step is the n=1 case of
// this same function, which is what makes sampler and trainer agree.
func attnForward(out, probs, q, k, v []float32, p0, n, hs int, scale float32) {
	off := 0
	for r0 := 0; r0 < n; r0 += attnBlock {
		r1 := min(r0+attnBlock, n)
		bs, nk := r1-r0, p0+r1
		s := probs[off : off+bs*nk]
		kern.MatMulNT(s, q[r0*hs:r1*hs], k[:nk*hs], bs, hs, nk, false)
		for i := 0; i < bs; i++ {
			softmaxCausal(s[i*nk:(i+1)*nk], p0+r0+i+1, scale)
		}
		kern.MatMul(out[r0*hs:r1*hs], s, v[:nk*hs], bs, nk, hs, false)
		off += bs * nk
	}
}

// attnBackward is the backward of attnForward for one head (p0 = 0, as in
// training). It overwrites dq and accumulates dk and dv (which the caller
// zeroes); dp is scratch of at least attnBlock·n.
//
//	dV += Pᵀ·dO;  dP = dO·Vᵀ;  dS = P ⊙ (dP − rowsum(P ⊙ dP)) · scale
//	dQ = dS·K;    dK += dSᵀ·Q
func attnBackward(dq, dk, dv, dp, dout, probs, q, k, v []float32, n, hs int, scale float32) {
	off := 0
	for r0 := 0; r0 < n; r0 += attnBlock {
		r1 := min(r0+attnBlock, n)
		bs, nk := r1-r0, r1
		p := probs[off : off+bs*nk]
		do := dout[r0*hs : r1*hs]
		kern.MatMulTN(dv[:nk*hs], p, do, nk, bs, hs, true)
		ds := dp[:bs*nk]
		kern.MatMulNT(ds, do, v[:nk*hs], bs, hs, nk, false)
		for i := 0; i < bs; i++ {
			valid := r0 + i + 1
			pr := p[i*nk : i*nk+valid]
			dr := ds[i*nk : (i+1)*nk]
			dv := dr[:valid]
			dot := dotLanes(pr, dv)
			for j, pj := range pr {
				dv[j] = float32(pj*(dv[j]-dot)) * scale
			}
			clear(dr[valid:])
		}
		kern.MatMul(dq[r0*hs:r1*hs], ds, k[:nk*hs], bs, nk, hs, false)
		kern.MatMulTN(dk[:nk*hs], ds, q[r0*hs:r1*hs], nk, bs, hs, true)
		off += bs * nk
	}
}

// swigluForward: act = silu(gate)·up, with h rows (2F) = [gate | up];
// sig keeps sigmoid(gate) for the backward. act and sig are (n, F).
// https://arxiv.org/abs/2002.05202
func swigluForward(act, sig, h []float32, n, f int) {
	for r := 0; r < n; r++ {
		gate := h[r*2*f : r*2*f+f]
		up := h[r*2*f+f : (r+1)*2*f]
		sr := sig[r*f : (r+1)*f]
		negate(sr, gate)
		kern.ExpInPlace(sr)
		swigluRow(act[r*f:(r+1)*f], sr, gate, up)
	}
}

// negateRef: dst = −src.
func negateRef(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = -v
	}
}

// swigluRowRef: with sr = exp(−gate) on entry, sr becomes s = 1/(1+sr)
// and act = (gate·s)·up.
func swigluRowRef(act, sr, gate, up []float32) {
	act, sr, up = act[:len(gate)], sr[:len(gate)], up[:len(gate)]
	for i, g := range gate {
		s := 1 / (1 + sr[i])
		sr[i] = s
		act[i] = float32(g*s) * up[i]
	}
}

// swigluBackward overwrites dh (n, 2F) from dact (n, F).
//
//	dup = dact·silu(g);  dgate = dact·up·s·(1 + g·(1−s))
func swigluBackward(dh, dact, h, sig []float32, n, f int) {
	for r := 0; r < n; r++ {
		swigluBackRow(dh[r*2*f:r*2*f+f], dh[r*2*f+f:(r+1)*2*f], dact[r*f:(r+1)*f],
			h[r*2*f:r*2*f+f], h[r*2*f+f:(r+1)*2*f], sig[r*f:(r+1)*f])
	}
}

func swigluBackRowRef(dg, du, da, gate, up, sr []float32) {
	n := len(gate)
	dg, du, da, up, sr = dg[:n], du[:n], da[:n], up[:n], sr[:n]
	for i, g := range gate {
		s := sr[i]
		du[i] = float32(da[i]*g) * s
		dsilu := s * (1 + float32(g*(1-s)))
		dg[i] = float32(da[i]*up[i]) * dsilu
	}
}

// logSumExp of one logits row: max + log Σ exp(x − max), in a fixed order;
// e receives exp(x − max) and sum is Σ e. The sampler and the trainer both
// get logprobs (x − lse) from this one function.
func logSumExp(row, e []float32) (lse, sum float32) {
	mx := float32(math.Inf(-1))
	for _, v := range row {
		if v > mx {
			mx = v
		}
	}
	e = e[:len(row)]
	for j, v := range row {
		e[j] = v - mx
	}
	kern.ExpInPlace(e)
	sum = sumLanes(e)
	return mx + float32(math.Log(float64(sum))), sum
}
