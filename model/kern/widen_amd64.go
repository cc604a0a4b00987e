//go:build goexperiment.simd && amd64

package kern

import (
	"simd/archsimd"
	"unsafe"
)

// widenFast widens the leading multiple of 16 (AVX-512) or 8 (AVX2)
// bfloat16 values of src into dst and returns how many it did: zero-extend
// to 32 bits, shift left 16. len(src) ≥ len(dst).
func widenFast(dst []float32, src []uint16) int {
	if len(dst) == 0 {
		return 0
	}
	d := unsafe.Pointer(unsafe.SliceData(dst))
	s := unsafe.Pointer(unsafe.SliceData(src))
	switch bestISA {
	case isaAVX512:
		n := len(dst) &^ 15
		for i := 0; i < n; i += 16 {
			v := archsimd.LoadUint16x16((*[16]uint16)(unsafe.Add(s, 2*i))).ExtendToUint32().ShiftAllLeft(16)
			v.Store((*[16]uint32)(unsafe.Add(d, 4*i)))
		}
		archsimd.ClearAVXUpperBits()
		return n
	case isaAVX2:
		n := len(dst) &^ 7
		for i := 0; i < n; i += 8 {
			v := archsimd.LoadUint16x8((*[8]uint16)(unsafe.Add(s, 2*i))).ExtendToUint32().ShiftAllLeft(16)
			v.Store((*[8]uint32)(unsafe.Add(d, 4*i)))
		}
		archsimd.ClearAVXUpperBits()
		return n
	}
	return 0
}
