package nsv2

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A change that meets a name locked by another mount's rename not decided
// yet waits for the decision and then goes on against what it left: mount
// b's unlink of f, begun while mount a's rename of f to g holds both names,
// answers ENOENT once the rename is decided (f has moved), and g stays.
// Before the wait it answered ErrLocked at once (the mount's EIO).
func TestChangeWaitsForALockedName(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	held := newPause(st, func(op staging.Op, key string) bool {
		return op == staging.OpPut && strings.Contains(key, "/ns2/tx/")
	})
	a, err := Open(Config{Store: held, Root: root, Mount: cid(1), FirstBatch: 1<<40 + 16})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	waiting := make(chan struct{})
	var once sync.Once
	b, err := Open(Config{Store: st, Root: root, Mount: cid(2), FirstBatch: 1<<40 + 32,
		Sleep: func(ctx context.Context, d time.Duration) error {
			once.Do(func() { close(waiting) })
			return sleepCtx(ctx, d)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rt := namespace.RootIno
	f := must(a.Create(ctx, rt, "f", 0o644, owner))(t)
	must(b.Lookup(ctx, rt, "f"))(t)

	renamed := make(chan error, 1)
	go func() { _, err := a.Rename(ctx, rt, "f", rt, "g", 0); renamed <- err }()
	<-held.reached // f and g locked, the decision not written
	unlinked := make(chan error, 1)
	go func() { _, err := b.Unlink(ctx, rt, "f"); unlinked <- err }()
	select {
	case err := <-unlinked:
		close(held.release)
		t.Fatalf("the unlink of a locked name answered before the rename was decided: %v", err)
	case <-waiting:
	}
	close(held.release)
	if err := <-renamed; err != nil {
		t.Fatalf("rename: %v", err)
	}
	if err := <-unlinked; !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("the unlink after the rename: %v, want ErrNotExist", err)
	}
	if n := must(b.Lookup(ctx, rt, "g"))(t); n.Ino != f.Ino {
		t.Fatalf("g is %+v, want the file %d", n, f.Ino)
	}
}
