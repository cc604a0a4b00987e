//go:build goexperiment.simd && amd64

package kern

import "unsafe"

// ntSmallRows is the most rows the NT product runs column panel by column
// panel (ntSmall): a decode step's rows. Each panel of B is packed (and
// widened, for bfloat16) from whole rows of the stored n×k B, read front
// to back across every k-block before the next panel: the weights stream
// from memory once, in order. The drivers for more rows run k-blocks
// outermost (the k-block of A stays cached across the panels), which for
// a few rows reads B in k-block strips, each a short run of every row.
const ntSmallRows = 16

// ntSmall is the NT product (B.cs = k: B(p, j) at j·k + p) for m ≤
// ntSmallRows, panels outermost. Each C element is the same chain over p
// as in the other drivers (k-blocks in order, the partial sum stored and
// reloaded), so the bits are theirs.
func ntSmall(isa int, c []float32, ldc int, A, B operand, m, k, n int, acc bool, buf *panel) {
	ar, ap := uintptr(A.rs)*4, uintptr(A.cs)*4
	ldcb := uintptr(ldc) * 4
	if isa == isaAVX512 {
		const W = panelW // 4 zmm: tiles of up to 6 rows
		tiles := (m + 5) / 6
		base, extra := m/tiles, m%tiles
		for jb := 0; jb < n; jb += W {
			w := min(W, n-jb)
			mask := ^uint64(0)
			if w < 64 {
				mask = 1<<w - 1
			}
			vecs := (w + 15) / 16
			_ = c[(m-1)*ldc+jb+w-1]
			for kb := 0; kb < k; kb += kcBlk {
				kc := min(kcBlk, k-kb)
				bp, bs := bPanel(isa, B, kb, kc, jb, w, vecs*16, true, buf)
				a0 := unsafe.Pointer(&A.s[kb*A.cs])
				i := 0
				for t := range tiles {
					r := base
					if t < extra {
						r++
					}
					asmZTile(vecs, r, kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs,
						unsafe.Pointer(&c[i*ldc+jb]), ldcb, mask, acc || kb > 0)
					i += r
				}
			}
		}
		return
	}
	for jb := 0; jb < n; {
		W := 16
		if n-jb <= 8 {
			W = 8
		}
		w := min(W, n-jb)
		for kb := 0; kb < k; kb += kcBlk {
			kc := min(kcBlk, k-kb)
			load := acc || kb > 0
			a0 := unsafe.Pointer(&A.s[kb*A.cs])
			bp, bs := bPanel(isa, B, kb, kc, jb, w, W, true, buf)
			for i := 0; i < m; i += asmRows {
				r := min(asmRows, m-i)
				ai := unsafe.Add(a0, uintptr(i)*ar)
				ci := c[i*ldc+jb:]
				_ = ci[(r-1)*ldc+w-1]
				if w == W {
					asmTile(W, r, kc, ai, ar, ap, bp, bs, unsafe.Pointer(&ci[0]), ldcb, load)
					continue
				}
				var t [asmRows * 16]float32
				if load {
					for rr := 0; rr < r; rr++ {
						copy(t[rr*W:rr*W+w], ci[rr*ldc:])
					}
				}
				asmTile(W, r, kc, ai, ar, ap, bp, bs, unsafe.Pointer(&t[0]), uintptr(W)*4, load)
				for rr := 0; rr < r; rr++ {
					copy(ci[rr*ldc:rr*ldc+w], t[rr*W:])
				}
			}
		}
		jb += W
	}
}

// ntGemv512 is the m = 1 NT product on the AVX-512 path with B read in
// place: rows in groups of ntGemvRows through the transposing assembly
// kernels (whole blocks of 16 p), then the p tail of those rows
// (continuing their chains: a k-split with acc is the same chain) and the
// last rows through ntSmall.
func ntGemv512(c []float32, A, B operand, k, n int, acc bool, buf *panel) {
	const R = ntGemvRows
	P := ntGemvF32P
	if B.h != nil {
		P = ntGemvBF16P
	}
	k16, n64 := k/P*P, n/R*R
	if k16 > 0 && n64 > 0 {
		_ = A.s[k16-1]
		_ = c[n64-1]
		ldw := uintptr(B.cs)
		for j := 0; j < n64; j += R {
			if B.h != nil {
				_ = B.h[(j+R-1)*B.cs+k16-1]
				asmNTGemvBF16(k16/P, unsafe.Pointer(&A.s[0]), unsafe.Pointer(&B.h[j*B.cs]), 2*ldw, unsafe.Pointer(&c[j]), acc)
			} else {
				_ = B.s[(j+R-1)*B.cs+k16-1]
				asmNTGemvF32(k16/P, unsafe.Pointer(&A.s[0]), unsafe.Pointer(&B.s[j*B.cs]), 4*ldw, unsafe.Pointer(&c[j]), acc)
			}
		}
		if k16 < k {
			tail := operand{rs: B.rs, cs: B.cs}
			if B.h != nil {
				tail.h = B.h[k16:]
			} else {
				tail.s = B.s[k16:]
			}
			ntSmall(isaAVX512, c, n, operand{s: A.s[k16:], rs: A.rs, cs: 1}, tail, 1, k-k16, n64, true, buf)
		}
	} else {
		n64 = 0
	}
	if n64 < n {
		rest := operand{rs: B.rs, cs: B.cs}
		if B.h != nil {
			rest.h = B.h[n64*B.cs:]
		} else {
			rest.s = B.s[n64*B.cs:]
		}
		ntSmall(isaAVX512, c[n64:], n-n64, A, rest, 1, k, n-n64, acc, buf)
	}
}
