package fusefs

import (
	"context"
	"fmt"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// countListings counts the namespace's listings.
type countListings struct {
	namespace.Names
	n int
}

func (c *countListings) ReadDirAfter(ctx context.Context, dir namespace.Ino, cookie uint64) ([]namespace.Dirent, error) {
	c.n++
	return c.Names.ReadDirAfter(ctx, dir, cookie)
}

// A directory stream lists the directory once: the listing holds every entry
// after the offset, so the stream ends with it, for the readdir that drains
// it and for the one after (the kernel's second getdents). Before, each of
// those listed again (a LIST each on a v2 volume): three listings a
// directory. A rewinddir (Seekdir) lists again.
func TestReaddirListsOnce(t *testing.T) {
	fsys, _, _ := newHeadFS(t, 3, 0)
	c := &countListings{Names: fsys.ns}
	fsys.ns = c
	d := &dirHandle{fsys: fsys, ino: namespace.RootIno, parent: namespace.RootIno}
	read := func() []string {
		var names []string
		for {
			e, errno := d.Readdirent(context.Background())
			if errno != 0 {
				t.Fatalf("readdir: %v", errno)
			}
			if e == nil {
				return names
			}
			names = append(names, e.Name)
		}
	}
	if got := fmt.Sprint(read()); got != "[. .. f0000 f0001 f0002]" {
		t.Fatalf("listed %s", got)
	}
	if got := read(); len(got) != 0 { // the kernel's next readdir at the end
		t.Fatalf("after the end: %v", got)
	}
	if c.n != 1 {
		t.Fatalf("a stream read to its end, twice, listed the directory %d times, want 1", c.n)
	}
	if err := d.Seekdir(context.Background(), 0); err != 0 {
		t.Fatal(err)
	}
	if got := read(); len(got) != 5 || c.n != 2 {
		t.Fatalf("after rewinddir: %v, %d listings; want 5 entries, 2 listings", got, c.n)
	}
}
