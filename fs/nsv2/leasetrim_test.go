package nsv2

import (
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// putLease stores mount cid(m)'s lease on dir, renewal r, and returns its
// key.
func putLease(t *testing.T, st staging.Store, dir namespace.Ino, m int, r uint64) string {
	t.Helper()
	key, _ := LeaseKey(root, dir, cid(m))
	body, err := EncodeLease(&Lease{Dir: dir, Mount: cid(m), Renewal: r})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(context.Background(), key, body, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return key
}

// putSeal stores the seal of dir by change tx, decided outcome ("" none).
func putSeal(t *testing.T, st staging.Store, dir namespace.Ino, tx, outcome string) {
	t.Helper()
	ctx := context.Background()
	key, _ := SealKey(root, dir)
	body, _ := EncodeSeal(&Seal{Dir: dir, Tx: tx})
	if _, err := st.Put(ctx, key, body, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if outcome != "" {
		if _, err := New(st, root, nil).decide(ctx, &Decision{Tx: tx, Outcome: outcome, Ops: []Op{{Dir: namespace.RootIno, Frags: 1, Name: "d"}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// The trim deletes an old lease only on a directory whose removal
// committed (its seal is there, decided commit); on a live directory, or
// one whose removal aborted or is undecided, the lease is its holder's and
// stays, however old. The decision a seal names stays too.
func TestTrimLeasesOfRemovedDirectories(t *testing.T) {
	st := mem.NewS3ETags()
	live := putLease(t, st, 5, 1, 1)
	putSeal(t, st, 6, cid(60), Commit)
	removed := putLease(t, st, 6, 1, 1)
	putSeal(t, st, 7, cid(70), Abort)
	aborted := putLease(t, st, 7, 1, 1)
	putSeal(t, st, 8, cid(80), "")
	pending := putLease(t, st, 8, 1, 1)
	r := trimAt(t, st, 2*TrimGrace, false)
	for k, there := range map[string]bool{live: true, removed: false, aborted: true, pending: true} {
		if has(t, st, k) != there {
			t.Errorf("%s there %v, want %v (report %+v)", k, !there, there, r)
		}
	}
	for _, tx := range []string{cid(60), cid(70)} {
		if xkey, _ := DecisionKey(root, tx); !has(t, st, xkey) {
			t.Errorf("the decision %s a seal names was trimmed", tx)
		}
	}
}

// A renewal of a lease on a live directory landing between any two of the
// trim's requests on it is never deleted: the trim does not delete the
// lease of a live directory at all. (Before, it read the lease again and
// deleted it: a renewal landing between was deleted while its holder
// believed it held it, and a remover would not wait for it.)
func TestTrimNeverDeletesARenewedLease(t *testing.T) {
	for i := 0; ; i++ {
		inner := mem.NewS3ETags()
		key := putLease(t, inner, 5, 1, 1)
		hs := &hookStore{Store: inner, key: key}
		ran := false
		hs.before = func(j int, op string) {
			if j == i {
				ran = true
				putLease(t, inner, 5, 1, 2) // the holder renews
			}
		}
		trimAt(t, hs, 2*TrimGrace, false)
		l, _, err := read(context.Background(), inner, key, kindLease, DecodeLease)
		if err != nil {
			t.Fatalf("before the trim's request %d on the lease: the lease of a live directory is gone: %v", i, err)
		}
		if ran && l.Renewal != 2 {
			t.Fatalf("renewal %d there; want the renewal", l.Renewal)
		}
		if !ran {
			break
		}
	}
}

// A removal that aborts (the directory has a name) leaves its seal: another
// remover's seal written over it (If-Match, once the abort is decided)
// between any two of the aborting remover's requests on the seal is never
// deleted by it. (Before, the aborting remover deleted the seal
// unconditionally after its abort, and with it the other remover's.)
func TestAbortedRemovalKeepsTheNextSeal(t *testing.T) {
	for i := 0; ; i++ {
		ctx := context.Background()
		inner := mem.NewS3ETags()
		setup := openTree(t, inner, 1)
		d := must(setup.Mkdir(ctx, namespace.RootIno, "d", 0o755, owner))(t)
		must(setup.Create(ctx, d.Ino, "x", 0o644, owner))(t)
		must(struct{}{}, setup.Close())(t)
		skey, _ := SealKey(root, d.Ino)
		hs := &hookStore{Store: inner, key: skey}
		other := cid(77)
		ran, landed := false, false
		hs.before = func(j int, op string) {
			if j != i {
				return
			}
			ran = true
			// What the other remover's seal does: over a seal whose change
			// is decided abort, If-Match.
			s, info, err := read(ctx, inner, skey, kindSeal, DecodeSeal)
			if err != nil {
				return
			}
			xkey, _ := DecisionKey(root, s.Tx)
			x, _, err := read(ctx, inner, xkey, kindDecision, DecodeDecision)
			if err != nil || x.Outcome != Abort {
				return
			}
			body, _ := EncodeSeal(&Seal{Dir: d.Ino, Tx: other})
			if _, err := inner.Put(ctx, skey, body, staging.PutOptions{Conditions: staging.Conditions{IfMatch: info.ETag}}); err == nil {
				landed = true
			}
		}
		a, err := Open(Config{Store: hs, Root: root, Mount: cid(2), FirstBatch: 1<<40 + 32})
		if err != nil {
			t.Fatal(err)
		}
		must(a.Lookup(ctx, namespace.RootIno, "d"))(t)
		if err := a.Rmdir(ctx, namespace.RootIno, "d"); !errors.Is(err, namespace.ErrNotEmpty) {
			t.Fatalf("rmdir of a directory with a name: %v", err)
		}
		_ = a.Close()
		s, _, err := read(ctx, inner, skey, kindSeal, DecodeSeal)
		if landed && (err != nil || s.Tx != other) {
			t.Fatalf("a seal written over the aborted one before the remover's request %d on it is gone (%v, %+v)", i, err, s)
		}
		if !ran {
			if err != nil {
				t.Fatalf("the aborted removal's seal is gone: %v", err)
			}
			break
		}
	}
}
