package test

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSparseFile writes two small pieces into a 5 GiB (1 GiB with -short) sparse file through
// the mount: st_blocks (and du) count only what is stored, lseek's
// SEEK_DATA and SEEK_HOLE find the pieces, and cp --sparse=always makes a
// sparse copy that compares equal.
func TestSparseFile(t *testing.T) {
	need(t, "python3", "cp", "cmp", "du")
	v := newVolume(t)
	m := v.mount("")
	src, dst := m.path("sparse"), m.path("copy")
	// With -short a 1 GiB file: cmp reads every byte of both through the
	// mount.
	size, second := int64(5<<30), int64(4<<30)
	if testing.Short() {
		size, second = 1<<30, 768<<20
	}
	// The mount's data blocks are 64 KiB: each piece takes one.
	const bs = 64 << 10
	script := `
import os, sys
path, size, second = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.ftruncate(fd, size)
os.pwrite(fd, b"first piece", 1 << 20)
os.pwrite(fd, b"second piece", second)
os.fsync(fd)
os.close(fd)
fd = os.open(path, os.O_RDONLY)
out = []
for off, whence in ((0, os.SEEK_DATA), (0, os.SEEK_HOLE), ((1 << 20) + 5, os.SEEK_DATA),
                    ((1 << 20) + 5, os.SEEK_HOLE), ((1 << 20) + 65536, os.SEEK_DATA),
                    (second + 65536, os.SEEK_HOLE)):
    out.append(str(os.lseek(fd, off, whence)))
try:
    os.lseek(fd, second + 65536, os.SEEK_DATA)
    out.append("no-ENXIO")
except OSError as e:
    out.append(os.strerror(e.errno) if e.errno != 6 else "ENXIO")
os.close(fd)
print(" ".join(out))
`
	out := strings.TrimSpace(run(t, m.dir, "python3", "-c", script, src, strconv.FormatInt(size, 10), strconv.FormatInt(second, 10)))
	want := fmt.Sprintf("%d %d %d %d %d %d ENXIO", 1<<20, 0, 1<<20+5, 1<<20+bs, second, second+bs)
	if out != want {
		t.Fatalf("lseek answers %q, want %q", out, want)
	}
	checkSparse := func(path string) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != size {
			t.Fatalf("%s: size %d, want %d", path, st.Size, size)
		}
		// Two 64 KiB blocks are 256 sectors; allow the copy nothing more.
		if st.Blocks != 2*bs/512 {
			t.Fatalf("%s: st_blocks %d, want %d (two stored blocks)", path, st.Blocks, 2*bs/512)
		}
		du := strings.Fields(run(t, m.dir, "du", "-k", path))[0]
		if kib, err := strconv.Atoi(du); err != nil || kib > 2*bs/1024 {
			t.Fatalf("du %s: %q KiB, want at most %d", path, du, 2*bs/1024)
		}
	}
	checkSparse(src)
	run(t, m.dir, "cp", "--sparse=always", src, dst)
	checkSparse(dst)
	run(t, m.dir, "cmp", src, dst)
}
