//go:build goexperiment.simd && amd64

package kern

import "simd/archsimd"

// Every SIMD section ends with archsimd.ClearAVXUpperBits (VZEROUPPER): the
// scalar code around it is legacy SSE (GOAMD64=v1), which runs with a false
// dependency on the vector registers' dirty upper halves otherwise (a
// softmax row ran 1.4× slower).

func dot(a, b []float32) float32                   { return dotISA(bestISA, a, b) }
func axpy(y []float32, alpha float32, x []float32) { axpyISA(bestISA, y, alpha, x) }
func scale(x []float32, alpha float32)             { scaleISA(bestISA, x, alpha) }
func expInPlace(x []float32)                       { expISA(bestISA, x) }
func softmax(x []float32)                          { softmaxISA(bestISA, x) }

// dotISA: element i goes to lane i%64 (four 16-lane accumulators, or eight
// 8-lane ones on AVX2, laid out identically), one FMA chain per lane; the
// 64 lanes are reduced as (q0+q1)+(q2+q3) then by reduce16.
func dotISA(isa int, a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s [16]float32
	switch isa {
	case isaAVX512:
		var q0, q1, q2, q3 archsimd.Float32x16
		i := 0
		for ; i+64 <= n; i += 64 {
			q0 = archsimd.LoadFloat32x16Slice(a[i:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i:]), q0)
			q1 = archsimd.LoadFloat32x16Slice(a[i+16:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i+16:]), q1)
			q2 = archsimd.LoadFloat32x16Slice(a[i+32:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i+32:]), q2)
			q3 = archsimd.LoadFloat32x16Slice(a[i+48:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i+48:]), q3)
		}
		if i < n {
			q0 = ld16(a[i:], 0, n-i).MulAdd(ld16(b[i:], 0, n-i), q0)
			q1 = ld16(a[i:], 16, n-i).MulAdd(ld16(b[i:], 16, n-i), q1)
			q2 = ld16(a[i:], 32, n-i).MulAdd(ld16(b[i:], 32, n-i), q2)
			q3 = ld16(a[i:], 48, n-i).MulAdd(ld16(b[i:], 48, n-i), q3)
		}
		q0.Add(q1).Add(q2.Add(q3)).Store(&s)
		archsimd.ClearAVXUpperBits()
	case isaAVX2:
		var l0, h0, l1, h1, l2, h2, l3, h3 archsimd.Float32x8
		i := 0
		for ; i+64 <= n; i += 64 {
			l0 = archsimd.LoadFloat32x8Slice(a[i:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i:]), l0)
			h0 = archsimd.LoadFloat32x8Slice(a[i+8:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+8:]), h0)
			l1 = archsimd.LoadFloat32x8Slice(a[i+16:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+16:]), l1)
			h1 = archsimd.LoadFloat32x8Slice(a[i+24:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+24:]), h1)
			l2 = archsimd.LoadFloat32x8Slice(a[i+32:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+32:]), l2)
			h2 = archsimd.LoadFloat32x8Slice(a[i+40:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+40:]), h2)
			l3 = archsimd.LoadFloat32x8Slice(a[i+48:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+48:]), l3)
			h3 = archsimd.LoadFloat32x8Slice(a[i+56:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+56:]), h3)
		}
		if i < n {
			r := n - i
			l0 = ld8(a[i:], 0, r).MulAdd(ld8(b[i:], 0, r), l0)
			h0 = ld8(a[i:], 8, r).MulAdd(ld8(b[i:], 8, r), h0)
			l1 = ld8(a[i:], 16, r).MulAdd(ld8(b[i:], 16, r), l1)
			h1 = ld8(a[i:], 24, r).MulAdd(ld8(b[i:], 24, r), h1)
			l2 = ld8(a[i:], 32, r).MulAdd(ld8(b[i:], 32, r), l2)
			h2 = ld8(a[i:], 40, r).MulAdd(ld8(b[i:], 40, r), h2)
			l3 = ld8(a[i:], 48, r).MulAdd(ld8(b[i:], 48, r), l3)
			h3 = ld8(a[i:], 56, r).MulAdd(ld8(b[i:], 56, r), h3)
		}
		l0.Add(l1).Add(l2.Add(l3)).StoreSlice(s[:8])
		h0.Add(h1).Add(h2.Add(h3)).StoreSlice(s[8:])
		archsimd.ClearAVXUpperBits()
	default:
		return refDot(a, b)
	}
	return reduce16(&s)
}

func axpyISA(isa int, y []float32, alpha float32, x []float32) {
	n := len(y)
	x = x[:n]
	switch isa {
	case isaAVX512:
		al := archsimd.BroadcastFloat32x16(alpha)
		i := 0
		for ; i+16 <= n; i += 16 {
			al.MulAdd(archsimd.LoadFloat32x16Slice(x[i:]), archsimd.LoadFloat32x16Slice(y[i:])).StoreSlice(y[i:])
		}
		if i < n {
			st16(al.MulAdd(ld16(x[i:], 0, n-i), ld16(y[i:], 0, n-i)), y[i:], 0, n-i)
		}
		archsimd.ClearAVXUpperBits()
	case isaAVX2:
		al := archsimd.BroadcastFloat32x8(alpha)
		i := 0
		for ; i+8 <= n; i += 8 {
			al.MulAdd(archsimd.LoadFloat32x8Slice(x[i:]), archsimd.LoadFloat32x8Slice(y[i:])).StoreSlice(y[i:])
		}
		if i < n {
			st8(al.MulAdd(ld8(x[i:], 0, n-i), ld8(y[i:], 0, n-i)), y[i:], 0, n-i)
		}
		archsimd.ClearAVXUpperBits()
	default:
		refAxpy(y, alpha, x)
	}
}

func scaleISA(isa int, x []float32, alpha float32) {
	n := len(x)
	switch isa {
	case isaAVX512:
		al := archsimd.BroadcastFloat32x16(alpha)
		i := 0
		for ; i+16 <= n; i += 16 {
			archsimd.LoadFloat32x16Slice(x[i:]).Mul(al).StoreSlice(x[i:])
		}
		if i < n {
			st16(ld16(x[i:], 0, n-i).Mul(al), x[i:], 0, n-i)
		}
		archsimd.ClearAVXUpperBits()
	case isaAVX2:
		al := archsimd.BroadcastFloat32x8(alpha)
		i := 0
		for ; i+8 <= n; i += 8 {
			archsimd.LoadFloat32x8Slice(x[i:]).Mul(al).StoreSlice(x[i:])
		}
		if i < n {
			st8(ld8(x[i:], 0, n-i).Mul(al), x[i:], 0, n-i)
		}
		archsimd.ClearAVXUpperBits()
	default:
		refScale(x, alpha)
	}
}

// exp16 and exp8 perform exactly the operation sequence of refExp1.
func exp16(v archsimd.Float32x16) archsimd.Float32x16 {
	bc := archsimd.BroadcastFloat32x16
	x := v.Max(bc(expLo)).Min(bc(expHi))
	t := x.Mul(bc(expLog2e))
	fn := t.Add(bc(expRound)).Sub(bc(expRound))
	x = x.Sub(fn.Mul(bc(expC1)))
	x = x.Sub(fn.Mul(bc(expC2)))
	z := x.Mul(x)
	y := bc(expP0).Mul(x)
	y = y.Add(bc(expP1)).Mul(x)
	y = y.Add(bc(expP2)).Mul(x)
	y = y.Add(bc(expP3)).Mul(x)
	y = y.Add(bc(expP4)).Mul(x)
	y = y.Add(bc(expP5)).Mul(z).Add(x).Add(bc(1))
	n := fn.ConvertToInt32()
	n1 := n.ShiftAllRight(1)
	n2 := n.Sub(n1)
	b := archsimd.BroadcastInt32x16(127)
	s1 := n1.Add(b).ShiftAllLeft(23).AsFloat32x16()
	s2 := n2.Add(b).ShiftAllLeft(23).AsFloat32x16()
	return v.Merge(y.Mul(s1).Mul(s2), v.IsNaN())
}

// exp16x2 is exp16 on two vectors, interleaved for instruction-level parallelism.
func exp16x2(v, w archsimd.Float32x16) (archsimd.Float32x16, archsimd.Float32x16) {
	bc := archsimd.BroadcastFloat32x16
	xA := v.Max(bc(expLo)).Min(bc(expHi))
	xB := w.Max(bc(expLo)).Min(bc(expHi))
	tA := xA.Mul(bc(expLog2e))
	tB := xB.Mul(bc(expLog2e))
	fnA := tA.Add(bc(expRound)).Sub(bc(expRound))
	fnB := tB.Add(bc(expRound)).Sub(bc(expRound))
	xA = xA.Sub(fnA.Mul(bc(expC1)))
	xB = xB.Sub(fnB.Mul(bc(expC1)))
	xA = xA.Sub(fnA.Mul(bc(expC2)))
	xB = xB.Sub(fnB.Mul(bc(expC2)))
	zA := xA.Mul(xA)
	zB := xB.Mul(xB)
	yA := bc(expP0).Mul(xA)
	yB := bc(expP0).Mul(xB)
	yA = yA.Add(bc(expP1)).Mul(xA)
	yB = yB.Add(bc(expP1)).Mul(xB)
	yA = yA.Add(bc(expP2)).Mul(xA)
	yB = yB.Add(bc(expP2)).Mul(xB)
	yA = yA.Add(bc(expP3)).Mul(xA)
	yB = yB.Add(bc(expP3)).Mul(xB)
	yA = yA.Add(bc(expP4)).Mul(xA)
	yB = yB.Add(bc(expP4)).Mul(xB)
	yA = yA.Add(bc(expP5)).Mul(zA).Add(xA).Add(bc(1))
	yB = yB.Add(bc(expP5)).Mul(zB).Add(xB).Add(bc(1))
	nA := fnA.ConvertToInt32()
	nB := fnB.ConvertToInt32()
	n1A := nA.ShiftAllRight(1)
	n1B := nB.ShiftAllRight(1)
	n2A := nA.Sub(n1A)
	n2B := nB.Sub(n1B)
	bA := archsimd.BroadcastInt32x16(127)
	bB := archsimd.BroadcastInt32x16(127)
	s1A := n1A.Add(bA).ShiftAllLeft(23).AsFloat32x16()
	s1B := n1B.Add(bB).ShiftAllLeft(23).AsFloat32x16()
	s2A := n2A.Add(bA).ShiftAllLeft(23).AsFloat32x16()
	s2B := n2B.Add(bB).ShiftAllLeft(23).AsFloat32x16()
	return v.Merge(yA.Mul(s1A).Mul(s2A), v.IsNaN()), w.Merge(yB.Mul(s1B).Mul(s2B), w.IsNaN())
}

func exp8(v archsimd.Float32x8) archsimd.Float32x8 {
	bc := archsimd.BroadcastFloat32x8
	x := v.Max(bc(expLo)).Min(bc(expHi))
	t := x.Mul(bc(expLog2e))
	fn := t.Add(bc(expRound)).Sub(bc(expRound))
	x = x.Sub(fn.Mul(bc(expC1)))
	x = x.Sub(fn.Mul(bc(expC2)))
	z := x.Mul(x)
	y := bc(expP0).Mul(x)
	y = y.Add(bc(expP1)).Mul(x)
	y = y.Add(bc(expP2)).Mul(x)
	y = y.Add(bc(expP3)).Mul(x)
	y = y.Add(bc(expP4)).Mul(x)
	y = y.Add(bc(expP5)).Mul(z).Add(x).Add(bc(1))
	n := fn.ConvertToInt32()
	n1 := n.ShiftAllRight(1)
	n2 := n.Sub(n1)
	b := archsimd.BroadcastInt32x8(127)
	s1 := n1.Add(b).ShiftAllLeft(23).AsFloat32x8()
	s2 := n2.Add(b).ShiftAllLeft(23).AsFloat32x8()
	return v.Merge(y.Mul(s1).Mul(s2), v.IsNaN())
}

func expISA(isa int, x []float32) {
	n := len(x)
	switch isa {
	case isaAVX512:
		i := 0
		for ; i+32 <= n; i += 32 {
			a, b := exp16x2(archsimd.LoadFloat32x16Slice(x[i:]), archsimd.LoadFloat32x16Slice(x[i+16:]))
			a.StoreSlice(x[i:])
			b.StoreSlice(x[i+16:])
		}
		for ; i+16 <= n; i += 16 {
			exp16(archsimd.LoadFloat32x16Slice(x[i:])).StoreSlice(x[i:])
		}
		if i < n {
			st16(exp16(ld16(x[i:], 0, n-i)), x[i:], 0, n-i)
		}
		archsimd.ClearAVXUpperBits()
	case isaAVX2:
		i := 0
		for ; i+8 <= n; i += 8 {
			exp8(archsimd.LoadFloat32x8Slice(x[i:])).StoreSlice(x[i:])
		}
		if i < n {
			st8(exp8(ld8(x[i:], 0, n-i)), x[i:], 0, n-i)
		}
		archsimd.ClearAVXUpperBits()
	default:
		refExp(x)
	}
}

// softmaxISA matches refSoftmax bit for bit: lane i%16 sums, reduce16,
// then a true division.
func softmaxISA(isa int, x []float32) {
	n := len(x)
	var s [16]float32
	var mx float32
	i := 0
	switch isa {
	case isaAVX512:
		softmax512(x)
		return
	case isaAVX2:
		m := archsimd.BroadcastFloat32x8(x[0])
		for ; i+8 <= n; i += 8 {
			m = m.Max(archsimd.LoadFloat32x8Slice(x[i:]))
		}
		m.StoreSlice(s[:8])
		archsimd.ClearAVXUpperBits()
		mx = s[0]
		for _, v := range s[1:8] {
			mx = max(mx, v)
		}
		for _, v := range x[i:] {
			mx = max(mx, v)
		}
		mv := archsimd.BroadcastFloat32x8(mx)
		var lo, hi archsimd.Float32x8
		for i = 0; i+16 <= n; i += 16 {
			e := exp8(archsimd.LoadFloat32x8Slice(x[i:]).Sub(mv))
			e.StoreSlice(x[i:])
			lo = lo.Add(e)
			e = exp8(archsimd.LoadFloat32x8Slice(x[i+8:]).Sub(mv))
			e.StoreSlice(x[i+8:])
			hi = hi.Add(e)
		}
		lo.StoreSlice(s[:8])
		hi.StoreSlice(s[8:])
		archsimd.ClearAVXUpperBits()
	default:
		refSoftmax(x)
		return
	}
	for ; i < n; i++ {
		e := refExp1(x[i] - mx)
		x[i] = e
		s[i&15] += e
	}
	sum := reduce16(&s)
	switch isa {
	case isaAVX512:
		sv := archsimd.BroadcastFloat32x16(sum)
		for i = 0; i+16 <= n; i += 16 {
			archsimd.LoadFloat32x16Slice(x[i:]).Div(sv).StoreSlice(x[i:])
		}
		if i < n {
			st16(ld16(x[i:], 0, n-i).Div(sv), x[i:], 0, n-i)
		}
		archsimd.ClearAVXUpperBits()
	default:
		sv := archsimd.BroadcastFloat32x8(sum)
		for i = 0; i+8 <= n; i += 8 {
			archsimd.LoadFloat32x8Slice(x[i:]).Div(sv).StoreSlice(x[i:])
		}
		if i < n {
			st8(ld8(x[i:], 0, n-i).Div(sv), x[i:], 0, n-i)
		}
		archsimd.ClearAVXUpperBits()
	}
}

// softmax512 is softmaxISA's AVX-512 path, with the reductions kept in
// registers (a scalar pass over a just-stored vector stalls on store
// forwarding). The sum is the same lane-wise chain and the same tree as
// reduce16: lane l adds elements l, l+16, ... in order (the masked tail
// adds +0 in unused lanes, which leaves a sum ≥ +0 unchanged), then
// (l, l+8), (l, l+4), (l, l+2), (l, l+1).
func softmax512(x []float32) {
	n := len(x)
	m := archsimd.BroadcastFloat32x16(x[0])
	i := 0
	for ; i+16 <= n; i += 16 {
		m = m.Max(archsimd.LoadFloat32x16Slice(x[i:]))
	}
	if i < n {
		m = m.Max(ld16(x[i:], 0, n-i).Merge(m, archsimd.Mask32x16FromBits(uint16(1)<<(n-i)-1)))
	}
	m8 := m.GetLo().Max(m.GetHi())
	m4 := m8.GetLo().Max(m8.GetHi())
	var t [4]float32
	m4.Store(&t)
	archsimd.ClearAVXUpperBits()
	mx := max(max(t[0], t[1]), max(t[2], t[3]))
	mv := archsimd.BroadcastFloat32x16(mx)
	var acc archsimd.Float32x16
	for i = 0; i+32 <= n; i += 32 {
		e, f := exp16x2(archsimd.LoadFloat32x16Slice(x[i:]).Sub(mv), archsimd.LoadFloat32x16Slice(x[i+16:]).Sub(mv))
		e.StoreSlice(x[i:])
		f.StoreSlice(x[i+16:])
		acc = acc.Add(e).Add(f)
	}
	for ; i+16 <= n; i += 16 {
		e := exp16(archsimd.LoadFloat32x16Slice(x[i:]).Sub(mv))
		e.StoreSlice(x[i:])
		acc = acc.Add(e)
	}
	if i < n {
		e := exp16(ld16(x[i:], 0, n-i).Sub(mv)).Masked(archsimd.Mask32x16FromBits(uint16(1)<<(n-i) - 1))
		st16(e, x[i:], 0, n-i)
		acc = acc.Add(e)
	}
	s8 := acc.GetLo().Add(acc.GetHi())
	s4 := s8.GetLo().Add(s8.GetHi())
	s4.Store(&t)
	archsimd.ClearAVXUpperBits()
	sum := (t[0] + t[2]) + (t[1] + t[3])
	sv := archsimd.BroadcastFloat32x16(sum)
	for i = 0; i+16 <= n; i += 16 {
		archsimd.LoadFloat32x16Slice(x[i:]).Div(sv).StoreSlice(x[i:])
	}
	if i < n {
		st16(ld16(x[i:], 0, n-i).Div(sv), x[i:], 0, n-i)
	}
	archsimd.ClearAVXUpperBits()
}
