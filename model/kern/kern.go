// Package kern holds the float32 kernels the embedded model spends its time
// in: matrix products in the three layouts a transformer's forward and
// backward passes need.
//
// Determinism contract: every output element is one sequential chain over
// the reduction index p = 0, 1, ..., k-1, starting from 0 (or from the old
// value of C when accumulating). Implementations may split work over output
// rows and columns, never over p, so results do not depend on how many
// goroutines run or how the output is tiled.
//
// All matrices are dense and row-major.
package kern

// MatMul computes C[m×n] = A[m×k]·B[k×n], or C += A·B when acc is set.
func MatMul(c, a, b []float32, m, k, n int, acc bool) { matMul(c, a, b, m, k, n, acc) }

// MatMulNT computes C[m×n] = A[m×k]·Bᵀ where B is stored n×k (or C += when acc).
func MatMulNT(c, a, b []float32, m, k, n int, acc bool) { matMulNT(c, a, b, m, k, n, acc) }

// MatMulTN computes C[m×n] = Aᵀ·B where A is stored k×m and B is k×n (or C += when acc).
func MatMulTN(c, a, b []float32, m, k, n int, acc bool) { matMulTN(c, a, b, m, k, n, acc) }

// RefMatMul is the plain reference for MatMul, used by tests and as the
// portable fallback.
func RefMatMul(c, a, b []float32, m, k, n int, acc bool) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			if acc {
				s = c[i*n+j]
			}
			for p := 0; p < k; p++ {
				s += a[i*k+p] * b[p*n+j]
			}
			c[i*n+j] = s
		}
	}
}

// RefMatMulNT is the plain reference for MatMulNT.
func RefMatMulNT(c, a, b []float32, m, k, n int, acc bool) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			if acc {
				s = c[i*n+j]
			}
			for p := 0; p < k; p++ {
				s += a[i*k+p] * b[j*k+p]
			}
			c[i*n+j] = s
		}
	}
}

// RefMatMulTN is the plain reference for MatMulTN.
func RefMatMulTN(c, a, b []float32, m, k, n int, acc bool) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			if acc {
				s = c[i*n+j]
			}
			for p := 0; p < k; p++ {
				s += a[p*m+i] * b[p*n+j]
			}
			c[i*n+j] = s
		}
	}
}
