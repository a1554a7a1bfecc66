package fusefs

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// smallObjects is the mount's defaults with objects of 5 MiB (S3's least
// part): a 16 MiB checkpoint is several objects.
func smallObjects() config.Config {
	cfg := config.MountDefault(1 << 30)
	cfg.SegmentMaxObjectBytes = 5 << 20
	cfg.StreamSegmentBytes = 5 << 20
	cfg.SegmentMPUChunkSize = 5 << 20
	return cfg
}

// fileReader is what a read handle of the file or of .checkpoints is here.
type fileReader interface {
	Read(context.Context, []byte, int64) (fuse.ReadResult, syscall.Errno)
}

// firstErrno reads 128 KiB at every MiB of [from, to) through h until a
// read fails, and returns that failure (0: none failed). Some of a file may
// be in an object still there, or read already.
func firstErrno(h fileReader, from, to int64) syscall.Errno {
	buf := make([]byte, 128<<10)
	for off := from; off < to; off += 1 << 20 {
		if _, errno := h.Read(context.Background(), buf, off); errno != 0 {
			return errno
		}
	}
	return 0
}

// An old checkpoint read through .checkpoints, or a file read through a
// handle held on a version another mount has since replaced twice, while
// the cleaner removes it (a dropped checkpoint's part 0 first, then its
// other objects): the reader is told ESTALE, the version is gone, as a
// lookup of the checkpoint now says (ENOENT). An object missing under a
// part 0 still there is lost: EIO.
func TestCheckpointRemovedWhileRead(t *testing.T) {
	for _, tc := range []struct {
		name      string
		live      bool // a handle of the file, not of .checkpoints
		dropPart0 bool
		want      syscall.Errno
	}{
		{"dropped by the cleaner", false, true, syscall.ESTALE},
		{"object lost", false, false, syscall.EIO},
		{"held handle, dropped by the cleaner", true, true, syscall.ESTALE},
		{"held handle, object lost", true, false, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			fsys, n, f := newTestFile(t, st, smallObjects())
			// Checkpoint 1: 16 MiB of 'a', several objects; then all of it
			// written again as 'b' (nothing of checkpoint 1 is shared). A
			// handle of the file opened between them shows checkpoint 1.
			var cnos []uint64
			var h fileReader
			for i, c := range []byte("ab") {
				if _, err := f.WriteAt(ctx, bytes.Repeat([]byte{c}, 16<<20), 0); err != nil {
					t.Fatal(err)
				}
				if _, err := f.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				cps, err := f.Checkpoints(ctx)
				if err != nil {
					t.Fatal(err)
				}
				cnos = append(cnos, cps[0].Inode.Cno)
				if i == 0 && tc.live {
					of, err := fsys.acquire(ctx, n.FileID)
					if err != nil {
						t.Fatal(err)
					}
					defer fsys.release(ctx, of, false)
					h = newHandle(fsys, of, syscall.O_RDONLY)
				}
			}
			f.Close()
			old := cnos[0]

			if !tc.live {
				p, err := fsys.ckptOne(ctx, n.FileID, old)
				if err != nil {
					t.Fatal(err)
				}
				cf := &ckptFile{fsys: fsys, ino: n.Ino, id: n.FileID, cno: old, size: p.size, mtime: p.mtime}
				fh, _, errno := cf.Open(ctx, syscall.O_RDONLY)
				if errno != 0 {
					t.Fatalf("open checkpoint %d: %v", old, errno)
				}
				defer fh.(*ckptHandle).Release(ctx)
				h = fh.(*ckptHandle)
			}
			buf := make([]byte, 128<<10)
			res, errno := h.Read(ctx, buf, 0)
			if errno != 0 {
				t.Fatalf("read checkpoint %d before the cleaner: %v", old, errno)
			}
			if b, _ := res.Bytes(nil); len(b) != len(buf) || b[0] != 'a' {
				t.Fatalf("checkpoint %d reads %d bytes starting %q, want %d of 'a'", old, len(b), b[:min(len(b), 1)], len(buf))
			}

			// The cleaner's order: part 0, then the rest of the checkpoint.
			objs, err := staging.ListAll(ctx, st, fsys.prefix(n.FileID))
			if err != nil {
				t.Fatal(err)
			}
			part0 := fsys.prefix(n.FileID) + segment.ObjectName{Cno: old, Part: 0}.String()
			if tc.dropPart0 {
				if err := st.Delete(ctx, part0); err != nil {
					t.Fatal(err)
				}
			}
			deleted := 0
			for _, o := range objs {
				rel := strings.TrimPrefix(o.Key, fsys.prefix(n.FileID))
				nm, _, err := segment.ParseObjectName(rel)
				if err != nil || nm.Cno != old || nm.Part == 0 {
					continue
				}
				if err := st.Delete(ctx, o.Key); err != nil {
					t.Fatal(err)
				}
				deleted++
			}
			if deleted == 0 {
				t.Fatalf("checkpoint %d has no object beside its part 0 (%d objects listed)", old, len(objs))
			}
			// Some of the 16 MiB are in part 0 (or read already): the
			// first failure is the one told.
			if errno = firstErrno(h, int64(len(buf)), 16<<20); errno != tc.want {
				t.Fatalf("read of checkpoint %d after its objects went: %v, want %v", old, errno, tc.want)
			}
			if tc.dropPart0 {
				fsys.chains = chainCache{} // the listing the kernel would read again
				if _, err := fsys.ckptOne(ctx, n.FileID, old); err != errNoCheckpoint {
					t.Fatalf("lookup of checkpoint %d after the cleaner: %v, want no such checkpoint", old, err)
				}
			}
		})
	}
}

// A head carries its checkpoint's part 0 (a small last flush) before that
// object is stored: the checkpoint is not gone, though its part 0 object is
// missing, so an object lost under it is EIO, not ESTALE.
func TestCheckpointCarriedByHeadNotGone(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	fsys, n, f := newTestFile(t, st, smallObjects())
	var cnos []uint64
	for _, w := range []struct {
		off  int64
		data []byte
	}{{0, bytes.Repeat([]byte{'a'}, 16<<20)}, {0, []byte("small")}} {
		if _, err := f.WriteAt(ctx, w.data, w.off); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		cnos = append(cnos, f.Stat().Cno)
	}
	f.Close()
	prefix := fsys.prefix(n.FileID)
	objs, err := staging.ListAll(ctx, st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	// The small flush's part 0 as if its PUT had not landed (the head
	// carries it), and one object of the first checkpoint lost.
	if err := st.Delete(ctx, prefix+segment.ObjectName{Cno: cnos[1], Part: 0}.String()); err != nil {
		t.Fatal(err)
	}
	lost := ""
	for _, o := range objs {
		if nm, _, err := segment.ParseObjectName(strings.TrimPrefix(o.Key, prefix)); err == nil && nm.Cno == cnos[0] && nm.Part != 0 {
			lost = o.Key
			break
		}
	}
	if lost == "" {
		t.Fatalf("checkpoint %d has no object beside its part 0", cnos[0])
	}
	if err := st.Delete(ctx, lost); err != nil {
		t.Fatal(err)
	}
	of, err := fsys.acquire(ctx, n.FileID)
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.release(ctx, of, false)
	h := newHandle(fsys, of, syscall.O_RDONLY)
	if errno := firstErrno(h, 0, 16<<20); errno != syscall.EIO {
		t.Fatalf("read with %s lost under the head's own checkpoint %d: %v, want EIO", lost, cnos[1], errno)
	}
}

// A descriptor held on a file whose name another mount removed (a copy
// renamed over it), and whose objects the cleaner then deleted: its read
// is ESTALE, as for a version the cleaner dropped, whether the cleaner is
// part way (the head, deleted last, still there) or done and has forgotten
// the file. The read past the size the kernel caches asks for the
// attributes first, through the handle: they are ESTALE too, not ENOENT
// (10 of 56 reads, with ckptfs gc in a loop).
func TestReapedWhileHeld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		forget bool // the cleaner is done: the head deleted, the file forgotten
	}{
		{"head left", false},
		{"forgotten", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			fsys, nn, f := newTestFile(t, st, smallObjects())
			if _, err := f.WriteAt(ctx, bytes.Repeat([]byte{'a'}, 16<<20), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			f.Close()
			root := &node{fsys: fsys, ino: namespace.RootIno}
			gofs.NewNodeFS(root, &gofs.Options{})
			var eo fuse.EntryOut
			in, errno := root.Lookup(ctx, "f", &eo)
			if errno != 0 {
				t.Fatalf("lookup: %v", errno)
			}
			n := in.Operations().(*node)
			fh, _, errno := n.Open(ctx, syscall.O_RDONLY)
			if errno != 0 {
				t.Fatalf("open: %v", errno)
			}
			h := fh.(*handle)
			defer h.Release(ctx)
			if errno := firstErrno(h, 0, 1); errno != 0 {
				t.Fatalf("read before the name went: %v", errno)
			}

			// Another mount's rename over the name, read here; then the
			// cleaner: every object, the head last, and the file forgotten.
			if _, err := fsys.ns.Unlink(ctx, namespace.RootIno, "f"); err != nil {
				t.Fatal(err)
			}
			prefix := fsys.prefix(nn.FileID)
			objs, err := staging.ListAll(ctx, st, prefix)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if strings.TrimPrefix(o.Key, prefix) == volume.HeadName && !tc.forget {
					continue
				}
				if err := st.Delete(ctx, o.Key); err != nil {
					t.Fatal(err)
				}
			}
			if tc.forget {
				if err := fsys.ns.Forget(ctx, nn.FileID); err != nil {
					t.Fatal(err)
				}
				var out fuse.AttrOut
				if errno := n.Getattr(ctx, h, &out); errno != syscall.ESTALE {
					t.Fatalf("attributes through the held descriptor: %v, want ESTALE", errno)
				}
			}
			if errno := firstErrno(h, 1<<20, 16<<20); errno != syscall.ESTALE {
				t.Fatalf("read through the held descriptor: %v, want ESTALE", errno)
			}
		})
	}
}
