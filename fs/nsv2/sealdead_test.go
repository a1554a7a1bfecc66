package nsv2

import (
	"context"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestCreateInDirectorySealedByDeadRemover: a mount dies in its rmdir
// after the seal landed and before a decision; the directory was never
// removed, so a create there by another mount, once the dead remover's
// lock is older than TxGrace, succeeds (a lookup of the directory's name
// decides the change abort). Before that the create answers ENOENT, though
// the directory stays: the campaign's many mode met it (`put d0/x3/x3/f6
// … err 2` 11 s after the mount in `rmdir d0/x3/x3` was killed, the
// directory there before and after) and allows it for TxGrace
// (test/campaign_many_test.go, manySealedENOENT); this bounds it.
func TestCreateInDirectorySealedByDeadRemover(t *testing.T) {
	ctx := context.Background()
	for k := 0; ; k++ {
		if k > 50 {
			t.Fatal("no request count left the seal without a decision")
		}
		st := mem.NewS3ETags()
		d := &dyingStore{Store: st, n: 1 << 30}
		one, two := openTree(t, st, 1), openTree(t, d, 2)
		dir := must(one.Mkdir(ctx, namespace.RootIno, "d", 0o755, owner))(t)
		x := must(one.Mkdir(ctx, dir.Ino, "x", 0o755, owner))(t)
		must(two.Lookup(ctx, namespace.RootIno, "d"))(t)
		must(two.Lookup(ctx, dir.Ino, "x"))(t)
		d.mu.Lock()
		d.n = k
		d.mu.Unlock()
		if err := two.Rmdir(ctx, dir.Ino, "x"); err == nil {
			t.Fatal("the rmdir succeeded before a seal was left alone")
		}
		key, err := SealKey(root, x.Ino)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Head(ctx, key); err != nil {
			continue // died before the seal
		}
		late, err := Open(Config{Store: st, Root: root, Mount: cid(3), FirstBatch: 1<<40 + 3*16,
			StoreNow: func() time.Time { return time.Now().Add(2 * TxGrace) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = late.Close() })
		if _, err := late.Lookup(ctx, namespace.RootIno, "d"); err != nil {
			t.Fatal(err)
		}
		if n, err := late.Lookup(ctx, dir.Ino, "x"); err != nil || n.Ino != x.Ino {
			t.Fatalf("after the remover died with its seal stored (request %d): lookup of the directory %+v, %v", k, n, err)
		}
		if _, err := late.Create(ctx, x.Ino, "f", 0o644, owner); err != nil {
			t.Fatalf("create in the directory a dead remover sealed (died after request %d), past TxGrace: %v", k, err)
		}
		return
	}
}
