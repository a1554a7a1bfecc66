package segment

import (
	"strconv"
	"testing"
)

// Placing a block is on the writer's path when data is sent ahead.
func BenchmarkStreamPlace(b *testing.B) {
	blk := testBlock(1)
	b.SetBytes(testDBS)
	sb, err := NewStreamBuilder(ObjectName{Cno: 1, Part: 1}, testTag, testDBS, testMBS)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		if i%(MaxObjectBytes/testDBS/2) == 0 {
			sb, _ = NewStreamBuilder(ObjectName{Cno: 1, Part: 1}, testTag, testDBS, testMBS)
		}
		sb.Place(uint64(i), Checksum(blk))
	}
}

func BenchmarkChecksum(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		buf := make([]byte, size)
		b.Run(byteSize(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				Checksum(buf)
			}
		})
	}
}

func BenchmarkDecodeHeader(b *testing.B) {
	enc, err := EncodeHeader(testHeader(FormatStream))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := DecodeHeader(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
