package model

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

// madvHugepage is MADV_HUGEPAGE: back the range with 2 MiB transparent
// huge pages where /sys/kernel/mm/transparent_hugepage/enabled is
// "madvise" (or "always"): one fault and one clear_huge_page per 2 MiB
// instead of 512 faults, and fewer TLB misses afterwards.
const madvHugepage = 14

// hugePages asks for transparent huge pages on the 2 MiB-aligned interior
// of b, which must not have been touched yet. Errors are ignored: without
// THP the pages are 4 KiB, as without the call.
func hugePages(b []byte) {
	const hp = 2 << 20
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p + hp - 1) &^ (hp - 1)
	hi := (p + uintptr(len(b))) &^ (hp - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-p:hi-p], madvHugepage)
}
