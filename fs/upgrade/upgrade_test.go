package upgrade

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

const root = "vol/"

// v1Volume makes a v1 volume on a memory store with S3's ETags: files,
// directories (nested), symlinks, extended attributes, device nodes, a FIFO
// and a socket, names that need escaping, set owners, modes and times; and
// a stand-in for each file's data under f/<file-id>/ (the upgrade must not
// touch it); and a file of three names (hard links: /d/e/f3 = /hard =
// /d/hard2) with its own owner, mode, times and extended attribute. It
// returns the store and the open v1 namespace.
func v1Volume(t testing.TB) (*mem.Store, *namespace.Namespace) {
	t.Helper()
	ctx := context.Background()
	st := mem.NewS3ETags()
	if _, err := volume.CreateDescriptor(ctx, st, root, config.Default()); err != nil {
		t.Fatal(err)
	}
	ns, err := namespace.Open(ctx, st, root, namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(n namespace.Node, err error) namespace.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	own := namespace.Owner{Uid: 1000, Gid: 100}
	d := must(ns.Mkdir(ctx, namespace.RootIno, "d", 0o750, own))
	e := must(ns.Mkdir(ctx, d.Ino, "e", 0o700, namespace.Owner{}))
	var files []namespace.Node
	for i, where := range []namespace.Ino{namespace.RootIno, d.Ino, e.Ino, e.Ino} {
		files = append(files, must(ns.Create(ctx, where, fmt.Sprintf("f%d", i), 0o644, own)))
	}
	// A name v2 escapes in its key.
	files = append(files, must(ns.Create(ctx, d.Ino, "100% \xff\x01?", 0o600, own)))
	must(ns.Symlink(ctx, namespace.RootIno, "s", "d/e/f2", own))
	must(ns.Symlink(ctx, e.Ino, "dangling", "/nowhere", namespace.Owner{}))
	must(ns.MknodDevice(ctx, namespace.RootIno, "null", namespace.KindCharDev, 0o666, 1, 3, namespace.Owner{}))
	must(ns.MknodDevice(ctx, d.Ino, "sda", namespace.KindBlockDev, 0o660, 8, 0, namespace.Owner{Gid: 6}))
	must(ns.Mknod(ctx, e.Ino, "fifo", namespace.KindFIFO, 0o644, own))
	must(ns.Mknod(ctx, e.Ino, "sock", namespace.KindSocket, 0o755, own))
	for _, x := range []struct {
		ino   namespace.Ino
		name  string
		value string
	}{{files[0].Ino, "user.a", "1"}, {files[0].Ino, "user.b", ""}, {d.Ino, "user.dir", "x\x00y"}, {files[2].Ino, "user.\xfe", "bin"},
		{files[3].Ino, "user.linked", "3"}} {
		if err := ns.SetXattr(ctx, x.ino, x.name, []byte(x.value), 0); err != nil {
			t.Fatal(err)
		}
	}
	at, mt := time.Unix(1_600_000_000, 5), time.Unix(1_500_000_000, 7)
	mode, uid := uint32(0o4755), uint32(7)
	must(ns.SetAttr(ctx, files[1].Ino, namespace.SetAttr{Mode: &mode, Uid: &uid, Atime: &at, Mtime: &mt}))
	must(ns.Link(ctx, files[3].Ino, namespace.RootIno, "hard"))
	must(ns.Link(ctx, files[3].Ino, d.Ino, "hard2"))
	lmode, lgid, lt := uint32(0o640), uint32(50), time.Unix(1_400_000_000, 9)
	must(ns.SetAttr(ctx, files[3].Ino, namespace.SetAttr{Mode: &lmode, Gid: &lgid, Mtime: &lt}))
	// The root's attributes, which v2 keeps in an object of their own.
	rmode, ruid, rt := uint32(0o1777), uint32(1000), time.Unix(1_300_000_000, 11)
	must(ns.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: &rmode, Uid: &ruid, Mtime: &rt}))
	if err := ns.SetXattr(ctx, namespace.RootIno, "user.root", []byte("r"), 0); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for _, name := range []string{"inode", "0000000001.0"} {
			if _, err := st.Put(ctx, volume.FilePrefix(root, f.FileID)+name, []byte("data of "+f.FileID+name), staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return st, ns
}

// view is a namespace as its names show it: path -> node, attributes,
// extended attributes, and a file's count of names.
type view map[string]string

// walk reads every name of ns from the root.
func walk(t testing.TB, ns namespace.Names) view {
	t.Helper()
	ctx := context.Background()
	out := view{}
	node := func(p string, n namespace.Node) {
		xs, err := ns.ListXattr(ctx, n.Ino)
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(xs)
		var xv []string
		for _, x := range xs {
			v, err := ns.GetXattr(ctx, n.Ino, x)
			if err != nil {
				t.Fatal(err)
			}
			xv = append(xv, fmt.Sprintf("%q=%q", x, v))
		}
		nl := ""
		if n.Kind != namespace.KindDir {
			nl = fmt.Sprintf(" nlink=%d", n.Nlink)
		}
		out[p] = fmt.Sprintf("ino=%d kind=%v%s mode=%o uid=%d gid=%d at=%d mt=%d ct=%d ms=%d file=%s target=%q dev=%d:%d x=%v",
			n.Ino, n.Kind, nl, n.Mode, n.Uid, n.Gid, n.AtimeNs, n.MtimeNs, n.CtimeNs, n.MtimeSetNs, n.FileID, n.Target, n.Major, n.Minor, xv)
	}
	r, err := ns.GetNode(ctx, namespace.RootIno)
	if err != nil {
		t.Fatalf("the root: %v", err)
	}
	node("/", r)
	var rec func(dir namespace.Ino, path string)
	rec = func(dir namespace.Ino, path string) {
		ents, err := ns.ReadDir(ctx, dir)
		if err != nil {
			t.Fatalf("ReadDir %s: %v", path, err)
		}
		for _, de := range ents {
			p := path + "/" + de.Name
			n, err := ns.Lookup(ctx, dir, de.Name)
			if err != nil {
				t.Fatalf("Lookup %s: %v", p, err)
			}
			if n.Ino != de.Ino || n.Kind != de.Kind {
				t.Fatalf("%s: listed as %d %v, looked up as %d %v", p, de.Ino, de.Kind, n.Ino, n.Kind)
			}
			node(p, n)
			if n.Kind == namespace.KindDir {
				rec(n.Ino, p)
			}
		}
	}
	rec(namespace.RootIno, "")
	return out
}

// objects is every object under prefix, key -> content.
func objects(t testing.TB, st staging.Store, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	objs, err := staging.ListAll(ctx, st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range objs {
		b, _, err := st.Get(ctx, o.Key, staging.Whole())
		if err != nil {
			t.Fatal(err)
		}
		out[o.Key] = string(b)
	}
	return out
}

// openV2 opens the volume's names as a mount would, and checks they are
// v2's.
func openV2(t testing.TB, st staging.Store) namespace.Names {
	t.Helper()
	ctx := context.Background()
	d, err := volume.ReadDescriptor(ctx, st, root)
	if err != nil {
		t.Fatal(err)
	}
	if d.NamespaceVersion() != config.NamespaceV2 || d.LayoutVersion != 2 {
		t.Fatalf("descriptor after the upgrade: %+v", d)
	}
	names, err := volume.OpenNames(ctx, st, root, d, volume.NamesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := names.(*nsv2.Tree); !ok {
		t.Fatalf("OpenNames gave a %T", names)
	}
	t.Cleanup(func() { names.Close() })
	return names
}

// TestUpgrade: a v1 volume upgraded lists, through an nsv2.Tree, the same
// names with the same inos and attributes; the files' objects are
// untouched; a v1 mount open meanwhile fails its next change with
// ErrFenced; a new v2 ino is above every v1 ino; the format and block
// sizes stay; upgrading again is ErrAlreadyV2. The file of three names is
// one inode object that its names bind, whole for fsck, and changes through
// one name are seen through another (checkLinked).
func TestUpgrade(t *testing.T) {
	ctx := context.Background()
	st, ns := v1Volume(t)
	defer ns.Close()
	before := walk(t, ns)
	data := objects(t, st, root+"f/")
	desc, err := volume.ReadDescriptor(ctx, st, root)
	if err != nil {
		t.Fatal(err)
	}

	var progress []int
	var mu sync.Mutex
	rep, err := Upgrade(ctx, st, root, Options{Parallel: 4, Progress: func(n int) { mu.Lock(); progress = append(progress, n); mu.Unlock() }})
	if err != nil {
		t.Fatalf("Upgrade: %v", err)
	}
	if rep.Names != len(before)-1 || rep.Dirs != 2 || rep.Files != 7 || rep.Symlinks != 2 || rep.Others != 4 || rep.Linked != 1 || rep.Resumed || len(progress) != len(before)-1 {
		t.Fatalf("report %+v (progress %d calls), want %d names", rep, len(progress), len(before))
	}

	tree := openV2(t, st)
	after := walk(t, tree)
	if !reflect.DeepEqual(before, after) {
		for p, v := range before {
			if after[p] != v {
				t.Errorf("%s:\n v1 %s\n v2 %s", p, v, after[p])
			}
		}
		for p := range after {
			if _, ok := before[p]; !ok {
				t.Errorf("%s only in v2", p)
			}
		}
		t.FailNow()
	}
	if got := objects(t, st, root+"f/"); !reflect.DeepEqual(got, data) {
		t.Fatal("the files' objects changed")
	}
	nd, err := volume.ReadDescriptor(ctx, st, root)
	if err != nil || nd.Format != desc.Format || nd.DataBlockSize != desc.DataBlockSize || nd.MetaBlockSize != desc.MetaBlockSize {
		t.Fatalf("descriptor %+v, %v; was %+v", nd, err, desc)
	}

	// The v1 mount, open all along.
	if _, err := ns.Create(ctx, namespace.RootIno, "late", 0o644, namespace.Owner{}); !errors.Is(err, namespace.ErrFenced) {
		t.Fatalf("a v1 change after the upgrade: %v; want ErrFenced", err)
	}
	// A v1 open of the volume as it was (a build that reads layout 1 and
	// the fence) is refused, naming ckptfs upgrade.
	if _, err := namespace.Open(ctx, st, root, namespace.Options{}); !errors.Is(err, namespace.ErrFenced) || !strings.Contains(err.Error(), "ckptfs upgrade") {
		t.Fatalf("v1 open of the upgraded volume: %v", err)
	}

	// fsck of v2 finds the upgraded names whole: the file of three names
	// counted once as a file, its names as linked.
	c, err := nsv2.Check(ctx, st, root, time.Now(), func(context.Context, string) (bool, int, error) { return true, 2, nil })
	if err != nil || len(c.Problems) != 0 || len(c.Notes) != 0 || c.Files != 5 || c.Linked != 3 || c.Dirs != 2 || c.Others != 6 {
		t.Fatalf("nsv2.Check after the upgrade: %+v, %v", c, err)
	}
	checkLinked(t, st, tree)

	// A new v2 node: an ino no v1 node has, above them all.
	n, err := tree.Create(ctx, namespace.RootIno, "new", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Ino < nsv2.FirstIno(v2FirstBatch) {
		t.Fatalf("new v2 ino %d below %d", n.Ino, nsv2.FirstIno(v2FirstBatch))
	}
	if d, err := tree.Lookup(ctx, namespace.RootIno, "d"); err != nil {
		t.Fatal(err)
	} else if _, err := tree.Create(ctx, d.Ino, "new", 0o644, namespace.Owner{}); err != nil {
		t.Fatalf("create in an upgraded directory: %v", err)
	}

	if _, err := Upgrade(ctx, st, root, Options{}); !errors.Is(err, ErrAlreadyV2) {
		t.Fatalf("upgrade of a v2 volume: %v; want ErrAlreadyV2", err)
	}
}

// checkLinked: the file of three names is, in v2, an inode object (three
// names, the v1 ino) whose names bind it without attributes, as nsv2's Link
// leaves one; a chmod through one name and the unlink of another, made
// through tree, are seen through the third by another mount.
func checkLinked(t *testing.T, st staging.Store, tree namespace.Names) {
	t.Helper()
	ctx := context.Background()
	f3, err := tree.Lookup(ctx, namespace.RootIno, "hard")
	if err != nil {
		t.Fatal(err)
	}
	if f3.Nlink != 3 || f3.Mode != 0o640 || f3.Gid != 50 {
		t.Fatalf("/hard in v2: %+v", f3)
	}
	prim := nsv2.New(st, root, nil)
	r, err := prim.Resolve(ctx, namespace.RootIno, rootFrags, "hard")
	if err != nil || r.Bound == nil || r.Bound.Ino != f3.Ino || r.Bound.Node != nil {
		t.Fatalf("the dentry of /hard: %+v, %v; want ino %d without attributes", r.Bound, err, f3.Ino)
	}
	in, err := prim.ResolveInode(ctx, f3.Ino)
	if err != nil || in.Inode == nil || in.Inode.Nlink != 3 || in.Inode.Node.FileID != f3.FileID || in.Locked {
		t.Fatalf("the inode object of /hard: %+v, %v", in.Inode, err)
	}

	mode := uint32(0o600)
	if _, err := tree.SetAttr(ctx, f3.Ino, namespace.SetAttr{Mode: &mode}); err != nil {
		t.Fatalf("chmod /hard: %v", err)
	}
	e, err := tree.Lookup(ctx, namespace.RootIno, "d")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Unlink(ctx, e.Ino, "hard2"); err != nil {
		t.Fatalf("unlink /d/hard2: %v", err)
	}
	other := openV2(t, st)
	d, err := other.Lookup(ctx, namespace.RootIno, "d")
	if err != nil {
		t.Fatal(err)
	}
	e, err = other.Lookup(ctx, d.Ino, "e")
	if err != nil {
		t.Fatal(err)
	}
	got, err := other.Lookup(ctx, e.Ino, "f3")
	if err != nil {
		t.Fatal(err)
	}
	if got.Ino != f3.Ino || got.Nlink != 2 || got.Mode != 0o600 || got.FileID != f3.FileID {
		t.Fatalf("/d/e/f3 seen by another mount after the chmod and the unlink: %+v", got)
	}
	if _, err := other.Lookup(ctx, d.Ino, "hard2"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("/d/hard2 after its unlink: %v", err)
	}
}

// TestUpgradeRoot: v1's root's attributes are v2's root object's after
// the upgrade (TestUpgrade compares them through a v2 mount), which a v2
// mount then changes; a root object with other attributes is ErrConflict,
// the descriptor left at v1; one with the same under another change id
// counts as written.
func TestUpgradeRoot(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		mode uint32
		want error
	}{{"none", 0, nil}, {"other attributes", 0o700, ErrConflict}, {"same attributes", 0o1777, nil}} {
		t.Run(c.name, func(t *testing.T) {
			st, ns := v1Volume(t)
			r, err := ns.GetNode(ctx, namespace.RootIno)
			if err != nil {
				t.Fatal(err)
			}
			ra, err := rootAttrs(ctx, ns, r)
			if err != nil {
				t.Fatal(err)
			}
			ns.Close()
			if c.mode != 0 {
				ra.Change, ra.Node.Mode = changeID("someone else", 0, ""), c.mode
				body, err := nsv2.EncodeRoot(ra)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.Put(ctx, nsv2.RootKey(root), body, staging.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			_, err = Upgrade(ctx, st, root, Options{})
			if c.want != nil {
				if !errors.Is(err, c.want) {
					t.Fatalf("Upgrade: %v; want %v", err, c.want)
				}
				if d, err := volume.ReadDescriptor(ctx, st, root); err != nil || d.NamespaceVersion() == config.NamespaceV2 {
					t.Fatalf("descriptor after a conflict: %+v, %v", d, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Upgrade: %v", err)
			}
			v2 := openV2(t, st)
			got, err := v2.GetNode(ctx, namespace.RootIno)
			if err != nil || got.Mode != 0o1777 || got.Uid != 1000 || got.MtimeNs != r.MtimeNs {
				t.Fatalf("the root after the upgrade: %+v, %v; v1's %+v", got, err, r)
			}
			uid := uint32(0)
			if _, err := v2.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Uid: &uid}); err != nil {
				t.Fatal(err)
			}
			if got, err := openV2(t, st).GetNode(ctx, namespace.RootIno); err != nil || got.Uid != 0 || got.Mode != 0o1777 {
				t.Fatalf("the root after a chown on v2: %+v, %v", got, err)
			}
		})
	}
}

// TestUpgradeRefusals: a volume already v2, no volume, files without a
// name: refused with what stands in the way, and
// nothing written (no fence, no v2 object, the log as it was).
func TestUpgradeRefusals(t *testing.T) {
	ctx := context.Background()

	v2 := mem.NewS3ETags()
	cfg := config.Default()
	cfg.Namespace = config.NamespaceV2
	if _, err := volume.CreateDescriptor(ctx, v2, root, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := Upgrade(ctx, v2, root, Options{}); !errors.Is(err, ErrAlreadyV2) || !strings.Contains(err.Error(), "already namespace v2") {
		t.Fatalf("v2 volume: %v", err)
	}
	if _, err := Upgrade(ctx, mem.NewS3ETags(), root, Options{}); !errors.Is(err, volume.ErrNoVolume) {
		t.Fatalf("no volume: %v", err)
	}

	for _, c := range []struct {
		name string
		make func(ns *namespace.Namespace, d namespace.Node) error
		want []string
	}{
		{"orphan", func(ns *namespace.Namespace, d namespace.Node) error {
			_, err := ns.Unlink(ctx, d.Ino, "f1")
			return err
		}, []string{"1 files without a name left", "ckptfs gc", "nothing changed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, ns := v1Volume(t)
			defer ns.Close()
			d, err := ns.Lookup(ctx, namespace.RootIno, "d")
			if err != nil {
				t.Fatal(err)
			}
			if err := c.make(ns, d); err != nil {
				t.Fatal(err)
			}
			was := objects(t, st, "")
			_, err = Upgrade(ctx, st, root, Options{})
			var re *RefusedError
			if !errors.Is(err, ErrRefused) || !errors.As(err, &re) {
				t.Fatalf("Upgrade: %v; want a refusal", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
			if now := objects(t, st, ""); !reflect.DeepEqual(now, was) {
				t.Fatal("a refused upgrade changed the store")
			}
			if _, err := ns.Mkdir(ctx, namespace.RootIno, "still", 0o755, namespace.Owner{}); err != nil {
				t.Fatalf("v1 after a refused upgrade: %v", err)
			}
		})
	}
}

// unlinkAtFence removes a name with another v1 mount just before the
// upgrade's first write to the log (the fence), as a mount racing it.
type unlinkAtFence struct {
	staging.Store
	once   sync.Once
	unlink func()
}

func (s *unlinkAtFence) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.HasPrefix(key, root+"ns/log/") {
		s.once.Do(s.unlink)
	}
	return s.Store.Put(ctx, key, data, o)
}

// TestUpgradeOrphanBeforeFence: a file left without a name by another
// mount between the upgrade's check and its fence is seen once the log is
// fenced; the fence is removed and v1 goes on.
func TestUpgradeOrphanBeforeFence(t *testing.T) {
	ctx := context.Background()
	st, ns := v1Volume(t)
	defer ns.Close()
	racer := &unlinkAtFence{Store: st, unlink: func() {
		if _, err := ns.Unlink(ctx, namespace.RootIno, "f0"); err != nil {
			t.Errorf("unlink: %v", err)
		}
	}}
	_, err := Upgrade(ctx, racer, root, Options{})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "1 files without a name left") || !strings.Contains(err.Error(), "the fence is removed") {
		t.Fatalf("Upgrade racing an unlink: %v", err)
	}
	if ks := objects(t, st, root+"ns2/"); len(ks) != 0 {
		t.Fatalf("v2 objects written: %d", len(ks))
	}
	// The racing mount met the fence (its unlink is before it) and stays
	// fenced; a new v1 mount is not.
	fresh, err := namespace.Open(ctx, st, root, namespace.Options{})
	if err != nil {
		t.Fatalf("v1 open after the fence was removed: %v", err)
	}
	defer fresh.Close()
	if _, err := fresh.Mkdir(ctx, namespace.RootIno, "after", 0o755, namespace.Owner{}); err != nil {
		t.Fatalf("v1 change after the fence was removed: %v", err)
	}
}

// crashStore is a process that dies after its first n requests: every
// request after them fails, unsent.
type crashStore struct {
	staging.Store
	mu   sync.Mutex
	n    int // requests left before the crash
	sent int
}

var errCrashed = errors.New("crashed")

func (s *crashStore) take() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n <= 0 {
		return errCrashed
	}
	s.n--
	s.sent++
	return nil
}

func (s *crashStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if err := s.take(); err != nil {
		return staging.ObjectInfo{}, err
	}
	return s.Store.Put(ctx, key, data, o)
}

func (s *crashStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if err := s.take(); err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	return s.Store.Get(ctx, key, r)
}

func (s *crashStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if err := s.take(); err != nil {
		return staging.ObjectInfo{}, err
	}
	return s.Store.Head(ctx, key)
}

func (s *crashStore) List(ctx context.Context, prefix, after string, max int) (staging.ListPage, error) {
	if err := s.take(); err != nil {
		return staging.ListPage{}, err
	}
	return s.Store.List(ctx, prefix, after, max)
}

func (s *crashStore) Delete(ctx context.Context, key string) error {
	if err := s.take(); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key)
}

// clone copies every object of st into a new memory store.
func clone(t testing.TB, st staging.Store) *mem.Store {
	t.Helper()
	out := mem.NewS3ETags()
	for k, v := range objects(t, st, "") {
		if _, err := out.Put(context.Background(), k, []byte(v), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestUpgradeCrashAtEveryRequest: an upgrade that dies after each of its
// requests leaves the volume v1 and open to v1 mounts (before the fence),
// fenced with the descriptor at 1 (v1 refused, naming ckptfs upgrade), or
// v2; upgrading again ends in the state of an upgrade never interrupted.
func TestUpgradeCrashAtEveryRequest(t *testing.T) {
	ctx := context.Background()
	st0, ns := v1Volume(t)
	want := walk(t, ns)
	ns.Close()

	full := &crashStore{Store: clone(t, st0), n: 1 << 30}
	if _, err := Upgrade(ctx, full, root, Options{Parallel: 1}); err != nil {
		t.Fatal(err)
	}
	total := full.sent
	t.Logf("an upgrade of %d names: %d requests", len(want), total)
	if total < len(want)+3 {
		t.Fatalf("an upgrade of %d names sent %d requests", len(want), total)
	}
	for k := 0; k < total; k++ {
		st := clone(t, st0)
		_, err := Upgrade(ctx, &crashStore{Store: st, n: k}, root, Options{Parallel: 1 + k%4})
		if err == nil {
			t.Fatalf("crash after %d requests: no error", k)
		}
		d, derr := volume.ReadDescriptor(ctx, st, root)
		if derr != nil {
			t.Fatal(derr)
		}
		v1, oerr := namespace.Open(ctx, st, root, namespace.Options{})
		fenced := errors.Is(oerr, namespace.ErrFenced)
		switch {
		case d.NamespaceVersion() == config.NamespaceV2:
			t.Fatalf("crash after %d requests: v2 though the upgrade failed (%v)", k, err)
		case oerr != nil && !fenced:
			t.Fatalf("crash after %d requests: v1 open: %v", k, oerr)
		case fenced && !strings.Contains(oerr.Error(), "ckptfs upgrade"):
			t.Fatalf("crash after %d requests: the refusal does not name the upgrade: %v", k, oerr)
		case !fenced:
			if got := walk(t, v1); !reflect.DeepEqual(got, want) {
				t.Fatalf("crash after %d requests, not fenced: the v1 state changed", k)
			}
			v1.Close()
		}
		rep, err := Upgrade(ctx, st, root, Options{})
		if err != nil {
			t.Fatalf("crash after %d requests, then again: %v", k, err)
		}
		if rep.Resumed != fenced {
			t.Fatalf("crash after %d requests: resumed %v, fenced %v", k, rep.Resumed, fenced)
		}
		if got := walk(t, openV2(t, st)); !reflect.DeepEqual(got, want) {
			t.Fatalf("crash after %d requests, then again: the names differ", k)
		}
	}
}

// TestUpgradeInodeConflict: an inode object at a linked node's key that
// holds something else than the v1 node (not this upgrade's) is
// ErrConflict, and the descriptor stays at v1; one with the same body under
// another change id counts as written.
func TestUpgradeInodeConflict(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		nlink uint32
		want  error
	}{{"other count", 2, ErrConflict}, {"same body", 3, nil}} {
		t.Run(c.name, func(t *testing.T) {
			st, ns := v1Volume(t)
			n, err := ns.Lookup(ctx, namespace.RootIno, "hard")
			if err != nil {
				t.Fatal(err)
			}
			b, err := binding(ctx, ns, n)
			if err != nil {
				t.Fatal(err)
			}
			ns.Close()
			key, err := nsv2.InodeKey(root, n.Ino)
			if err != nil {
				t.Fatal(err)
			}
			body, err := nsv2.EncodeInode(&nsv2.Inode{Ino: n.Ino, Kind: n.Kind, Nlink: c.nlink, Change: changeID("someone else", 0, ""), Node: *b.Node})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Put(ctx, key, body, staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			_, err = Upgrade(ctx, st, root, Options{})
			if c.want == nil {
				if err != nil {
					t.Fatalf("Upgrade: %v", err)
				}
				if got, err := openV2(t, st).Lookup(ctx, namespace.RootIno, "hard"); err != nil || got.Nlink != 3 {
					t.Fatalf("/hard: %+v, %v", got, err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Upgrade: %v; want %v", err, c.want)
			}
			d, err := volume.ReadDescriptor(ctx, st, root)
			if err != nil || d.NamespaceVersion() == config.NamespaceV2 {
				t.Fatalf("descriptor after a conflict: %+v, %v", d, err)
			}
		})
	}
}
