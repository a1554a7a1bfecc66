package engine

import "testing"

func TestHugeRange(t *testing.T) {
	const h = hugePage
	for _, c := range []struct {
		p      uintptr
		n      int
		lo, hi int
	}{
		{0, 16 << 20, 0, 16 << 20},             // aligned: all of it
		{4096, 16 << 20, h - 4096, 8*h - 4096}, // the 7 whole pages inside
		{h - 8192, 2*h + 8192, 8192, 2*h + 8192},
		{4096, 2*h + 4096, h - 4096, 2*h - 4096}, // one whole page
		{4096, 2 * h, h - 4096, 2*h - 4096},      // one whole page
		{0, 2*h - 1, 0, 0},                       // too small
		{8192, h, 0, 0},
	} {
		lo, hi := hugeRange(c.p, c.n)
		if hi > lo && (lo < 0 || hi > c.n || (c.p+uintptr(lo))%h != 0 || (hi-lo)%h != 0) {
			t.Errorf("hugeRange(%#x, %d) = %d, %d: not whole huge pages inside the buffer", c.p, c.n, lo, hi)
		}
		if hi-lo != c.hi-c.lo || (hi > lo && lo != c.lo) {
			t.Errorf("hugeRange(%#x, %d) = %d, %d; want %d, %d", c.p, c.n, lo, hi, c.lo, c.hi)
		}
	}
	// A real buffer: advising it changes nothing of its bytes.
	b := allocPiece(8<<20, 0)
	for i := range b {
		b[i] = byte(i)
	}
	for i := range b {
		if b[i] != byte(i) {
			t.Fatalf("byte %d changed", i)
		}
	}
	freePiece(b)
}
