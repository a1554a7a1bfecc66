package test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
)

// TestCopyFileRangeLongPrefix: a copy_file_range of the first 6 GiB of a
// 12 GiB file copies exactly 6 GiB, in answers of at most 4 GiB - 4 KiB,
// by reference (no data moves): the copy is 6 GiB long, holds what the
// source holds there, and nothing after. A sparse file keeps it cheap.
func TestCopyFileRangeLongPrefix(t *testing.T) {
	need(t, "python3")
	v := newVolume(t)
	var cs *counting.Store
	m := v.mountWrapped("", func(st staging.Store) staging.Store { cs = counting.New(st); return cs })
	const size, want = 12 << 30, 6 << 30
	script := `
import os, sys
src, dst, size, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fd = os.open(src, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.ftruncate(fd, size)
for off, word in ((1 << 20, b"first"), (5 << 30, b"inside"), (want - 4, b"edge"), (want, b"after"), (size - 4, b"last")):
    os.pwrite(fd, word, off)
os.fsync(fd)
os.close(fd)
print("ready", flush=True)
sys.stdin.readline()
fi, fo = os.open(src, os.O_RDONLY), os.open(dst, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
answers = []
while sum(answers) < want:
    k = os.copy_file_range(fi, fo, want - sum(answers))
    if k == 0:
        break
    answers.append(k)
os.close(fo)
fo = os.open(dst, os.O_RDONLY)
print(os.stat(dst).st_size, ",".join(map(str, answers)), os.pread(fo, 5, 1 << 20).decode(),
      os.pread(fo, 6, 5 << 30).decode(), os.pread(fo, 4, want - 4).decode(), len(os.pread(fo, 5, want)))
`
	cmd := pythonPiped(t, m.dir, script, "src", "dst", strconv.Itoa(size), strconv.Itoa(want))
	cmd.waitLine("ready")
	before := cs.Snapshot()
	out := cmd.finish()
	d := cs.Snapshot().Sub(before)
	t.Logf("copy of a prefix: %s; %v", out, d)
	f := strings.Fields(out)
	if len(f) != 6 || f[0] != strconv.Itoa(want) || f[2] != "first" || f[3] != "inside" || f[4] != "edge" || f[5] != "0" {
		t.Fatalf("copy of the first %d bytes of %d: %q; want a copy of %d bytes holding first, inside, edge and nothing after",
			want, size, out, want)
	}
	total := 0
	for _, s := range strings.Split(f[1], ",") {
		k, err := strconv.Atoi(s)
		if err != nil || k <= 0 || k > 1<<32-4096 {
			t.Fatalf("answer %q of copy_file_range: want 1 to 4 GiB - 4 KiB", s)
		}
		total += k
	}
	if total != want {
		t.Fatalf("copy_file_range answered %d bytes in all (%s), want %d", total, f[1], want)
	}
	if tot := d.Total(); tot.BytesSent > 4<<20 || tot.BytesReceived > 4<<20 {
		t.Fatalf("the copy moved bytes: %v", d)
	}
}

// TestCopyFileRangePiecesAfterChanges: a piece of a copy in pieces extends
// the copy by reference only while neither file changed since the last
// piece; after a write into the source or into the copy, the rest is copied
// byte by byte, and neither the copy's earlier bytes nor its own write
// change.
func TestCopyFileRangePiecesAfterChanges(t *testing.T) {
	need(t, "python3")
	v := newVolume(t)
	m := v.mount("")
	script := `
import os
chunk = (1 << 32) - 4096
size = chunk + (1 << 20)
for name in ("src", "src2"):
    fd = os.open(name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.ftruncate(fd, size)
    os.pwrite(fd, b"first", 1 << 20)
    os.pwrite(fd, b"tail", size - 4)
    os.fsync(fd)
    os.close(fd)
out = []
for name, changed in (("src", "source"), ("src2", "copy")):
    fi = os.open(name, os.O_RDWR)
    fo = os.open(name + ".copy", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    answers = [os.copy_file_range(fi, fo, size)]
    if changed == "source":
        os.pwrite(fi, b"CHANGED", 1 << 20)
    else:
        os.pwrite(fo, b"mine", 2 << 20)
    while sum(answers) < size:
        k = os.copy_file_range(fi, fo, size - sum(answers))
        if k == 0:
            break
        answers.append(k)
    out.append("%s %d %d %s %s %s" % (changed, sum(answers), os.fstat(fo).st_size, os.pread(fo, 5, 1 << 20).decode(),
                                      os.pread(fo, 4, 2 << 20).replace(b"\0", b"-").decode(), os.pread(fo, 4, size - 4).decode()))
    os.close(fi); os.close(fo)
print("\n".join(out))
`
	out := strings.TrimSpace(run(t, m.dir, "python3", "-c", script))
	size := strconv.Itoa(1<<32 - 4096 + 1<<20)
	want := "source " + size + " " + size + " first ---- tail\ncopy " + size + " " + size + " first mine tail"
	if out != want {
		t.Fatalf("copies in pieces after a change:\n%s\nwant\n%s", out, want)
	}
}
