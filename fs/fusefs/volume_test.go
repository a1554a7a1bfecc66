package fusefs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestNewVolume: New creates the descriptor of a new volume, refuses a newer
// one, and a root without a trailing slash.
func TestNewVolume(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	cfg := config.MountDefault(1 << 30)
	fsys, err := New(ctx, st, Options{Config: cfg, Root: "vol/"})
	if err != nil {
		t.Fatal(err)
	}
	fsys.Close()
	if v, err := volume.ReadDescriptor(ctx, st, "vol/"); err != nil || v != fsys.Volume() {
		t.Fatalf("descriptor after New = %+v, %v; the mount has %+v", v, err, fsys.Volume())
	}
	if _, err := st.Put(ctx, "new/"+VolumeKey, []byte(`{"layout_version":7,"format":"stream"}`), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = New(ctx, st, Options{Config: cfg, Root: "new/"})
	if !errors.Is(err, volume.ErrNewerLayout) {
		t.Fatalf("New on a newer volume: %v, want ErrNewerLayout", err)
	}
	if _, err := New(ctx, st, Options{Config: cfg, Root: "no-slash"}); err == nil {
		t.Fatal("New accepted a root without a trailing slash")
	}
}

// TestRequireVolume: with RequireVolume a root without a descriptor is
// ErrNoVolume and nothing is written; once a descriptor is created, New
// opens it.
func TestRequireVolume(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	cfg := config.MountDefault(1 << 30)
	cfg.Format = segment.FormatParted
	_, err := New(ctx, st, Options{Config: cfg, Root: "tpyo/", RequireVolume: true})
	if !errors.Is(err, ErrNoVolume) || !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("New on an empty root with RequireVolume: %v, want ErrNoVolume", err)
	}
	if objs, err := staging.ListAll(ctx, st, ""); err != nil || len(objs) != 0 {
		t.Fatalf("a refused mount wrote %d objects (%v)", len(objs), err)
	}
	v, err := volume.CreateDescriptor(ctx, st, "tpyo/", cfg)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := New(ctx, st, Options{Config: cfg, Root: "tpyo/", RequireVolume: true})
	if err != nil {
		t.Fatalf("New with RequireVolume on a created volume: %v", err)
	}
	defer fsys.Close()
	if fsys.Volume() != v {
		t.Fatalf("the mount has descriptor %+v, want %+v", fsys.Volume(), v)
	}
}

// TestNewVolumeV2: a mount that creates its volume with namespace=v2 makes
// it a v2 volume; a mount of a v2 volume, whatever its namespace option,
// holds an nsv2.Tree and runs the background cleaner (gc is on); a mount of
// a v1 volume with namespace=v2 stays v1.
func TestNewVolumeV2(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	cfg := config.MountDefault(1 << 30)
	cfg.Namespace = config.NamespaceV2
	if !cfg.GC {
		t.Fatal("gc is off by default: the test needs it on")
	}
	fsys, err := New(ctx, st, Options{Config: cfg, Root: "vol/"})
	if err != nil {
		t.Fatal(err)
	}
	if v := fsys.Volume(); v.NamespaceVersion() != config.NamespaceV2 || v.LayoutVersion != 2 {
		t.Fatalf("volume made with namespace=v2: %+v", v)
	}
	check := func(fsys *FS) {
		t.Helper()
		if _, ok := fsys.Namespace().(*nsv2.Tree); !ok {
			t.Fatalf("a mount of a v2 volume holds a %T", fsys.Namespace())
		}
		if fsys.gc == nil {
			t.Fatal("a mount of a v2 volume with gc on runs no cleaner")
		}
	}
	check(fsys)
	if _, err := fsys.Namespace().Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	fsys.Close()
	second, err := New(ctx, st, Options{Config: config.MountDefault(1 << 30), Root: "vol/", RequireVolume: true})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	check(second)
	if _, err := second.Namespace().Lookup(ctx, namespace.RootIno, "f"); err != nil {
		t.Fatalf("the second mount's lookup of the first's name: %v", err)
	}
	f, err := second.Namespace().Lookup(ctx, namespace.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	if g, err := second.Namespace().Link(ctx, f.Ino, namespace.RootIno, "g"); err != nil || g.Ino != f.Ino || g.Nlink != 2 {
		t.Fatalf("link on a v2 volume: %+v, %v", g, err)
	}

	cfg.Namespace = config.NamespaceV1
	if _, err := volume.CreateDescriptor(ctx, st, "old/", cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Namespace = config.NamespaceV2
	old, err := New(ctx, st, Options{Config: cfg, Root: "old/"})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, ok := old.Namespace().(*namespace.Namespace); !ok || old.Volume().NamespaceVersion() != config.NamespaceV1 {
		t.Fatalf("a v1 volume mounted with namespace=v2: %T, %+v", old.Namespace(), old.Volume())
	}
}

func TestErrnoOf(t *testing.T) {
	fsys := &FS{log: zap.NewNop()}
	cases := []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{namespace.ErrNotExist, syscall.ENOENT},
		{errors.Join(errors.New("context"), namespace.ErrExist), syscall.EEXIST},
		{namespace.ErrNotEmpty, syscall.ENOTEMPTY},
		{namespace.ErrNoAttr, syscall.ENODATA},
		{namespace.ErrNotSupported, syscall.ENOTSUP},
		{fmt.Errorf("rename a: %w", nsv2.ErrMovedAncestor), syscall.EBUSY},
		{&nsv2.NameError{Key: "k", Err: nsv2.ErrLocked}, syscall.EBUSY},
		{engine.ErrReadOnly, syscall.EROFS},
		{context.Canceled, syscall.EINTR},
		{&segment.CorruptError{Key: "k", Err: segment.ErrChecksum, Detail: "bad"}, syscall.EIO},
		{errors.New("network down"), syscall.EIO},
		{syscall.EXDEV, syscall.EXDEV},
	}
	for _, c := range cases {
		if got := fsys.errnoOf("op", c.err); got != c.want {
			t.Errorf("errnoOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestParams(t *testing.T) {
	c := config.MountDefault(4 << 30)
	c.FlushConflictPolicy = config.ConflictFailFast
	p := Params(c)
	if err := p.Validate(); err != nil {
		t.Fatalf("params of the mount defaults: %v", err)
	}
	if p.DirtyLimit != c.DirtyLimit() || p.DataBlockSize != int(c.DataBlockSize) ||
		p.StreamSegmentBytes != c.EffectiveStreamSegmentBytes() || p.ConflictPolicy != engine.ConflictFailFast {
		t.Fatalf("params %+v do not follow config %v", p, c)
	}
}
