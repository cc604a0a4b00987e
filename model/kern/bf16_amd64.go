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

// transpose16pairs packs a 16-row × 32-column block of bfloat16 values
// (row r at src[r*ss:][:32]) widened into 32 columns: dst[q*ds:][:16] is
// column q. The pairs of values (32 bits) transpose as float32 would
// (transpose16: a third of the shuffles of widening first), then each
// pair splits into its even value (shifted up 16) and its odd one (the
// upper half). src must be 4-byte aligned.
func transpose16pairs(src []uint16, ss int, dst []float32, ds int) {
	_ = src[15*ss+31]
	_ = dst[31*ds+15]
	var t [256]float32
	transpose16(unsafe.Slice((*float32)(unsafe.Pointer(&src[0])), (15*ss+32)/2), ss/2, t[:], 16)
	hi := archsimd.BroadcastUint32x16(0xFFFF0000)
	pt, pd := unsafe.Pointer(&t[0]), unsafe.Pointer(&dst[0])
	dsb := uintptr(ds) * 4
	for q := range 16 {
		v := archsimd.LoadUint32x16((*[16]uint32)(unsafe.Add(pt, 64*q)))
		v.ShiftAllLeft(16).Store((*[16]uint32)(unsafe.Add(pd, uintptr(2*q)*dsb)))
		v.And(hi).Store((*[16]uint32)(unsafe.Add(pd, uintptr(2*q+1)*dsb)))
	}
	archsimd.ClearAVXUpperBits()
}
