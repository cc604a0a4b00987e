// The decode step: packed weights, the batched one-token forward and its
// attention over the KV cache.

package model

import (
	"math"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// decodePacked holds decode's weight matrices laid out by kern.Pack:
// a decode step reads every weight once for a few rows, and packed panels
// stream front to back (kern's BenchmarkPackedDecode, Model A at 8 rows on
// the shared Xeon: 37-41 % of the AVX-512 FMA peak in place, 53-57 %
// packed; AVX2 about even). The products give the bits of kern.MatMul with
// the plain weights.
type decodePacked struct {
	packed bool   // the panels hold the weights of version ver
	ver    uint64 // Model.wver when packed
	layers []struct{ qkv, proj, fc, fc2 kern.Packed }
	head   kern.Packed
}

// packDecodeMin is the fewest decode rows (tokens to sample, summed over
// the batch) for which packing the weights (one pass over them) pays.
const packDecodeMin = 256

// packDecode lays the weights out for decode when the call samples enough
// tokens to repay it, and says whether decode reads the panels; otherwise
// decode reads the weights in place. The panels are kept for the next call
// until the weights change (the RL loop's snapshot serves many calls per
// version). A whole-model call (lane < 0) packs on both shards, a lane's
// call on its own core; concurrent lanes pack once, under m.prep.
func (m *Model) packDecode(cost []int, lane int) bool {
	m.prep.Lock()
	defer m.prep.Unlock()
	if m.dpk == nil {
		m.dpk = &decodePacked{layers: make([]struct{ qkv, proj, fc, fc2 kern.Packed }, m.cfg.Layers)}
	}
	rows := 0
	for _, c := range cost {
		rows += c
	}
	dp := m.dpk
	if rows < packDecodeMin {
		return false
	}
	if dp.packed && dp.ver == m.wver {
		return true
	}
	c := m.cfg
	d, f := c.Dim, c.Hidden
	type job struct {
		dst  *kern.Packed
		b    []float32
		k, n int
	}
	jobs := []job{{&dp.head, m.wteT, d, c.Vocab}}
	for l := range dp.layers {
		lp, pl := &m.p.layers[l], &dp.layers[l]
		jobs = append(jobs, job{&pl.qkv, lp.qkv, d, 3 * d}, job{&pl.proj, lp.proj, d, d},
			job{&pl.fc, lp.fc, d, 2 * f}, job{&pl.fc2, lp.fc2, f, d})
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
	dp.packed, dp.ver = true, m.wver
	return true
}

// decodeMatMul is kern.MatMul(c, a, w, rows, k, n, acc), from the packed
// copy of w when this call reads the panels.
func (m *Model) decodeMatMul(dw *decodeWS, c, a, w []float32, pk *kern.Packed, rows, k, n int, acc bool) {
	if dw.packed {
		kern.MatMulPacked(c, a, rows, pk, acc)
		return
	}
	kern.MatMul(c, a, w, rows, k, n, acc)
}

// decodeStep feeds each sequence's pending token at its position and leaves
// the next logits in s.logits. It is the training forward restricted to one
// row per sequence: the same layer functions, the same kernel chains.
func (m *Model) decodeStep(dw *decodeWS, seqs []*genSeq) {
	c := m.cfg
	B, d, H, hs, f, T, V := len(seqs), c.Dim, c.Heads, c.HeadDim(), c.Hidden, c.Context, c.Vocab
	half, tl := hs/2, ktLen(T)
	scale := float32(1 / math.Sqrt(float64(hs)))
	p := &m.p
	for b, s := range seqs {
		embedForward(dw.x[b*d:(b+1)*d], []int32{s.pending}, p.wte, p.wpe, s.pos, d)
	}
	for l := range c.Layers {
		lp := &p.layers[l]
		rmsnormForward(dw.ln, dw.rstd, dw.x, lp.ln1, B, d, c.NormEps)
		pl := &m.dpk.layers[l]
		m.decodeMatMul(dw, dw.qkv, dw.ln, lp.qkv, &pl.qkv, B, d, 3*d, false)
		for b, s := range seqs {
			pos := s.pos
			src := dw.qkv[b*3*d : (b+1)*3*d]
			kv := s.kv[l]
			// q and k are roped in place in this step's qkv row (decode
			// never reads the cache's untransposed keys: writing them only
			// pulled their lines in)
			for h := range H {
				qh := src[h*hs : (h+1)*hs]
				kh := src[d+h*hs : d+(h+1)*hs]
				copy(kv.v[(h*T+pos)*hs:(h*T+pos+1)*hs], src[2*d+h*hs:])
				if m.cos != nil {
					cs, sn := m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half]
					ropeForward(qh, cs, sn)
					ropeForward(kh, cs, sn)
				}
				kt := kv.kt[h*hs*tl+ktAt(hs, pos, 0):]
				for p, v := range kh {
					kt[p*ktBlock] = v
				}
			}
			attnDecodeRow(dw.att[b*d:(b+1)*d], dw.probs, src[:d], kv.kt, kv.v, pos+1, T, H, hs, scale)
		}
		m.decodeMatMul(dw, dw.x, dw.att, lp.proj, &pl.proj, B, d, d, true)
		rmsnormForward(dw.ln, dw.rstd, dw.x, lp.ln2, B, d, c.NormEps)
		m.decodeMatMul(dw, dw.h, dw.ln, lp.fc, &pl.fc, B, d, 2*f, false)
		swigluForward(dw.act, dw.sig, dw.h, B, f)
		m.decodeMatMul(dw, dw.x, dw.act, lp.fc2, &pl.fc2, B, f, d, true)
	}
	rmsnormForward(dw.ln, dw.rstd, dw.x, p.lnf, B, d, c.NormEps)
	m.decodeMatMul(dw, dw.logits, dw.ln, m.wteT, &m.dpk.head, B, d, V, false)
	for b, s := range seqs {
		copy(s.logits, dw.logits[b*V:(b+1)*V])
		s.pos++
	}
}

// attnDecode is attnForward for one query row at position nk−1, over a
// head's blocked transposed keys kt (ktAt) and values v (≥nk, hs). Scores and output are
// the same per-element chains as attnForward's kern products (a sequential
// multiply-add chain over the reduction index from 0, fused exactly when
// kern fuses), so decode and training agree bit for bit; decodeScores and
// decodeValues are the fused SIMD loops or their Axpy-chain fallback.
// probs needs room for nk rounded up to 32.
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
// are (H·hs), kt the layer's blocked transposed keys (H heads of
// hs·ktLen(T)), v its values (H, T, hs), probs room for H·probStride(T).
// Running the heads' chains together keeps the FMA units busy; every lane
// is the same chain as attnDecode's (and training's). The heads' score
// rows lie probRow(nk) apart, so the softmax's exp, sum and scaling run on
// whole vectors (exp once over all heads; the lanes past nk are zeros and
// never read): softmaxCausal's operations on every lane that is read.
func attnDecodeRow(out, probs, q, kt, v []float32, nk, T, H, hs int, scale float32) {
	ps := probRow(nk)
	all := probs[:H*ps]
	decodeScoresHeads(all, ps, q, kt, nk, T, H, hs)
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
	decodeValuesHeads(out, all, ps, v, nk, T, H, hs)
}

// axpyScores: s[j] = Σ_p q[p]·kt[ktAt(hs, j, p)] as kern.Axpy chains, one
// block of keys at a time.
func axpyScores(probs, q, kt []float32, nk int) {
	hs := len(q)
	for j := 0; j < nk; j += ktBlock {
		n := min(ktBlock, nk-j)
		s, blk := probs[j:j+n], kt[j*hs:]
		clear(s)
		for p, qp := range q {
			kern.Axpy(s, qp, blk[p*ktBlock:p*ktBlock+n])
		}
	}
}

// axpyValues: out[c] = Σ_j s[j]·v[j·hs+c] as kern.Axpy chains.
func axpyValues(out, s, v []float32) {
	hs := len(out)
	clear(out)
	for j, pj := range s {
		kern.Axpy(out, pj, v[j*hs:(j+1)*hs])
	}
}
