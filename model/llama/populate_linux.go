package llama

import (
	"syscall"
	"unsafe"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault the range in
// writable in one call instead of one page fault per 4 KiB page.
const madvPopulateWrite = 23

// populate faults in the whole pages inside b. On older kernels madvise
// fails and the pages fault in as they are written, as without it.
func populate(b []byte) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	ps := uintptr(syscall.Getpagesize())
	lo := (p + ps - 1) &^ (ps - 1)
	hi := (p + uintptr(len(b))) &^ (ps - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-p:hi-p], madvPopulateWrite)
}
