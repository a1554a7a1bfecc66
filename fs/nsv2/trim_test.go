package nsv2

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// trimAt trims root at the clock now+d.
func trimAt(t *testing.T, st staging.Store, d time.Duration, dry bool) *TrimReport {
	t.Helper()
	now := time.Now().Add(d)
	r, err := Trim(context.Background(), st, root, TrimOptions{Now: func() time.Time { return now }, DryRun: dry})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func has(t *testing.T, st staging.Store, key string) bool {
	t.Helper()
	_, err := st.Head(context.Background(), key)
	if err != nil && !errors.Is(err, staging.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// A decided change whose names are still locked (the coordinator died
// before resolving them, and no reader came) keeps its decision, whatever
// its age: a reader of a locked name needs it, or it would abort a change
// that committed. A dry run changes nothing; a trim resolves the locks from
// the decision, as a reader does, and a later trim takes the op lists off
// the dentries, then the decision; the names read as the change made them
// all along.
func TestTrimKeepsDecisionOfLockedName(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	n := New(st, root, nil)
	etagA := store(t, st, dentryOf(nameA, cid(50), fb(1)))
	tx := cid(7)
	lockAB(t, n, tx, etagA)
	if _, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: renameAB()}); err != nil {
		t.Fatal(err)
	}
	xkey, _ := DecisionKey(root, tx)
	locked := func() (out []string) {
		for _, nm := range []name{nameA, nameB} {
			if d, _ := stored(t, st, nm); d != nil && d.Lock != nil {
				out = append(out, nm.name)
			}
		}
		return out
	}
	for _, dry := range []bool{true, false} {
		r := trimAt(t, st, TrimGrace+time.Hour, dry)
		if !has(t, st, xkey) || r.Kept != 1 || len(r.Deleted) != 0 {
			t.Fatalf("dry %v: trim with the names locked: decision there %v, report %+v", dry, has(t, st, xkey), r)
		}
		if l := locked(); dry && len(l) != 2 || !dry && len(l) != 0 {
			t.Fatalf("dry %v: names locked after the trim: %v", dry, l)
		}
		if v := view(t, st, nameB, false); !reflect.DeepEqual(v.Bound, fb(1)) {
			t.Fatalf("nameB read after the trim: %+v", v.Bound)
		}
	}
	r := trimAt(t, st, TrimGrace+time.Hour, false)
	if has(t, st, xkey) || len(r.Rewritten) == 0 {
		t.Fatalf("trim after the names resolved: decision there %v, report %+v", has(t, st, xkey), r)
	}
	// nameB bound without the op list; nameA a tombstone without it (or
	// gone already: this test's clock is past the grace of the rewrite
	// too).
	if d, _ := stored(t, st, nameB); d == nil || d.Lock != nil || len(d.Ops) != 0 || !reflect.DeepEqual(d.Bound, fb(1)) {
		t.Fatalf("nameB after the trim: %+v", d)
	}
	if d, _ := stored(t, st, nameA); d != nil && (!d.Tombstone() || len(d.Ops) != 0) {
		t.Fatalf("nameA after the trim: %+v", d)
	}
	if v := view(t, st, nameB, true); !reflect.DeepEqual(v.Bound, fb(1)) {
		t.Fatalf("nameB after the decision went: %+v", v.Bound)
	}
	// nameA's tombstone goes at the next trim; nameB, bound, stays.
	trimAt(t, st, TrimGrace+time.Hour, false)
	if has(t, st, nameA.key(t)) || !has(t, st, nameB.key(t)) {
		t.Fatalf("after the last trim: nameA there %v (a tombstone), nameB there %v (bound)", has(t, st, nameA.key(t)), has(t, st, nameB.key(t)))
	}
}

// A lock younger than TxGrace of a change not decided yet is left alone by
// a trim: no decision exists to trim, and the trim writes no abort.
func TestTrimLeavesPendingLock(t *testing.T) {
	st := mem.NewS3ETags()
	n := New(st, root, nil)
	etagA := store(t, st, dentryOf(nameA, cid(50), fb(1)))
	lockAB(t, n, cid(8), etagA)
	r := trimAt(t, st, TrimGrace+time.Hour, false)
	if len(r.Deleted) != 0 || len(r.Rewritten) != 0 {
		t.Fatalf("trim of a change in progress: %+v", r)
	}
	xkey, _ := DecisionKey(root, cid(8))
	if has(t, st, xkey) {
		t.Fatal("the trim decided a change in progress")
	}
	for _, nm := range []name{nameA, nameB} {
		if d, _ := stored(t, st, nm); d == nil || d.Lock == nil {
			t.Fatalf("%s after the trim: %+v, want still locked", nm.name, d)
		}
	}
}

// Tombstones go once older than the grace, unless an orphan record names
// them; bound names never; a lease of a live directory stays, however old
// (TestTrimLeasesOfRemovedDirectories). A young tombstone stays.
func TestTrimTombstonesAndLeases(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	gone := name{1, 1, "gone"}
	recorded := name{1, 1, "recorded"}
	bound := name{1, 1, "bound"}
	store(t, st, dentryOf(gone, cid(1), nil))
	store(t, st, dentryOf(recorded, cid(2), nil))
	store(t, st, dentryOf(bound, cid(3), fb(3)))
	rec, err := EncodeOrphan(&Orphan{FileID: cid(9), Ino: 9, Dir: 1, Frags: 1, Name: "recorded", Change: cid(2)})
	if err != nil {
		t.Fatal(err)
	}
	rkey, _ := OrphanKey(root, cid(9))
	if _, err := st.Put(ctx, rkey, rec, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	lkey, _ := LeaseKey(root, 5, cid(4))
	lease, _ := EncodeLease(&Lease{Dir: 5, Mount: cid(4), Renewal: 1})
	if _, err := st.Put(ctx, lkey, lease, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := trimAt(t, st, time.Minute, false); len(r.Deleted) != 0 {
		t.Fatalf("young history trimmed: %+v", r.Deleted)
	}
	r := trimAt(t, st, TrimGrace+time.Minute, false)
	want := map[string]bool{gone.key(t): false, recorded.key(t): true, bound.key(t): true, lkey: true, rkey: true}
	for k, there := range want {
		if has(t, st, k) != there {
			t.Errorf("%s there %v, want %v (report %+v)", k, !there, there, r)
		}
	}
}

// A trim that fails midway (a DELETE fails) returns the error and leaves
// what it did not reach; run again, it finishes, and never deletes a name
// that is bound.
func TestTrimFault(t *testing.T) {
	inner := mem.NewS3ETags()
	st := faulty.New(inner, 1)
	var bound []name
	for i := range 5 {
		store(t, st, dentryOf(name{1, 1, string(rune('a' + i))}, cid(10+i), nil))
		b := name{1, 1, string(rune('A' + i))}
		store(t, st, dentryOf(b, cid(20+i), fb(20+i)))
		bound = append(bound, b)
	}
	st.Add(faulty.Rule{Op: staging.OpDelete, Nth: 3, Times: 1})
	now := time.Now().Add(TrimGrace + time.Minute)
	if _, err := Trim(context.Background(), st, root, TrimOptions{Now: func() time.Time { return now }}); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("trim with a DELETE failing: %v", err)
	}
	trimAt(t, st, TrimGrace+time.Minute, false)
	objs, err := staging.ListAll(context.Background(), st, DentriesPrefix(root))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(bound) {
		t.Fatalf("%d dentries after the trims, want the %d bound", len(objs), len(bound))
	}
	for _, b := range bound {
		if d, _ := stored(t, st, b); d == nil || d.Bound == nil {
			t.Fatalf("bound name %s after the trims: %+v", b.name, d)
		}
	}
}

// The bound on a tombstone's size that keeps the trim from reading bound
// names holds: every bound dentry is larger than the largest tombstone of
// its name, and every tombstone at most that.
func TestMaxTombstoneLen(t *testing.T) {
	for _, nm := range []string{"a", "step_1.tmp", "\xff\xfe", string(make([]byte, 0)) + "x%y"} {
		for _, frags := range []uint32{1, 16, 256} {
			dn := DentryName{Dir: 1<<40 + 7, Name: nm}
			tomb, err := EncodeDentry(&Dentry{Dir: dn.Dir, Frags: frags, Name: Name(nm), Change: cid(1)})
			if err != nil {
				t.Fatal(err)
			}
			small := &Binding{Ino: 1, Kind: namespace.KindFIFO, Node: &Attrs{}}
			b, err := EncodeDentry(&Dentry{Dir: dn.Dir, Frags: frags, Name: Name(nm), Change: cid(1), Bound: small})
			if err != nil {
				t.Fatal(err)
			}
			if m := maxTombstoneLen(dn); len(tomb) > m || len(b) <= m {
				t.Fatalf("%q, %d fragments: tombstone %d bytes, bound %d, bound %d", nm, frags, len(tomb), len(b), m)
			}
		}
	}
}

// The name of a directory removed (a change of its own, whose decision
// its seal names and so stays, see sealTxs) loses its op list and goes as
// any tombstone does; the seal and the decision stay. (Before, the trim
// skipped a sealed decision whole: the name's tombstone kept its op list,
// and a tombstone with one is never trimmed, so every directory ever
// removed left its name under ns2/d/ for good: scripts/bench-ranks steady,
// 5 a checkpoint step of 4 ranks.)
func TestTrimRemovedDirectoryName(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := openTree(t, st, 1)
	dir := must(tr.Mkdir(ctx, namespace.RootIno, "step_1", 0o755, owner))(t)
	if err := tr.Rmdir(ctx, namespace.RootIno, "step_1"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil { // its tidying of the lock done
		t.Fatal(err)
	}
	nm := name{namespace.RootIno, 1, "step_1"}
	d, _ := stored(t, st, nm)
	if d == nil || d.Bound != nil || d.Lock != nil && d.Lock.To != nil {
		t.Fatalf("the removed directory's name: %+v, want a tombstone, or locked to one", d)
	}
	skey, _ := SealKey(root, dir.Ino)
	xkey, _ := DecisionKey(root, d.Change)
	if !has(t, st, skey) || !has(t, st, xkey) {
		t.Fatalf("after the rmdir: seal there %v, decision there %v", has(t, st, skey), has(t, st, xkey))
	}
	trimAt(t, st, TrimGrace+time.Hour, false) // the op list, if any
	r := trimAt(t, st, TrimGrace+time.Hour, false)
	if has(t, st, nm.key(t)) {
		d, _ := stored(t, st, nm)
		t.Fatalf("the removed directory's name after two trims past the grace: %+v (report %+v)", d, r)
	}
	if !has(t, st, skey) || !has(t, st, xkey) {
		t.Fatalf("after the trims: seal there %v, decision there %v; both stay", has(t, st, skey), has(t, st, xkey))
	}
	if _, err := openTree(t, st, 2).Create(ctx, dir.Ino, "f", 0o644, owner); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("a create in the removed directory after the trims: %v, want ErrNotExist", err)
	}
}
