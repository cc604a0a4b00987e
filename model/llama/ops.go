package llama

import (
	"math"

	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/model/kern"
)

// Layer functions over flat row-major []float32 with explicit dims. Scalar
// code writes float32(a*b) where a product feeds a sum so no compiler may
// fuse it into an FMA: the bits do not depend on GOAMD64. Reductions use 8
// interleaved lanes and a fixed tree, an order that depends only on the
// length; the plain sums and dots are model's (model.SumLanes,
// model.DotLanes: SIMD where the build has it, the same bits either way).

// attnBlock is the query-row block of causal attention: rows [r0, r1)
// attend to keys [0, p0+r1). A row's masked tail is an exact zero, so its
// chains equal the decode step's shorter ones.
const attnBlock = 32

func reduce8(s *[8]float32) float32 {
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

func dot3Lanes(a, b, c []float32) float32 {
	b, c = b[:len(a)], c[:len(a)]
	var s [8]float32
	for i, v := range a {
		s[i&7] += float32(float32(v*b[i]) * c[i])
	}
	return reduce8(&s)
}

// linForward: y (n, out) = x (n, in)·Wᵀ + b, W stored [out, in] as HF does.
// With acc, y += instead (a residual add).
func linForward(y, x, w, b []float32, n, in, out int, acc bool) {
	kern.MatMulNT(y, x, w, n, in, out, acc)
	if b != nil {
		for r := range n {
			row := y[r*out : (r+1)*out]
			for j, v := range b[:out] {
				row[j] += v
			}
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

// rmsnormForward: out = g·(x·rstd), rstd = 1/sqrt(mean(x²)+eps), per row
// of d (transformers' LlamaRMSNorm).
func rmsnormForward(out, rstd, x, g []float32, n, d int, eps float32) {
	g = g[:d]
	for r := range n {
		xr, or := x[r*d:(r+1)*d], out[r*d:(r+1)*d]
		s := float32(1 / math.Sqrt(float64(model.DotLanes(xr, xr)/float32(d)+eps)))
		rstd[r] = s
		for i, v := range xr {
			or[i] = g[i] * float32(v*s)
		}
	}
}

// rmsnormBackward accumulates dx (+=) and dg from dout:
//
//	dx_j += rstd·g_j·dy_j − x_j·rstd³·(1/d)·Σ_i g_i·dy_i·x_i
//	dg_i += dy_i·x_i·rstd
func rmsnormBackward(dx, dg, dout, x, rstd, g []float32, n, d int) {
	g, dg = g[:d], dg[:d]
	for r := range n {
		xr, dy, dxr := x[r*d:(r+1)*d], dout[r*d:(r+1)*d], dx[r*d:(r+1)*d]
		s := rstd[r]
		c := float32(float32(float32(s*s)*s)*dot3Lanes(g, dy, xr)) / float32(d)
		for i, xi := range xr {
			dg[i] += float32(dy[i] * float32(xi*s))
			dxr[i] += float32(float32(s*g[i])*dy[i]) - float32(xi*c)
		}
	}
}

// softmaxCausal turns a row of raw scores into probabilities over its
// first valid entries (after scaling); the rest become exact zeros.
func softmaxCausal(row []float32, valid int, scale float32) {
	v := row[:valid]
	for j := range v {
		v[j] *= scale
	}
	kern.SoftmaxInPlace(v)
	clear(row[valid:])
}

// attnForward is causal attention for one query head: query rows are
// positions p0..p0+n−1, q and out (n, hd); k and v hold positions
// 0..p0+n−1 as rows of hd. probs receives the probabilities block by block
// (each (r1−r0, p0+r1)) for the backward pass.
func attnForward(out, probs, q, k, v []float32, p0, n, hd int, scale float32) {
	off := 0
	for r0 := 0; r0 < n; r0 += attnBlock {
		r1 := min(r0+attnBlock, n)
		bs, nk := r1-r0, p0+r1
		s := probs[off : off+bs*nk]
		kern.MatMulNT(s, q[r0*hd:r1*hd], k[:nk*hd], bs, hd, nk, false)
		for i := range bs {
			softmaxCausal(s[i*nk:(i+1)*nk], p0+r0+i+1, scale)
		}
		kern.MatMul(out[r0*hd:r1*hd], s, v[:nk*hd], bs, nk, hd, false)
		off += bs * nk
	}
}

// attnBackward is attnForward's backward for one query head (p0 = 0). It
// overwrites dq and accumulates dk and dv (shared by the heads of a GQA
// group; the caller zeroes them); dp is scratch of attnBlock·n.
//
//	dV += Pᵀ·dO;  dP = dO·Vᵀ;  dS = P ⊙ (dP − rowsum(P ⊙ dP))·scale
//	dQ = dS·K;    dK += dSᵀ·Q
func attnBackward(dq, dk, dv, dp, dout, probs, q, k, v []float32, n, hd int, scale float32) {
	off := 0
	for r0 := 0; r0 < n; r0 += attnBlock {
		r1 := min(r0+attnBlock, n)
		bs, nk := r1-r0, r1
		p := probs[off : off+bs*nk]
		do := dout[r0*hd : r1*hd]
		kern.MatMulTN(dv[:nk*hd], p, do, nk, bs, hd, true)
		ds := dp[:bs*nk]
		kern.MatMulNT(ds, do, v[:nk*hd], bs, hd, nk, false)
		for i := range bs {
			valid := r0 + i + 1
			pr := p[i*nk : i*nk+valid]
			dr := ds[i*nk : (i+1)*nk]
			dot := model.DotLanes(pr, dr)
			for j, pj := range pr {
				dr[j] = float32(pj*(dr[j]-dot)) * scale
			}
			clear(dr[valid:])
		}
		kern.MatMul(dq[r0*hd:r1*hd], ds, k[:nk*hd], bs, nk, hd, false)
		kern.MatMulTN(dk[:nk*hd], ds, q[r0*hd:r1*hd], nk, bs, hd, true)
		off += bs * nk
	}
}

// swigluForward: act = silu(gate)·up over n·F values; sig keeps
// sigmoid(gate) for the backward.
func swigluForward(act, sig, gate, up []float32) {
	n := len(gate)
	act, sig, up = act[:n], sig[:n], up[:n]
	for i, g := range gate {
		sig[i] = -g
	}
	kern.ExpInPlace(sig)
	for i, g := range gate {
		s := 1 / (1 + sig[i])
		sig[i] = s
		act[i] = float32(g*s) * up[i]
	}
}

// swigluBackward: dup = dact·silu(g); dgate = dact·up·s·(1 + g·(1−s)).
func swigluBackward(dgate, dup, dact, gate, up, sig []float32) {
	n := len(gate)
	dgate, dup, dact, up, sig = dgate[:n], dup[:n], dact[:n], up[:n], sig[:n]
	for i, g := range gate {
		s := sig[i]
		dup[i] = float32(dact[i]*g) * s
		dsilu := s * (1 + float32(g*(1-s)))
		dgate[i] = float32(dact[i]*up[i]) * dsilu
	}
}
