package nsv2

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/s3"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// TestPrimitivesS3 runs the primitives on a real S3 server (versitygw on
// loopback unless the environment names a bucket): its If-None-Match and
// If-Match on these keys, one winner among concurrent binders, and lost
// answers over it.
func TestPrimitivesS3(t *testing.T) {
	ctx := context.Background()
	st := s3test.NewStore(t)
	n := New(st, root, nil)

	t.Run("conditions on a dentry key", func(t *testing.T) {
		nm := name{9, 1, "cond"}
		body, err := EncodeDentry(dentryOf(nm, cid(1), fb(1)))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Put(ctx, nm.key(t), body, staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Put(ctx, nm.key(t), body, staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}}); !errors.Is(err, staging.ErrPrecondition) {
			t.Fatalf("If-None-Match on an existing key: %v", err)
		}
		next, err := n.Tombstone(ctx, nm.dir, nm.frags, nm.name, cid(2), info.ETag)
		if err != nil {
			t.Fatal(err)
		}
		if next == info.ETag {
			t.Fatal("a tombstone kept the bound dentry's ETag")
		}
		// The old ETag is stale now, for the store and for Tombstone.
		if _, err := st.Put(ctx, nm.key(t), body, staging.PutOptions{Conditions: staging.Conditions{IfMatch: info.ETag}}); !errors.Is(err, staging.ErrPrecondition) {
			t.Fatalf("If-Match with a stale ETag: %v", err)
		}
		if _, err := n.Tombstone(ctx, nm.dir, nm.frags, nm.name, cid(3), info.ETag); !errors.Is(err, ErrStale) {
			t.Fatalf("tombstone with a stale ETag: %v", err)
		}
		// If-Match on a key with no object is refused as a stale ETag.
		if _, err := n.Tombstone(ctx, 9, 1, "none", cid(3), info.ETag); !errors.Is(err, ErrStale) {
			t.Fatalf("tombstone of no object: %v", err)
		}
	})

	t.Run("bind", func(t *testing.T) {
		nm := name{9, 4, "bind"}
		etag, err := n.Bind(ctx, nm.dir, nm.frags, nm.name, cid(1), fb(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Bind(ctx, nm.dir, nm.frags, nm.name, cid(2), fb(2)); !errors.Is(err, namespace.ErrExist) {
			t.Fatalf("second bind: %v", err)
		}
		if _, err := n.Tombstone(ctx, nm.dir, nm.frags, nm.name, cid(3), etag); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Bind(ctx, nm.dir, nm.frags, nm.name, cid(4), fb(4)); err != nil {
			t.Fatalf("bind over a tombstone: %v", err)
		}
		if r := view(t, st, nm, false); !reflect.DeepEqual(r.Bound, fb(4)) || r.Dentry.Change != cid(4) {
			t.Fatalf("reads %+v", r)
		}
	})

	t.Run("concurrent binders", func(t *testing.T) {
		const binders = 4
		start := make(chan struct{})
		errs := make([]error, binders)
		var wg sync.WaitGroup
		for i := range binders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = n.Bind(ctx, 9, 1, "race", cid(10+i), fb(i))
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, namespace.ErrExist):
				t.Fatalf("binder %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("%d binders won", won)
		}
	})

	t.Run("rename", func(t *testing.T) {
		etagA := store(t, st, dentryOf(nameA, cid(1), fb(1)))
		tx := cid(7)
		locks := lockAB(t, n, tx, etagA)
		if _, err := n.Lock(ctx, cid(8), renameAB(), []Held{{ETag: etagA, Bound: fb(1)}, {}}); !errors.Is(err, ErrStale) {
			t.Fatalf("a second lock of the same names: %v", err)
		}
		if out, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: renameAB()}); out != Commit || err != nil {
			t.Fatalf("decide: %s, %v", out, err)
		}
		if out, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Abort}); out != Commit || err != nil {
			t.Fatalf("abort after commit: %s, %v", out, err)
		}
		if b := view(t, st, nameB, false); !reflect.DeepEqual(b.Bound, fb(1)) || b.Decision == nil {
			t.Fatalf("b reads %+v", b)
		}
		if err := n.Finish(ctx, locks, Commit); err != nil {
			t.Fatal(err)
		}
		if a := view(t, st, nameA, false); a.Bound != nil || a.Dentry.Lock != nil {
			t.Fatalf("a reads %+v", a)
		}
	})

	t.Run("claim batch", func(t *testing.T) {
		a, err := n.ClaimBatch(ctx, cid(1), 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := n.ClaimBatch(ctx, cid(2), 0)
		if err != nil || a != 0 || b != 1 {
			t.Fatalf("claims %d and %d (%v), want 0 and 1", a, b, err)
		}
	})

	t.Run("lost answers", func(t *testing.T) {
		f := faulty.New(st, 1)
		fn := New(f, root, nil)
		f.Add(faulty.Rule{Op: staging.OpPut, Nth: 1, Times: 1, Kind: faulty.LostAnswer})
		if _, err := fn.Bind(ctx, 9, 1, "lost", cid(1), fb(1)); err != nil {
			t.Fatalf("bind, its answer lost: %v", err)
		}
		f.Add(faulty.Rule{Op: staging.OpPut, Nth: 1, Times: 1, Kind: faulty.LostAnswer})
		if out, err := fn.Decide(ctx, &Decision{Tx: cid(20), Outcome: Abort}); out != Abort || err != nil {
			t.Fatalf("decide, its answer lost: %s, %v", out, err)
		}
		f.Add(faulty.Rule{Op: staging.OpPut, Nth: 1, Times: 1, Kind: faulty.LostAnswer})
		if b, err := fn.ClaimBatch(ctx, cid(3), 0); err != nil || b != 2 {
			t.Fatalf("claim, its answer lost: %d, %v", b, err)
		}
	})
}

// TestRefusedS3: a server that refuses every request (403: credentials it
// does not accept) fails bind with the server's answer, which the S3 store
// still explains, and stores nothing.
func TestRefusedS3(t *testing.T) {
	ctx := context.Background()
	cfg := s3test.Config(t)
	good, err := s3.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AccessKey, cfg.SecretKey = "nsv2-test-key", "not-the-secret"
	bad, err := s3.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(bad, root, nil).Bind(ctx, nameB.dir, nameB.frags, nameB.name, cid(1), fb(1))
	if err == nil || !errors.Is(bad.Explain(err), s3.ErrBadCredentials) {
		t.Fatalf("bind refused by the server: %v", err)
	}
	if _, err := good.Head(ctx, nameB.key(t)); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("after a refused bind, the name: %v", err)
	}
}
