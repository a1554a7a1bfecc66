package cleaner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/fs/writermark"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// v2Volume makes a namespace v2 volume at the bucket's top in st and
// returns a Tree on it, as a mount holds one.
func v2Volume(t *testing.T, st staging.Store) *nsv2.Tree {
	t.Helper()
	cfg := config.MountDefault(1 << 30)
	cfg.Namespace = config.NamespaceV2
	if _, err := volume.CreateDescriptor(context.Background(), st, "", cfg); err != nil {
		t.Fatal(err)
	}
	return v2Mount(t, st)
}

// v2Mount is another mount's Tree on the volume.
func v2Mount(t *testing.T, st staging.Store) *nsv2.Tree {
	t.Helper()
	tr, err := nsv2.Open(nsv2.Config{Store: st, Mount: namespace.NewFileID()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func at(d time.Duration) func() time.Time {
	t := time.Now().Add(d)
	return func() time.Time { return t }
}

func recordKey(t *testing.T, id string) string {
	t.Helper()
	k, err := nsv2.OrphanKey("", id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func hasKey(t *testing.T, st staging.Store, key string) bool {
	t.Helper()
	_, err := st.Head(context.Background(), key)
	if err != nil && !errors.Is(err, staging.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// On a v2 volume, an unlinked file's objects go once the grace (and the
// namespace lag) passed since a run first found it orphaned, then its
// orphan record; a dry run deletes nothing; a named file keeps its
// retained checkpoints, and loses the rest as on v1 (Keep).
func TestV2OrphanedFile(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := v2Volume(t, st)
	hist := map[string]*history{}
	ids := map[string]string{}
	for i, name := range []string{"gone", "kept"} {
		n, err := tr.Create(ctx, namespace.RootIno, name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = n.FileID
		hist[name] = writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 7, uint64(i))
	}
	if _, err := tr.Unlink(ctx, namespace.RootIno, "gone"); err != nil {
		t.Fatal(err)
	}
	rec := recordKey(t, ids["gone"])
	for _, tc := range []struct {
		name    string
		elapsed time.Duration
		dry     bool
		reaped  bool
	}{
		{"within grace", 30 * time.Minute, false, false},
		{"dry run past grace", 2 * time.Hour, true, false},
		{"past grace", 2 * time.Hour, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, NSLag: time.Minute, DryRun: tc.dry, Now: at(tc.elapsed)})
			if err != nil {
				t.Fatal(err)
			}
			left := len(keys(t, st, hist["gone"].prefix))
			if tc.reaped != (left == 0) {
				t.Fatalf("orphan has %d objects left; want reaped=%v (report %v)", left, tc.reaped, rep.Orphans)
			}
			if tc.reaped == hasKey(t, st, rec) {
				t.Fatalf("orphan record there: %v; want it gone once reaped (%v)", !tc.reaped, tc.reaped)
			}
			if tc.dry && len(rep.Orphans) != 1 {
				t.Fatalf("dry run reports orphans %v; want one", rep.Orphans)
			}
			for _, cno := range hist["kept"].cnos {
				hist["kept"].checkAt(t, st, cno)
			}
		})
	}
	// Keep 1: the named file's older checkpoints go, as on v1.
	k := hist["kept"]
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour, Now: at(3 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	chain := k.chain(t, st)
	if len(chain) >= len(k.cnos) || len(rep.Deleted) == 0 {
		t.Fatalf("Keep 1 left the chain %v of %v (deleted %v)", chain, k.cnos, rep.Deleted)
	}
	for _, cno := range chain {
		k.checkAt(t, st, cno)
	}
}

// A file unlinked on one mount while another mount has it open: the open
// file's writer marker keeps its objects, whatever the grace; a handle of
// the cleaner's own mount (Options.Open) keeps it too. Once the marker is
// dead, it goes.
func TestV2OrphanOpenOnAnotherMount(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	a := v2Volume(t, st)
	n, err := a.Create(ctx, namespace.RootIno, "open", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	h := writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 2, 3)
	// Mount A writes it: its marker.
	if _, err := st.Put(ctx, h.prefix+volume.WritersDir+"w", writermark.Encode(writermark.Marker{Lo: 1, TTL: 2 * time.Hour}), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b := v2Mount(t, st)
	if _, err := b.Unlink(ctx, namespace.RootIno, "open"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after  time.Duration
		open   bool
		reaped bool
	}{{90 * time.Minute, false, false}, {3 * time.Hour, true, false}, {3 * time.Hour, false, true}} {
		o := cleaner.Options{Grace: time.Hour, Now: at(tc.after)}
		if tc.open {
			o.Open = func(id string) bool { return id == n.FileID }
		}
		rep, err := cleaner.CleanVolume(ctx, st, "", o)
		if err != nil {
			t.Fatal(err)
		}
		if left := len(keys(t, st, h.prefix)); tc.reaped != (left == 0) {
			t.Fatalf("after %v (open here %v): %d objects left, orphans reaped %v; want reaped=%v", tc.after, tc.open, left, rep.Orphans, tc.reaped)
		}
	}
}

// A mount that failed between the orphan record and the tombstone (the
// tombstone's PUT fails) leaves a record whose name still binds the file:
// the file is never reaped, and the record goes once older than the grace.
// So with a rename of the file after the failed unlink: the record's name
// no longer binds it, but another name does (the listing of names says
// so).
func TestV2RecordWithoutTombstone(t *testing.T) {
	for _, rename := range []bool{false, true} {
		t.Run(fmt.Sprintf("renamed=%v", rename), func(t *testing.T) {
			ctx := context.Background()
			inner := mem.NewS3ETags()
			st := faulty.New(inner, 1)
			tr := v2Volume(t, st)
			n, err := tr.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{})
			if err != nil {
				t.Fatal(err)
			}
			h := writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 2, 5)
			dk, err := nsv2.DentryKey("", namespace.RootIno, 1, "f")
			if err != nil {
				t.Fatal(err)
			}
			id := st.Add(faulty.Rule{Op: staging.OpPut, KeyPrefix: dk, Times: 1})
			if _, err := tr.Unlink(ctx, namespace.RootIno, "f"); err == nil {
				t.Fatal("unlink with its tombstone's PUT failing succeeded")
			}
			st.Remove(id)
			rec := recordKey(t, n.FileID)
			if !hasKey(t, st, rec) {
				t.Fatal("no orphan record after the failed unlink: the test makes nothing")
			}
			name := "f"
			if rename {
				// Another mount renames the file. Its rename deletes a
				// record naming the name it moves the file from; the
				// failed unlink's mount, still running, stores the record
				// again after that (the race the listing of names closes).
				data, _, err := inner.Get(ctx, rec, staging.Range{})
				if err != nil {
					t.Fatal(err)
				}
				other := v2Mount(t, st)
				if _, err := other.Lookup(ctx, namespace.RootIno, "f"); err != nil {
					t.Fatal(err)
				}
				if _, err := other.Rename(ctx, namespace.RootIno, "f", namespace.RootIno, "g", 0); err != nil {
					t.Fatal(err)
				}
				if _, err := inner.Put(ctx, rec, data, staging.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				name = "g"
			}
			for _, tc := range []struct {
				after     time.Duration
				recordOff bool
			}{{30 * time.Minute, false}, {3 * time.Hour, true}} {
				rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, Now: at(tc.after)})
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Orphans) != 0 || len(keys(t, st, h.prefix)) == 0 {
					t.Fatalf("after %v: the named file was reaped (%v)", tc.after, rep.Orphans)
				}
				if hasKey(t, st, rec) == tc.recordOff {
					t.Fatalf("after %v: record there %v; want gone %v (names deleted %v)", tc.after, !tc.recordOff, tc.recordOff, rep.Names)
				}
			}
			h.checkAt(t, st, h.cnos[len(h.cnos)-1])
			if _, err := v2Mount(t, st).Lookup(ctx, namespace.RootIno, name); err != nil {
				t.Fatalf("lookup %q after the runs: %v", name, err)
			}
		})
	}
}

// The objects under ns2/ stay bounded: after many checkpoint cycles
// (create a temporary name, rename it into place, unlink an old one) and
// runs past the grace and TrimGrace, ns2/ holds the live names, the inode
// batch and nothing of the history: no tombstone, decision or record.
func TestV2NamesBounded(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := v2Volume(t, st)
	const cycles, keep = 40, 2
	for i := range cycles {
		n, err := tr.Create(ctx, namespace.RootIno, "step.tmp", 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		if i%8 == 0 {
			writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 1, uint64(i))
		}
		if _, err := tr.Rename(ctx, namespace.RootIno, "step.tmp", namespace.RootIno, fmt.Sprintf("step_%d", i), 0); err != nil {
			t.Fatal(err)
		}
		if i >= keep {
			if _, err := tr.Unlink(ctx, namespace.RootIno, fmt.Sprintf("step_%d", i-keep)); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func() map[string]int {
		objs, err := staging.ListAll(ctx, st, "ns2/")
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]int{}
		for _, o := range objs {
			by[strings.SplitN(strings.TrimPrefix(o.Key, "ns2/"), "/", 2)[0]]++
		}
		return by
	}
	before := count()
	if before["tx"] < cycles || before["d"] < cycles {
		t.Fatalf("ns2/ before the runs: %v; the cycles left less history than they make", before)
	}
	// Orphans found, then reaped past the grace, then their tombstones
	// trimmed (a record keeps its tombstone until it goes).
	for _, d := range []time.Duration{time.Minute, 2 * time.Hour, 2*time.Hour + time.Minute} {
		if _, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, Now: at(d)}); err != nil {
			t.Fatal(err)
		}
	}
	after := count()
	want := map[string]int{"d": keep, "ino": 1}
	if fmt.Sprint(after) != fmt.Sprint(want) {
		t.Fatalf("ns2/ after the runs: %v (before %v); want %v", after, before, want)
	}
	for i := cycles - keep; i < cycles; i++ {
		if _, err := v2Mount(t, st).Lookup(ctx, namespace.RootIno, fmt.Sprintf("step_%d", i)); err != nil {
			t.Fatalf("a live name after the runs: %v", err)
		}
	}
}
