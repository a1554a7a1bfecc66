package namespace

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging/mem"
)

// fixture holds a namespace with:
//
//	/d/         dir
//	/d/f        file
//	/d/sub/     dir
//	/d/sub/g    file
//	/e/         empty dir
//	/f          file (xattr user.k = "v")
//	/s          symlink -> f
type fixture struct {
	ns                  *Namespace
	d, df, sub, e, f, s Node
	subg                Node
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	fx := &fixture{ns: openNS(t, mem.New(), Options{})}
	ns := fx.ns
	must := func(n Node, err error) Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	fx.d = must(ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{}))
	fx.df = must(ns.Create(ctx, fx.d.Ino, "f", 0o644, Owner{}))
	fx.sub = must(ns.Mkdir(ctx, fx.d.Ino, "sub", 0o755, Owner{}))
	fx.subg = must(ns.Create(ctx, fx.sub.Ino, "g", 0o644, Owner{}))
	fx.e = must(ns.Mkdir(ctx, RootIno, "e", 0o700, Owner{}))
	fx.f = must(ns.Create(ctx, RootIno, "f", 0o600, Owner{Uid: 7, Gid: 8}))
	fx.s = must(ns.Symlink(ctx, RootIno, "s", "f", Owner{}))
	if err := ns.SetXattr(ctx, fx.f.Ino, "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	return fx
}

func TestErrors(t *testing.T) {
	long := strings.Repeat("x", MaxNameLen+1)
	cases := []struct {
		name string
		do   func(ctx context.Context, fx *fixture) error
		want error
	}{
		{"create existing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, RootIno, "f", 0o644, Owner{})
			return err
		}, ErrExist},
		{"create over dir name", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, RootIno, "d", 0o644, Owner{})
			return err
		}, ErrExist},
		{"create in missing parent", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, 12345<<16, "x", 0o644, Owner{})
			return err
		}, ErrNotExist},
		{"create in a file", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, fx.f.Ino, "x", 0o644, Owner{})
			return err
		}, ErrNotDir},
		{"create dot", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, RootIno, ".", 0o644, Owner{})
			return err
		}, ErrInvalid},
		{"create dotdot", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, RootIno, "..", 0o644, Owner{})
			return err
		}, ErrInvalid},
		{"create empty name", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, RootIno, "", 0o644, Owner{})
			return err
		}, ErrInvalid},
		{"create slash", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, RootIno, "a/b", 0o644, Owner{})
			return err
		}, ErrInvalid},
		{"create NUL", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, RootIno, "a\x00b", 0o644, Owner{})
			return err
		}, ErrInvalid},
		{"create long name", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, RootIno, long, 0o644, Owner{})
			return err
		}, ErrNameTooLong},
		{"create type bits in mode", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Create(ctx, RootIno, "x", 0o100644, Owner{})
			return err
		}, ErrInvalid},
		{"mkdir existing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Mkdir(ctx, RootIno, "e", 0o755, Owner{})
			return err
		}, ErrExist},
		{"mkdir long name", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Mkdir(ctx, RootIno, long, 0o755, Owner{})
			return err
		}, ErrNameTooLong},
		{"symlink empty target", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Symlink(ctx, RootIno, "x", "", Owner{})
			return err
		}, ErrInvalid},
		{"symlink long target", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Symlink(ctx, RootIno, "x", strings.Repeat("a/", 2048), Owner{})
			return err
		}, ErrNameTooLong},
		{"symlink existing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Symlink(ctx, RootIno, "s", "f", Owner{})
			return err
		}, ErrExist},
		{"link a directory", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Link(ctx, fx.d.Ino, RootIno, "x")
			return err
		}, ErrNotPermitted},
		{"link onto existing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Link(ctx, fx.f.Ino, RootIno, "s")
			return err
		}, ErrExist},
		{"link missing node", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Link(ctx, 999<<16, RootIno, "x")
			return err
		}, ErrNotExist},
		{"link into a file", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Link(ctx, fx.f.Ino, fx.f.Ino, "x")
			return err
		}, ErrNotDir},
		{"unlink a directory", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Unlink(ctx, RootIno, "e")
			return err
		}, ErrIsDir},
		{"unlink missing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Unlink(ctx, RootIno, "nope")
			return err
		}, ErrNotExist},
		{"rmdir a file", func(ctx context.Context, fx *fixture) error {
			return fx.ns.Rmdir(ctx, RootIno, "f")
		}, ErrNotDir},
		{"rmdir non-empty", func(ctx context.Context, fx *fixture) error {
			return fx.ns.Rmdir(ctx, RootIno, "d")
		}, ErrNotEmpty},
		{"rmdir missing", func(ctx context.Context, fx *fixture) error {
			return fx.ns.Rmdir(ctx, RootIno, "nope")
		}, ErrNotExist},
		{"rename missing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "nope", RootIno, "x", 0)
			return err
		}, ErrNotExist},
		{"rename into missing dir", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "f", 999<<16, "x", 0)
			return err
		}, ErrNotExist},
		{"rename dir under itself", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "d", fx.sub.Ino, "x", 0)
			return err
		}, ErrInvalid},
		{"rename dir into itself", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "d", fx.d.Ino, "x", 0)
			return err
		}, ErrInvalid},
		{"rename file onto dir", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "f", RootIno, "e", 0)
			return err
		}, ErrIsDir},
		{"rename dir onto file", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "e", RootIno, "f", 0)
			return err
		}, ErrNotDir},
		{"rename dir onto non-empty dir", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "e", RootIno, "d", 0)
			return err
		}, ErrNotEmpty},
		{"rename noreplace onto existing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "f", RootIno, "s", RenameNoReplace)
			return err
		}, ErrExist},
		{"rename exchange with missing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "f", RootIno, "nope", RenameExchange)
			return err
		}, ErrNotExist},
		{"rename exchange dir into own subtree", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "d", fx.sub.Ino, "g", RenameExchange)
			return err
		}, ErrInvalid},
		{"rename both flags", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "f", RootIno, "s", RenameNoReplace|RenameExchange)
			return err
		}, ErrInvalid},
		{"rename unknown flag", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "f", RootIno, "x", 8)
			return err
		}, ErrInvalid},
		{"rename to long name", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Rename(ctx, RootIno, "f", RootIno, long, 0)
			return err
		}, ErrNameTooLong},
		{"setattr missing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.SetAttr(ctx, 999<<16, SetAttr{Mode: u32(0o644)})
			return err
		}, ErrNotExist},
		{"setattr bad mode", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.SetAttr(ctx, fx.f.Ino, SetAttr{Mode: u32(0o170000)})
			return err
		}, ErrInvalid},
		{"setxattr trusted", func(ctx context.Context, fx *fixture) error {
			return fx.ns.SetXattr(ctx, fx.f.Ino, "trusted.x", []byte("v"), 0)
		}, ErrNotSupported},
		{"setxattr security", func(ctx context.Context, fx *fixture) error {
			return fx.ns.SetXattr(ctx, fx.f.Ino, "security.selinux", []byte("v"), 0)
		}, ErrNotSupported},
		{"setxattr bare user.", func(ctx context.Context, fx *fixture) error {
			return fx.ns.SetXattr(ctx, fx.f.Ino, "user.", []byte("v"), 0)
		}, ErrNotSupported},
		{"setxattr create existing", func(ctx context.Context, fx *fixture) error {
			return fx.ns.SetXattr(ctx, fx.f.Ino, "user.k", []byte("w"), XattrCreate)
		}, ErrExist},
		{"setxattr replace missing", func(ctx context.Context, fx *fixture) error {
			return fx.ns.SetXattr(ctx, fx.f.Ino, "user.nope", []byte("w"), XattrReplace)
		}, ErrNoAttr},
		{"setxattr both flags", func(ctx context.Context, fx *fixture) error {
			return fx.ns.SetXattr(ctx, fx.f.Ino, "user.k", []byte("w"), XattrCreate|XattrReplace)
		}, ErrInvalid},
		{"setxattr too big", func(ctx context.Context, fx *fixture) error {
			return fx.ns.SetXattr(ctx, fx.f.Ino, "user.k", make([]byte, MaxXattrValueLen+1), 0)
		}, ErrTooBig},
		{"setxattr long name", func(ctx context.Context, fx *fixture) error {
			return fx.ns.SetXattr(ctx, fx.f.Ino, "user."+long, nil, 0)
		}, ErrNameTooLong},
		{"setxattr missing node", func(ctx context.Context, fx *fixture) error {
			return fx.ns.SetXattr(ctx, 999<<16, "user.k", nil, 0)
		}, ErrNotExist},
		{"removexattr missing", func(ctx context.Context, fx *fixture) error {
			return fx.ns.RemoveXattr(ctx, fx.f.Ino, "user.nope")
		}, ErrNoAttr},
		{"removexattr system", func(ctx context.Context, fx *fixture) error {
			return fx.ns.RemoveXattr(ctx, fx.f.Ino, "system.posix_acl_access")
		}, ErrNotSupported},
		{"getxattr missing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.GetXattr(context.Background(), fx.f.Ino, "user.nope")
			return err
		}, ErrNoAttr},
		{"getxattr trusted", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.GetXattr(context.Background(), fx.f.Ino, "trusted.k")
			return err
		}, ErrNotSupported},
		{"forget a named file", func(ctx context.Context, fx *fixture) error {
			return fx.ns.Forget(ctx, fx.f.FileID)
		}, ErrInvalid},
		{"forget unknown file", func(ctx context.Context, fx *fixture) error {
			return fx.ns.Forget(ctx, NewFileID())
		}, ErrNotExist},
		{"lookup in a file", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Lookup(context.Background(), fx.f.Ino, "x")
			return err
		}, ErrNotDir},
		{"lookup missing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.Lookup(context.Background(), RootIno, "x")
			return err
		}, ErrNotExist},
		{"readdir of a file", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.ReadDir(context.Background(), fx.f.Ino)
			return err
		}, ErrNotDir},
		{"getnode missing", func(ctx context.Context, fx *fixture) error {
			_, err := fx.ns.GetNode(context.Background(), 999<<16)
			return err
		}, ErrNotExist},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			before, seq := dump(t, fx.ns), fx.ns.Seq()
			err := tc.do(context.Background(), fx)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if fx.ns.Seq() != seq || dump(t, fx.ns) != before {
				t.Fatalf("a refused change changed the namespace (seq %d -> %d)", seq, fx.ns.Seq())
			}
		})
	}
}

func TestCreateAndTimes(t *testing.T) {
	ctx := context.Background()
	ns := openNS(t, mem.New(), Options{})
	n, err := ns.Create(ctx, RootIno, "a", 0o640, Owner{Uid: 5, Gid: 6})
	if err != nil {
		t.Fatal(err)
	}
	if n.Ino != inoOf(ns.Seq(), 0) || n.Kind != KindFile || n.Mode != 0o640 || n.Uid != 5 || n.Gid != 6 || n.Nlink != 1 {
		t.Fatalf("created %+v", n)
	}
	if !validID(n.FileID) || n.AtimeNs == 0 || n.MtimeNs != n.CtimeNs || n.MtimeSetNs != 0 {
		t.Fatalf("created %+v", n)
	}
	root, _ := ns.GetNode(context.Background(), RootIno)
	if root.MtimeNs != n.CtimeNs || root.CtimeNs != n.CtimeNs {
		t.Fatalf("root times %d/%d, want %d", root.MtimeNs, root.CtimeNs, n.CtimeNs)
	}
	got, err := ns.Lookup(context.Background(), RootIno, "a")
	if err != nil || got != n {
		t.Fatalf("Lookup = %+v, %v; want %+v", got, err, n)
	}
	d, err := ns.Mkdir(ctx, RootIno, "d", 0o700, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Nlink != 2 || d.Parent != RootIno || d.Kind != KindDir {
		t.Fatalf("mkdir %+v", d)
	}
	if root, _ = ns.GetNode(context.Background(), RootIno); root.Nlink != 3 {
		t.Fatalf("root nlink %d, want 3", root.Nlink)
	}
	s, err := ns.Symlink(ctx, d.Ino, "l", "../a", Owner{Uid: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind != KindSymlink || s.Target != "../a" || s.Mode != 0o777 || s.FileID != "" {
		t.Fatalf("symlink %+v", s)
	}
	// Names of any bytes survive.
	odd := "caf\xe9-\xff"
	if _, err := ns.Create(ctx, RootIno, odd, 0o600, Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Lookup(context.Background(), RootIno, odd); err != nil {
		t.Fatal(err)
	}
	other := openNS(t, ns.store, Options{})
	if dump(t, other) != dump(t, ns) {
		t.Fatal("a second mount replays to another state")
	}
}

func TestLinkUnlinkOrphanForget(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t)
	ns := fx.ns
	n, err := ns.Link(ctx, fx.f.Ino, fx.d.Ino, "f2")
	if err != nil {
		t.Fatal(err)
	}
	if n.Nlink != 2 || n.Ino != fx.f.Ino {
		t.Fatalf("after link %+v", n)
	}
	for _, p := range []struct {
		dir  Ino
		name string
	}{{RootIno, "f"}, {fx.d.Ino, "f2"}} {
		got, err := ns.Lookup(context.Background(), p.dir, p.name)
		if err != nil || got.Ino != fx.f.Ino || got.Nlink != 2 {
			t.Fatalf("Lookup %q = %+v, %v", p.name, got, err)
		}
	}
	// Renaming one name of a node onto another changes nothing.
	if rep, err := ns.Rename(ctx, RootIno, "f", fx.d.Ino, "f2", 0); err != nil || rep.Ino != 0 {
		t.Fatalf("rename onto own link: %+v, %v", rep, err)
	}
	if got, err := ns.Lookup(context.Background(), RootIno, "f"); err != nil || got.Nlink != 2 {
		t.Fatalf("after rename onto own link: %+v, %v", got, err)
	}
	if n, err = ns.Unlink(ctx, RootIno, "f"); err != nil || n.Nlink != 1 {
		t.Fatalf("unlink first name: %+v, %v", n, err)
	}
	if len(orphans(t, ns)) != 0 {
		t.Fatalf("orphans %v with a name left", orphans(t, ns))
	}
	if n, err = ns.Unlink(ctx, fx.d.Ino, "f2"); err != nil || n.Nlink != 0 {
		t.Fatalf("unlink last name: %+v, %v", n, err)
	}
	want := []Orphan{{Ino: fx.f.Ino, FileID: fx.f.FileID}}
	if got := orphans(t, ns); !slices.Equal(got, want) {
		t.Fatalf("Orphans = %v, want %v", got, want)
	}
	if got, err := ns.GetNode(context.Background(), fx.f.Ino); err != nil || got.Nlink != 0 || got.FileID != fx.f.FileID {
		t.Fatalf("orphan GetNode = %+v, %v", got, err)
	}
	if v, err := ns.GetXattr(context.Background(), fx.f.Ino, "user.k"); err != nil || string(v) != "v" {
		t.Fatalf("orphan xattr = %q, %v", v, err)
	}
	if _, err := ns.Link(ctx, fx.f.Ino, RootIno, "back"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("link of an orphan: %v", err)
	}
	// A second mount agrees before the orphan is forgotten.
	other := openNS(t, ns.store, Options{})
	if got := orphans(t, other); !slices.Equal(got, want) {
		t.Fatalf("other mount Orphans = %v", got)
	}
	if err := ns.Forget(ctx, fx.f.FileID); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.GetNode(context.Background(), fx.f.Ino); !errors.Is(err, ErrNotExist) {
		t.Fatalf("GetNode after Forget: %v", err)
	}
	if len(orphans(t, ns)) != 0 {
		t.Fatal("orphan left after Forget")
	}
	if err := other.Forget(ctx, fx.f.FileID); !errors.Is(err, ErrNotExist) {
		t.Fatalf("second Forget: %v", err)
	}
	// Unlinking a symlink's last name drops it.
	if n, err = ns.Unlink(ctx, RootIno, "s"); err != nil || n.Nlink != 0 || n.Ino != fx.s.Ino {
		t.Fatalf("unlink symlink: %+v, %v", n, err)
	}
	if _, err := ns.GetNode(context.Background(), fx.s.Ino); !errors.Is(err, ErrNotExist) {
		t.Fatalf("symlink node left: %v", err)
	}
	if err := ns.Rmdir(ctx, RootIno, "e"); err != nil {
		t.Fatal(err)
	}
	if root, _ := ns.GetNode(context.Background(), RootIno); root.Nlink != 3 {
		t.Fatalf("root nlink %d after rmdir, want 3 (d)", root.Nlink)
	}
	if _, err := ns.GetNode(context.Background(), fx.e.Ino); !errors.Is(err, ErrNotExist) {
		t.Fatalf("removed dir node left: %v", err)
	}
}

func TestRename(t *testing.T) {
	ctx := context.Background()
	type want struct {
		dir  func(fx *fixture) Ino
		name string
		ino  func(fx *fixture) Ino
	}
	root := func(*fixture) Ino { return RootIno }
	cases := []struct {
		name        string
		from        func(fx *fixture) (Ino, string)
		to          func(fx *fixture) (Ino, string)
		flags       RenameFlags
		present     []want
		absent      []want
		replaced    func(fx *fixture) Ino
		orphan      bool
		rootNlink   uint32
		dNlink      uint32
		movedParent func(fx *fixture) (Ino, Ino) // dir ino, want parent
	}{
		{
			name:      "file across dirs",
			from:      func(fx *fixture) (Ino, string) { return RootIno, "f" },
			to:        func(fx *fixture) (Ino, string) { return fx.d.Ino, "moved" },
			present:   []want{{func(fx *fixture) Ino { return fx.d.Ino }, "moved", func(fx *fixture) Ino { return fx.f.Ino }}},
			absent:    []want{{root, "f", nil}},
			rootNlink: 4, dNlink: 3,
		},
		{
			name:      "file over file",
			from:      func(fx *fixture) (Ino, string) { return fx.d.Ino, "f" },
			to:        func(fx *fixture) (Ino, string) { return RootIno, "f" },
			present:   []want{{root, "f", func(fx *fixture) Ino { return fx.df.Ino }}},
			absent:    []want{{func(fx *fixture) Ino { return fx.d.Ino }, "f", nil}},
			replaced:  func(fx *fixture) Ino { return fx.f.Ino },
			orphan:    true,
			rootNlink: 4, dNlink: 3,
		},
		{
			name:      "dir over empty dir",
			from:      func(fx *fixture) (Ino, string) { return fx.d.Ino, "sub" },
			to:        func(fx *fixture) (Ino, string) { return RootIno, "e" },
			present:   []want{{root, "e", func(fx *fixture) Ino { return fx.sub.Ino }}},
			absent:    []want{{func(fx *fixture) Ino { return fx.d.Ino }, "sub", nil}},
			replaced:  func(fx *fixture) Ino { return fx.e.Ino },
			rootNlink: 4, dNlink: 2,
			movedParent: func(fx *fixture) (Ino, Ino) { return fx.sub.Ino, RootIno },
		},
		{
			name:      "dir up a level",
			from:      func(fx *fixture) (Ino, string) { return fx.d.Ino, "sub" },
			to:        func(fx *fixture) (Ino, string) { return RootIno, "sub2" },
			present:   []want{{root, "sub2", func(fx *fixture) Ino { return fx.sub.Ino }}},
			rootNlink: 5, dNlink: 2,
			movedParent: func(fx *fixture) (Ino, Ino) { return fx.sub.Ino, RootIno },
		},
		{
			name:  "exchange file and dir across dirs",
			from:  func(fx *fixture) (Ino, string) { return RootIno, "f" },
			to:    func(fx *fixture) (Ino, string) { return fx.d.Ino, "sub" },
			flags: RenameExchange,
			present: []want{
				{root, "f", func(fx *fixture) Ino { return fx.sub.Ino }},
				{func(fx *fixture) Ino { return fx.d.Ino }, "sub", func(fx *fixture) Ino { return fx.f.Ino }},
			},
			rootNlink: 5, dNlink: 2,
			movedParent: func(fx *fixture) (Ino, Ino) { return fx.sub.Ino, RootIno },
		},
		{
			name:      "noreplace to a free name",
			from:      func(fx *fixture) (Ino, string) { return RootIno, "s" },
			to:        func(fx *fixture) (Ino, string) { return RootIno, "s2" },
			flags:     RenameNoReplace,
			present:   []want{{root, "s2", func(fx *fixture) Ino { return fx.s.Ino }}},
			absent:    []want{{root, "s", nil}},
			rootNlink: 4, dNlink: 3,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			fd, fn := tc.from(fx)
			td, tn := tc.to(fx)
			rep, err := fx.ns.Rename(ctx, fd, fn, td, tn, tc.flags)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.present {
				n, err := fx.ns.Lookup(context.Background(), w.dir(fx), w.name)
				if err != nil || n.Ino != w.ino(fx) {
					t.Errorf("Lookup %q = %d, %v; want %d", w.name, n.Ino, err, w.ino(fx))
				}
			}
			for _, w := range tc.absent {
				if _, err := fx.ns.Lookup(context.Background(), w.dir(fx), w.name); !errors.Is(err, ErrNotExist) {
					t.Errorf("Lookup %q: %v, want ErrNotExist", w.name, err)
				}
			}
			var wantRep Ino
			if tc.replaced != nil {
				wantRep = tc.replaced(fx)
			}
			if rep.Ino != wantRep || wantRep != 0 && rep.Nlink != 0 {
				t.Errorf("replaced %+v, want ino %d with no names", rep, wantRep)
			}
			if got := len(orphans(t, fx.ns)) == 1; got != tc.orphan {
				t.Errorf("orphans %v", orphans(t, fx.ns))
			}
			if r, _ := fx.ns.GetNode(context.Background(), RootIno); r.Nlink != tc.rootNlink {
				t.Errorf("root nlink %d, want %d", r.Nlink, tc.rootNlink)
			}
			if d, _ := fx.ns.GetNode(context.Background(), fx.d.Ino); d.Nlink != tc.dNlink {
				t.Errorf("d nlink %d, want %d", d.Nlink, tc.dNlink)
			}
			if tc.movedParent != nil {
				ino, parent := tc.movedParent(fx)
				if n, _ := fx.ns.GetNode(context.Background(), ino); n.Parent != parent {
					t.Errorf("parent of %d is %d, want %d", ino, n.Parent, parent)
				}
			}
			other := openNS(t, fx.ns.store, Options{})
			if dump(t, other) != dump(t, fx.ns) {
				t.Error("a second mount replays to another state")
			}
		})
	}
}

func TestSetAttrAndXattr(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t)
	ns := fx.ns
	at, mt := time.Unix(100, 1), time.Unix(200, 2)
	n, err := ns.SetAttr(ctx, fx.f.Ino, SetAttr{Mode: u32(0o4755), Uid: u32(1000), Atime: &at, Mtime: &mt})
	if err != nil {
		t.Fatal(err)
	}
	if n.Mode != 0o4755 || n.Uid != 1000 || n.Gid != fx.f.Gid || n.AtimeNs != at.UnixNano() || n.MtimeNs != mt.UnixNano() {
		t.Fatalf("after setattr %+v", n)
	}
	if n.MtimeSetNs == 0 || n.CtimeNs != n.MtimeSetNs || n.CtimeNs <= fx.f.CtimeNs {
		t.Fatalf("setattr times %+v (created %+v)", n, fx.f)
	}
	// Only atime (touch -a): mtime and its mark stay.
	at2 := time.Unix(300, 0)
	n2, err := ns.SetAttr(ctx, fx.f.Ino, SetAttr{Atime: &at2})
	if err != nil {
		t.Fatal(err)
	}
	if n2.AtimeNs != at2.UnixNano() || n2.MtimeNs != mt.UnixNano() || n2.MtimeSetNs != n.MtimeSetNs || n2.CtimeNs <= n.CtimeNs {
		t.Fatalf("after touch -a %+v", n2)
	}
	ct := time.Unix(400, 0)
	if n3, err := ns.SetAttr(ctx, fx.f.Ino, SetAttr{Gid: u32(9), Ctime: &ct}); err != nil || n3.Gid != 9 || n3.CtimeNs != ct.UnixNano() {
		t.Fatalf("explicit ctime: %+v, %v", n3, err)
	}

	for _, x := range []struct {
		name  string
		value string
		flags XattrFlags
	}{{"user.a", "1", XattrCreate}, {"user.k", "v2", XattrReplace}, {"user.b", "", 0}} {
		if err := ns.SetXattr(ctx, fx.f.Ino, x.name, []byte(x.value), x.flags); err != nil {
			t.Fatalf("SetXattr %s: %v", x.name, err)
		}
		if v, err := ns.GetXattr(context.Background(), fx.f.Ino, x.name); err != nil || string(v) != x.value {
			t.Fatalf("GetXattr %s = %q, %v", x.name, v, err)
		}
	}
	if names, _ := ns.ListXattr(context.Background(), fx.f.Ino); !slices.Equal(names, []string{"user.a", "user.b", "user.k"}) {
		t.Fatalf("ListXattr = %v", names)
	}
	if err := ns.RemoveXattr(ctx, fx.f.Ino, "user.a"); err != nil {
		t.Fatal(err)
	}
	if names, _ := ns.ListXattr(context.Background(), fx.f.Ino); !slices.Equal(names, []string{"user.b", "user.k"}) {
		t.Fatalf("ListXattr after remove = %v", names)
	}
	other := openNS(t, ns.store, Options{})
	if dump(t, other) != dump(t, ns) {
		t.Fatal("a second mount replays to another state")
	}
}

func TestReadDirCookies(t *testing.T) {
	ctx := context.Background()
	ns := openNS(t, mem.New(), Options{})
	names := []string{"m", "c", "x", "a", "q", "b"}
	for _, n := range names {
		if _, err := ns.Create(ctx, RootIno, n, 0o644, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := ns.ReadDir(context.Background(), RootIno)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, de := range list {
		got = append(got, de.Name)
		if de.Cookie <= 2 || de.Kind != KindFile {
			t.Fatalf("dirent %+v", de)
		}
	}
	if !slices.Equal(got, []string{"a", "b", "c", "m", "q", "x"}) {
		t.Fatalf("ReadDir names %v", got)
	}
	// Read two entries, remove some (read and unread), resume at the second
	// one's cookie: the rest comes exactly once.
	first, err := ns.ReadDirAfter(context.Background(), RootIno, 0)
	if err != nil || len(first) != 6 {
		t.Fatalf("ReadDirAfter(0) = %v, %v", first, err)
	}
	if first[0].Name != "m" || first[1].Name != "c" {
		t.Fatalf("cookie order %v", first)
	}
	for _, n := range []string{"m", "c", "a"} {
		if _, err := ns.Unlink(ctx, RootIno, n); err != nil {
			t.Fatal(err)
		}
	}
	rest, err := ns.ReadDirAfter(context.Background(), RootIno, first[1].Cookie)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, de := range rest {
		got = append(got, de.Name)
	}
	if !slices.Equal(got, []string{"x", "q", "b"}) {
		t.Fatalf("resumed listing %v, want [x q b]", got)
	}
	// Cookies are the same in every mount.
	other := openNS(t, ns.store, Options{})
	o, _ := other.ReadDirAfter(context.Background(), RootIno, 0)
	if !slices.Equal(o, rest) {
		t.Fatalf("other mount lists %v, want %v", o, rest)
	}
}
