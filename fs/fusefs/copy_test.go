package fusefs

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// copyRig is two mounts of one volume, a and b, and on a a file "src" open
// for reading (hin) and an empty "dst" open for writing (hout): what cp
// holds while it copies src into dst with copy_file_range on a, with b
// rewriting src meanwhile.
type copyRig struct {
	a, b      *FS
	srcID     string
	sof, dof  *openFile
	hin, hout *handle
	n         *node // src's node on a
}

func newCopyRig(t *testing.T) *copyRig {
	t.Helper()
	ctx := context.Background()
	st := mem.New()
	r := &copyRig{}
	for _, p := range []**FS{&r.a, &r.b} {
		fsys, err := New(ctx, st, Options{Config: config.MountDefault(1 << 30)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fsys.Close() })
		*p = fsys
	}
	var ofs []*openFile
	for _, name := range []string{"src", "dst"} {
		nn, err := r.a.ns.Create(ctx, namespace.RootIno, name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		f, err := engineCreate(ctx, r.a, nn.FileID)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		of, err := r.a.acquire(ctx, nn.FileID)
		if err != nil {
			t.Fatal(err)
		}
		ofs = append(ofs, of)
		if name == "src" {
			r.srcID = nn.FileID
		}
	}
	r.sof, r.dof = ofs[0], ofs[1]
	r.n = &node{fsys: r.a}
	r.hin = newHandle(r.a, r.sof, syscall.O_RDONLY)
	r.hout = newHandle(r.a, r.dof, syscall.O_WRONLY)
	t.Cleanup(func() {
		r.hin.Release(ctx)
		r.hout.Release(ctx)
	})
	return r
}

// writeVersion makes the file of of hold size bytes, zero but for words at
// their offsets, and publishes it.
func writeVersion(t *testing.T, of *openFile, size int64, words map[int64]string) {
	t.Helper()
	ctx := context.Background()
	if err := of.f.Truncate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := of.f.Truncate(ctx, size); err != nil {
		t.Fatal(err)
	}
	for off, w := range words {
		if _, err := of.f.WriteAt(ctx, []byte(w), off); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := of.f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// rewrite has mount b rewrite src whole (O_TRUNC, write, fsync), and, when
// seen, a process on mount a open it (close-to-open: a's engine of src
// reads the head b published).
func (r *copyRig) rewrite(t *testing.T, size int64, words map[int64]string, seen bool) {
	t.Helper()
	ctx := context.Background()
	of, err := r.b.acquire(ctx, r.srcID)
	if err != nil {
		t.Fatal(err)
	}
	writeVersion(t, of, size, words)
	if err := r.b.release(ctx, of, false); err != nil {
		t.Fatal(err)
	}
	if seen {
		if _, err := r.sof.f.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if got := r.sof.f.Size(); got != size {
			t.Fatalf("mount a shows src %d bytes long after b rewrote it, want %d", got, size)
		}
	}
}

// copyAt is one copy_file_range call of cp on mount a, at off of both files.
func (r *copyRig) copyAt(off, length uint64) (uint32, syscall.Errno) {
	return r.n.CopyFileRange(context.Background(), r.hin, off, nil, r.hout, off, length, 0)
}

// dstHolds fails t unless dst is size bytes long and holds each word at
// its offset.
func (r *copyRig) dstHolds(t *testing.T, size int64, words map[int64]string) {
	t.Helper()
	if got := r.dof.f.Size(); got != size {
		t.Fatalf("the copy is %d bytes long, want %d", got, size)
	}
	for off, w := range words {
		buf := make([]byte, len(w))
		if _, err := r.dof.f.ReadAt(context.Background(), buf, off); err != nil {
			t.Fatal(err)
		}
		if string(buf) != w {
			t.Fatalf("the copy holds %q at %d, want %q", buf, off, w)
		}
	}
}

func fill(c byte, n int) map[int64]string {
	return map[int64]string{0: string(bytes.Repeat([]byte{c}, n))}
}

// cp asks for a whole file at once (more than there is) and calls again
// until an answer of 0. Mount b publishes a newer, longer version of the
// source after the first call looked at the source's size (8 KiB) and
// before it copied: the copy, of the newer version, answered 8 KiB, the
// size it had looked at, and so was cut there and left for later pieces
// (issue: cp failed with EIO at the next call, or copied two versions).
// The first call answers what it copied of the version it took, whole.
func TestCopyAnswersTheVersionItTook(t *testing.T) {
	t.Parallel()
	r := newCopyRig(t)
	writeVersion(t, r.sof, 8<<10, fill('1', 8<<10))
	r.a.copySized = func() {
		r.a.copySized = nil
		r.rewrite(t, 40<<10, fill('2', 40<<10), true)
	}
	got, errno := r.copyAt(0, 1<<30)
	if errno != 0 || got != 40<<10 {
		t.Fatalf("first copy_file_range: %d bytes, %v; want %d, the version it copied, whole", got, errno, 40<<10)
	}
	r.dstHolds(t, 40<<10, fill('2', 40<<10))
	if got, errno := r.copyAt(40<<10, 1<<30); errno != 0 || got != 0 {
		t.Fatalf("copy_file_range at the end of the version copied: %d bytes, %v; want 0", got, errno)
	}
}

// After a first call copied a small file whole, mount b publishes a longer
// version and a process on mount a opens it: cp's next call, at the end of
// what it copied, must answer 0, the end of the version it copies. It
// answered EOPNOTSUPP, and the kernel appended the newer version's tail
// (a copy mixing two versions).
func TestCopyEndsWithTheVersionItTook(t *testing.T) {
	t.Parallel()
	r := newCopyRig(t)
	writeVersion(t, r.sof, 8<<10, fill('1', 8<<10))
	if got, errno := r.copyAt(0, 1<<30); errno != 0 || got != 8<<10 {
		t.Fatalf("first copy_file_range: %d bytes, %v; want %d", got, errno, 8<<10)
	}
	r.rewrite(t, 40<<10, fill('2', 40<<10), true)
	if got, errno := r.copyAt(8<<10, 1<<30); errno != 0 || got != 0 {
		t.Fatalf("copy_file_range at the end of the version copied, a newer one shown: %d bytes, %v; want 0", got, errno)
	}
	r.dstHolds(t, 8<<10, fill('1', 8<<10))
}

// A copy in pieces (over 4 GiB: a sparse file) whose source mount b
// rewrites between the first piece and the second: the second piece is of
// the version the first took, whether or not mount a shows the newer one
// by then. It answered EIO (the source's head replaced while the piece was
// made of it again) or EOPNOTSUPP (the kernel copied the rest of the newer
// version). When the copy itself was written between the pieces, the rest
// can only be the kernel's bytes: refused while the source shows another
// version, the copy failing, not mixing two.
func TestCopyPiecesTakeTheVersionOfTheFirst(t *testing.T) {
	const size = copyChunk + 1<<20
	v1 := map[int64]string{1 << 20: "first", copyChunk - 4: "edge", size - 5: "tail1"}
	v2 := map[int64]string{0: "two"}
	for _, tc := range []struct {
		name      string
		seen      bool // mount a shows the newer version before the second piece
		writeCopy bool // the copy is written between the pieces
		rewrite   bool
		want      syscall.Errno
	}{
		{name: "newer version not seen", rewrite: true},
		{name: "newer version seen", seen: true, rewrite: true},
		{name: "copy written, source unchanged", writeCopy: true},
		{name: "copy written, newer version seen", writeCopy: true, seen: true, rewrite: true, want: syscall.ESTALE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newCopyRig(t)
			writeVersion(t, r.sof, size, v1)
			if got, errno := r.copyAt(0, size); errno != 0 || got != copyChunk {
				t.Fatalf("first piece: %d bytes, %v; want %d", got, errno, uint32(copyChunk))
			}
			if tc.writeCopy {
				if _, err := r.dof.f.WriteAt(context.Background(), []byte("mine"), 2<<20); err != nil {
					t.Fatal(err)
				}
			}
			if tc.rewrite {
				r.rewrite(t, 3, v2, tc.seen)
			}
			got, errno := r.copyAt(copyChunk, size-copyChunk)
			switch {
			case tc.want == 0 && (errno != 0 || got != 1<<20):
				t.Fatalf("second piece: %d bytes, %v; want %d bytes of the first version", got, errno, 1<<20)
			case errno != tc.want:
				t.Fatalf("second piece: %d bytes, %v; want %v", got, errno, tc.want)
			}
			if errno != 0 {
				return
			}
			r.dstHolds(t, size, v1)
			if got, errno := r.copyAt(size, 1<<30); errno != 0 || got != 0 {
				t.Fatalf("copy_file_range at the end: %d bytes, %v; want 0", got, errno)
			}
		})
	}
}

// A copy of the bytes (the first call asked for less than the file, here)
// is made by the mount, and goes on, call after call, only while the
// source shows the version it showed at the first call: once this mount
// took another mount's newer version, the next call fails (ESTALE) rather
// than copy the rest of the newer one after the older one's start.
func TestCopyOfBytesStaysOnTheVersion(t *testing.T) {
	for _, seen := range []bool{false, true} {
		t.Run(map[bool]string{false: "newer version not seen", true: "newer version seen"}[seen], func(t *testing.T) {
			t.Parallel()
			r := newCopyRig(t)
			writeVersion(t, r.sof, 8<<10, fill('1', 8<<10))
			if got, errno := r.copyAt(0, 4<<10); errno != 0 || got != 4<<10 {
				t.Fatalf("first copy_file_range of half the file: %d bytes, %v; want %d", got, errno, 4<<10)
			}
			r.rewrite(t, 40<<10, fill('2', 40<<10), seen)
			got, errno := r.copyAt(4<<10, 4<<10)
			if seen {
				if errno != syscall.ESTALE {
					t.Fatalf("second copy_file_range: %d bytes, %v; want %v", got, errno, syscall.ESTALE)
				}
				r.dstHolds(t, 4<<10, fill('1', 4<<10))
				return
			}
			if errno != 0 || got != 4<<10 {
				t.Fatalf("second copy_file_range: %d bytes, %v; want %d", got, errno, 4<<10)
			}
			r.dstHolds(t, 8<<10, fill('1', 8<<10))
		})
	}
}

// A copy the mount makes of the bytes, while another mount's newer
// version is taken between two of the buffers it copies through (a
// process here opened the source): the call answers the bytes it copied
// before, all of the version it began with, and the next call fails. The
// first call was declined (EOPNOTSUPP) and the kernel copied the bytes
// through its cache of the source, which the newer version replaced in
// part while it read: after a kill, a copy's 115738 bytes were the start
// of no version (the campaign's cprw, in plain mode).
func TestCopyOfBytesIsOneVersion(t *testing.T) {
	t.Parallel()
	const size = 3 * copyBytesBuf
	r := newCopyRig(t)
	writeVersion(t, r.sof, size, fill('1', size))
	r.a.copyWrote = func() {
		r.a.copyWrote = nil
		r.rewrite(t, size, fill('2', size), true)
	}
	if got, errno := r.copyAt(0, size-1); errno != 0 || got != copyBytesBuf {
		t.Fatalf("first copy_file_range of all but a byte: %d bytes, %v; want %d, what it copied before the newer version", got, errno, copyBytesBuf)
	}
	r.dstHolds(t, copyBytesBuf, fill('1', copyBytesBuf))
	if got, errno := r.copyAt(copyBytesBuf, size-1-copyBytesBuf); errno != syscall.ESTALE {
		t.Fatalf("second copy_file_range: %d bytes, %v; want %v", got, errno, syscall.ESTALE)
	}
	r.dstHolds(t, copyBytesBuf, fill('1', copyBytesBuf))
}

// The kernel cuts copy_file_range at the size it caches of the source,
// without asking the mount, and never calls again past it. When that is
// the size of an older version than the mount shows (another mount
// rewrote the source after cp's open and fstat, and a process here opened
// it), the first call asks for that many bytes of a longer file: it was
// declined, and the kernel copied the newer version's start, cut at the
// older one's size (the campaign's cprw, in dir mode: 334 bytes of a
// 164251-byte version). It fails (ESTALE), the copy empty: whether the
// source took the version after cp's descriptor opened, or the size asked
// is the one the kernel was last answered.
func TestCopyCutAtAnotherVersionsSize(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reopen    bool // cp's descriptor opened after the newer version was taken
		duringBy  bool // taken while the copy by reference is made, after the size was looked at
		shown     int64
		length    uint64
		wantBytes bool
	}{
		{name: "taken after the open", length: 8 << 10},
		{name: "the size last answered", reopen: true, shown: 8 << 10, length: 8 << 10},
		{name: "taken by the copy by reference", duringBy: true, length: 8 << 10},
		{name: "a part asked, the source unchanged since the open", reopen: true, shown: 40 << 10, length: 8 << 10, wantBytes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newCopyRig(t)
			writeVersion(t, r.sof, 8<<10, fill('1', 8<<10))
			if tc.duringBy {
				r.a.copySized = func() {
					r.a.copySized = nil
					r.rewrite(t, 40<<10, fill('2', 40<<10), true)
				}
			} else {
				r.rewrite(t, 40<<10, fill('2', 40<<10), true)
			}
			if tc.reopen {
				h := newHandle(r.a, r.sof, syscall.O_RDONLY)
				t.Cleanup(func() { h.Release(context.Background()) })
				r.hin = h
			}
			r.n.shownSize.Store(tc.shown + 1)
			got, errno := r.copyAt(0, tc.length)
			if tc.wantBytes {
				if errno != 0 || got != uint32(tc.length) {
					t.Fatalf("copy_file_range of the first %d bytes: %d bytes, %v; want them", tc.length, got, errno)
				}
				r.dstHolds(t, int64(tc.length), fill('2', int(tc.length)))
				return
			}
			if errno != syscall.ESTALE {
				t.Fatalf("copy_file_range cut at the older version's size: %d bytes, %v; want %v", got, errno, syscall.ESTALE)
			}
			r.dstHolds(t, 0, nil)
		})
	}
}

// Mount b rewrote the source after cp's open on mount a read its head: the
// copy by reference, made of the head a's engine holds, finds the source's
// head replaced; it takes the new one, what an open reads now, and copies
// it. It was left to the kernel, whose bytes another version could replace
// before it was done.
func TestCopyTakesTheHeadThatReplacedIt(t *testing.T) {
	t.Parallel()
	r := newCopyRig(t)
	writeVersion(t, r.sof, 8<<10, fill('1', 8<<10))
	r.rewrite(t, 40<<10, fill('2', 40<<10), false)
	if got, errno := r.copyAt(0, 1<<30); errno != 0 || got != 40<<10 {
		t.Fatalf("copy_file_range of a source replaced on another mount: %d bytes, %v; want %d", got, errno, 40<<10)
	}
	r.dstHolds(t, 40<<10, fill('2', 40<<10))
}
