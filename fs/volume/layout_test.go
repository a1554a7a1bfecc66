package volume_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/fusefs"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// TestLayout: every object a volume holds after a mount's writes, a copy by
// reference and the write-ahead log is one the package doc names, under the
// root.
func TestLayout(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	const root = "vol/"
	cfg := config.MountDefault(1 << 30)
	if _, err := volume.OpenDescriptor(ctx, st, root, cfg, false); err != nil {
		t.Fatal(err)
	}
	ns, err := namespace.Open(ctx, st, root, namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	src, err := ns.Create(ctx, namespace.RootIno, "src", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ns.Create(ctx, namespace.RootIno, "cp", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	open := func(id string, withWAL bool) *engine.File {
		p := fusefs.Params(cfg)
		p.WAL = withWAL
		f, err := engine.Create(ctx, st, volume.FilePrefix(root, id), engine.Options{Params: p, FileID: id, FilesPrefix: volume.FilesPrefix(root)})
		if err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		return f
	}
	a := open(src.FileID, true)
	defer a.Close()
	if _, err := a.WriteAt(ctx, make([]byte, 3<<20), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b := open(cp.FileID, false) // a copy by reference logs nothing
	defer b.Close()
	if err := b.CloneFrom(ctx, a); err != nil {
		t.Fatalf("copy by reference: %v", err)
	}
	if _, err := a.WriteAt(ctx, []byte("logged, not yet published"), 0); err != nil {
		t.Fatal(err)
	}

	objs, err := staging.ListAll(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, o := range objs {
		kind := classify(root, o.Key)
		if kind == "" {
			t.Errorf("%s is no object of the layout", o.Key)
		}
		seen[kind]++
	}
	for _, kind := range []string{"descriptor", "namespace", "head", "checkpoint object", "lineage", "reference marker", "wal"} {
		if seen[kind] == 0 {
			t.Errorf("no %s among %d objects: %v", kind, len(objs), seen)
		}
	}
}

// classify names the kind of key in the layout of the volume at root, or "".
func classify(root, key string) string {
	rel, ok := strings.CutPrefix(key, root)
	switch {
	case !ok:
		return ""
	case rel == volume.DescriptorKey:
		return "descriptor"
	case strings.HasPrefix(rel, volume.NamespaceDir):
		return "namespace"
	case strings.HasPrefix(rel, volume.GCDir):
		return "pending record"
	}
	id, rel, ok := volume.SplitFileKey(volume.FilesPrefix(root), key)
	if !ok || !segment.ValidFileID(id) {
		return ""
	}
	if rel == volume.HeadName {
		return "head"
	}
	if volume.IsWriterKey(rel) {
		return "writer marker"
	}
	if _, ok := volume.IsRefKey(rel); ok {
		return "reference marker"
	}
	if _, ok := volume.IsLineageKey(rel); ok {
		return "lineage"
	}
	if w, ok := strings.CutPrefix(rel, volume.WALDir); ok {
		if _, ok := wal.ParseRecordName(w); ok || w == wal.OwnerName {
			return "wal"
		}
		return ""
	}
	if _, _, err := segment.ParseObjectName(rel); err == nil {
		return "checkpoint object"
	}
	return ""
}
