package nsv2

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// Hard links through namespace.Names: two Trees as two mounts on the
// memory store with S3's ETags, races of two mounts, a fault at every
// request and a mount that dies after each.

// rootView is what ns sees of the root: each name's ino and Nlink, read
// from the store (a Refresh first), and the orphans.
func rootView(t testing.TB, ns namespace.Names) (map[string]string, []namespace.Orphan) {
	t.Helper()
	ctx := context.Background()
	must(struct{}{}, ns.Refresh(ctx))(t)
	out := map[string]string{}
	for _, d := range must(ns.ReadDir(ctx, namespace.RootIno))(t) {
		n := must(ns.Lookup(ctx, namespace.RootIno, d.Name))(t)
		if n.Ino != d.Ino {
			t.Fatalf("%s listed as %d, looked up as %d", d.Name, d.Ino, n.Ino)
		}
		out[d.Name] = fmt.Sprintf("%d/%d", n.Ino, n.Nlink)
	}
	return out, must(ns.Orphans(ctx))(t)
}

// inodeKeyOf is the key of ino's inode object under the tests' root.
func inodeKeyOf(ino namespace.Ino) string {
	k, _ := InodeKey(root, ino)
	return k
}

func modeOf(m uint32) *uint32 { return &m }

func nl(ino namespace.Ino, n int) string { return fmt.Sprintf("%d/%d", ino, n) }

// TestLinkTwoMounts: a link made on one mount, seen from another through
// both names with one ino and one set of attributes; attribute changes
// through different names on the two mounts both land; unlinks count down
// to the last, which leaves an orphan as an unlinked file does.
func TestLinkTwoMounts(t *testing.T) {
	ctx := context.Background()
	root := namespace.RootIno
	st := mem.NewS3ETags()
	one, two := openTree(t, st, 1), openTree(t, st, 2)
	f := must(one.Create(ctx, root, "f", 0o644, owner))(t)
	d := must(one.Mkdir(ctx, root, "d", 0o755, owner))(t)
	must(two.Lookup(ctx, root, "f"))(t) // cached as a node of one name
	n := must(one.Link(ctx, f.Ino, d.Ino, "g"))(t)
	if n.Nlink != 2 || n.Ino != f.Ino || n.FileID != f.FileID || n.Mode != 0o644 {
		t.Fatalf("link answered %+v", n)
	}
	// Mount 2 changes the mode through its stale name: refused, read
	// again, applied to the inode object.
	must(two.SetAttr(ctx, f.Ino, namespace.SetAttr{Mode: modeOf(0o600)}))(t)
	dd := must(two.Lookup(ctx, root, "d"))(t)
	g := must(two.Lookup(ctx, dd.Ino, "g"))(t)
	if g.Ino != f.Ino || g.Nlink != 2 || g.Mode != 0o600 || g.FileID != f.FileID {
		t.Fatalf("mount 2 sees g as %+v", g)
	}
	uid := uint32(7)
	must(one.SetAttr(ctx, f.Ino, namespace.SetAttr{Uid: &uid}))(t)
	if err := one.SetXattr(ctx, f.Ino, "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := two.SetXattr(ctx, g.Ino, "user.b", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	three := openTree(t, st, 3)
	for _, p := range []struct {
		dir  namespace.Ino
		name string
	}{{root, "f"}, {dd.Ino, "g"}} {
		if p.dir != root {
			must(three.Lookup(ctx, root, "d"))(t)
		}
		n := must(three.Lookup(ctx, p.dir, p.name))(t)
		if n.Ino != f.Ino || n.Nlink != 2 || n.Mode != 0o600 || n.Uid != 7 {
			t.Fatalf("mount 3 sees %s as %+v", p.name, n)
		}
		if x := must(three.ListXattr(ctx, n.Ino))(t); !reflect.DeepEqual(x, []string{"user.a", "user.b"}) {
			t.Fatalf("mount 3 lists attributes %v", x)
		}
	}
	// A third name by mount 2, then every name removed, from either mount.
	must(two.Link(ctx, f.Ino, root, "h"))(t)
	must(struct{}{}, one.Refresh(ctx))(t)
	if n := must(one.GetNode(ctx, f.Ino))(t); n.Nlink != 3 {
		t.Fatalf("mount 1 sees Nlink %d after mount 2's link", n.Nlink)
	}
	if n := must(one.Unlink(ctx, root, "f"))(t); n.Nlink != 2 {
		t.Fatalf("unlink of f answered %+v", n)
	}
	if n := must(two.Unlink(ctx, dd.Ino, "g"))(t); n.Nlink != 1 {
		t.Fatalf("unlink of g answered %+v", n)
	}
	if named := must(three.Named(ctx, f.FileID))(t); !named {
		t.Fatal("a file with a name left reads as not named")
	}
	if o := must(three.Orphans(ctx))(t); len(o) != 0 {
		t.Fatalf("orphans %+v while h is left", o)
	}
	// Mount 1 reads it again after a Refresh: through a name, or by its ino
	// when the name it holds went.
	must(struct{}{}, one.Refresh(ctx))(t)
	if n := must(one.GetNode(ctx, f.Ino))(t); n.Nlink != 1 {
		t.Fatalf("mount 1 reads the node as %+v", n)
	}
	if n := must(one.Unlink(ctx, root, "h"))(t); n.Nlink != 0 {
		t.Fatalf("unlink of the last name answered %+v", n)
	}
	if o := must(three.Orphans(ctx))(t); !reflect.DeepEqual(o, []namespace.Orphan{{Ino: f.Ino, FileID: f.FileID}}) {
		t.Fatalf("orphans %+v", o)
	}
	if orphaned := must(two.Orphaned(ctx, f.FileID))(t); !orphaned {
		t.Fatal("not an orphan after its last name went")
	}
	if err := three.Forget(ctx, f.FileID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Head(ctx, inodeKeyOf(f.Ino)); err == nil {
		t.Fatal("the inode object outlived Forget")
	}
	if _, err := one.Link(ctx, f.Ino, root, "again"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("link of an orphan: %v", err)
	}
}

// TestLinkRename: renames of a name of a node of several names, over one,
// and from one.
func TestLinkRename(t *testing.T) {
	ctx := context.Background()
	root := namespace.RootIno
	st := mem.NewS3ETags()
	one, two := openTree(t, st, 1), openTree(t, st, 2)
	f := must(one.Create(ctx, root, "f", 0o644, owner))(t)
	x := must(one.Create(ctx, root, "x", 0o644, owner))(t)
	must(one.Link(ctx, f.Ino, root, "g"))(t)
	// From: g moves to k, the node keeps two names.
	if rep := must(two.Rename(ctx, root, "g", root, "k", 0))(t); rep.Ino != 0 {
		t.Fatalf("replaced %+v", rep)
	}
	// Over: x replaces f, one of the node's two names.
	rep := must(two.Rename(ctx, root, "x", root, "f", 0))(t)
	if rep.Ino != f.Ino || rep.Nlink != 1 {
		t.Fatalf("rename over a linked name replaced %+v", rep)
	}
	view, orphans := rootView(t, openTree(t, st, 3))
	if want := map[string]string{"f": nl(x.Ino, 1), "k": nl(f.Ino, 1)}; !reflect.DeepEqual(view, want) || len(orphans) != 0 {
		t.Fatalf("root %v orphans %+v, want %v", view, orphans, want)
	}
	// Over the last name: an orphan, as a file replaced is.
	rep = must(one.Rename(ctx, root, "f", root, "k", 0))(t)
	if rep.Ino != f.Ino || rep.Nlink != 0 {
		t.Fatalf("rename over the last name replaced %+v", rep)
	}
	view, orphans = rootView(t, openTree(t, st, 4))
	if want := map[string]string{"k": nl(x.Ino, 1)}; !reflect.DeepEqual(view, want) ||
		!reflect.DeepEqual(orphans, []namespace.Orphan{{Ino: f.Ino, FileID: f.FileID}}) {
		t.Fatalf("root %v orphans %+v", view, orphans)
	}
}

// TestLinkRaces: two mounts racing on names of one node, many times: the
// store arbitrates, and the result is one of the orders.
func TestLinkRaces(t *testing.T) {
	ctx := context.Background()
	root := namespace.RootIno
	race := func(a, b func() error) (errA, errB error) {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); errA = a() }()
		go func() { defer wg.Done(); errB = b() }()
		wg.Wait()
		return
	}
	for i := 0; i < 20; i++ {
		t.Run(fmt.Sprint("round ", i), func(t *testing.T) {
			st := mem.NewS3ETags()
			one, two := openTree(t, st, 1), openTree(t, st, 2)
			f := must(one.Create(ctx, root, "f", 0o644, owner))(t)
			e := must(one.Create(ctx, root, "e", 0o644, owner))(t)
			must(two.Lookup(ctx, root, "f"))(t)
			must(two.Lookup(ctx, root, "e"))(t)

			// Two mounts link two nodes to one new name: one wins.
			errA, errB := race(func() error {
				_, err := one.Link(ctx, f.Ino, root, "n")
				return err
			}, func() error {
				_, err := two.Link(ctx, e.Ino, root, "n")
				return err
			})
			if (errA == nil) == (errB == nil) {
				t.Fatalf("both or neither linked: %v, %v", errA, errB)
			}
			lost := errA
			if lost == nil {
				lost = errB
			}
			if !errors.Is(lost, namespace.ErrExist) {
				t.Fatalf("the loser: %v", lost)
			}
			winner := f.Ino
			if errA != nil {
				winner = e.Ino
			}
			view, _ := rootView(t, openTree(t, st, 3))
			if view["n"] != nl(winner, 2) {
				t.Fatalf("n is %s, want %s", view["n"], nl(winner, 2))
			}

			// Two mounts make the first links of one node at once: both
			// land, one after the other, and the count is 3.
			one3 := must(one.Create(ctx, root, "o", 0o644, owner))(t)
			must(two.Lookup(ctx, root, "o"))(t)
			errA, errB = race(func() error {
				_, err := one.Link(ctx, one3.Ino, root, "o1")
				return err
			}, func() error {
				_, err := two.Link(ctx, one3.Ino, root, "o2")
				return err
			})
			if errA != nil || errB != nil {
				t.Fatalf("first links: %v, %v", errA, errB)
			}
			view, _ = rootView(t, openTree(t, st, 6))
			for _, name := range []string{"o", "o1", "o2"} {
				if view[name] != nl(one3.Ino, 3) {
					t.Fatalf("%s is %s, want %s", name, view[name], nl(one3.Ino, 3))
				}
			}

			// An unlink of f's only name against a link of it.
			loner := must(one.Create(ctx, root, "l", 0o644, owner))(t)
			must(two.Lookup(ctx, root, "l"))(t)
			errA, errB = race(func() error {
				_, err := one.Unlink(ctx, root, "l")
				return err
			}, func() error {
				_, err := two.Link(ctx, loner.Ino, root, "m")
				return err
			})
			if errA != nil || errB != nil && !errors.Is(errB, namespace.ErrNotExist) {
				t.Fatalf("unlink: %v, link: %v", errA, errB)
			}
			view, orphans := rootView(t, openTree(t, st, 4))
			_, hasL := view["l"]
			switch {
			case hasL:
				t.Fatalf("l survived its unlink: %v", view)
			case errB == nil && (view["m"] != nl(loner.Ino, 1) || len(orphans) != 0):
				t.Fatalf("linked first: m %s, orphans %+v", view["m"], orphans)
			case errB != nil && (view["m"] != "" || !reflect.DeepEqual(orphans, []namespace.Orphan{{Ino: loner.Ino, FileID: loner.FileID}})):
				t.Fatalf("unlinked first: m %s, orphans %+v", view["m"], orphans)
			}

			// Attribute changes through two names on two mounts: both land.
			errA, errB = race(func() error {
				return one.SetXattr(ctx, winner, "user.one", []byte("1"), 0)
			}, func() error {
				return two.SetXattr(ctx, winner, "user.two", []byte("2"), 0)
			})
			if errA != nil || errB != nil {
				t.Fatalf("setxattr: %v, %v", errA, errB)
			}
			if x := must(openTree(t, st, 5).ListXattr(ctx, winner))(t); !reflect.DeepEqual(x, []string{"user.one", "user.two"}) {
				t.Fatalf("attributes %v", x)
			}
		})
	}
}

// linkFaultCases are the changes of a node of several names, run by mount
// 2, for the fault and dying tests.
func linkFaultCases() []treeFaultCase {
	ctx := context.Background()
	root := namespace.RootIno
	var f, x namespace.Node
	state := func(done, none map[string]string, doneOrphans []namespace.Orphan) func(t *testing.T, three namespace.Names) string {
		return func(t *testing.T, three namespace.Names) string {
			view, orphans := rootView(t, three)
			switch {
			case reflect.DeepEqual(view, done) && reflect.DeepEqual(orphans, doneOrphans):
				return "done"
			case reflect.DeepEqual(view, none) && len(orphans) == 0:
				return "none"
			}
			return fmt.Sprintf("the root holds %v, orphans %+v", view, orphans)
		}
	}
	mk := func(t *testing.T, one namespace.Names, links ...string) {
		f = must(one.Create(ctx, root, "f", 0o644, owner))(t)
		x = must(one.Create(ctx, root, "x", 0o644, owner))(t)
		for _, l := range links {
			must(one.Link(ctx, f.Ino, root, l))(t)
		}
	}
	return []treeFaultCase{
		{name: "first link", setup: func(t *testing.T, one, two namespace.Names) {
			mk(t, one)
			must(two.Lookup(ctx, root, "f"))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Link(ctx, f.Ino, root, "g")
			return err
		}, state: func(t *testing.T, three namespace.Names) string {
			return state(map[string]string{"f": nl(f.Ino, 2), "g": nl(f.Ino, 2), "x": nl(x.Ino, 1)},
				map[string]string{"f": nl(f.Ino, 1), "x": nl(x.Ino, 1)}, nil)(t, three)
		}},
		{name: "second link", setup: func(t *testing.T, one, two namespace.Names) {
			mk(t, one, "g")
			must(two.Lookup(ctx, root, "g"))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Link(ctx, f.Ino, root, "h")
			return err
		}, state: func(t *testing.T, three namespace.Names) string {
			return state(map[string]string{"f": nl(f.Ino, 3), "g": nl(f.Ino, 3), "h": nl(f.Ino, 3), "x": nl(x.Ino, 1)},
				map[string]string{"f": nl(f.Ino, 2), "g": nl(f.Ino, 2), "x": nl(x.Ino, 1)}, nil)(t, three)
		}},
		{name: "unlink of one of two names", setup: func(t *testing.T, one, _ namespace.Names) { mk(t, one, "g") },
			run: func(ctx context.Context, ns namespace.Names) error {
				_, err := ns.Unlink(ctx, root, "f")
				return err
			}, state: func(t *testing.T, three namespace.Names) string {
				return state(map[string]string{"g": nl(f.Ino, 1), "x": nl(x.Ino, 1)},
					map[string]string{"f": nl(f.Ino, 2), "g": nl(f.Ino, 2), "x": nl(x.Ino, 1)}, nil)(t, three)
			}},
		{name: "unlink of the last name", setup: func(t *testing.T, one, _ namespace.Names) {
			mk(t, one, "g")
			must(one.Unlink(ctx, root, "f"))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Unlink(ctx, root, "g")
			return err
		}, state: func(t *testing.T, three namespace.Names) string {
			return state(map[string]string{"x": nl(x.Ino, 1)},
				map[string]string{"g": nl(f.Ino, 1), "x": nl(x.Ino, 1)}, []namespace.Orphan{{Ino: f.Ino, FileID: f.FileID}})(t, three)
		}},
		{name: "rename over one of two names", setup: func(t *testing.T, one, _ namespace.Names) { mk(t, one, "g") },
			run: func(ctx context.Context, ns namespace.Names) error {
				_, err := ns.Rename(ctx, root, "x", root, "g", 0)
				return err
			}, state: func(t *testing.T, three namespace.Names) string {
				return state(map[string]string{"f": nl(f.Ino, 1), "g": nl(x.Ino, 1)},
					map[string]string{"f": nl(f.Ino, 2), "g": nl(f.Ino, 2), "x": nl(x.Ino, 1)}, nil)(t, three)
			}},
		{name: "chmod through a name", setup: func(t *testing.T, one, two namespace.Names) {
			mk(t, one, "g")
			must(two.Lookup(ctx, root, "g"))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.SetAttr(ctx, f.Ino, namespace.SetAttr{Mode: modeOf(0o600)})
			return err
		}, state: func(t *testing.T, three namespace.Names) string {
			n := must(three.Lookup(ctx, root, "f"))(t)
			g := must(three.Lookup(ctx, root, "g"))(t)
			switch {
			case n.Mode != g.Mode || n.Nlink != 2 || g.Nlink != 2:
				return fmt.Sprintf("f %+v, g %+v", n, g)
			case n.Mode == 0o600:
				return "done"
			case n.Mode == 0o644:
				return "none"
			}
			return fmt.Sprintf("mode %o", n.Mode)
		}},
	}
}

func TestLinkFaultAtEveryRequest(t *testing.T) {
	for _, fc := range linkFaultCases() {
		t.Run(fc.name, func(t *testing.T) { faultAtEveryRequest(t, fc, 2) })
	}
}

// TestLinkDies: mount 2 dies after its k-th request of each change, for
// every k; a mount whose clock of the store is past TxGrace then reads the
// store (aborting a lock left undecided) and finds all or none of the
// change, and a mount after it the same.
func TestLinkDies(t *testing.T) {
	ctx := context.Background()
	for _, fc := range linkFaultCases() {
		t.Run(fc.name, func(t *testing.T) {
			for k := 0; ; k++ {
				st := mem.NewS3ETags()
				d := &dyingStore{Store: st, n: 1 << 30}
				one, two := openTree(t, st, 1), openTree(t, d, 2)
				fc.setup(t, one, two)
				d.mu.Lock()
				d.n = k
				d.mu.Unlock()
				err := fc.run(ctx, two)
				late, err2 := Open(Config{Store: st, Root: root, Mount: cid(3), FirstBatch: 1<<40 + 3*16,
					StoreNow: func() time.Time { return time.Now().Add(2 * TxGrace) }})
				if err2 != nil {
					t.Fatal(err2)
				}
				state := fc.state(t, late)
				_ = late.Close()
				after := fc.state(t, openTree(t, st, 4))
				where := fmt.Sprintf("died after request %d", k)
				switch {
				case state != "done" && state != "none":
					t.Fatalf("%s: the store holds a part: %s", where, state)
				case after != state:
					t.Fatalf("%s: read %s, then %s", where, state, after)
				case err == nil && state != "done":
					t.Fatalf("%s: told done, the store holds %s", where, state)
				}
				if err == nil {
					break
				}
			}
		})
	}
}

// TestLinkCookies: three names of one node in one directory, listed one
// entry at a time (each call resuming after the last cookie, as a listing
// the kernel resumes): every name once. With the node's ino as each name's
// cookie, the names after the first were skipped.
func TestLinkCookies(t *testing.T) {
	ctx := context.Background()
	root := namespace.RootIno
	ns := openTree(t, mem.NewS3ETags(), 1)
	f := must(ns.Create(ctx, root, "f", 0o644, owner))(t)
	must(ns.Create(ctx, root, "e", 0o644, owner))(t)
	must(ns.Link(ctx, f.Ino, root, "g"))(t)
	must(ns.Link(ctx, f.Ino, root, "h"))(t)
	seen := map[string]int{}
	for pos := uint64(2); ; {
		ents := must(ns.ReadDirAfter(ctx, root, pos))(t)
		if len(ents) == 0 {
			break
		}
		if ents[0].Cookie <= pos {
			t.Fatalf("cookie %d after %d", ents[0].Cookie, pos)
		}
		seen[ents[0].Name]++
		pos = ents[0].Cookie
	}
	if want := map[string]int{"e": 1, "f": 1, "g": 1, "h": 1}; !reflect.DeepEqual(seen, want) {
		t.Fatalf("listed %v, want %v", seen, want)
	}
}

// TestLinkConcurrentReads: lookups of a node of several names, which set
// its inode object in every cached entry of it, beside GetNode and stats of
// the same node: under the race detector, no read of an entry outside the
// cache's lock (the mount's prefetch of a listing did GetNode so).
func TestLinkConcurrentReads(t *testing.T) {
	ctx := context.Background()
	root := namespace.RootIno
	ns := openTree(t, mem.NewS3ETags(), 1)
	f := must(ns.Create(ctx, root, "f", 0o644, owner))(t)
	must(ns.Link(ctx, f.Ino, root, "g"))(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, op := range []func() error{
		func() error {
			if err := ns.Refresh(ctx); err != nil {
				return err
			}
			_, err := ns.Lookup(ctx, root, "g")
			return err
		},
		func() error { _, err := ns.GetNode(ctx, f.Ino); return err },
		func() error { _, err := ns.Lookup(ctx, root, "f"); return err },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if err := op(); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
