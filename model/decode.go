// The decode step: how it reads the weights, the batched one-token
// forward and its attention over the KV cache.

package model

import (
	"math"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// decodeMode is how a call's decode reads the weights.
type decodeMode int

const (
	// decodeT: plain products with the transposed copies ([in, out]),
	// read in place.
	decodeT decodeMode = iota
	// decodePacked: the transposed copies laid out by kern.Pack: a
	// decode step reads every weight once for a few rows, and packed
	// panels stream front to back (BenchmarkPackedDecode).
	decodePacked
	// decodeInPlace: NT products on the weights as the model holds them
	// (float32 or bfloat16, [out, in]), each product's columns split over
	// the call's cores: a model too big to copy, whose every step streams
	// its weights from memory.
	decodeInPlace
)

// copyMaxBytes is the largest model (resident bytes) decode keeps
// transposed copies of: the copies double its weights' memory, and above
// L2-to-L3 sizes a step is bound by streaming the weights, which the NT
// products do from the weights in place.
const copyMaxBytes = 64 << 20

// packDecodeMin is the fewest decode rows (tokens to sample, summed over
// the batch) for which packing the copies (one pass over them) pays.
const packDecodeMin = 256

// decodeCopies are decode's transposed weights: per layer [q | k | v] (d,
// H·hd + 2·K·hd), o (H·hd, d), [gate | up] (d, 2F), down (F, d), and the
// head (d, V): products with them are the chains of training's NT
// products (column blocks of one product are the separate products). They
// and their packed panels are remade when the weights change (wver).
type decodeCopies struct {
	ver     uint64 // wver of the copies
	layers  []decodeLayer
	head    []float32
	phead   kern.Packed
	packed  bool   // the panels hold the copies of version pver
	pver    uint64 // wver the panels were packed at
	scratch []float32
}

type decodeLayer struct {
	qkv, o, fc, down     []float32
	pqkv, po, pfc, pdown kern.Packed
}

// transposeDecode makes the transposed copies of the current weights
// (small models only; a no-op while they are fresh). The caller holds
// m.prep.
func (m *Model) transposeDecode() {
	if !m.decodeCopies() {
		m.dc = nil
		return
	}
	c := m.cfg
	d, f, q, kv := c.Dim, c.Hidden, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	if m.dc == nil {
		dc := &decodeCopies{ver: m.wver - 1, layers: make([]decodeLayer, c.Layers), head: make([]float32, d*c.Vocab)}
		for l := range dc.layers {
			dc.layers[l] = decodeLayer{qkv: make([]float32, d*(q+2*kv)), o: make([]float32, q*d),
				fc: make([]float32, d*2*f), down: make([]float32, f*d)}
		}
		m.dc = dc
	}
	dc := m.dc
	if dc.ver == m.wver {
		return
	}
	row := make([]float32, max(d, f, q))
	for l := range dc.layers {
		lp, dl := &m.p.layers[l], &dc.layers[l]
		transposeInto(dl.qkv, q+2*kv, 0, lp.wq, q, d, row)
		transposeInto(dl.qkv, q+2*kv, q, lp.wk, kv, d, row)
		transposeInto(dl.qkv, q+2*kv, q+kv, lp.wv, kv, d, row)
		transposeInto(dl.o, d, 0, lp.wo, d, q, row)
		transposeInto(dl.fc, 2*f, 0, lp.wgate, f, d, row)
		transposeInto(dl.fc, 2*f, f, lp.wup, f, d, row)
		transposeInto(dl.down, d, 0, lp.wdown, d, f, row)
	}
	transposeInto(dc.head, c.Vocab, 0, m.p.head, c.Vocab, d, row)
	dc.ver = m.wver
}

// decodeCopies reports whether decode keeps transposed copies: for models
// of at most copyMaxBytes (tests lower the bound, Model.copyMax).
func (m *Model) decodeCopies() bool {
	limit := int64(copyMaxBytes)
	if m.copyMax != 0 {
		limit = m.copyMax
	}
	return m.ResidentBytes() <= limit
}

// transposeInto writes wᵀ (w r×c, float32 or bfloat16 widened) into
// columns [col, col+r) of dst, whose rows are ld wide; row is scratch of
// c floats.
func transposeInto(dst []float32, ld, col int, w mat, r, c int, row []float32) {
	if w.f == nil {
		for i := range r {
			w.row(row, i, c)
			for j, v := range row[:c] {
				dst[j*ld+col+i] = v
			}
		}
		return
	}
	const blk = 16 // blocks of 16×16: both sides' lines stay in L1
	for i0 := 0; i0 < r; i0 += blk {
		for j0 := 0; j0 < c; j0 += blk {
			for i := i0; i < min(i0+blk, r); i++ {
				src := w.f[i*c : (i+1)*c]
				for j := j0; j < min(j0+blk, c); j++ {
					dst[j*ld+col+i] = src[j]
				}
			}
		}
	}
}

// decodeWeights picks how this call's decode reads the weights, packing
// the copies when the call samples enough tokens to repay it. The panels
// are kept for the next call until the weights change (the RL loop's
// snapshot serves many calls per version). A whole-model call (lane < 0)
// packs on both shards, a lane's call on its own core; concurrent lanes
// pack once, under m.prep.
func (m *Model) decodeWeights(cost []int, lane int) decodeMode {
	m.prep.Lock()
	defer m.prep.Unlock()
	dc := m.dc
	if dc == nil {
		return decodeInPlace
	}
	rows := 0
	for _, c := range cost {
		rows += c
	}
	if rows < packDecodeMin {
		return decodeT
	}
	if dc.packed && dc.pver == m.wver {
		return decodePacked
	}
	c := m.cfg
	d, f, q, kv := c.Dim, c.Hidden, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	type job struct {
		dst  *kern.Packed
		b    []float32
		k, n int
	}
	jobs := []job{{&dc.phead, dc.head, d, c.Vocab}}
	for l := range dc.layers {
		dl := &dc.layers[l]
		jobs = append(jobs, job{&dl.pqkv, dl.qkv, d, q + 2*kv}, job{&dl.po, dl.o, q, d},
			job{&dl.pfc, dl.fc, d, 2 * f}, job{&dl.pdown, dl.down, f, d})
	}
	// each job to the shard with less to pack so far (in this fixed order)
	var load [nShards]int
	shard := make([]int, len(jobs))
	for i, j := range jobs {
		s := 0
		for t := range nShards {
			if load[t] < load[s] {
				s = t
			}
		}
		shard[i] = s
		load[s] += j.k * j.n
	}
	packShard := func(sh int) {
		for i, j := range jobs {
			if shard[i] == sh {
				kern.Pack(j.dst, j.b, j.k, j.n)
			}
		}
	}
	if lane < 0 {
		runShards(packShard)
	} else {
		for sh := range nShards {
			packShard(sh)
		}
	}
	dc.packed, dc.pver = true, m.wver
	return decodePacked
}

// copyMatMul is kern.MatMul(c, a, w, rows, k, n, acc) with a transposed
// copy w, from its panels when this call reads them.
func copyMatMul(dw *decodeWS, c, a, w []float32, pk *kern.Packed, rows, k, n int, acc bool) {
	if dw.mode == decodePacked {
		kern.MatMulPacked(c, a, rows, pk, acc)
		return
	}
	kern.MatMul(c, a, w, rows, k, n, acc)
}

// ntCols is linForward without bias, each product's columns over par cores.
func ntCols(y, x []float32, w mat, n, in, out int, acc bool, par int) {
	if w.f != nil {
		kern.MatMulNTCols(y, x, w.f, n, in, out, acc, par)
	} else {
		kern.MatMulNTBF16Cols(y, x, w.h, n, in, out, acc, par)
	}
}

// ntProd is one product of ntColsMany: y (n, out) = x·Wᵀ.
type ntProd struct {
	y   []float32
	w   mat
	out int
}

// ntColsMany runs several products of the same input rows x (n, in), one
// fork for all: each core computes its column block of every product (the
// blocks of ntCols, so the same bits).
func ntColsMany(x []float32, n, in, par int, ps ...ntProd) {
	part := func(i int) {
		for _, p := range ps {
			if p.w.f != nil {
				kern.MatMulNTColsPart(p.y, x, p.w.f, n, in, p.out, false, i, par)
			} else {
				kern.MatMulNTBF16ColsPart(p.y, x, p.w.h, n, in, p.out, false, i, par)
			}
		}
	}
	if par <= 1 {
		part(0)
		return
	}
	kern.Fork(par, part)
}

// decodeStep feeds each sequence's pending token at its position and leaves
// the next logits in s.logits. It is the training forward restricted to one
// row per sequence: the same layer functions, the same kernel chains.
func (m *Model) decodeStep(dw *decodeWS, seqs []*genSeq) {
	c := m.cfg
	B, d, H, K, hd, f, V := len(seqs), c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.Hidden, c.Vocab
	half, rep, q, kvw := hd/2, H/K, H*hd, K*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	eps := float32(c.NormEps)
	p, dc, fused := &m.p, m.dc, dw.mode != decodeInPlace
	// row b's q, k, v: fused rows [q | k | v] from the copies, else three
	// blocks (B×q, B×kvw, B×kvw)
	qs, ko, vo, kvs := q+2*kvw, q, q+kvw, q+2*kvw
	if !fused {
		qs, ko, vo, kvs = q, B*q, B*(q+kvw), kvw
	}
	for b, s := range seqs {
		p.embed.row(dw.x[b*d:], int(s.pending), d)
	}
	for l := range c.Layers {
		lp := &p.layers[l]
		rmsnormForward(dw.ln, dw.rstd, dw.x, lp.ln1, B, d, eps)
		if fused {
			dl := &dc.layers[l]
			copyMatMul(dw, dw.qkv, dw.ln, dl.qkv, &dl.pqkv, B, d, q+2*kvw, false)
		} else {
			ntColsMany(dw.ln, B, d, dw.par, ntProd{dw.qkv, lp.wq, q}, ntProd{dw.qkv[ko:], lp.wk, kvw}, ntProd{dw.qkv[vo:], lp.wv, kvw})
		}
		for b, s := range seqs {
			qh := dw.qkv[b*qs : b*qs+q]
			kh := dw.qkv[ko+b*kvs : ko+b*kvs+kvw]
			vh := dw.qkv[vo+b*kvs : vo+b*kvs+kvw]
			if lp.bq != nil {
				addBias(qh, lp.bq, 1, q)
				addBias(kh, lp.bk, 1, kvw)
				addBias(vh, lp.bv, 1, kvw)
			}
			if lp.qnorm != nil {
				rmsnormForward(qh, dw.nrstd, qh, lp.qnorm, H, hd, eps)
				rmsnormForward(kh, dw.nrstd, kh, lp.knorm, K, hd, eps)
			}
			pos, kv, T := s.pos, &s.kv.l[l], s.kv.T
			tl := ktLen(T)
			cs, sn := m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half]
			// q and k are roped in place in this step's rows (decode
			// never reads the cache's untransposed keys: writing them only
			// pulled their lines in)
			for h := range H {
				ropeForward(qh[h*hd:(h+1)*hd], cs, sn)
			}
			for g := range K {
				kg := kh[g*hd : (g+1)*hd]
				ropeForward(kg, cs, sn)
				copy(kv.v[(g*T+pos)*hd:(g*T+pos+1)*hd], vh[g*hd:])
				kt := kv.kt[g*hd*tl+ktAt(hd, pos, 0):]
				for i, v := range kg {
					kt[i*ktBlock] = v
				}
			}
			attnDecodeRow(dw.att[b*q:(b+1)*q], dw.probs, qh, kv.kt, kv.v, pos+1, T, H, rep, hd, scale)
		}
		if fused {
			dl := &dc.layers[l]
			copyMatMul(dw, dw.x, dw.att, dl.o, &dl.po, B, q, d, true)
		} else {
			ntCols(dw.x, dw.att, lp.wo, B, q, d, true, dw.par)
		}
		addBias(dw.x, lp.bo, B, d)
		rmsnormForward(dw.ln, dw.rstd, dw.x, lp.ln2, B, d, eps)
		if fused {
			dl := &dc.layers[l]
			copyMatMul(dw, dw.h, dw.ln, dl.fc, &dl.pfc, B, d, 2*f, false)
			for b := range B {
				r := dw.h[b*2*f : (b+1)*2*f]
				swigluForward(dw.act[b*f:(b+1)*f], dw.sig[b*f:], r[:f], r[f:])
			}
			copyMatMul(dw, dw.x, dw.act, dl.down, &dl.pdown, B, f, d, true)
		} else {
			ntColsMany(dw.ln, B, d, dw.par, ntProd{dw.h, lp.wgate, f}, ntProd{dw.h[B*f:], lp.wup, f})
			swigluForward(dw.act[:B*f], dw.sig, dw.h[:B*f], dw.h[B*f:])
			ntCols(dw.x, dw.act, lp.wdown, B, f, d, true, dw.par)
		}
	}
	rmsnormForward(dw.ln, dw.rstd, dw.x, p.norm, B, d, eps)
	if fused {
		copyMatMul(dw, dw.logits, dw.ln, dc.head, &dc.phead, B, d, V, false)
	} else {
		ntCols(dw.logits, dw.ln, p.head, B, d, V, false, dw.par)
	}
	for b, s := range seqs {
		copy(s.logits, dw.logits[b*V:(b+1)*V])
		s.pos++
	}
}

// attnDecode is attnForward for one query row at position nk−1, over a
// head's blocked transposed keys kt (ktAt) and values v (≥nk, hd). Scores
// and output are the same per-element chains as attnForward's kern
// products (a sequential multiply-add chain over the reduction index from
// 0, fused exactly when kern fuses), so decode and training agree bit for
// bit; decodeScores and decodeValues are the fused SIMD loops or their
// Axpy-chain fallback. probs needs room for nk rounded up to 32.
func attnDecode(out, probs, q, kt, v []float32, nk int, scale float32) {
	s := probs[:nk]
	decodeScores(probs, q, kt, nk)
	softmaxCausal(s, nk, scale)
	decodeValues(out, s, v)
}

// probStride is the room for one head's scores in a decode row: the
// context and a tail for lanes past nk (up to 32 of them).
func probStride(T int) int { return T + 32 }

// attnDecodeRow is attnDecode for every head of one row at once: q and out
// are (H·hd), kt the layer's blocked transposed keys (K kv heads of
// hd·ktLen(T)), v its values (K, T, hd); query head h reads kv head h/rep;
// probs has room for H·probStride(T). Running the heads' chains together
// keeps the FMA units busy; every lane is the same chain as attnDecode's
// (and training's). The heads' score rows lie probRow(nk) apart, so the
// softmax's exp, sum and scaling run on whole vectors (exp once over all
// heads; the lanes past nk are zeros and never read): softmaxCausal's
// operations on every lane that is read.
func attnDecodeRow(out, probs, q, kt, v []float32, nk, T, H, rep, hd int, scale float32) {
	ps := probRow(nk)
	all := probs[:H*ps]
	decodeScoresHeads(all, ps, q, kt, nk, T, H, rep, hd)
	for h := range H {
		row := all[h*ps : (h+1)*ps]
		mx := scaleMax(row[:nk], scale)
		addScalar(row[:nk], -mx)
		clear(row[nk:])
	}
	kern.ExpInPlace(all)
	for h := range H {
		// the lanes past nk (exp(0) = 1 now) become +0 again, which
		// sumLanes adds as its own zero-filled tail would: the sum over
		// whole vectors is the sum over nk
		row := all[h*ps : (h+1)*ps]
		clear(row[nk:])
		kern.Scale(row, 1/sumLanes(row))
	}
	decodeValuesHeads(out, all, ps, v, nk, T, H, rep, hd)
}

// axpyScores: s[j] = Σ_p q[p]·kt[ktAt(hd, j, p)] as kern.Axpy chains, one
// block of keys at a time.
func axpyScores(probs, q, kt []float32, nk int) {
	hd := len(q)
	for j := 0; j < nk; j += ktBlock {
		n := min(ktBlock, nk-j)
		s, blk := probs[j:j+n], kt[j*hd:]
		clear(s)
		for p, qp := range q {
			kern.Axpy(s, qp, blk[p*ktBlock:p*ktBlock+n])
		}
	}
}

// axpyValues: out[c] = Σ_j s[j]·v[j·hd+c] as kern.Axpy chains.
func axpyValues(out, s, v []float32) {
	hd := len(out)
	clear(out)
	for j, pj := range s {
		kern.Axpy(out, pj, v[j*hd:(j+1)*hd])
	}
}
