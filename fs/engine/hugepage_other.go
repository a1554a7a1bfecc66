//go:build !linux

package engine

// adviseHuge does nothing where huge pages are not asked for with madvise
// (hugepage_linux.go).
func adviseHuge([]byte) {}
