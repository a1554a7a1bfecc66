package fusefs

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
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

// silentLists is a store whose listings, once on, wait until the call's
// context ends, as a LIST does while the store is silent; a context that
// never ends is refused at once, so that a test of a listing left without
// the call's deadline fails instead of hanging.
type silentLists struct {
	staging.Store
	on atomic.Bool
}

var errUnbounded = errors.New("listing without a deadline")

func (s *silentLists) List(ctx context.Context, prefix, after string, max int) (staging.ListPage, error) {
	if !s.on.Load() {
		return s.Store.List(ctx, prefix, after, max)
	}
	if ctx.Done() == nil {
		return staging.ListPage{}, errUnbounded
	}
	<-ctx.Done()
	return staging.ListPage{}, fmt.Errorf("list %s: %w", prefix, ctx.Err())
}

// A readdir's listing waits for the store within op_timeout, as every call
// that may wait for it does (opctx.go): on a v2 volume it is a LIST, and the
// one of `ls -l` during an outage waited for the store's own bounds (two
// minutes) before. It answers ETIMEDOUT.
func TestReaddirBoundedByOpTimeout(t *testing.T) {
	cfg := headTestConfig()
	cfg.OpTimeout = time.Second
	cfg.Namespace = config.NamespaceV2
	st := &silentLists{Store: mem.New()}
	fsys, err := New(context.Background(), st, Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	st.on.Store(true)
	d := &dirHandle{fsys: fsys, ino: namespace.RootIno, parent: namespace.RootIno}
	for range 2 { // . and ..
		if _, errno := d.Readdirent(context.Background()); errno != 0 {
			t.Fatal(errno)
		}
	}
	if e, errno := d.Readdirent(context.Background()); errno != syscall.ETIMEDOUT {
		t.Fatalf("readdir with the store silent: %+v, %v; want ETIMEDOUT", e, errno)
	}
}
