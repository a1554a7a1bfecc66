package nsv2

import (
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// TestRootAndFragmentsS3: on a real S3 server (versitygw on loopback
// unless the environment names a bucket), the root's attributes written
// If-None-Match then If-Match, one mount's stale write refused and applied
// again, and a directory's fragment count set under its seal and leases
// while another mount holds a lease there with the old count.
func TestRootAndFragmentsS3(t *testing.T) {
	ctx := context.Background()
	st := s3test.NewStore(t)
	a, b := openTree(t, st, 1), openTree(t, st, 2)
	rootOf(t, a)
	rootOf(t, b)
	must(a.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Mode: rootModeP(0o1777)}))(t)
	uid := uint32(1000)
	if n := must(b.SetAttr(ctx, namespace.RootIno, namespace.SetAttr{Uid: &uid}))(t); n.Mode != 0o1777 || n.Uid != uid {
		t.Fatalf("chown over another mount's chmod: %+v", n)
	}
	if r := rootOf(t, openTree(t, st, 3)); r.Mode != 0o1777 || r.Uid != uid {
		t.Fatalf("root on a new mount %+v", r)
	}

	d := must(a.Mkdir(ctx, namespace.RootIno, "d", 0o755, owner))(t)
	must(b.Lookup(ctx, namespace.RootIno, "d"))(t)
	if err := a.SetXattr(ctx, d.Ino, FragmentsXattr, []byte("16"), 0); err != nil {
		t.Fatal(err)
	}
	n := nameIn("n", 16)
	must(b.Create(ctx, d.Ino, n, 0o644, owner))(t) // b held the count 1: it reads the seal's
	if !storedAt(t, st, d.Ino, 16, n) {
		t.Fatalf("%s is not in its fragment of 16", n)
	}
	if err := a.SetXattr(ctx, d.Ino, FragmentsXattr, []byte("4"), 0); !errors.Is(err, namespace.ErrNotEmpty) {
		t.Fatalf("another count with a name: %v", err)
	}
	if _, err := a.Lookup(ctx, d.Ino, n); err != nil {
		t.Fatal(err)
	}
}
