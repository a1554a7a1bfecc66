package nsv2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The root's attributes (root.go): their object, and a chmod, chown and
// setxattr of the root through two mounts.

func TestRootKeyGolden(t *testing.T) {
	for root, want := range map[string]string{"vol": "vol/ns2/root", "/a/b/": "a/b/ns2/root", "": "ns2/root"} {
		if got := RootKey(root); got != want {
			t.Errorf("RootKey(%q) = %q, want %q", root, got, want)
		}
	}
	for _, key := range []string{"vol/ns2/roots", "vol/ns2/root/", "vol/ns2/root/x", "vol/ns/root", "vol//ns2/root", "root"} {
		if _, err := ParseRootKey(key); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParseRootKey(%q): %v, want ErrBadKey", key, err)
		}
	}
	d, err := EncodeRoot(&RootAttrs{Change: idA, Node: Attrs{Mode: 0o1777, Uid: 1000}})
	want := "CKN2\x01\x0a\x00\x00\x5b\x00\x00\x00" + string(d[12:16]) +
		`{"c":"` + idA + `","a":{"m":1023,"u":1000,"g":0,"at":0,"mt":0,"ct":0}}`
	if err != nil || string(d) != want {
		t.Fatalf("root %q, %v;\nwant %q", d, err, want)
	}
}

// What the decoder refuses, each as corruption naming the key; what the
// encoder refuses, as ErrInvalid.
func TestRootRefused(t *testing.T) {
	good := sampleObjects()["root"].(*RootAttrs)
	key := RootKey(root)
	for what, edit := range map[string]func(r *RootAttrs){
		"bad change id":          func(r *RootAttrs) { r.Change = "x" },
		"a file id":              func(r *RootAttrs) { r.Node.FileID = idB },
		"a target":               func(r *RootAttrs) { r.Node.Target = "t" },
		"a device":               func(r *RootAttrs) { r.Node.Major = 1 },
		"a mode past the mask":   func(r *RootAttrs) { r.Node.Mode = 0o170755 },
		"an attribute not user.": func(r *RootAttrs) { r.Node.Xattrs = []Xattr{{Name: "trusted.a", Value: []byte{}}} },
		"attributes out of order": func(r *RootAttrs) {
			r.Node.Xattrs = []Xattr{{Name: "user.b", Value: []byte{}}, {Name: "user.a", Value: []byte{}}}
		},
	} {
		r := *good
		r.Node.Xattrs = slices.Clone(good.Node.Xattrs)
		edit(&r)
		if _, err := EncodeRoot(&r); !errors.Is(err, namespace.ErrInvalid) {
			t.Errorf("encode %s: %v, want ErrInvalid", what, err)
		}
		body, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		_, err = DecodeRoot(key, sealRaw(kindRoot, body))
		wantCorrupt(t, what, key, err)
	}
	if _, err := EncodeRoot(&RootAttrs{Change: idA, Node: Attrs{Xattrs: []Xattr{}}}); !errors.Is(err, namespace.ErrInvalid) {
		t.Errorf("encode an empty attribute list: %v, want ErrInvalid", err)
	}
	_, err := DecodeRoot(key, sealRaw(kindRoot, []byte(`{"c":"`+idA+`","a":{"m":0,"u":0,"g":0,"at":0,"mt":0,"ct":0,"x":[]}}`)))
	wantCorrupt(t, "an empty attribute list", key, err)
	data, _ := EncodeRoot(good)
	if _, err := DecodeRoot("vol/ns2/seal/0000000000000002", data); !errors.Is(err, namespace.ErrCorrupt) {
		t.Errorf("read at a seal's key: %v, want ErrCorrupt", err)
	}
	// Another kind's object at the root's key.
	seal, _ := EncodeSeal(&Seal{Dir: 2, Tx: idB})
	wantCorrupt(t, "a seal", key, func() error { _, err := DecodeRoot(key, seal); return err }())
	// The largest root: the most attribute bytes, each costing the most JSON
	// (a control byte is \u00XX, six bytes).
	big := &RootAttrs{Change: idA, Node: Attrs{Mode: 0o7777, Uid: ^uint32(0), Gid: ^uint32(0), Atime: -1 << 63, Mtime: -1 << 63, Ctime: -1 << 63, MtimeSet: -1 << 63}}
	total := 0
	for i := 0; total+namespace.MaxNameLen <= namespace.MaxXattrsLen; i++ {
		n := "user." + string([]byte{byte(1 + i/31), byte(1 + i%31)}) + strings.Repeat("\x01", namespace.MaxNameLen-7)
		big.Node.Xattrs = append(big.Node.Xattrs, Xattr{Name: Name(n), Value: []byte{}})
		total += len(n)
	}
	slices.SortFunc(big.Node.Xattrs, func(a, b Xattr) int { return strings.Compare(string(a.Name), string(b.Name)) })
	if _, err := EncodeRoot(big); err != nil {
		t.Errorf("largest root: %v", err)
	}
}

// rootOf is the root as ns holds it.
func rootOf(t *testing.T, ns namespace.Names) namespace.Node {
	t.Helper()
	return must(ns.GetNode(context.Background(), namespace.RootIno))(t)
}

// Two mounts: a chmod, chown and setxattr of the root by one is seen by the
// other once its TTL is over (served from its cache before), at once by a
// mount opened after (a remount), and at once after a Refresh.
func TestRootTwoMounts(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	st := mem.NewS3ETags()
	a, b := openTTL(t, st, 1, c), openTTL(t, st, 2, c)
	if r := rootOf(t, b); r.Mode != 0o755 || r.Uid != 0 || r.Gid != 0 || r.Kind != namespace.KindDir || r.Parent != namespace.RootIno {
		t.Fatalf("root before any change %+v", r)
	}
	uid, gid := uint32(1000), uint32(100)
	must(a.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o1777), Uid: &uid, Gid: &gid}))(t)
	if err := a.SetXattr(ctx, namespace.RootIno, "user.r", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if r := rootOf(t, a); r.Mode != 0o1777 || r.Uid != uid || r.Gid != gid {
		t.Fatalf("root on the mount that changed it %+v", r)
	}
	c.sleep(ctx, time.Second/2)
	if r := rootOf(t, b); r.Mode != 0o755 {
		t.Fatalf("root on the other mount within its TTL %+v: not served from its cache", r)
	}
	c.sleep(ctx, time.Second/2)
	if r := rootOf(t, b); r.Mode != 0o1777 || r.Uid != uid || r.Gid != gid {
		t.Fatalf("root on the other mount after its TTL %+v", r)
	}
	if v := must(b.GetXattr(ctx, namespace.RootIno, "user.r"))(t); string(v) != "v" {
		t.Fatalf("user.r of the root on the other mount %q", v)
	}
	if l := must(b.ListXattr(ctx, namespace.RootIno))(t); !slices.Equal(l, []string{"user.r"}) {
		t.Fatalf("the root's attributes on the other mount %q", l)
	}
	// A Refresh makes it stale at once.
	must(a.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o700)}))(t)
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rootOf(t, b); r.Mode != 0o700 {
		t.Fatalf("root after a Refresh %+v", r)
	}
	// A remount reads them at its first use.
	if err := a.RemoveXattr(ctx, namespace.RootIno, "user.r"); err != nil {
		t.Fatal(err)
	}
	d := openTTL(t, st, 3, c)
	if r := rootOf(t, d); r.Mode != 0o700 || r.Uid != uid || r.Gid != gid {
		t.Fatalf("root on a new mount %+v", r)
	}
	if _, err := d.GetXattr(ctx, namespace.RootIno, "user.r"); !errors.Is(err, namespace.ErrNoAttr) {
		t.Fatalf("a removed attribute of the root: %v", err)
	}
}

// A change of the root on a mount whose cache is stale (another mount
// changed the root since it read it) is refused If-Match (If-None-Match
// when it read none), and applied again to what the store holds: both
// mounts' changes land, in three requests.
func TestRootRefusedReapplied(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	cb := counting.New(st)
	a, b := openTree(t, st, 1), openTree(t, cb, 2)
	rootOf(t, a)
	rootOf(t, b) // none stored: b holds Config's root
	must(a.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o700)}))(t)
	uid := uint32(1000)
	s0 := cb.Snapshot()
	n := must(b.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Uid: &uid}))(t)
	if n.Mode != 0o700 || n.Uid != uid {
		t.Fatalf("chown over another mount's chmod: %+v", n)
	}
	if got := cb.Snapshot().Sub(s0); got.Op(staging.OpPut).Requests != 2 || got.Op(staging.OpGet).Requests != 1 || got.Total().Requests != 3 {
		t.Fatalf("a refused change sent %v, want a PUT, its read-back and a PUT", got)
	}
	// a holds its own write's ETag, which b replaced.
	if err := a.SetXattr(ctx, namespace.RootIno, "user.a", []byte("1"), namespace.XattrCreate); err != nil {
		t.Fatal(err)
	}
	// A flag refused on the attributes read again: b's cache has no
	// user.a, the store has.
	if err := b.SetXattr(ctx, namespace.RootIno, "user.a", []byte("2"), namespace.XattrCreate); !errors.Is(err, namespace.ErrExist) {
		t.Fatalf("create of an attribute another mount made: %v, want ErrExist", err)
	}
	r := rootOf(t, openTree(t, st, 3))
	if r.Mode != 0o700 || r.Uid != uid {
		t.Fatalf("root on a new mount %+v", r)
	}
	if v := must(openTree(t, st, 4).GetXattr(ctx, namespace.RootIno, "user.a"))(t); string(v) != "1" {
		t.Fatalf("user.a %q", v)
	}
}

// The refresher reads the root's attributes again ahead of their TTL while
// they are in use, so that a stat of the root sends nothing and shows
// another mount's chmod from the read ahead on.
func TestRootReadAhead(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	st := mem.NewS3ETags()
	cb := counting.New(st)
	a, b := openTTL(t, st, 1, c), openTTL(t, cb, 2, c)
	rootOf(t, b)
	c.sleep(ctx, time.Second/2)
	rootOf(t, b) // in use for half a TTL
	must(a.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o1777)}))(t)
	c.sleep(ctx, time.Second/4)
	s0 := cb.Snapshot()
	b.refreshPass(ctx)
	if got := cb.Snapshot().Sub(s0); got.Op(staging.OpGet).Requests != 1 {
		t.Fatalf("a pass sent %v, want a GET of the root's attributes", got)
	}
	c.sleep(ctx, time.Second/2) // past the TTL of the first read, not of the pass's
	s0 = cb.Snapshot()
	if r := rootOf(t, b); r.Mode != 0o1777 {
		t.Fatalf("root after the read ahead %+v", r)
	}
	if got := cb.Snapshot().Sub(s0); got.Total().Requests != 0 {
		t.Fatalf("a stat of the root read ahead sent %v", got)
	}
}

// A damaged root object is an error naming its key (the root is not taken
// for Config's), and fsck reports it; a good one fsck accepts.
func TestRootDamagedAndChecked(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	a := openTree(t, st, 1)
	must(a.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o700)}))(t)
	r, err := Check(ctx, st, root, time.Now(), nil)
	if err != nil || len(r.Problems) != 0 || r.Objects != 1 {
		t.Fatalf("check of a root object: %v, %+v", err, r)
	}
	if _, err := st.Put(ctx, RootKey(root), []byte("CKN2 not a root"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var ce *namespace.CorruptError
	if _, err := openTree(t, st, 2).GetNode(ctx, namespace.RootIno); !errors.As(err, &ce) || ce.Key != RootKey(root) {
		t.Fatalf("a damaged root: %v, want a CorruptError naming its key", err)
	}
	r, err = Check(ctx, st, root, time.Now(), nil)
	if err != nil || len(r.Problems) != 1 || r.Problems[0].Key != RootKey(root) {
		t.Fatalf("check of a damaged root object: %v, %+v", err, r.Problems)
	}
}

// A chmod and a setxattr of the root with a fault at each request: the
// store holds the change or not, and the answer says which.
func TestRootFaultAtEveryRequest(t *testing.T) {
	ctx := context.Background()
	rootMode := func(want uint32, none uint32) func(t *testing.T, three namespace.Names) string {
		return func(t *testing.T, three namespace.Names) string {
			r := rootOf(t, three)
			switch r.Mode {
			case want:
				return "done"
			case none:
				return "none"
			}
			return fmt.Sprintf("%+v", r)
		}
	}
	for _, fc := range []treeFaultCase{
		{name: "chmod of the root, none stored", setup: func(*testing.T, namespace.Names, namespace.Names) {},
			run: func(ctx context.Context, ns namespace.Names) error {
				_, err := ns.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o1777)})
				return err
			}, state: rootMode(0o1777, 0o755)},
		{name: "chmod of the root, cached", setup: func(t *testing.T, one, two namespace.Names) {
			must(one.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o700)}))(t)
			rootOf(t, two)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o1777)})
			return err
		}, state: rootMode(0o1777, 0o700)},
		{name: "setxattr of the root, changed since cached", setup: func(t *testing.T, one, two namespace.Names) {
			rootOf(t, two)
			must(one.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o700)}))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			return ns.SetXattr(ctx, namespace.RootIno, "user.a", []byte("v"), 0)
		}, state: func(t *testing.T, three namespace.Names) string {
			r := rootOf(t, three)
			v, err := three.GetXattr(ctx, namespace.RootIno, "user.a")
			switch {
			case r.Mode == 0o700 && err == nil && string(v) == "v":
				return "done"
			case r.Mode == 0o700 && errors.Is(err, namespace.ErrNoAttr):
				return "none"
			}
			return fmt.Sprintf("%+v, user.a %q, %v", r, v, err)
		}},
	} {
		t.Run(fc.name, func(t *testing.T) { faultAtEveryRequest(t, fc, 1) })
	}
}

func rootModeP(m uint32) *uint32 { return &m }
