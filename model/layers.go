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
// (≥p0+n, hs). With keep, probs receives the probabilities block by block
// (each block (r1−r0, p0+r1)) for the backward pass; without, every block
// reuses probs[:attnBlock·(p0+n)]. The decode step's chains are those of
// n=1, which is what makes sampler and trainer agree.
func attnForward(out, probs, q, k, v []float32, p0, n, hs int, scale float32, keep bool) {
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
		if keep {
			off += bs * nk
		}
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

// swigluForward: act = silu(gate)·up elementwise over gate, up (n·F);
// sig keeps sigmoid(gate) for the backward.
// https://arxiv.org/abs/2002.05202
func swigluForward(act, sig, gate, up []float32) {
	sig = sig[:len(gate)]
	negate(sig, gate)
	kern.ExpInPlace(sig)
	swigluRow(act, sig, gate, up)
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

// swigluBackward overwrites dgate and dup (n·F) from dact.
//
//	dup = dact·silu(g);  dgate = dact·up·s·(1 + g·(1−s))
func swigluBackward(dgate, dup, dact, gate, up, sig []float32) {
	swigluBackRow(dgate, dup, dact, gate, up, sig)
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

// linForward: y (n, out) = x (n, in)·Wᵀ + b, W stored [out, in] as HF does
// (float32 or bfloat16), over par row blocks. With acc, y += instead (a
// residual add).
func linForward(y, x []float32, w mat, b []float32, n, in, out int, acc bool, par int) {
	if w.f != nil {
		kern.MatMulNTPar(y, x, w.f, n, in, out, acc, par)
	} else {
		kern.MatMulNTBF16Par(y, x, w.h, n, in, out, acc, par)
	}
	addBias(y, b, n, out)
}

// addBias adds b to each of the n rows of y (nothing when b is nil).
func addBias(y, b []float32, n, out int) {
	if b == nil {
		return
	}
	for r := range n {
		row := y[r*out : (r+1)*out]
		for j, v := range b[:out] {
			row[j] += v
		}
	}
}

// linBackward: dx (n, in) = dy·W (or += with acc); dW += dyᵀ·x; db += Σ_rows dy.
func linBackward(dx, gw, gb, dy, x, w []float32, n, in, out int, acc bool) {
	kern.MatMul(dx, dy, w, n, out, in, acc)
	kern.MatMulTN(gw, dy, x, out, n, in, true)
	if gb != nil {
		for r := range n {
			row := dy[r*out : (r+1)*out]
			for j, v := range row {
				gb[j] += v
			}
		}
	}
}
