//go:build goexperiment.simd && amd64

package llama

import (
	"simd/archsimd"
	"unsafe"
)

var (
	hasAVX512 = archsimd.X86.AVX512()
	hasAVX2   = archsimd.X86.AVX2()
)

// widenFast widens the leading multiple of 16 (AVX-512) or 8 (AVX2)
// bfloat16 values of src into dst and returns how many it did: zero-extend
// to 32 bits, shift left 16. len(src) ≥ 2·len(dst).
func widenFast(dst []float32, src []byte) int {
	d := unsafe.Pointer(unsafe.SliceData(dst))
	s := unsafe.Pointer(unsafe.SliceData(src))
	switch {
	case hasAVX512:
		n := len(dst) &^ 15
		for i := 0; i < n; i += 16 {
			v := archsimd.LoadUint16x16((*[16]uint16)(unsafe.Add(s, 2*i))).ExtendToUint32().ShiftAllLeft(16)
			v.Store((*[16]uint32)(unsafe.Add(d, 4*i)))
		}
		return n
	case hasAVX2:
		n := len(dst) &^ 7
		for i := 0; i < n; i += 8 {
			v := archsimd.LoadUint16x8((*[8]uint16)(unsafe.Add(s, 2*i))).ExtendToUint32().ShiftAllLeft(16)
			v.Store((*[8]uint32)(unsafe.Add(d, 4*i)))
		}
		return n
	}
	return 0
}
