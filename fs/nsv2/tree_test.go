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

// The Tree through namespace.Names, on the memory store: one mount's
// calls, then two mounts (two Trees) on one store.

// openTree is mount m's Tree on st, closed when t ends.
func openTree(t testing.TB, st staging.Store, m int) *Tree {
	t.Helper()
	tr, err := Open(Config{Store: st, Root: root, Mount: cid(m), FirstBatch: 1<<40 + uint64(m)*16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

var owner = namespace.Owner{Uid: 1000, Gid: 100}

// must(v, err)(t) is v, failing t on err.
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// fixture is a volume of: file "f", directory "d" holding file "x", symlink
// "l" to "f", and FIFO "p", made through ns.
type fixture struct {
	f, d, x, l, p namespace.Node
}

func makeFixture(t testing.TB, ns namespace.Names) fixture {
	t.Helper()
	ctx := context.Background()
	var fx fixture
	fx.f = must(ns.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
	fx.d = must(ns.Mkdir(ctx, namespace.RootIno, "d", 0o755, owner))(t)
	fx.x = must(ns.Create(ctx, fx.d.Ino, "x", 0o600, owner))(t)
	fx.l = must(ns.Symlink(ctx, namespace.RootIno, "l", "f", owner))(t)
	fx.p = must(ns.Mknod(ctx, namespace.RootIno, "p", namespace.KindFIFO, 0o600, owner))(t)
	return fx
}

func TestTreeOps(t *testing.T) {
	ctx := context.Background()
	long := strings.Repeat("n", namespace.MaxNameLen+1)
	mode := func(m uint32) *uint32 { return &m }
	for _, tc := range []struct {
		name string
		run  func(ns namespace.Names, fx fixture) error
		want error
		// check, when set, runs after a run that answered as wanted.
		check func(t *testing.T, ns namespace.Names, fx fixture)
	}{
		{name: "create, lookup", run: func(ns namespace.Names, fx fixture) error {
			_, err := ns.Create(ctx, namespace.RootIno, "new", 0o640, owner)
			return err
		}, check: func(t *testing.T, ns namespace.Names, _ fixture) {
			n := must(ns.Lookup(ctx, namespace.RootIno, "new"))(t)
			if n.Kind != namespace.KindFile || n.Mode != 0o640 || n.Uid != owner.Uid || n.Gid != owner.Gid || n.Nlink != 1 || !ValidID(n.FileID) {
				t.Fatalf("created %+v", n)
			}
		}},
		{name: "create taken", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Create(ctx, namespace.RootIno, "d", 0o644, owner)
			return err
		}, want: namespace.ErrExist},
		{name: "create in a file", run: func(ns namespace.Names, fx fixture) error {
			_, err := ns.Create(ctx, fx.f.Ino, "a", 0o644, owner)
			return err
		}, want: namespace.ErrNotDir},
		{name: "create in a directory never seen", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Create(ctx, 1<<50, "a", 0o644, owner)
			return err
		}, want: namespace.ErrNotExist},
		{name: "create dot", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Create(ctx, namespace.RootIno, ".", 0o644, owner)
			return err
		}, want: namespace.ErrInvalid},
		{name: "create a/b", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Create(ctx, namespace.RootIno, "a/b", 0o644, owner)
			return err
		}, want: namespace.ErrInvalid},
		{name: "create a long name", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Create(ctx, namespace.RootIno, long, 0o644, owner)
			return err
		}, want: namespace.ErrNameTooLong},
		{name: "create with a type in the mode", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Create(ctx, namespace.RootIno, "a", 0o100644, owner)
			return err
		}, want: namespace.ErrInvalid},
		{name: "mkdir, create inside, readdir", run: func(ns namespace.Names, fx fixture) error {
			sub, err := ns.Mkdir(ctx, fx.d.Ino, "sub", 0o700, owner)
			if err != nil {
				return err
			}
			_, err = ns.Create(ctx, sub.Ino, "in", 0o644, owner)
			return err
		}, check: func(t *testing.T, ns namespace.Names, fx fixture) {
			sub := must(ns.Lookup(ctx, fx.d.Ino, "sub"))(t)
			if sub.Kind != namespace.KindDir || sub.Parent != fx.d.Ino || sub.Mode != 0o700 {
				t.Fatalf("sub %+v", sub)
			}
			got := must(ns.ReadDir(ctx, sub.Ino))(t)
			if len(got) != 1 || got[0].Name != "in" || got[0].Kind != namespace.KindFile {
				t.Fatalf("sub lists %+v", got)
			}
			if got := must(ns.ReadDir(ctx, fx.d.Ino))(t); len(got) != 2 || got[0].Name != "sub" || got[1].Name != "x" {
				t.Fatalf("d lists %+v", got)
			}
		}},
		{name: "symlink", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Symlink(ctx, namespace.RootIno, "s", "../x", owner)
			return err
		}, check: func(t *testing.T, ns namespace.Names, _ fixture) {
			if n := must(ns.Lookup(ctx, namespace.RootIno, "s"))(t); n.Kind != namespace.KindSymlink || n.Target != "../x" || n.Mode != 0o777 {
				t.Fatalf("symlink %+v", n)
			}
		}},
		{name: "symlink to nothing", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Symlink(ctx, namespace.RootIno, "s", "", owner)
			return err
		}, want: namespace.ErrInvalid},
		{name: "symlink to a long target", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Symlink(ctx, namespace.RootIno, "s", strings.Repeat("t", namespace.MaxTargetLen+1), owner)
			return err
		}, want: namespace.ErrNameTooLong},
		{name: "mknod socket", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Mknod(ctx, namespace.RootIno, "sock", namespace.KindSocket, 0o600, owner)
			return err
		}, check: func(t *testing.T, ns namespace.Names, _ fixture) {
			if n := must(ns.Lookup(ctx, namespace.RootIno, "sock"))(t); n.Kind != namespace.KindSocket {
				t.Fatalf("socket %+v", n)
			}
		}},
		{name: "mknod of a file", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Mknod(ctx, namespace.RootIno, "m", namespace.KindFile, 0o600, owner)
			return err
		}, want: namespace.ErrInvalid},
		{name: "mknod device", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.MknodDevice(ctx, namespace.RootIno, "null", namespace.KindCharDev, 0o666, 1, 3, owner)
			return err
		}, check: func(t *testing.T, ns namespace.Names, _ fixture) {
			if n := must(ns.Lookup(ctx, namespace.RootIno, "null"))(t); n.Kind != namespace.KindCharDev || n.Major != 1 || n.Minor != 3 {
				t.Fatalf("device %+v", n)
			}
		}},
		{name: "mknod device past the bounds", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.MknodDevice(ctx, namespace.RootIno, "dev", namespace.KindBlockDev, 0o666, namespace.MaxMajor+1, 0, owner)
			return err
		}, want: namespace.ErrInvalid},
		{name: "lookup none", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Lookup(ctx, namespace.RootIno, "none")
			return err
		}, want: namespace.ErrNotExist},
		{name: "unlink a file", run: func(ns namespace.Names, fx fixture) error {
			n, err := ns.Unlink(ctx, namespace.RootIno, "f")
			if err == nil && (n.Ino != fx.f.Ino || n.Nlink != 0 || n.FileID != fx.f.FileID) {
				t.Errorf("unlink answered %+v", n)
			}
			return err
		}, check: func(t *testing.T, ns namespace.Names, fx fixture) {
			if _, err := ns.Lookup(ctx, namespace.RootIno, "f"); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("lookup after unlink: %v", err)
			}
			if n := must(ns.GetNode(ctx, fx.f.Ino))(t); n.Nlink != 0 || n.FileID != fx.f.FileID {
				t.Fatalf("the orphan %+v", n)
			}
			if o := must(ns.Orphans(ctx))(t); !reflect.DeepEqual(o, []namespace.Orphan{{Ino: fx.f.Ino, FileID: fx.f.FileID}}) {
				t.Fatalf("orphans %+v", o)
			}
			// The name can be made again, over its tombstone.
			must(ns.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
		}},
		{name: "unlink a symlink", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Unlink(ctx, namespace.RootIno, "l")
			return err
		}, check: func(t *testing.T, ns namespace.Names, _ fixture) {
			if o := must(ns.Orphans(ctx))(t); len(o) != 0 {
				t.Fatalf("orphans %+v", o)
			}
		}},
		{name: "unlink a directory", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Unlink(ctx, namespace.RootIno, "d")
			return err
		}, want: namespace.ErrIsDir},
		{name: "unlink none", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.Unlink(ctx, namespace.RootIno, "none")
			return err
		}, want: namespace.ErrNotExist},
		{name: "rmdir a file", run: func(ns namespace.Names, _ fixture) error {
			return ns.Rmdir(ctx, namespace.RootIno, "f")
		}, want: namespace.ErrNotDir},
		{name: "rmdir with names", run: func(ns namespace.Names, _ fixture) error {
			return ns.Rmdir(ctx, namespace.RootIno, "d")
		}, want: namespace.ErrNotEmpty},
		{name: "link", run: func(ns namespace.Names, fx fixture) error {
			n, err := ns.Link(ctx, fx.f.Ino, namespace.RootIno, "g")
			if err == nil && (n.Ino != fx.f.Ino || n.Nlink != 2 || n.FileID != fx.f.FileID) {
				t.Errorf("link answered %+v", n)
			}
			return err
		}, check: func(t *testing.T, ns namespace.Names, fx fixture) {
			for _, name := range []string{"f", "g"} {
				if n := must(ns.Lookup(ctx, namespace.RootIno, name))(t); n.Ino != fx.f.Ino || n.Nlink != 2 {
					t.Errorf("%s: %+v", name, n)
				}
			}
		}},
		{name: "link of a directory", run: func(ns namespace.Names, fx fixture) error {
			_, err := ns.Link(ctx, fx.d.Ino, namespace.RootIno, "g")
			return err
		}, want: namespace.ErrNotPermitted},
		{name: "link onto a name", run: func(ns namespace.Names, fx fixture) error {
			_, err := ns.Link(ctx, fx.f.Ino, namespace.RootIno, "p")
			return err
		}, want: namespace.ErrExist},
		{name: "setattr", run: func(ns namespace.Names, fx fixture) error {
			at := time.Unix(100, 5)
			n, err := ns.SetAttr(ctx, fx.x.Ino, namespace.SetAttr{Mode: mode(0o444), Mtime: &at})
			if err == nil && (n.Mode != 0o444 || n.MtimeNs != at.UnixNano() || n.MtimeSetNs == 0 || n.FileID != fx.x.FileID) {
				t.Errorf("setattr answered %+v", n)
			}
			return err
		}, check: func(t *testing.T, ns namespace.Names, fx fixture) {
			_ = ns.Refresh(ctx)
			if n := must(ns.GetNode(ctx, fx.x.Ino))(t); n.Mode != 0o444 || n.MtimeNs != time.Unix(100, 5).UnixNano() {
				t.Fatalf("after setattr, read again: %+v", n)
			}
		}},
		{name: "setattr of a symlink's mode", run: func(ns namespace.Names, fx fixture) error {
			_, err := ns.SetAttr(ctx, fx.l.Ino, namespace.SetAttr{Mode: mode(0o600)})
			return err
		}, check: func(t *testing.T, ns namespace.Names, fx fixture) {
			if n := must(ns.GetNode(ctx, fx.l.Ino))(t); n.Mode != 0o777 {
				t.Fatalf("symlink mode %o", n.Mode)
			}
		}},
		{name: "setattr of a bad mode", run: func(ns namespace.Names, fx fixture) error {
			_, err := ns.SetAttr(ctx, fx.f.Ino, namespace.SetAttr{Mode: mode(0o170000)})
			return err
		}, want: namespace.ErrInvalid},
		{name: "setattr of the root", run: func(ns namespace.Names, _ fixture) error {
			n, err := ns.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: mode(0o1777), Uid: &owner.Uid})
			if err == nil && (n.Ino != namespace.RootIno || n.Kind != namespace.KindDir || n.Mode != 0o1777 || n.Uid != owner.Uid || n.Gid != 0) {
				t.Errorf("root after setattr %+v", n)
			}
			return err
		}, check: func(t *testing.T, ns namespace.Names, _ fixture) {
			if n := must(ns.GetNode(ctx, namespace.RootIno))(t); n.Mode != 0o1777 || n.Uid != owner.Uid {
				t.Errorf("root %+v", n)
			}
		}},
		{name: "setattr of a node never seen", run: func(ns namespace.Names, _ fixture) error {
			_, err := ns.SetAttr(ctx, 1<<50, namespace.SetAttr{Mode: mode(0o700)})
			return err
		}, want: namespace.ErrNotExist},
		{name: "getnode of the root", run: func(ns namespace.Names, _ fixture) error {
			n, err := ns.GetNode(ctx, namespace.RootIno)
			if err == nil && (n.Kind != namespace.KindDir || n.Mode != 0o755 || n.Parent != namespace.RootIno) {
				t.Errorf("root %+v", n)
			}
			return err
		}},
		{name: "setxattr outside user.", run: func(ns namespace.Names, fx fixture) error {
			return ns.SetXattr(ctx, fx.f.Ino, "trusted.a", []byte("v"), 0)
		}, want: namespace.ErrNotSupported},
		{name: "setxattr of the fragment count of a directory with names", run: func(ns namespace.Names, fx fixture) error {
			return ns.SetXattr(ctx, fx.d.Ino, FragmentsXattr, []byte("16"), 0)
		}, want: namespace.ErrNotEmpty},
		{name: "setxattr too big", run: func(ns namespace.Names, fx fixture) error {
			return ns.SetXattr(ctx, fx.f.Ino, "user.a", make([]byte, namespace.MaxXattrValueLen+1), 0)
		}, want: namespace.ErrTooBig},
		{name: "setxattr past the node's room", run: func(ns namespace.Names, fx fixture) error {
			v := make([]byte, namespace.MaxXattrValueLen)
			for _, n := range []string{"user.1", "user.2", "user.3", "user.4"} {
				if err := ns.SetXattr(ctx, fx.f.Ino, n, v, 0); err != nil {
					return err
				}
			}
			return nil
		}, want: namespace.ErrNoSpace},
		{name: "setxattr replace of none", run: func(ns namespace.Names, fx fixture) error {
			return ns.SetXattr(ctx, fx.f.Ino, "user.a", []byte("v"), namespace.XattrReplace)
		}, want: namespace.ErrNoAttr},
		{name: "setxattr create of one", run: func(ns namespace.Names, fx fixture) error {
			if err := ns.SetXattr(ctx, fx.f.Ino, "user.a", []byte("v"), namespace.XattrCreate); err != nil {
				return err
			}
			return ns.SetXattr(ctx, fx.f.Ino, "user.a", []byte("w"), namespace.XattrCreate)
		}, want: namespace.ErrExist},
		{name: "removexattr of none", run: func(ns namespace.Names, fx fixture) error {
			return ns.RemoveXattr(ctx, fx.d.Ino, "user.a")
		}, want: namespace.ErrNoAttr},
		{name: "xattrs", run: func(ns namespace.Names, fx fixture) error {
			for _, x := range []struct{ n, v string }{{"user.b", "2"}, {"user.a", "1"}, {"user.c", ""}, {"user.b", "22"}} {
				if err := ns.SetXattr(ctx, fx.d.Ino, x.n, []byte(x.v), 0); err != nil {
					return err
				}
			}
			return ns.RemoveXattr(ctx, fx.d.Ino, "user.c")
		}, check: func(t *testing.T, ns namespace.Names, fx fixture) {
			_ = ns.Refresh(ctx)
			if l := must(ns.ListXattr(ctx, fx.d.Ino))(t); !reflect.DeepEqual(l, []string{"user.a", "user.b"}) {
				t.Fatalf("list %q", l)
			}
			if v := must(ns.GetXattr(ctx, fx.d.Ino, "user.b"))(t); string(v) != "22" {
				t.Fatalf("user.b is %q", v)
			}
			if _, err := ns.GetXattr(ctx, fx.d.Ino, "user.c"); !errors.Is(err, namespace.ErrNoAttr) {
				t.Fatalf("user.c: %v", err)
			}
		}},
		{name: "forget a named file", run: func(ns namespace.Names, fx fixture) error {
			return ns.Forget(ctx, fx.f.FileID)
		}, want: namespace.ErrNotExist},
		{name: "orphan and forget", run: func(ns namespace.Names, fx fixture) error {
			if _, err := ns.Unlink(ctx, fx.d.Ino, "x"); err != nil {
				return err
			}
			return ns.Forget(ctx, fx.x.FileID)
		}, check: func(t *testing.T, ns namespace.Names, fx fixture) {
			if o := must(ns.Orphaned(ctx, fx.x.FileID))(t); o {
				t.Fatal("orphaned after forget")
			}
			if n := must(ns.Named(ctx, fx.x.FileID))(t); n {
				t.Fatal("named after forget")
			}
			if err := ns.Forget(ctx, fx.x.FileID); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("forget again: %v", err)
			}
			if _, err := ns.GetNode(ctx, fx.x.Ino); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("getnode after forget: %v", err)
			}
		}},
		{name: "named", run: func(ns namespace.Names, fx fixture) error {
			named, err := ns.Named(ctx, fx.f.FileID)
			if err == nil && !named {
				t.Error("a named file is not named")
			}
			return err
		}},
		{name: "named of a file never seen", run: func(ns namespace.Names, _ fixture) error {
			named, err := ns.Named(ctx, cid(999))
			if named {
				t.Error("an unknown file is named")
			}
			return err
		}, want: errUnknownFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace.Names(openTree(t, mem.New(), 1))
			fx := makeFixture(t, ns)
			err := tc.run(ns, fx)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if tc.check != nil {
				tc.check(t, ns, fx)
			}
		})
	}
}

// TestTreeReadDirAfter: cookies are stable, above 2, and resume a listing
// neither repeating nor skipping what stayed.
func TestTreeReadDirAfter(t *testing.T) {
	ctx := context.Background()
	ns := namespace.Names(openTree(t, mem.New(), 1))
	for _, n := range []string{"a", "b", "c", "d"} {
		must(ns.Create(ctx, namespace.RootIno, n, 0o644, owner))(t)
	}
	all := must(ns.ReadDirAfter(ctx, namespace.RootIno, 0))(t)
	if len(all) != 4 || all[0].Cookie <= 2 {
		t.Fatalf("listing %+v", all)
	}
	must(ns.Unlink(ctx, namespace.RootIno, all[1].Name))(t)
	rest := must(ns.ReadDirAfter(ctx, namespace.RootIno, all[1].Cookie))(t)
	if !reflect.DeepEqual(rest, all[2:]) {
		t.Fatalf("after cookie %d: %+v, want %+v", all[1].Cookie, rest, all[2:])
	}
}

// TestTreeDamagedName: a damaged dentry is EIO for its name only.
func TestTreeDamagedName(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	ns := namespace.Names(openTree(t, st, 1))
	must(ns.Create(ctx, namespace.RootIno, "good", 0o644, owner))(t)
	key := must(DentryKey(root, namespace.RootIno, 1, "bad"))(t)
	if _, err := st.Put(ctx, key, []byte("CKN2junk"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Lookup(ctx, namespace.RootIno, "bad"); !errors.Is(err, namespace.ErrCorrupt) {
		t.Fatalf("lookup of the damaged name: %v", err)
	}
	if l := must(ns.ReadDir(ctx, namespace.RootIno))(t); len(l) != 1 || l[0].Name != "good" {
		t.Fatalf("listing %+v", l)
	}
	if _, err := ns.Create(ctx, namespace.RootIno, "bad", 0o644, owner); !errors.Is(err, namespace.ErrCorrupt) {
		t.Fatalf("create over the damaged name: %v", err)
	}
}

// TestTwoMountsSee: what one mount makes, the other finds on a miss, with
// no Refresh: names, a directory and names in it, attributes.
func TestTwoMountsSee(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	a, b := namespace.Names(openTree(t, st, 1)), namespace.Names(openTree(t, st, 2))
	f := must(a.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
	if got := must(b.Lookup(ctx, namespace.RootIno, "f"))(t); got != f {
		t.Fatalf("b looks up %+v, a made %+v", got, f)
	}
	d := must(a.Mkdir(ctx, namespace.RootIno, "d", 0o755, owner))(t)
	x := must(a.Create(ctx, d.Ino, "x", 0o644, owner))(t)
	if l := must(b.ReadDir(ctx, namespace.RootIno))(t); len(l) != 2 || l[0].Name != "d" || l[0].Ino != d.Ino || l[1].Name != "f" {
		t.Fatalf("b lists the root: %+v", l)
	}
	// b knows d from its listing: it can list it and create in it.
	if l := must(b.ReadDir(ctx, d.Ino))(t); len(l) != 1 || l[0].Ino != x.Ino {
		t.Fatalf("b lists d: %+v", l)
	}
	y := must(b.Create(ctx, d.Ino, "y", 0o644, owner))(t)
	if y.Ino>>BatchShift == x.Ino>>BatchShift {
		t.Fatalf("two mounts gave inos of one batch: %d, %d", x.Ino, y.Ino)
	}
	if l := must(a.ReadDir(ctx, d.Ino))(t); len(l) != 2 || l[1].Name != "y" || l[1].Ino != y.Ino {
		t.Fatalf("a lists d: %+v", l)
	}
	// A change of attributes by a, read by b after its Refresh.
	must(a.SetAttr(ctx, x.Ino, namespace.SetAttr{Uid: new(uint32(7))}))(t)
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := must(b.Lookup(ctx, d.Ino, "x"))(t); n.Uid != 7 {
		t.Fatalf("b reads x's owner %d", n.Uid)
	}
}

// TestTwoMountsExclusive: two mounts make one name at once: one wins, the
// other is told ErrExist, and both then see the winner's node.
func TestTwoMountsExclusive(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	trees := []namespace.Names{openTree(t, st, 1), openTree(t, st, 2)}
	makes := []func(ns namespace.Names, name string) (namespace.Node, error){
		func(ns namespace.Names, name string) (namespace.Node, error) {
			return ns.Create(ctx, namespace.RootIno, name, 0o644, owner)
		},
		func(ns namespace.Names, name string) (namespace.Node, error) {
			return ns.Mkdir(ctx, namespace.RootIno, name, 0o755, owner)
		},
	}
	for round := range 20 {
		name := "n" + string(rune('a'+round))
		start := make(chan struct{})
		nodes := make([]namespace.Node, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, ns := range trees {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				nodes[i], errs[i] = makes[(round+i)%2](ns, name)
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("%s: both mounts made it", name)
			case err == nil:
				won = i
			case !errors.Is(err, namespace.ErrExist):
				t.Fatalf("%s: mount %d: %v", name, i, err)
			}
		}
		if won < 0 {
			t.Fatalf("%s: neither mount made it", name)
		}
		for i, ns := range trees {
			if n := must(ns.Lookup(ctx, namespace.RootIno, name))(t); n.Ino != nodes[won].Ino {
				t.Fatalf("%s: mount %d sees %d, the winner made %d", name, i, n.Ino, nodes[won].Ino)
			}
		}
	}
}

// TestTwoMountsUnlink: an unlink by one mount is seen by the other's
// listing at once, by its Lookup after its Refresh (before it, a cached
// name may be served), and then as an orphan.
func TestTwoMountsUnlink(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	a, b := namespace.Names(openTree(t, st, 1)), namespace.Names(openTree(t, st, 2))
	f := must(a.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
	must(b.Lookup(ctx, namespace.RootIno, "f"))(t)
	must(a.Unlink(ctx, namespace.RootIno, "f"))(t)
	if l := must(b.ReadDir(ctx, namespace.RootIno))(t); len(l) != 0 {
		t.Fatalf("b lists %+v after the unlink", l)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lookup(ctx, namespace.RootIno, "f"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("b looks up f after the unlink and a Refresh: %v", err)
	}
	if n := must(b.GetNode(ctx, f.Ino))(t); n.Nlink != 0 {
		t.Fatalf("b's node of f after its unlink: %+v", n)
	}
	for _, ns := range []namespace.Names{a, b} {
		if o := must(ns.Orphaned(ctx, f.FileID))(t); !o {
			t.Fatal("not an orphan")
		}
		if n := must(ns.Named(ctx, f.FileID))(t); n {
			t.Fatal("named after its unlink")
		}
	}
	// Unlinked by b from a stale view: refused by the tombstone's ETag,
	// read again, and not there.
	if _, err := b.Unlink(ctx, namespace.RootIno, "f"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("a second unlink: %v", err)
	}
}

// TestTwoMountsXattrs: two mounts set attributes of one node, each from
// what it read before the other's change: the second is refused by
// If-Match, reads the dentry again and applies its change to it, so both
// stand.
func TestTwoMountsXattrs(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	a, b := namespace.Names(openTree(t, st, 1)), namespace.Names(openTree(t, st, 2))
	f := must(a.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
	must(b.Lookup(ctx, namespace.RootIno, "f"))(t)
	if err := a.SetXattr(ctx, f.Ino, "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := b.SetXattr(ctx, f.Ino, "user.b", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	// XattrCreate is checked against what the store holds, not the cache.
	if err := b.SetXattr(ctx, f.Ino, "user.a", []byte("3"), namespace.XattrCreate); !errors.Is(err, namespace.ErrExist) {
		t.Fatalf("b creates user.a, which a set: %v", err)
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if l := must(a.ListXattr(ctx, f.Ino))(t); !reflect.DeepEqual(l, []string{"user.a", "user.b"}) {
		t.Fatalf("a lists %q", l)
	}
	if v := must(a.GetXattr(ctx, f.Ino, "user.a"))(t); string(v) != "1" {
		t.Fatalf("user.a is %q", v)
	}
}

// TestTreeClosed: a closed Tree refuses calls.
func TestTreeClosed(t *testing.T) {
	tr := openTree(t, mem.New(), 1)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Lookup(context.Background(), namespace.RootIno, "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("lookup after close: %v", err)
	}
}
