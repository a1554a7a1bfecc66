package nsv2

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// Rename, exchange and rmdir through namespace.Names on the memory store
// with S3's ETags, and two mounts racing them.

// fakeClock is the lease clock of the test's mounts: Sleep advances it, so a
// remover that waits out a lease waits no real time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
	// onSleep, when set, runs at the first Sleep.
	onSleep func()
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(d)
	f := c.onSleep
	c.onSleep = nil
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return ctx.Err()
}

// openTreeClock is mount m's Tree on st with lease clock c.
func openTreeClock(t testing.TB, st staging.Store, m int, c *fakeClock) *Tree {
	t.Helper()
	tr, err := Open(Config{Store: st, Root: root, Mount: cid(m), FirstBatch: 1<<40 + uint64(m)*16,
		Clock: c.now, Sleep: c.sleep})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// names is the names of dir as ns lists them, with their inos.
func names(t testing.TB, ns namespace.Names, dir namespace.Ino) map[string]namespace.Ino {
	t.Helper()
	out := map[string]namespace.Ino{}
	for _, d := range must(ns.ReadDir(context.Background(), dir))(t) {
		out[d.Name] = d.Ino
	}
	return out
}

func TestTreeRenameOps(t *testing.T) {
	ctx := context.Background()
	root := namespace.RootIno
	for _, tc := range []struct {
		name  string
		run   func(ns namespace.Names, fx fixture) (namespace.Node, error)
		want  error
		check func(t *testing.T, ns namespace.Names, fx fixture, replaced namespace.Node)
	}{
		{name: "a file within its directory", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "f", root, "g", 0)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture, rep namespace.Node) {
			if rep.Ino != 0 {
				t.Fatalf("replaced %+v", rep)
			}
			if _, err := ns.Lookup(ctx, root, "f"); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("old name: %v", err)
			}
			if g := must(ns.Lookup(ctx, root, "g"))(t); g.Ino != fx.f.Ino || g.FileID != fx.f.FileID {
				t.Fatalf("new name %+v", g)
			}
			if l := names(t, ns, root); len(l) != 4 || l["g"] != fx.f.Ino {
				t.Fatalf("root lists %v", l)
			}
		}},
		{name: "a file across directories", run: func(ns namespace.Names, fx fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "f", fx.d.Ino, "f2", 0)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture, _ namespace.Node) {
			if l := names(t, ns, fx.d.Ino); !reflect.DeepEqual(l, map[string]namespace.Ino{"x": fx.x.Ino, "f2": fx.f.Ino}) {
				t.Fatalf("d lists %v", l)
			}
			if _, ok := names(t, ns, root)["f"]; ok {
				t.Fatal("the root still lists f")
			}
		}},
		{name: "over a file", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "p", root, "f", 0)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture, rep namespace.Node) {
			if rep.Ino != fx.f.Ino || rep.Nlink != 0 || rep.FileID != fx.f.FileID {
				t.Fatalf("replaced %+v", rep)
			}
			if n := must(ns.Lookup(ctx, root, "f"))(t); n.Ino != fx.p.Ino {
				t.Fatalf("f is %+v", n)
			}
			if o := must(ns.Orphans(ctx))(t); !reflect.DeepEqual(o, []namespace.Orphan{{Ino: fx.f.Ino, FileID: fx.f.FileID}}) {
				t.Fatalf("orphans %+v", o)
			}
		}},
		{name: "noreplace over a file", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "p", root, "f", namespace.RenameNoReplace)
		}, want: namespace.ErrExist},
		{name: "noreplace to a new name", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "p", root, "q", namespace.RenameNoReplace)
		}},
		{name: "exchange", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "f", root, "d", namespace.RenameExchange)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture, _ namespace.Node) {
			if l := names(t, ns, root); l["f"] != fx.d.Ino || l["d"] != fx.f.Ino {
				t.Fatalf("root lists %v", l)
			}
			if x := must(ns.Lookup(ctx, fx.d.Ino, "x"))(t); x.Ino != fx.x.Ino {
				t.Fatalf("x in the moved directory: %+v", x)
			}
		}},
		{name: "exchange across directories", run: func(ns namespace.Names, fx fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "f", fx.d.Ino, "x", namespace.RenameExchange)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture, _ namespace.Node) {
			if l := names(t, ns, fx.d.Ino); l["x"] != fx.f.Ino {
				t.Fatalf("d lists %v", l)
			}
			if l := names(t, ns, root); l["f"] != fx.x.Ino {
				t.Fatalf("root lists %v", l)
			}
			if o := must(ns.Orphans(ctx))(t); len(o) != 0 {
				t.Fatalf("orphans %+v", o)
			}
		}},
		{name: "exchange with none", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "f", root, "none", namespace.RenameExchange)
		}, want: namespace.ErrNotExist},
		{name: "both flags", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "f", root, "g", namespace.RenameExchange|namespace.RenameNoReplace)
		}, want: namespace.ErrInvalid},
		{name: "none", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "none", root, "g", 0)
		}, want: namespace.ErrNotExist},
		{name: "onto itself", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "f", root, "f", 0)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture, rep namespace.Node) {
			if n := must(ns.Lookup(ctx, root, "f"))(t); rep.Ino != 0 || n.Ino != fx.f.Ino {
				t.Fatalf("replaced %+v, f %+v", rep, n)
			}
		}},
		{name: "onto itself, noreplace", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "f", root, "f", namespace.RenameNoReplace)
		}, want: namespace.ErrExist},
		{name: "a directory within its directory", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "d", root, "d2", 0)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture, _ namespace.Node) {
			d2 := must(ns.Lookup(ctx, root, "d2"))(t)
			if d2.Ino != fx.d.Ino || d2.Kind != namespace.KindDir {
				t.Fatalf("d2 %+v", d2)
			}
			if l := names(t, ns, d2.Ino); l["x"] != fx.x.Ino {
				t.Fatalf("d2 lists %v", l)
			}
		}},
		{name: "a directory across directories", run: func(ns namespace.Names, fx fixture) (namespace.Node, error) {
			must(ns.Mkdir(ctx, root, "e", 0o755, owner))(t)
			return ns.Rename(ctx, root, "e", fx.d.Ino, "e", 0)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture, _ namespace.Node) {
			e := must(ns.Lookup(ctx, fx.d.Ino, "e"))(t)
			if _, err := ns.Lookup(ctx, root, "e"); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("e left in the root: %v", err)
			}
			if e.Kind != namespace.KindDir || e.Parent != fx.d.Ino {
				t.Fatalf("e %+v", e)
			}
		}},
		{name: "a directory into itself", run: func(ns namespace.Names, fx fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "d", fx.d.Ino, "d", 0)
		}, want: namespace.ErrInvalid},
		{name: "a directory over an empty one", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			must(ns.Mkdir(ctx, root, "e", 0o755, owner))(t)
			return ns.Rename(ctx, root, "d", root, "e", 0)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture, rep namespace.Node) {
			if rep.Kind != namespace.KindDir || rep.Nlink != 0 {
				t.Fatalf("replaced %+v", rep)
			}
			if e := must(ns.Lookup(ctx, root, "e"))(t); e.Ino != fx.d.Ino {
				t.Fatalf("e %+v", e)
			}
			if _, err := ns.Create(ctx, rep.Ino, "in", 0o644, owner); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("create in the directory replaced: %v", err)
			}
		}},
		{name: "a directory over one with names", run: func(ns namespace.Names, fx fixture) (namespace.Node, error) {
			e := must(ns.Mkdir(ctx, root, "e", 0o755, owner))(t)
			must(ns.Create(ctx, e.Ino, "in", 0o644, owner))(t)
			return ns.Rename(ctx, root, "d", root, "e", 0)
		}, want: namespace.ErrNotEmpty, check: func(t *testing.T, ns namespace.Names, fx fixture, _ namespace.Node) {
			e := must(ns.Lookup(ctx, root, "e"))(t)
			// The seal went with the abort: e takes names again.
			must(ns.Create(ctx, e.Ino, "in2", 0o644, owner))(t)
			if d := must(ns.Lookup(ctx, root, "d"))(t); d.Ino != fx.d.Ino {
				t.Fatalf("d %+v", d)
			}
		}},
		{name: "a directory over a file", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "d", root, "f", 0)
		}, want: namespace.ErrNotDir},
		{name: "a file over a directory", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return ns.Rename(ctx, root, "f", root, "d", 0)
		}, want: namespace.ErrIsDir},
		{name: "rmdir empty", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			e := must(ns.Mkdir(ctx, root, "e", 0o755, owner))(t)
			must(ns.Create(ctx, e.Ino, "in", 0o644, owner))(t)
			must(ns.Unlink(ctx, e.Ino, "in"))(t)
			return e, ns.Rmdir(ctx, root, "e")
		}, check: func(t *testing.T, ns namespace.Names, _ fixture, e namespace.Node) {
			if _, err := ns.Lookup(ctx, root, "e"); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("lookup after rmdir: %v", err)
			}
			if _, err := ns.Create(ctx, e.Ino, "late", 0o644, owner); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("create in the removed directory: %v", err)
			}
			// The name can be made again, a new directory.
			if e2 := must(ns.Mkdir(ctx, root, "e", 0o755, owner))(t); e2.Ino == e.Ino {
				t.Fatal("the new directory has the removed one's ino")
			}
		}},
		{name: "rmdir with names", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return namespace.Node{}, ns.Rmdir(ctx, root, "d")
		}, want: namespace.ErrNotEmpty, check: func(t *testing.T, ns namespace.Names, fx fixture, _ namespace.Node) {
			must(ns.Create(ctx, fx.d.Ino, "more", 0o644, owner))(t)
		}},
		{name: "rmdir a file", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return namespace.Node{}, ns.Rmdir(ctx, root, "f")
		}, want: namespace.ErrNotDir},
		{name: "rmdir none", run: func(ns namespace.Names, _ fixture) (namespace.Node, error) {
			return namespace.Node{}, ns.Rmdir(ctx, root, "none")
		}, want: namespace.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace.Names(openTree(t, mem.NewS3ETags(), 1))
			fx := makeFixture(t, ns)
			n, err := tc.run(ns, fx)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if tc.check != nil {
				tc.check(t, ns, fx, n)
			}
			// What another mount reads from the store is what this one
			// shows, after a Refresh and before.
			other := openTree(t, ns.(*Tree).st, 9)
			for _, refresh := range []bool{false, true} {
				if refresh {
					_ = ns.Refresh(ctx)
				}
				for _, dir := range []namespace.Ino{root, fx.d.Ino} {
					want, werr := ns.ReadDir(ctx, dir)
					if dir != root {
						_, _ = other.Lookup(ctx, root, "d")
						_, _ = other.Lookup(ctx, root, "e")
						_, _ = other.Lookup(ctx, root, "f")
						_, _ = other.Lookup(ctx, root, "d2")
					}
					got, gerr := other.ReadDir(ctx, dir)
					if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(got, want) {
						t.Fatalf("directory %d: this mount lists %+v, %v; another %+v, %v", dir, want, werr, got, gerr)
					}
				}
			}
		})
	}
}

// race runs fs at once and returns their errors.
func race(fs ...func() error) []error {
	errs := make([]error, len(fs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f()
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// TestTwoMountsRenameSame: two mounts rename one name at once to two new
// names: exactly one wins; the other is told the name is gone, or locked by
// the winner's change (ErrLocked). Both then read the winner's.
func TestTwoMountsRenameSame(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	a, b := namespace.Names(openTree(t, st, 1)), namespace.Names(openTree(t, st, 2))
	root := namespace.RootIno
	for round := range 10 {
		f := must(a.Create(ctx, root, "f", 0o644, owner))(t)
		must(b.Lookup(ctx, root, "f"))(t)
		errs := race(
			func() error { _, err := a.Rename(ctx, root, "f", root, "ra", 0); return err },
			func() error { _, err := b.Rename(ctx, root, "f", root, "rb", 0); return err },
		)
		won := ""
		for i, err := range errs {
			switch {
			case err == nil && won != "":
				t.Fatalf("round %d: both renamed", round)
			case err == nil:
				won = []string{"ra", "rb"}[i]
			case !errors.Is(err, namespace.ErrNotExist) && !errors.Is(err, ErrLocked):
				t.Fatalf("round %d: mount %d: %v", round, i, err)
			}
		}
		if won == "" {
			t.Fatalf("round %d: neither renamed: %v", round, errs)
		}
		for i, ns := range []namespace.Names{a, b, openTree(t, st, 3+round)} {
			if err := ns.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			l := names(t, ns, root)
			if len(l) != 1 || l[won] != f.Ino {
				t.Fatalf("round %d: mount %d lists %v, want only %s", round, i, l, won)
			}
			if n := must(ns.Lookup(ctx, root, won))(t); n.Ino != f.Ino {
				t.Fatalf("round %d: mount %d: %s is %+v", round, i, won, n)
			}
		}
		must(a.Unlink(ctx, root, won))(t)
	}
}

// TestTwoMountsRenameSeen: a rename by one mount is seen by the other: at
// once by its listing, and by its lookups after a Refresh, both names at
// once (the old gone, the new there).
func TestTwoMountsRenameSeen(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	a, b := namespace.Names(openTree(t, st, 1)), namespace.Names(openTree(t, st, 2))
	root := namespace.RootIno
	d := must(a.Mkdir(ctx, root, "d", 0o755, owner))(t)
	f := must(a.Create(ctx, root, "f", 0o644, owner))(t)
	must(b.Lookup(ctx, root, "d"))(t)
	must(b.Lookup(ctx, root, "f"))(t)
	must(a.Rename(ctx, root, "f", d.Ino, "g", 0))(t)
	if l := names(t, b, root); len(l) != 1 || l["d"] != d.Ino {
		t.Fatalf("b lists the root: %v", l)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lookup(ctx, root, "f"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("b looks up f: %v", err)
	}
	if g := must(b.Lookup(ctx, d.Ino, "g"))(t); g.Ino != f.Ino {
		t.Fatalf("b looks up g: %+v", g)
	}
	if n := must(b.GetNode(ctx, f.Ino))(t); n.Nlink != 1 {
		t.Fatalf("b's node of f after its move: %+v", n)
	}
	if named := must(b.Named(ctx, f.FileID))(t); !named {
		t.Fatal("the file moved is not named")
	}
	if o := must(b.Orphans(ctx))(t); len(o) != 0 {
		t.Fatalf("orphans %+v", o)
	}
}

// TestTwoMountsRenameCreate: one mount renames f to g while the other
// creates g: either the create lands first and the rename replaces it (both
// succeed, the rename answers the created node), or the rename lands first
// and the create is refused (ErrExist). Either way g is f's node, f is
// gone, and the orphans are exactly the replaced node.
func TestTwoMountsRenameCreate(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	a, b := namespace.Names(openTree(t, st, 1)), namespace.Names(openTree(t, st, 2))
	root := namespace.RootIno
	for round := range 10 {
		f := must(a.Create(ctx, root, "f", 0o644, owner))(t)
		var replaced, made namespace.Node
		errs := race(
			func() (err error) { replaced, err = a.Rename(ctx, root, "f", root, "g", 0); return err },
			func() (err error) { made, err = b.Create(ctx, root, "g", 0o644, owner); return err },
		)
		switch {
		case errs[0] != nil:
			t.Fatalf("round %d: rename: %v", round, errs[0])
		case errs[1] == nil && replaced.Ino != made.Ino:
			t.Fatalf("round %d: created %d, the rename replaced %+v", round, made.Ino, replaced)
		case errs[1] != nil && (!errors.Is(errs[1], namespace.ErrExist) || replaced.Ino != 0):
			t.Fatalf("round %d: create: %v; the rename replaced %+v", round, errs[1], replaced)
		}
		c := openTree(t, st, 10+round)
		if l := names(t, c, root); len(l) != 1 || l["g"] != f.Ino {
			t.Fatalf("round %d: the root lists %v", round, l)
		}
		o := must(c.Orphans(ctx))(t)
		if errs[1] == nil && (len(o) != 1 || o[0].Ino != made.Ino) || errs[1] != nil && len(o) != 0 {
			t.Fatalf("round %d: orphans %+v", round, o)
		}
		for _, x := range o {
			must(struct{}{}, c.Forget(ctx, x.FileID))(t)
		}
		must(a.Unlink(ctx, root, "g"))(t)
		must(struct{}{}, c.Forget(ctx, f.FileID))(t)
	}
}

// pauseStore holds back the first request that match selects, until
// release is closed; reached is closed when that request arrives. Before
// says whether it is held before it is sent (else after it landed).
type pauseStore struct {
	staging.Store
	mu      sync.Mutex
	match   func(op staging.Op, key string) bool
	reached chan struct{}
	release chan struct{}
	done    bool
}

func newPause(st staging.Store, match func(op staging.Op, key string) bool) *pauseStore {
	return &pauseStore{Store: st, match: match, reached: make(chan struct{}), release: make(chan struct{})}
}

func (p *pauseStore) hold(op staging.Op, key string) {
	p.mu.Lock()
	hit := !p.done && p.match(op, key)
	if hit {
		p.done = true
	}
	p.mu.Unlock()
	if hit {
		close(p.reached)
		<-p.release
	}
}

func (p *pauseStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	p.hold(staging.OpPut, key)
	return p.Store.Put(ctx, key, data, opts)
}

func (p *pauseStore) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	p.hold(staging.OpList, prefix)
	return p.Store.List(ctx, prefix, startAfter, max)
}

// TestTwoMountsRmdirCreate: mount b removes d while mount a creates d/x,
// in each order, each made by holding back one request: the create lands
// and the rmdir is refused (ErrNotEmpty), or the create fails
// (ErrNotExist) and the rmdir succeeds; never both, never a name in a
// removed directory.
func TestTwoMountsRmdirCreate(t *testing.T) {
	ctx := context.Background()
	root := namespace.RootIno
	isLeases := func(op staging.Op, key string) bool {
		return op == staging.OpList && strings.Contains(key, "/ns2/lease/")
	}
	for _, tc := range []struct {
		name string
		// leased: a holds a lease on d before b seals it.
		leased bool
		// pauseA holds a request of a's (else one of b's).
		pauseA bool
		match  func(op staging.Op, key string) bool
		// created: a's create lands (and b's rmdir is refused).
		created bool
	}{
		// b sealed, holds its listing of leases; a, whose lease is valid,
		// creates without reading the seal; b then waits out a's lease
		// and finds x.
		{name: "create under a lease taken before the seal", leased: true, match: isLeases, created: true},
		// b sealed, holds its listing of leases; a takes its lease, reads
		// the seal and fails.
		{name: "lease taken after the seal", match: isLeases},
		// a's lease is held back until b's rmdir is over: a then reads the
		// seal of the committed removal and fails.
		{name: "lease landing after the removal", pauseA: true, match: func(op staging.Op, key string) bool {
			return op == staging.OpPut && strings.Contains(key, "/ns2/lease/")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mem.NewS3ETags()
			clk := newFakeClock()
			p := newPause(st, tc.match)
			sa, sb := staging.Store(st), staging.Store(st)
			if tc.pauseA {
				sa = p
			} else {
				sb = p
			}
			a, b := openTreeClock(t, sa, 1, clk), openTreeClock(t, sb, 2, clk)
			var d namespace.Node
			if tc.leased {
				d = must(a.Mkdir(ctx, root, "d", 0o755, owner))(t)
				must(a.Create(ctx, d.Ino, "y", 0o644, owner))(t)
				must(a.Unlink(ctx, d.Ino, "y"))(t)
			} else {
				d = must(b.Mkdir(ctx, root, "d", 0o755, owner))(t)
				must(a.Lookup(ctx, root, "d"))(t)
			}
			must(b.Lookup(ctx, root, "d"))(t)
			var rmErr, createErr error
			if tc.pauseA {
				// a's create waits at its lease; b removes d meanwhile.
				done := make(chan struct{})
				go func() { _, createErr = a.Create(ctx, d.Ino, "x", 0o644, owner); close(done) }()
				select {
				case <-p.reached:
				case <-done:
					t.Fatalf("the create took no lease: %v", createErr)
				}
				rmErr = b.Rmdir(ctx, root, "d")
				close(p.release)
				<-done
			} else {
				done := make(chan struct{})
				go func() { rmErr = b.Rmdir(ctx, root, "d"); close(done) }()
				select {
				case <-p.reached:
				case <-done:
					t.Fatalf("the rmdir listed no leases: %v", rmErr)
				}
				_, createErr = a.Create(ctx, d.Ino, "x", 0o644, owner)
				close(p.release)
				<-done
			}
			c := openTree(t, st, 3)
			_, lookErr := c.Lookup(ctx, root, "d")
			if tc.created {
				if createErr != nil || !errors.Is(rmErr, namespace.ErrNotEmpty) || lookErr != nil {
					t.Fatalf("create %v, rmdir %v, d looked up: %v", createErr, rmErr, lookErr)
				}
				if l := names(t, c, d.Ino); len(l) != 1 {
					t.Fatalf("d lists %v", l)
				}
				// The seal went with the abort.
				must(b.Create(ctx, d.Ino, "z", 0o644, owner))(t)
				return
			}
			if !errors.Is(createErr, namespace.ErrNotExist) || rmErr != nil || !errors.Is(lookErr, namespace.ErrNotExist) {
				t.Fatalf("create %v, rmdir %v, d looked up: %v", createErr, rmErr, lookErr)
			}
			// No name under the removed directory's ino, bound or locked.
			objs := must(staging.ListAll(ctx, st, c.fragPrefix(d.Ino, 0)))(t)
			for _, o := range objs {
				if dd, _, err := read(ctx, st, o.Key, kindDentry, DecodeDentry); err != nil || dd.Bound != nil || dd.Lock != nil {
					t.Fatalf("%s in the removed directory: %+v, %v", o.Key, dd, err)
				}
			}
		})
	}
}

// TestTwoMountsRmdirCreateInFlight: a's create, sent under its lease
// before b sealed d, lands while b waits out that lease: b's listing,
// after the wait, finds it (ErrNotEmpty). A remover that did not wait would
// list d before the name landed and remove a directory that then holds it.
func TestTwoMountsRmdirCreateInFlight(t *testing.T) {
	ctx := context.Background()
	root := namespace.RootIno
	st := mem.NewS3ETags()
	clk := newFakeClock()
	p := newPause(st, func(op staging.Op, key string) bool {
		return op == staging.OpPut && strings.HasSuffix(key, "/x")
	})
	a, b := openTreeClock(t, p, 1, clk), openTreeClock(t, st, 2, clk)
	d := must(a.Mkdir(ctx, root, "d", 0o755, owner))(t)
	must(a.Create(ctx, d.Ino, "y", 0o644, owner))(t) // a's lease
	must(a.Unlink(ctx, d.Ino, "y"))(t)
	must(b.Lookup(ctx, root, "d"))(t)
	var createErr error
	created := make(chan struct{})
	go func() { _, createErr = a.Create(ctx, d.Ino, "x", 0o644, owner); close(created) }()
	<-p.reached // a's dentry PUT of x is in flight
	clk.mu.Lock()
	clk.onSleep = func() { close(p.release); <-created } // lands while b waits
	clk.mu.Unlock()
	rmErr := b.Rmdir(ctx, root, "d")
	select {
	case <-created:
	default:
		close(p.release)
		<-created
		t.Fatalf("b did not wait for a's lease: rmdir %v", rmErr)
	}
	if createErr != nil || !errors.Is(rmErr, namespace.ErrNotEmpty) {
		t.Fatalf("create %v, rmdir %v", createErr, rmErr)
	}
	c := openTree(t, st, 3)
	must(c.Lookup(ctx, root, "d"))(t)
	if l := names(t, c, d.Ino); len(l) != 1 || l["x"] == 0 {
		t.Fatalf("d lists %v", l)
	}
}
