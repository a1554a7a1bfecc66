package engine

// hugePage is the size of a transparent huge page on x86-64 and on arm64
// with 4 KiB pages.
const hugePage = 2 << 20

// hugeRange is the offsets, within a buffer of n bytes at address p, of the
// whole huge pages it holds; lo == hi when it holds none. Buffers of less
// than two huge pages are left alone: the most they could gain is one.
func hugeRange(p uintptr, n int) (lo, hi int) {
	if n < 2*hugePage {
		return 0, 0
	}
	first := (p + hugePage - 1) &^ (hugePage - 1)
	last := (p + uintptr(n)) &^ (hugePage - 1)
	if last <= first {
		return 0, 0
	}
	return int(first - p), int(last - p)
}
