package fusefs

import (
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestMarkAppend: only a write whose own flags hold O_APPEND, and that is
// not the kernel's write-back of pages, is marked an append; the offset is
// put back after the call.
func TestMarkAppend(t *testing.T) {
	for _, tc := range []struct {
		name       string
		flags      uint32
		writeFlags uint32
		marked     bool
	}{
		{"O_APPEND", syscall.O_WRONLY | syscall.O_APPEND, 0, true},
		{"plain", syscall.O_WRONLY, 0, false},
		{"write-back", syscall.O_APPEND, fuse.WRITE_CACHE, false},
		{"write-back, no flags", 0, fuse.WRITE_CACHE, false},
	} {
		in := &fuse.WriteIn{Offset: 4096, Flags: tc.flags, WriteFlags: tc.writeFlags}
		restore := markAppend(in)
		if off := int64(in.Offset); (off < 0) != tc.marked || off&(1<<63-1) != 4096 {
			t.Errorf("%s: offset %#x, want 4096 marked %v", tc.name, in.Offset, tc.marked)
		}
		restore()
		if in.Offset != 4096 {
			t.Errorf("%s: offset after the call %#x, want 4096", tc.name, in.Offset)
		}
	}
}
