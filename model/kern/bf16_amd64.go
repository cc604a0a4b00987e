//go:build goexperiment.simd && amd64

package kern

import (
	"simd/archsimd"
	"unsafe"
)

// transpose16h is transpose16 of a 16×16 block of bfloat16 values (row r
// at src[r*ss:][:16]), widened: each row goes through a 16-float staging
// row, then the float32 transpose.
func transpose16h(src []uint16, ss int, dst []float32, ds int) {
	_ = src[15*ss+15]
	var t [256]float32
	ps, pt := unsafe.Pointer(&src[0]), unsafe.Pointer(&t[0])
	for r := range 16 {
		v := archsimd.LoadUint16x16((*[16]uint16)(unsafe.Add(ps, 2*r*ss))).ExtendToUint32().ShiftAllLeft(16)
		v.Store((*[16]uint32)(unsafe.Add(pt, 64*r)))
	}
	transpose16(t[:], 16, dst, ds)
}
