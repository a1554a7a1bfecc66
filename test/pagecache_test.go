package test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
)

// TestWarmReadFromPages: a file read again in the same mount is read from
// the kernel's pages, with nothing fetched, as long as they are its bytes;
// once another mount has published a newer checkpoint, or this mount merged
// one into its own writes, they are dropped and the read shows the file as
// it is now, exactly.
func TestWarmReadFromPages(t *testing.T) {
	need(t, "cp", "cmp", "dd", "python3")
	v := newVolume(t)
	var cs *counting.Store
	a := v.mountWrapped("ns_refresh=100ms", func(st staging.Store) staging.Store { cs = counting.New(st); return cs })
	b := v.mount("ns_refresh=100ms")
	tmp := t.TempDir()
	n := size(64<<20, 16<<20)
	local := filepath.Join(tmp, "ckpt")
	randomFile(t, local, n)
	run(t, tmp, "cp", local, a.path("ckpt"))

	// received is what reading the file whole in mount a fetched.
	received := func(what string) int64 {
		t.Helper()
		before := cs.Snapshot()
		run(t, a.dir, "cmp", local, "ckpt")
		got := cs.Snapshot().Sub(before).Total().BytesReceived
		t.Logf("%s: %d bytes fetched for %d read", what, got, n)
		return got
	}
	// The first read after the write may fetch: the kernel drops the
	// pages itself when it sees the mtime move. The second must not.
	received("read after the write")
	if got := received("read again"); got > 1<<20 {
		t.Fatalf("a second read fetched %d bytes, want it from the page cache", got)
	}

	// Another mount overwrites 1 MiB in place (same size, so only the
	// checkpoint tells): the next open here drops the pages.
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(b.path("ckpt")); return err })
	run(t, b.dir, "dd", "if=/dev/zero", "of=ckpt", "bs=1M", "count=1", "seek=2", "conv=notrunc,fsync", "status=none")
	overwrite(t, local, 2<<20, make([]byte, 1<<20))
	if got := received("read after another mount's checkpoint"); got < 1<<20 {
		t.Fatalf("after another mount's checkpoint the read fetched %d bytes: stale pages", got)
	}
	// The kernel may drop the pages once more when it sees the new mtime
	// (its attributes came from the head seen before the change).
	received("read again")
	if got := received("read a third time"); got > 1<<20 {
		t.Fatalf("a second read of the new checkpoint fetched %d bytes, want it from the page cache", got)
	}

	// Another mount's checkpoint with the mtime this mount's kernel holds
	// (set back after the write, as tar and rsync set times): only the
	// checkpoint number tells the pages are stale.
	st, err := os.Stat(a.path("ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	mtime := st.ModTime().UnixNano()
	run(t, b.dir, "python3", "-c", `
import os, sys
fd = os.open("ckpt", os.O_WRONLY)
os.pwrite(fd, b"B" * (1 << 20), 3 << 20)
os.fsync(fd)
os.close(fd)
os.utime("ckpt", ns=(int(sys.argv[1]), int(sys.argv[1])))
`, strconv.FormatInt(mtime, 10))
	overwrite(t, local, 3<<20, bytes.Repeat([]byte("B"), 1<<20))
	if got := received("read after another mount's checkpoint, same mtime"); got < 1<<20 {
		t.Fatalf("after another mount's checkpoint with the same mtime the read fetched %d bytes: stale pages", got)
	}

	// This mount holds the file open with its pages cached and a write of
	// its own not yet flushed (the pages read again after it, so that the
	// kernel's own check of the mtime has nothing left to find); the other
	// mount publishes a change to another range; this one fsyncs, and its
	// flush merges the other checkpoint into its own. The pages of the
	// other range are stale now: read on the same descriptor at once
	// (within the kernel's attribute timeout), they must show the change.
	p := pythonPiped(t, a.dir, `
import os, sys
fd = os.open("ckpt", os.O_RDWR)
os.pwrite(fd, b"A" * (1 << 20), 5 << 20)
os.fstat(fd)
os.lseek(fd, 0, os.SEEK_SET)
while os.read(fd, 1 << 20):
    pass
os.fstat(fd)
print("open", flush=True)
sys.stdin.read()
os.fsync(fd)
print(os.pread(fd, 16, 8 << 20).hex(), flush=True)
os.close(fd)
`)
	p.waitLine("open")
	run(t, b.dir, "dd", "if=/dev/zero", "of=ckpt", "bs=1M", "count=1", "seek=8", "conv=notrunc,fsync", "status=none")
	overwrite(t, local, 8<<20, make([]byte, 1<<20))
	overwrite(t, local, 5<<20, bytes.Repeat([]byte("A"), 1<<20))
	if out, want := p.finish(), strings.Repeat("00", 16); out != want {
		t.Fatalf("after the merge the open descriptor read %s at 8 MiB, want %s (the other mount's zeros)", out, want)
	}
	received("read after a merge")
	run(t, b.dir, "cmp", local, "ckpt")
}

// overwrite writes data into the local file path at off.
func overwrite(t *testing.T, path string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

// TestWarmReadWALRecords: the kernel's pages of a file, kept since this
// mount last read it, are dropped at an open that applies another mount's
// acknowledged WAL writes over the same checkpoint, even with the size and
// the mtime as the kernel knows them (set back after the writes): only the
// records applied tell the pages are stale.
func TestWarmReadWALRecords(t *testing.T) {
	need(t, "python3", "cat")
	const n = 256 << 10
	a, b := twoMountsWith(t, "ns_refresh=100ms", "wal=on,ns_refresh=100ms", bytes.Repeat([]byte("a"), n))
	run(t, "", "cat", a.path("f")) // the pages, kept once a closed it
	st, err := os.Stat(a.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	mtime := strconv.FormatInt(st.ModTime().UnixNano(), 10)
	w := pythonPiped(t, b.dir, `
import os, sys
fd = os.open("f", os.O_WRONLY)
os.pwrite(fd, b"b" * 65536, 0)
os.pwrite(fd, b"c" * 65536, 131072)
os.utime("f", ns=(int(sys.argv[1]), int(sys.argv[1])))
print("written", flush=True)
sys.stdin.read()
os.close(fd)
`, mtime)
	w.waitLine("written")
	got := run(t, "", "python3", "-c", `
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
print(os.pread(fd, 4, 0).decode() + os.pread(fd, 4, 131072).decode())
`, a.path("f"))
	if got = strings.TrimSpace(got); got != "bbbbcccc" {
		t.Fatalf("an open on a after b's acknowledged writes read %q at 0 and 128 KiB, want bbbb and cccc", got)
	}
	w.finish()
}
