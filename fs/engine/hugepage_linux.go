package engine

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHuge asks the kernel to back the whole huge pages inside b's
// capacity with huge pages when it first touches them (transparent huge
// pages in "madvise" mode, the common default). A fresh piece buffer is
// written front to back once: with 4 KiB pages that is a page fault, and a
// page zeroed, every 4 KiB; with huge pages one every 2 MiB. Fresh buffers
// are the rule with a store that keeps what it is given (the memory store)
// and whenever the pool was emptied by a collection: 2 GiB written with dd
// into mem:// cost 1.1-1.2 s of the mount's CPU per GiB, 0.81 with this
// (docs/benchmarks.md). The advice is only that: a kernel without
// transparent huge pages, or with none free, gives small pages as before.
func adviseHuge(b []byte) {
	lo, hi := hugeRange(uintptr(unsafe.Pointer(unsafe.SliceData(b))), cap(b))
	if hi > lo {
		_ = unix.Madvise(b[:cap(b)][lo:hi], unix.MADV_HUGEPAGE)
	}
}
