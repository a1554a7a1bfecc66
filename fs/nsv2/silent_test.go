package nsv2

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// silentStore answers nothing while silent is set: every request fails as
// a request the store never answered does (staging.ErrTimeout).
type silentStore struct {
	staging.Store
	silent atomic.Bool
}

func (s *silentStore) quiet(op, key string) error {
	if s.silent.Load() {
		return fmt.Errorf("%s %s: %w", op, key, staging.ErrTimeout)
	}
	return nil
}

func (s *silentStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if err := s.quiet("get", key); err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	return s.Store.Get(ctx, key, r)
}

func (s *silentStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if err := s.quiet("head", key); err != nil {
		return staging.ObjectInfo{}, err
	}
	return s.Store.Head(ctx, key)
}

func (s *silentStore) List(ctx context.Context, prefix, after string, max int) (staging.ListPage, error) {
	if err := s.quiet("list", prefix); err != nil {
		return staging.ListPage{}, err
	}
	return s.Store.List(ctx, prefix, after, max)
}

func (s *silentStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if err := s.quiet("put", key); err != nil {
		return staging.ObjectInfo{}, err
	}
	return s.Store.Put(ctx, key, data, opts)
}

// While the store answers nothing, the names this mount read before (and
// the listing of their directory, with the names it made since) answer
// past their TTL, as v1's view of
// the log answers during an outage (docs/outages.md): a lookup, a GetNode
// and a listing wait for the store, then serve what was last seen instead
// of failing. A name never seen still fails (its absence is not known),
// and so does a change. Once the store answers, they are read again.
func TestSilentStoreAnswersFromCache(t *testing.T) {
	ctx := context.Background()
	ss := &silentStore{Store: mem.New()}
	c := newFakeClock()
	tr, err := Open(Config{Store: ss, Root: root, Mount: cid(1), FirstBatch: 1 << 40, Clock: c.now, Sleep: c.sleep, TTL: time.Second, RefreshEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	other := openTree(t, ss, 2)
	rt := namespace.RootIno
	d := must(other.Mkdir(ctx, rt, "d", 0o755, owner))(t)
	f := must(other.Create(ctx, d.Ino, "f", 0o644, owner))(t)
	must(other.Create(ctx, d.Ino, "g", 0o644, owner))(t)
	d2 := must(other.Mkdir(ctx, rt, "d2", 0o755, owner))(t)
	must(tr.Lookup(ctx, rt, "d2"))(t) // known, never listed
	if got := must(tr.Lookup(ctx, rt, "d"))(t); got.Ino != d.Ino {
		t.Fatalf("lookup d: %+v", got)
	}
	if l := must(tr.ReadDirAfter(ctx, d.Ino, 0))(t); len(l) != 2 {
		t.Fatalf("listing of d: %+v", l)
	}
	// A name this mount makes after its listing shows in it too.
	must(tr.Create(ctx, d.Ino, "h", 0o644, owner))(t)
	c.sleep(ctx, 2*time.Second) // every name and the listing past the TTL
	ss.silent.Store(true)

	if got, err := tr.Lookup(ctx, d.Ino, "f"); err != nil || got.Ino != f.Ino {
		t.Fatalf("lookup of a name seen, the store silent: %+v, %v; want it as seen", got, err)
	}
	if got, err := tr.GetNode(ctx, d.Ino); err != nil || got.Ino != d.Ino {
		t.Fatalf("GetNode of a directory seen, the store silent: %+v, %v; want it as seen", got, err)
	}
	if l, err := tr.ReadDirAfter(ctx, d.Ino, 0); err != nil || len(l) != 3 {
		t.Fatalf("listing of a directory listed, the store silent: %+v, %v; want its 3 names", l, err)
	}
	if _, err := tr.Lookup(ctx, d.Ino, "never"); !errors.Is(err, staging.ErrTimeout) {
		t.Fatalf("lookup of a name never seen, the store silent: %v; want the store's silence", err)
	}
	if _, err := tr.ReadDirAfter(ctx, d2.Ino, 0); !errors.Is(err, staging.ErrTimeout) {
		t.Fatalf("listing of a directory never listed, the store silent: %v; want the store's silence", err)
	}
	if _, err := tr.Create(ctx, d.Ino, "new", 0o644, owner); !errors.Is(err, staging.ErrTimeout) {
		t.Fatalf("create, the store silent: %v; want the store's silence", err)
	}

	ss.silent.Store(false)
	must(other.Unlink(ctx, d.Ino, "f"))(t)
	if _, err := tr.Lookup(ctx, d.Ino, "f"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("lookup of a name removed, once the store answers: %v; want ErrNotExist", err)
	}
}
