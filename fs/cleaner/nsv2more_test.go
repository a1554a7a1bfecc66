package cleaner_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// An unlinked file that a copy by reference points into is kept whole on
// v2 as on v1 (the same rules): reported as referenced, never reaped,
// while the copy's retained checkpoint needs it.
func TestV2OrphanKeptForCopy(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := v2Volume(t, st)
	p := params(segment.FormatStream, false)
	x, err := tr.Create(ctx, namespace.RootIno, "x", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	h := writeHistory(t, st, x.FileID, p, 2, 11)
	d, err := tr.Create(ctx, namespace.RootIno, "d", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, st, p, d.FileID, x.FileID)
	if _, err := tr.Unlink(ctx, namespace.RootIno, "x"); err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{time.Minute, 3 * time.Hour} {
		rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, Now: at(after)})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Orphans) != 0 || !slices.Contains(rep.Referenced, x.FileID) {
			t.Fatalf("after %v: orphans reaped %v, referenced %v; want x kept for its copy", after, rep.Orphans, rep.Referenced)
		}
	}
	h.checkAt(t, st, h.cnos[len(h.cnos)-1])
	if !hasKey(t, st, recordKey(t, x.FileID)) {
		t.Fatal("the kept orphan's record went")
	}
}

// A mount's background cleaner on a v2 volume reaps the unlinked files and
// their records, and leaves the named ones.
func TestV2Background(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := v2Volume(t, st)
	var gone, kept []string
	for i := range 6 {
		name := string(rune('a' + i))
		n, err := tr.Create(ctx, namespace.RootIno, name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 2, uint64(i))
		if i%2 == 0 {
			if _, err := tr.Unlink(ctx, namespace.RootIno, name); err != nil {
				t.Fatal(err)
			}
			gone = append(gone, n.FileID)
		} else {
			kept = append(kept, n.FileID)
		}
	}
	var passes atomic.Int32
	b := cleaner.StartBackground(st, "", cleaner.BackgroundOptions{
		Options:  cleaner.Options{Keep: 1, Grace: time.Nanosecond},
		Interval: time.Millisecond, MaxFiles: 2, LeaseTTL: time.Hour,
		OnPass: func(rep *cleaner.Report, err error) {
			if err != nil {
				t.Errorf("pass: %v", err)
			}
			passes.Add(1)
		},
	})
	defer b.Stop()
	waitFor(t, "the unlinked files and their records gone", func() bool {
		for _, id := range gone {
			if countKeys(t, st, "f/"+id+"/") > 0 || countKeys(t, st, recordKey(t, id)) > 0 {
				return false
			}
		}
		return true
	})
	for _, id := range kept {
		if countKeys(t, st, "f/"+id+"/inode") != 1 {
			t.Fatalf("named file %s lost its head", id)
		}
	}
}

// A run on a v2 volume with a fault at its Nth request, for every N, then a
// run without: nothing named is ever lost, and the second run finishes
// what the first left (the orphan reaped, the stale record and the old
// history gone).
func TestV2CleanerFaultAtEveryRequest(t *testing.T) {
	ctx := context.Background()
	type vol struct {
		st        *faulty.Store
		named     *history
		orphan    string
		stale     string
		tombstone string
	}
	setup := func(t *testing.T) vol {
		inner := mem.NewS3ETags()
		st := faulty.New(inner, 1)
		tr := v2Volume(t, st)
		var v vol
		v.st = st
		n, err := tr.Create(ctx, namespace.RootIno, "named", 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		v.named = writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 2, 1)
		o, err := tr.Create(ctx, namespace.RootIno, "orphan", 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		writeHistory(t, st, o.FileID, params(segment.FormatStream, false), 1, 2)
		if _, err := tr.Unlink(ctx, namespace.RootIno, "orphan"); err != nil {
			t.Fatal(err)
		}
		v.orphan = o.FileID
		// A symlink removed: its tombstone, which no record names.
		if _, err := tr.Symlink(ctx, namespace.RootIno, "link", "named", namespace.Owner{}); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Unlink(ctx, namespace.RootIno, "link"); err != nil {
			t.Fatal(err)
		}
		v.tombstone, _ = nsv2.DentryKey("", namespace.RootIno, 1, "link")
		// A record of an unlink of "named" that never landed.
		dk, _ := nsv2.DentryKey("", namespace.RootIno, 1, "named")
		id := st.Add(faulty.Rule{Op: staging.OpPut, KeyPrefix: dk, Times: 1})
		if _, err := tr.Unlink(ctx, namespace.RootIno, "named"); err == nil {
			t.Fatal("unlink with its tombstone failing succeeded")
		}
		st.Remove(id)
		v.stale = recordKey(t, n.FileID)
		return v
	}
	o := cleaner.Options{Keep: 1, Grace: time.Hour, Now: at(nsv2.TrimGrace + 3*time.Hour)}
	for n := 1; ; n++ {
		v := setup(t)
		before := v.st.Injected() // the setup's own
		v.st.Add(faulty.Rule{Nth: n, Times: 1})
		_, err := cleaner.CleanVolume(ctx, v.st, "", o)
		injected := v.st.Injected() > before
		if err != nil && !errors.Is(err, faulty.ErrInjected) {
			t.Fatalf("fault at request %d: %v", n, err)
		}
		v.st.Clear()
		// The orphan's grace counts from the first run that found it:
		// two runs a grace apart, whatever the first did.
		for _, later := range []time.Duration{6 * time.Hour, 8 * time.Hour} {
			if _, err := cleaner.CleanVolume(ctx, v.st, "", cleaner.Options{Keep: 1, Grace: time.Hour, Now: at(nsv2.TrimGrace + later)}); err != nil {
				t.Fatalf("fault at request %d, then a run without: %v", n, err)
			}
		}
		chain := v.named.chain(t, v.st)
		if len(chain) == 0 {
			t.Fatalf("fault at request %d: the named file has no checkpoint", n)
		}
		for _, cno := range chain {
			v.named.checkAt(t, v.st, cno)
		}
		if countKeys(t, v.st, "f/"+v.orphan+"/") != 0 || hasKey(t, v.st, recordKey(t, v.orphan)) || hasKey(t, v.st, v.stale) || hasKey(t, v.st, v.tombstone) {
			t.Fatalf("fault at request %d: left the orphan's objects %d, its record %v, the stale record %v, the tombstone %v",
				n, countKeys(t, v.st, "f/"+v.orphan+"/"), hasKey(t, v.st, recordKey(t, v.orphan)), hasKey(t, v.st, v.stale), hasKey(t, v.st, v.tombstone))
		}
		if !injected {
			if n < 10 {
				t.Fatalf("a run of %d requests: the test exercises nothing", n)
			}
			t.Logf("a fault at each of %d requests", n-1)
			return
		}
	}
}

// Under a mount root: the records, the files and the trim are the root's.
func TestV2UnderRoot(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	const root = "vol/"
	cfg := config.MountDefault(1 << 30)
	cfg.Namespace = config.NamespaceV2
	if _, err := volume.CreateDescriptor(ctx, st, root, cfg); err != nil {
		t.Fatal(err)
	}
	tr, err := nsv2.Open(nsv2.Config{Store: st, Root: root, Mount: namespace.NewFileID()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ids := map[string]string{}
	for _, name := range []string{"gone", "kept"} {
		n, err := tr.Create(ctx, namespace.RootIno, name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = n.FileID
		if _, err := st.Put(ctx, volume.FilePrefix(root, n.FileID)+"0000000001.0", []byte("x"), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Unlink(ctx, namespace.RootIno, "gone"); err != nil {
		t.Fatal(err)
	}
	rep, err := cleaner.CleanVolume(ctx, st, root, cleaner.Options{Now: at(nsv2.TrimGrace + time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := nsv2.OrphanKey(root, ids["gone"])
	tomb, _ := nsv2.DentryKey(root, namespace.RootIno, 1, "gone")
	if countKeys(t, st, volume.FilePrefix(root, ids["gone"])) != 0 || hasKey(t, st, rec) || hasKey(t, st, tomb) {
		t.Fatalf("under %q: the orphan's objects %d, record %v, tombstone %v left (report %+v)", root,
			countKeys(t, st, volume.FilePrefix(root, ids["gone"])), hasKey(t, st, rec), hasKey(t, st, tomb), rep)
	}
	if countKeys(t, st, volume.FilePrefix(root, ids["kept"])) != 1 {
		t.Fatal("the named file's object went")
	}
}

// A rename of x over the file y whose mount died after deciding commit,
// before resolving its locks, with no reader since: y's record names a
// locked name. The cleaner resolves the lock as a reader does, finds y
// without a name, and reaps it past its grace; a dry run writes nothing.
func TestV2RecordOfDeadRename(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := v2Volume(t, st)
	if _, err := tr.Create(ctx, namespace.RootIno, "x", 0o644, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	y, err := tr.Create(ctx, namespace.RootIno, "y", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	h := writeHistory(t, st, y.FileID, params(segment.FormatStream, false), 1, 4)
	bindingOf := func(name string) (*nsv2.Binding, string) {
		key, _ := nsv2.DentryKey("", namespace.RootIno, 1, name)
		data, info, err := st.Get(ctx, key, staging.Range{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := nsv2.DecodeDentry(key, data)
		if err != nil {
			t.Fatal(err)
		}
		return d.Bound, info.ETag
	}
	bx, ex := bindingOf("x")
	by, ey := bindingOf("y")
	tx := namespace.NewFileID()
	rec, err := nsv2.EncodeOrphan(&nsv2.Orphan{FileID: y.FileID, Ino: y.Ino, Dir: namespace.RootIno, Frags: 1, Name: "y", Change: tx})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, recordKey(t, y.FileID), rec, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ops := []nsv2.Op{{Dir: namespace.RootIno, Frags: 1, Name: "x"}, {Dir: namespace.RootIno, Frags: 1, Name: "y", To: bx}}
	n := nsv2.New(st, "", nil)
	if _, err := n.Lock(ctx, tx, ops, []nsv2.Held{{ETag: ex, Bound: bx}, {ETag: ey, Bound: by}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Decide(ctx, &nsv2.Decision{Tx: tx, Outcome: nsv2.Commit, Ops: ops}); err != nil {
		t.Fatal(err)
	}
	locked := func() bool {
		key, _ := nsv2.DentryKey("", namespace.RootIno, 1, "y")
		data, _, err := st.Get(ctx, key, staging.Range{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := nsv2.DecodeDentry(key, data)
		if err != nil {
			t.Fatal(err)
		}
		return d.Lock != nil
	}
	for _, tc := range []struct {
		after  time.Duration
		dry    bool
		reaped bool
	}{{time.Minute, true, false}, {time.Minute, false, false}, {3 * time.Hour, false, true}} {
		rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, DryRun: tc.dry, Now: at(tc.after)})
		if err != nil {
			t.Fatal(err)
		}
		if tc.dry != locked() {
			t.Fatalf("after %v (dry %v): y locked %v", tc.after, tc.dry, !tc.dry)
		}
		if left := countKeys(t, st, h.prefix); tc.reaped != (left == 0) {
			t.Fatalf("after %v (dry %v): y has %d objects, orphans %v; want reaped %v", tc.after, tc.dry, left, rep.Orphans, tc.reaped)
		}
	}
	if _, err := v2Mount(t, st).Lookup(ctx, namespace.RootIno, "y"); err != nil {
		t.Fatalf("y after the rename of x over it: %v", err)
	}
}
