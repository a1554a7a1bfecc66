package nsv2

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A mount away for longer than TrimGrace drops its cache at its next call
// (docs/namespace-v2.md §5): a name another mount removed since, which the
// cache would still serve (no TTL: until a Refresh), is read again and
// found gone. A pause shorter than that keeps the cache.
func TestCacheDroppedAfterGap(t *testing.T) {
	for _, tc := range []struct {
		pause   time.Duration
		dropped bool
	}{{TrimGrace / 2, false}, {TrimGrace + time.Second, true}} {
		ctx := context.Background()
		st := mem.NewS3ETags()
		a := openTreeClock(t, st, 1, newFakeClock())
		cb := newFakeClock()
		b := openTreeClock(t, st, 2, cb)
		if _, err := a.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Lookup(ctx, namespace.RootIno, "f"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Unlink(ctx, namespace.RootIno, "f"); err != nil {
			t.Fatal(err)
		}
		cb.mu.Lock()
		cb.t = cb.t.Add(tc.pause)
		cb.mu.Unlock()
		_, err := b.Lookup(ctx, namespace.RootIno, "f")
		if gone := errors.Is(err, namespace.ErrNotExist); gone != tc.dropped || b.CacheDrops() != map[bool]int{false: 0, true: 1}[tc.dropped] {
			t.Fatalf("after a pause of %v: lookup of a name removed by another mount: %v, %d drops; want the cache dropped %v",
				tc.pause, err, b.CacheDrops(), tc.dropped)
		}
	}
}
