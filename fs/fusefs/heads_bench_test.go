package fusefs

import (
	"context"
	"fmt"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/link"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// BenchmarkColdListing is ls -l of a directory of 500 files on a mount just
// made (nothing cached) over the emulated general purpose bucket link (30 ms
// a request): the listing and a stat of every file, in the kernel's order.
// Its time reports the cost of a cold listing; it asserts nothing about it.
func BenchmarkColdListing(b *testing.B) {
	const n = 500
	ctx := context.Background()
	mem := mem.New()
	setup, err := New(ctx, mem, Options{Config: headTestConfig()})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		nn, err := setup.ns.Create(ctx, namespace.RootIno, fmt.Sprintf("f%04d", i), 0o644, namespace.Owner{})
		if err != nil {
			b.Fatal(err)
		}
		f, err := engineCreate(ctx, setup, nn.FileID)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	if err := setup.Close(); err != nil {
		b.Fatal(err)
	}
	link := link.New(mem, link.ProfileGeneral)
	for b.Loop() {
		b.StopTimer()
		fsys, err := New(ctx, link, Options{Config: headTestConfig()})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		d := &dirHandle{fsys: fsys, ino: namespace.RootIno, parent: namespace.RootIno}
		for {
			e, errno := d.Readdirent(ctx)
			if errno != 0 {
				b.Fatal(errno)
			}
			if e == nil {
				break
			}
			if e.Name == "." || e.Name == ".." {
				continue
			}
			nn, err := fsys.ns.Lookup(ctx, namespace.RootIno, e.Name)
			if err != nil {
				b.Fatal(err)
			}
			var a fuse.Attr
			if errno := fsys.fillAttr(ctx, nn, &a); errno != 0 {
				b.Fatal(errno)
			}
		}
		b.StopTimer()
		fsys.Close()
		b.StartTimer()
	}
}
