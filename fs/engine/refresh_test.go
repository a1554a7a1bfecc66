package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestOpenSeesAnotherMountsClose: a File kept open (a mount's engine shared
// by its handles) shows another writer's checkpoint once refreshed, which a
// new open on that mount does; one holding changes of its own keeps them.
func TestOpenSeesAnotherMountsClose(t *testing.T) {
	ctx := context.Background()
	st := counting.New(mem.New())
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
	st := mem.New()
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

// TestCloneRefusesOverlay: a copy by reference of a file that shows a live
// writer's WAL records over its head (an overlay), or whose log holds
// records after its head that it does not show, is refused, and the copy
// is left empty, with no head: the caller copies the bytes.
func TestCloneRefusesOverlay(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	wp := p
	wp.WAL, wp.WALLeaseTTL = true, walParams(segment.FormatStream).WALLeaseTTL
	w := createIn(t, st, "src", wp)
	defer w.Close()
	if _, err := w.WriteAt(ctx, bytes.Repeat([]byte("a"), 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	clean := openIn(t, st, "src", p) // the head alone
	defer clean.Close()
	if _, err := w.WriteAt(ctx, bytes.Repeat([]byte("b"), 1000), 6000); err != nil { // acknowledged, logged
		t.Fatal(err)
	}
	over := openIn(t, st, "src", p) // the head and the record
	defer over.Close()
	for _, c := range []struct {
		name string
		src  *File
	}{{"overlay", over}, {"records after the head", clean}} {
		t.Run(c.name, func(t *testing.T) {
			d := createIn(t, st, "d-"+strings.ReplaceAll(c.name, " ", "-"), p)
			defer d.Close()
			err := d.CloneFrom(ctx, c.src)
			if !errors.Is(err, ErrCloneUnsupported) {
				t.Fatalf("copy of a file with WAL records over its head: %v, want ErrCloneUnsupported", err)
			}
			if s := d.Stat(); s.Size != 0 || s.Cno != 0 {
				t.Fatalf("the refused copy: %+v, want it empty", s)
			}
			if _, _, err := d.readHead(ctx); !errors.Is(err, ErrNotExist) {
				t.Fatalf("the refused copy has a head (%v)", err)
			}
		})
	}
}

// replaceOnRef is a store whose first PUT of a reference marker runs hook
// before it stores it (another mount publishing while a copy is made).
type replaceOnRef struct {
	staging.Store
	once sync.Once
	hook func()
}

func (s *replaceOnRef) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.Contains(key, "/refs/") {
		s.once.Do(s.hook)
	}
	return s.Store.Put(ctx, key, data, o)
}

// TestCloneSourceReplacedWhileCopied: a source whose head another writer
// replaces while the copy is made (before the reference markers are
// stored: the copied checkpoint is then protected by no head) is not copied
// by reference; the copy names nothing.
func TestCloneSourceReplacedWhileCopied(t *testing.T) {
	ctx := context.Background()
	st := &replaceOnRef{Store: mem.New()}
	p := smallParams(segment.FormatStream)
	x := createIn(t, st, "x", p)
	defer x.Close()
	writeFlush(t, x, bytes.Repeat([]byte("1"), 20000), 0)
	other := openIn(t, st, "x", p)
	defer other.Close()
	st.hook = func() { writeFlush(t, other, bytes.Repeat([]byte("2"), 30000), 0) }
	d := createIn(t, st, "d", p)
	defer d.Close()
	if err := d.CloneFrom(ctx, x); !errors.Is(err, ErrCloneUnsupported) {
		t.Fatalf("copy of a source replaced meanwhile: %v, want ErrCloneUnsupported", err)
	}
	if s := d.Stat(); s.Size != 0 || s.Cno != 0 {
		t.Fatalf("the refused copy: %+v, want it empty", s)
	}
	if _, _, err := d.readHead(ctx); !errors.Is(err, ErrNotExist) {
		t.Fatalf("the refused copy has a head (%v)", err)
	}
	// Refreshed, the source is copied by reference: the new checkpoint.
	if _, err := x.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.CloneFrom(ctx, x); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "the copy", readAll(t, d), bytes.Repeat([]byte("2"), 30000))
}

// TestRefreshCreatedHere: a File created here and held open, never
// published (no head, nothing marked for the WAL), takes the head another
// writer created with the WAL and the records it logged after it.
func TestRefreshCreatedHere(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: smallParams(segment.FormatStream), FileID: "ch"}
	r, err := Create(ctx, st, "ch/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wo := o
	wo.Params = walParams(segment.FormatStream)
	w, err := Create(ctx, st, "ch/", wo) // the head, marked for the WAL
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt(ctx, bytes.Repeat([]byte("w"), 3000), 100); err != nil {
		t.Fatal(err)
	}
	if changed, err := r.Refresh(ctx); err != nil || !changed {
		t.Fatalf("refresh: %v, %v; want true, nil", changed, err)
	}
	mustEqual(t, "reader after refresh", readAll(t, r), readAll(t, w))
}
