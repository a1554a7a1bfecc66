package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// TestOpenSeesAnotherMountsClose: a File kept open (a mount's engine shared
// by its handles) shows another writer's checkpoint once refreshed, which a
// new open on that mount does; one holding changes of its own keeps them.
func TestOpenSeesAnotherMountsClose(t *testing.T) {
	ctx := context.Background()
	st := staging.NewCounting(staging.NewMem())
	o := Options{Params: smallParams(segment.FormatStream), FileID: "c"}
	w, err := Create(ctx, st, "c/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	v1 := bytes.Repeat([]byte("1"), 3000)
	writeFlush(t, w, v1, 0)
	r, err := Open(ctx, st, "c/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mustEqual(t, "reader at the first checkpoint", readAll(t, r), v1)

	// Unchanged: one request, nothing taken.
	before, foreign := st.Snapshot().Total().Requests, r.ForeignChanges()
	if changed, err := r.Refresh(ctx); err != nil || changed {
		t.Fatalf("refresh of an unchanged file: %v, %v; want false, nil", changed, err)
	}
	if got := st.Snapshot().Total().Requests - before; got != 1 || r.ForeignChanges() != foreign {
		t.Fatalf("refresh of an unchanged file: %d requests, foreign %d->%d; want 1 and unmoved", got, foreign, r.ForeignChanges())
	}

	v2 := bytes.Repeat([]byte("2"), 5000)
	writeFlush(t, w, v2, 0)
	mustEqual(t, "reader before refresh (the checkpoint it opened)", readAll(t, r), v1)
	if changed, err := r.Refresh(ctx); err != nil || !changed {
		t.Fatalf("refresh after another writer's checkpoint: %v, %v; want true, nil", changed, err)
	}
	mustEqual(t, "reader after refresh", readAll(t, r), v2)
	if r.ForeignChanges() == foreign || r.Stat().Version != w.Stat().Version {
		t.Fatalf("after refresh: foreign %d (was %d), version %+v, writer's %+v", r.ForeignChanges(), foreign, r.Stat().Version, w.Stat().Version)
	}

	// Changes of its own: a refresh leaves them (the flush merges).
	if _, err := r.WriteAt(ctx, []byte("R"), 0); err != nil {
		t.Fatal(err)
	}
	writeFlush(t, w, []byte("3"), 1)
	if changed, err := r.Refresh(ctx); err != nil || changed {
		t.Fatalf("refresh with changes of its own: %v, %v; want false, nil", changed, err)
	}
	if got := readAll(t, r); got[0] != 'R' || got[1] != '2' {
		t.Fatalf("refresh with changes of its own read %q", got[:2])
	}
}

// TestRefreshAppliesLiveWritersRecords: a File kept open while a live
// writer holds the WAL shows, once refreshed, the writer's records stored
// since (over an unmoved head, and again after the writer published and
// deleted the records it read), with its Version and ForeignChanges moved;
// it publishes nothing.
func TestRefreshAppliesLiveWritersRecords(t *testing.T) {
	ctx := context.Background()
	st := staging.NewMem()
	o := Options{Params: walParams(segment.FormatStream), FileID: "lw"}
	w, err := Create(ctx, st, "lw/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt(ctx, bytes.Repeat([]byte("a"), 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ro := o
	ro.Params.WAL = false
	r, err := Open(ctx, st, "lw/", ro)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mustEqual(t, "reader at the published checkpoint", readAll(t, r), readAll(t, w))

	// Acknowledged, in the log only.
	if _, err := w.WriteAt(ctx, bytes.Repeat([]byte("b"), 1000), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(ctx, bytes.Repeat([]byte("c"), 1000), 6000); err != nil {
		t.Fatal(err)
	}
	ver, foreign := r.Stat().Version, r.ForeignChanges()
	_, head, err := r.readHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := r.Refresh(ctx); err != nil || !changed {
		t.Fatalf("refresh with the writer's records stored: %v, %v; want true, nil", changed, err)
	}
	mustEqual(t, "reader after refresh, records over the head", readAll(t, r), readAll(t, w))
	if s := r.Stat(); s.Version == ver || s.Version.Cno != ver.Cno || r.ForeignChanges() == foreign || s.Dirty {
		t.Fatalf("after refresh: stat %+v (version was %+v), foreign %d (was %d)", s, ver, r.ForeignChanges(), foreign)
	}
	if _, err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, info, err := r.readHead(ctx); err != nil || info.ETag != head.ETag {
		t.Fatalf("the reader published (%v)", err)
	}

	// One more record: applied over those shown.
	if _, err := w.WriteAt(ctx, []byte("d"), 8000); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "reader after a second refresh", readAll(t, r), readAll(t, w))

	// The writer publishes (its records deleted) and writes on: the new
	// head and the record after it.
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(ctx, []byte("e"), 9000); err != nil {
		t.Fatal(err)
	}
	if changed, err := r.Refresh(ctx); err != nil || !changed {
		t.Fatalf("refresh after the writer published: %v, %v", changed, err)
	}
	mustEqual(t, "reader after the writer published", readAll(t, r), readAll(t, w))
	if r.Stat().Cno != w.Stat().Cno {
		t.Fatalf("reader at checkpoint %d, writer's head %d", r.Stat().Cno, w.Stat().Cno)
	}
}
