package cleaner_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// sweep runs passes of at most max files from the first file until one
// reaches the end, and returns their reports.
func sweep(t *testing.T, st staging.Store, o cleaner.Options, max int) []*cleaner.Report {
	t.Helper()
	var reps []*cleaner.Report
	o.After, o.MaxFiles = "", max
	for {
		rep, err := cleaner.CleanVolume(context.Background(), st, "", o)
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, rep)
		if rep.Next == "" {
			return reps
		}
		if rep.Next <= o.After {
			t.Fatalf("pass after %q ended at %q: the cursor does not move on", o.After, rep.Next)
		}
		o.After = rep.Next
		if len(reps) > 10000 {
			t.Fatal("the sweep does not end")
		}
	}
}

// A sweep in passes of a bounded number of files does what one run does:
// each pass takes at most its files, the orphans' grace counts across
// passes (a pass keeps the record of the others' orphans), and once the
// grace has passed a second sweep reaps every orphan and drops every
// checkpoint the policy does not keep, while the named files read back.
func TestIncrementalPasses(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	files := 2000
	if testing.Short() {
		files = 600
	}
	const max = 150
	p := params(segment.FormatStream, false)
	hist := map[string]*history{}
	var gone []string
	for i := range files {
		name := "f" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		n, err := ns.Create(ctx, namespace.RootIno, name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		hist[n.FileID] = writeHistory(t, st, n.FileID, p, 3, uint64(i))
		if i%3 == 0 {
			if _, err := ns.Unlink(ctx, namespace.RootIno, name); err != nil {
				t.Fatal(err)
			}
			gone = append(gone, n.FileID)
		}
	}
	ns.Close()
	start := time.Now()
	o := cleaner.Options{Keep: 1, Grace: time.Hour, NSLag: time.Hour, Now: func() time.Time { return start }}
	reps := sweep(t, st, o, max)
	if want := (files + max - 1) / max; len(reps) != want {
		t.Fatalf("%d passes over %d files of at most %d; want %d", len(reps), files, max, want)
	}
	var stored int64
	for i, r := range reps {
		if r.Files > max {
			t.Fatalf("pass %d took %d files; at most %d", i, r.Files, max)
		}
		stored += r.StoredBytes
	}
	rec, _, err := staging.GetLimited(ctx, st, volume.PendingOrphansKey(""), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	pend, err := cleaner.DecodePending(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != len(gone) {
		t.Fatalf("the orphans' record holds %d files after a sweep; want all %d found orphaned (a pass dropped the others')", len(pend), len(gone))
	}
	for _, id := range gone {
		if !pend[id].Equal(start) {
			t.Fatalf("orphan %s recorded at %v; want the first sweep's %v", id, pend[id], start)
		}
	}
	later := start.Add(2 * time.Hour)
	o.Now = func() time.Time { return later }
	reps = sweep(t, st, o, max)
	orphans := 0
	var after int64
	for _, r := range reps {
		orphans += len(r.Orphans)
		after += r.StoredBytes
	}
	if orphans != len(gone) {
		t.Fatalf("second sweep reaped %d orphans; want %d", orphans, len(gone))
	}
	if after >= stored {
		t.Fatalf("the files hold %d bytes after the second sweep, %d before: nothing freed", after, stored)
	}
	all, err := staging.ListAll(ctx, st, volume.FilesPrefix(""))
	if err != nil {
		t.Fatal(err)
	}
	var listed int64
	for _, obj := range all {
		listed += obj.Size
	}
	if listed != after {
		t.Fatalf("the passes counted %d bytes stored; the bucket's files hold %d", after, listed)
	}
	for _, id := range gone {
		if k := keys(t, st, hist[id].prefix); len(k) != 0 {
			t.Fatalf("orphan %s keeps %v", id, k)
		}
		delete(hist, id)
	}
	for _, h := range hist {
		for _, cno := range h.chain(t, st) {
			h.checkAt(t, st, cno)
		}
	}
	// The passes left nothing a whole run would delete.
	o.After, o.MaxFiles = "", 0
	rep, err := cleaner.CleanVolume(ctx, st, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 0 || rep.StoredBytes != after {
		t.Fatalf("a whole run after the passes deleted %d objects (%v); want none", len(rep.Deleted), deletedKeys(rep))
	}
	ns2, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns2.Close()
	if o, err := ns2.Orphans(ctx); err != nil || len(o) != 0 {
		t.Fatalf("namespace still holds %d orphans (%v)", len(o), err)
	}
}
