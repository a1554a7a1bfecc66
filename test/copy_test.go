package test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
)

// TestCopyByReference: coreutils cp of a flushed file inside one mount on
// the S3 server is answered by reference (copy_file_range): the requests it
// makes do not depend on the file's size and almost no bytes are sent; the
// copy compares equal, stays as it was when the source is overwritten, and
// still reads after the source is deleted and the cleaner has run (then
// fsck finds the volume clean). cp --reflink=always fails as on ext4: the
// kernel does not pass FICLONE to FUSE.
func TestCopyByReference(t *testing.T) {
	need(t, "cp", "cmp", "dd", "sync")
	v := newVolume(t)
	var cs *counting.Store
	m := v.mountWrapped("metrics=127.0.0.1:0", func(st staging.Store) staging.Store { cs = counting.New(st); return cs })
	tmp := t.TempDir()
	n := size(256<<20, 64<<20)
	big, small := filepath.Join(tmp, "big"), filepath.Join(tmp, "small")
	randomFile(t, big, n)
	randomFile(t, small, n/16)
	run(t, tmp, "cp", big, m.path("big"))
	run(t, tmp, "cp", small, m.path("small"))

	copyCost := func(from, to string) counting.OpCounts {
		t.Helper()
		before := cs.Snapshot()
		run(t, m.dir, "cp", from, to)
		d := cs.Snapshot().Sub(before)
		t.Logf("cp %s %s: %v", from, to, d)
		return d.Total()
	}
	bigCost := copyCost("big", "big.copy")
	smallCost := copyCost("small", "small.copy")
	if bigCost.BytesSent > 1<<20 || bigCost.BytesReceived > 1<<20 {
		t.Fatalf("a copy of %d bytes sent %d and received %d bytes", n, bigCost.BytesSent, bigCost.BytesReceived)
	}
	// The cost does not grow with the size: a byte copy of either would
	// move its bytes (checked above) in many more requests. The two counts
	// may differ by a request or two under load: the open of a source whose
	// own close has just published reads the head once more when that
	// publish lands between its mark and the open's HEAD, and a marker's
	// clean-up DELETE can fall inside either window.
	const copyRequests = 12
	if bigCost.Requests > copyRequests || smallCost.Requests > copyRequests ||
		bigCost.Requests > smallCost.Requests+2 || smallCost.Requests > bigCost.Requests+2 {
		t.Fatalf("a copy of %d bytes made %d requests, of %d bytes %d (want at most %d each, within 2 of each other)",
			n, bigCost.Requests, n/16, smallCost.Requests, copyRequests)
	}
	run(t, m.dir, "cmp", "big", "big.copy")
	run(t, m.dir, "cmp", "small", "small.copy")
	run(t, m.dir, "cmp", big, "big.copy")

	// The metrics count the two copies by reference.
	samples, err := scrape(m.fsys.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	if got := samples[`ckptfs_copy_file_range_total{how="reference"}`]; got != 2 {
		t.Fatalf("ckptfs_copy_file_range_total{how=\"reference\"} = %v, want 2", got)
	}

	out, err := runErr(m.dir, "cp", "--reflink=always", "big", "big.reflink")
	if err == nil || !strings.Contains(out, "not supported") {
		t.Fatalf("cp --reflink=always: %v, %q; want Operation not supported", err, out)
	}

	// The source overwritten in place: the copy is unchanged.
	run(t, m.dir, "dd", "if=/dev/zero", "of=big", "bs=1M", "count=4", "seek=3", "conv=notrunc,fsync", "status=none")
	if _, err := runErr(m.dir, "cmp", "-s", "big", "big.copy"); err == nil {
		t.Fatal("the overwritten source still equals the copy")
	}
	run(t, m.dir, "cmp", big, "big.copy")
	// Copies of the copy, and a copy written afterwards.
	copyCost("big.copy", "big.copy2")
	run(t, m.dir, "dd", "if=/dev/zero", "of=big.copy", "bs=64k", "count=1", "seek=100", "conv=notrunc,fsync", "status=none")
	run(t, m.dir, "cmp", big, "big.copy2")

	// The source deleted, the cleaner run past every grace period.
	if err := os.Remove(m.path("big")); err != nil {
		t.Fatal(err)
	}
	m.unmount()
	st := v.store()
	if n, ref := cleanLater(t, st); n != 0 || ref != 1 {
		t.Fatalf("the cleaner deleted %d orphans and kept %d for a copy, want 0 and 1 (the source)", n, ref)
	}
	m2 := v.mount("metrics=127.0.0.1:0")
	run(t, m2.dir, "cmp", big, "big.copy2")
	run(t, m2.dir, "cmp", small, "small.copy")
	// A copy over a file that has checkpoints of its own (cp opens it with
	// O_TRUNC) is by reference too.
	run(t, m2.dir, "cp", "big.copy2", "small.copy")
	run(t, m2.dir, "cmp", big, "small.copy")
	if samples, err := scrape(m2.fsys.MetricsAddr()); err != nil || samples[`ckptfs_copy_file_range_total{how="reference"}`] != 1 {
		t.Fatalf("the copy over an existing file was not by reference: %v, %v", samples[`ckptfs_copy_file_range_total{how="reference"}`], err)
	}
	fsckClean(t, st)
}

// TestCopyByReferenceInPieces: a file larger than one copy_file_range answer
// (4 GiB) is asked for in pieces; the first makes the copy cut to its
// answer, the later ones extend it, all by reference. A sparse 5 GiB file
// keeps it cheap to build and check.
func TestCopyByReferenceInPieces(t *testing.T) {
	need(t, "python3")
	v := newVolume(t)
	var cs *counting.Store
	m := v.mountWrapped("", func(st staging.Store) staging.Store { cs = counting.New(st); return cs })
	const size = 5 << 30
	script := `
import os, sys
src, dst, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(src, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.ftruncate(fd, size)
os.pwrite(fd, b"first", 1 << 20)
os.pwrite(fd, b"last", size - 4)
os.fsync(fd)
os.close(fd)
print("ready", flush=True)
sys.stdin.readline()
fi, fo = os.open(src, os.O_RDONLY), os.open(dst, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
pieces, total = 0, 0
while True:
    k = os.copy_file_range(fi, fo, 1 << 40)
    if k == 0:
        break
    pieces, total = pieces + 1, total + k
os.close(fo)
st = os.stat(dst)
fo = os.open(dst, os.O_RDONLY)
print(pieces, total, st.st_size, os.pread(fo, 5, 1 << 20).decode(), os.pread(fo, 4, size - 4).decode())
`
	cmd := pythonPiped(t, m.dir, script, "src", "dst", strconv.Itoa(size))
	cmd.waitLine("ready")
	before := cs.Snapshot()
	out := cmd.finish()
	d := cs.Snapshot().Sub(before)
	t.Logf("copy in pieces: %s; %v", out, d)
	f := strings.Fields(out)
	if len(f) != 5 || f[0] == "1" || f[1] != strconv.Itoa(size) || f[2] != strconv.Itoa(size) || f[3] != "first" || f[4] != "last" {
		t.Fatalf("copy in pieces: %q, want more than one piece, %d bytes, the two pieces", out, size)
	}
	if tot := d.Total(); tot.BytesSent > 1<<20 || tot.BytesReceived > 1<<20 {
		t.Fatalf("the copy moved bytes: %v", d)
	}
}

// piped is a python3 script whose stdin and stdout the test holds.
type piped struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	err bytes.Buffer
}

func pythonPiped(t *testing.T, dir, script string, args ...string) *piped {
	t.Helper()
	p := &piped{t: t, cmd: exec.Command("python3", append([]string{"-c", script}, args...)...)}
	p.cmd.Dir = dir
	p.cmd.Stderr = &p.err
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.out = bufio.NewReader(stdout)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	return p
}

// waitLine reads the script's next line, which must be want.
func (p *piped) waitLine(want string) {
	p.t.Helper()
	line, err := p.out.ReadString('\n')
	if strings.TrimSpace(line) != want {
		p.t.Fatalf("python3: %q (%v), want %q\n%s", line, err, want, p.err.String())
	}
}

// finish lets the script go on and returns the rest of its output.
func (p *piped) finish() string {
	p.t.Helper()
	_ = p.in.Close()
	rest, _ := io.ReadAll(p.out)
	if err := p.cmd.Wait(); err != nil {
		p.t.Fatalf("python3: %v\n%s", err, p.err.String())
	}
	return strings.TrimSpace(string(rest))
}

// TestCopyFileRangeParts: what is not copied by reference is copied by the
// kernel, byte for byte: an unaligned range into the middle of a file that
// is not empty, a range past the source's end; and a whole file with writes
// not yet flushed (by another descriptor) is copied with them.
func TestCopyFileRangeParts(t *testing.T) {
	need(t, "python3")
	v := newVolume(t)
	m := v.mount("")
	script := `
import os, random
rng = random.Random(7)
src_bytes = bytes(rng.getrandbits(8) for _ in range(300000))
dst_bytes = bytearray(rng.getrandbits(8) for _ in range(200000))
with open("src", "wb") as f: f.write(src_bytes)
with open("dst", "wb") as f: f.write(dst_bytes)
fi, fo = os.open("src", os.O_RDONLY), os.open("dst", os.O_WRONLY)
n = os.copy_file_range(fi, fo, 70001, 1234, 5555)
dst_bytes[5555:5555 + n] = src_bytes[1234:1234 + n]
k = os.copy_file_range(fi, fo, 100000, 250000, 190000)
dst_bytes[190000:190000 + k] = src_bytes[250000:250000 + k]
os.close(fo)
got = open("dst", "rb").read()
print("part", n, k, got == bytes(dst_bytes))
# A source with writes not flushed yet, copied whole into a new file.
w = os.open("src", os.O_WRONLY)
os.pwrite(w, b"unflushed", 299990)
src2 = src_bytes[:299990] + b"unflushed" + src_bytes[299999:]
fo = os.open("whole", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
total = 0
while True:
    c = os.copy_file_range(fi, fo, 1 << 30, total, total)
    if c == 0: break
    total += c
os.close(fo); os.close(w)
print("whole", total, open("whole", "rb").read() == src2)
`
	out := strings.TrimSpace(run(t, m.dir, "python3", "-c", script))
	if out != "part 70001 50000 True\nwhole 300000 True" {
		t.Fatalf("copy_file_range: %q", out)
	}
}

// TestCopyWithWALCopiesBytes: with wal=on a copy is not by reference (the
// log must hold every byte); the mount copies the bytes, which read back.
func TestCopyWithWALCopiesBytes(t *testing.T) {
	need(t, "cp", "cmp")
	v := newVolume(t)
	m := v.mount("wal=on,metrics=127.0.0.1:0")
	local := filepath.Join(t.TempDir(), "src")
	randomFile(t, local, 3<<20)
	run(t, m.dir, "cp", local, "src")
	run(t, m.dir, "cp", "src", "copy")
	run(t, m.dir, "cmp", local, "copy")
	samples, err := scrape(m.fsys.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	if samples[`ckptfs_copy_file_range_total{how="bytes"}`] < 1 || samples[`ckptfs_copy_file_range_total{how="reference"}`] != 0 {
		t.Fatalf("copy with the WAL: %v by reference, %v as bytes", samples[`ckptfs_copy_file_range_total{how="reference"}`], samples[`ckptfs_copy_file_range_total{how="bytes"}`])
	}
	m.unmount()
	m2 := v.mount("")
	run(t, m2.dir, "cmp", local, "copy")
}

// TestCopyReadOnAnotherMount: a copy made on one mount reads on another
// mount of the volume (which reads its lineage and the source's objects),
// also after the source is overwritten there.
func TestCopyReadOnAnotherMount(t *testing.T) {
	need(t, "cp", "cmp", "dd")
	v := newVolume(t)
	a, b := v.mount("ns_refresh=100ms"), v.mount("ns_refresh=100ms")
	local := filepath.Join(t.TempDir(), "src")
	randomFile(t, local, 9<<20)
	run(t, a.dir, "cp", local, "src")
	run(t, a.dir, "cp", "src", "copy")
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(b.path("copy")); return err })
	run(t, b.dir, "cmp", local, "copy")
	run(t, b.dir, "dd", "if=/dev/zero", "of=src", "bs=1M", "count=2", "conv=notrunc,fsync", "status=none")
	run(t, a.dir, "cmp", local, "copy")
	run(t, b.dir, "cmp", local, "copy")
}
