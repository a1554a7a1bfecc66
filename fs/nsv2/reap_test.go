package nsv2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// hookStore runs before, when set, ahead of each request on key: the test
// makes another party's step land between two of a trim's requests.
type hookStore struct {
	staging.Store
	key    string
	mu     sync.Mutex
	n      int // requests on key so far
	before func(i int, op string)
}

func (h *hookStore) hook(key, op string) {
	if key != h.key {
		return
	}
	h.mu.Lock()
	i := h.n
	h.n++
	fn := h.before
	h.mu.Unlock()
	if fn != nil {
		fn(i, op)
	}
}

func (h *hookStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	h.hook(key, "PUT")
	return h.Store.Put(ctx, key, data, o)
}

func (h *hookStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	h.hook(key, "GET")
	return h.Store.Get(ctx, key, r)
}

func (h *hookStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	h.hook(key, "HEAD")
	return h.Store.Head(ctx, key)
}

func (h *hookStore) Delete(ctx context.Context, key string) error {
	h.hook(key, "DELETE")
	return h.Store.Delete(ctx, key)
}

// markReaping rewrites the tombstone at nm as a reaping one (a trim that
// stopped between its mark and its DELETE) and returns its ETag.
func markReaping(t *testing.T, st staging.Store, nm name) string {
	t.Helper()
	d, _ := stored(t, st, nm)
	if d == nil || !d.Tombstone() {
		t.Fatalf("%v holds %+v, not a tombstone", nm, d)
	}
	d.Reap = newID()
	return store(t, st, d)
}

// A create of a name lands between any two of the trim's requests on the
// name's tombstone (old enough to go): it is never deleted with it. Before
// the trim's first request the create lands over the tombstone and the
// trim leaves it; after the mark, the create is refused (ErrLocked) until
// the DELETE, and lands If-None-Match after. A reaping tombstone left by a
// trim that stopped is marked again and deleted the same way.
func TestTrimNeverDeletesACreate(t *testing.T) {
	for _, left := range []bool{false, true} {
		for i := 0; ; i++ {
			ctx := context.Background()
			inner := mem.NewS3ETags()
			hs := &hookStore{Store: inner, key: nameA.key(t)}
			n := New(inner, root, nil)
			etag := store(t, inner, dentryOf(nameA, cid(1), fb(1)))
			if _, err := n.Tombstone(ctx, nameA.dir, nameA.frags, nameA.name, cid(2), etag); err != nil {
				t.Fatal(err)
			}
			if left {
				markReaping(t, inner, nameA)
			}
			ran, locked := false, false
			var got error
			var what string
			hs.before = func(j int, op string) {
				if j != i {
					return
				}
				ran, what = true, op
				_, got = n.Bind(ctx, nameA.dir, nameA.frags, nameA.name, cid(3), fb(3))
				locked = errors.Is(got, ErrLocked)
				if got != nil && !locked {
					t.Errorf("create before the trim's request %d (%s): %v", j, op, got)
				}
			}
			trimAt(t, hs, 2*TrimGrace, false)
			if !ran {
				if i < 2 {
					t.Fatalf("left=%v: the trim made %d requests on the tombstone", left, i)
				}
				break
			}
			if locked {
				// Refused while the trim held the name: it is gone now.
				if _, err := n.Bind(ctx, nameA.dir, nameA.frags, nameA.name, cid(3), fb(3)); err != nil {
					t.Fatalf("left=%v, before request %d (%s): create after the trim: %v", left, i, what, err)
				}
			}
			if r := view(t, inner, nameA, false); r.Bound == nil || r.Bound.Ino != fb(3).Ino {
				t.Fatalf("left=%v: a create acknowledged before the trim's request %d (%s) is lost: the name holds %+v", left, i, what, r.Dentry)
			}
		}
	}
}

// Every reader takes a reaping tombstone as no name: a lookup and a listing
// do not show it, Resolve says Pending with no binding, and a decoded one
// round-trips; a reaping mark on anything but a bare tombstone does not
// encode.
func TestReapingTombstoneReads(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := openTree(t, st, 1)
	must(tr.Create(ctx, namespace.RootIno, "t", 0o644, owner))(t)
	must(tr.Create(ctx, namespace.RootIno, "u", 0o644, owner))(t)
	must(tr.Unlink(ctx, namespace.RootIno, "t"))(t)
	frags := must(tr.dirFrags(namespace.RootIno))(t)
	nm := name{namespace.RootIno, frags, "t"}
	markReaping(t, st, nm)
	other := openTree(t, st, 2)
	if _, err := other.Lookup(ctx, namespace.RootIno, "t"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("lookup of a reaping tombstone: %v; want ErrNotExist", err)
	}
	for _, d := range must(other.ReadDir(ctx, namespace.RootIno))(t) {
		if d.Name == "t" {
			t.Fatal("a reaping tombstone is listed")
		}
	}
	if r := view(t, st, nm, false); r.Bound != nil || !r.Pending {
		t.Fatalf("resolved %+v; want no binding, pending", r)
	}
	bad := dentryOf(nameA, cid(1), fb(1))
	bad.Reap = cid(2)
	if _, err := EncodeDentry(bad); !errors.Is(err, namespace.ErrInvalid) {
		t.Fatalf("a bound dentry marked reaping encodes: %v", err)
	}
}

// A create, mkdir, rename onto or link onto a name whose
// tombstone the trim is reaping waits (no write lands on it) and goes
// through once it is gone: the wait here is the mount's backoff, whose
// first sleep is when the trim's DELETE lands.
func TestChangesWaitForReapingTombstone(t *testing.T) {
	for _, tc := range []struct {
		op     string
		cached bool // the mount unlinked the name itself: it holds the tombstone's old ETag
	}{{"create", false}, {"mkdir", false}, {"rename", false}, {"link", false}, {"create", true}, {"rename", true}, {"link", true}} {
		op := tc.op
		t.Run(fmt.Sprintf("%s cached=%v", op, tc.cached), func(t *testing.T) {
			ctx := context.Background()
			st := mem.NewS3ETags()
			sleep := sleepCtx // the test's own below, once the setup is done
			tr, err := Open(Config{Store: st, Root: root, Mount: cid(9), FirstBatch: 1<<40 + 9*16,
				Sleep: func(ctx context.Context, d time.Duration) error { return sleep(ctx, d) }})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			setup := openTree(t, st, 1)
			if tc.cached {
				setup = tr
			}
			src := must(setup.Create(ctx, namespace.RootIno, "src", 0o644, owner))(t)
			must(setup.Create(ctx, namespace.RootIno, "t", 0o644, owner))(t)
			must(setup.Unlink(ctx, namespace.RootIno, "t"))(t)
			frags := must(setup.dirFrags(namespace.RootIno))(t)
			nm := name{namespace.RootIno, frags, "t"}
			reaping := markReaping(t, st, nm)
			sleeps := 0
			sleep = func(ctx context.Context, d time.Duration) error {
				sleeps++
				if sleeps == 1 {
					if _, etag := stored(t, st, nm); etag != reaping {
						t.Errorf("%s wrote over a reaping tombstone before it went", op)
					}
					if err := st.Delete(ctx, nm.key(t)); err != nil { // the trim's DELETE
						return err
					}
				}
				if sleeps > 20 {
					return fmt.Errorf("still waiting")
				}
				return nil
			}
			var n namespace.Node
			switch op {
			case "create":
				n, err = tr.Create(ctx, namespace.RootIno, "t", 0o644, owner)
			case "mkdir":
				n, err = tr.Mkdir(ctx, namespace.RootIno, "t", 0o755, owner)
			case "rename":
				must(tr.Lookup(ctx, namespace.RootIno, "src"))(t)
				_, err = tr.Rename(ctx, namespace.RootIno, "src", namespace.RootIno, "t", 0)
				n = src
			case "link":
				must(tr.Lookup(ctx, namespace.RootIno, "src"))(t)
				n, err = tr.Link(ctx, src.Ino, namespace.RootIno, "t")
			}
			if err != nil {
				t.Fatalf("%s over a reaping tombstone: %v", op, err)
			}
			if sleeps == 0 {
				t.Fatalf("%s did not wait for the reaping tombstone", op)
			}
			got := must(openTree(t, st, 3).Lookup(ctx, namespace.RootIno, "t"))(t)
			if got.Ino != n.Ino {
				t.Fatalf("t is %d after the %s; want %d", got.Ino, op, n.Ino)
			}
		})
	}
}
