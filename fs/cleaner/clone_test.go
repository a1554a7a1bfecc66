package cleaner_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// volFile opens (or creates) file id of the volume at the root "", able to
// resolve the objects of the files it was copied from.
func volFile(t *testing.T, st staging.Store, p engine.Params, id string, create bool) *engine.File {
	t.Helper()
	ctx := context.Background()
	o := engine.Options{Params: p, FileID: id, FilesPrefix: volume.FilesPrefix("")}
	prefix := volume.FilePrefix("", id)
	open := engine.Open
	if create {
		open = engine.Create
	}
	f, err := open(ctx, st, prefix, o)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	return f
}

// contentsOf opens file id afresh and reads all of it.
func contentsOf(t *testing.T, st staging.Store, p engine.Params, id string) []byte {
	t.Helper()
	ctx := context.Background()
	f := volFile(t, st, p, id, false)
	defer f.Close()
	buf := make([]byte, f.Size())
	n, err := f.ReadAt(ctx, buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read %s: %v", id, err)
	}
	return buf[:n]
}

func checkContents(t *testing.T, st staging.Store, p engine.Params, id string, want []byte) {
	t.Helper()
	if got := contentsOf(t, st, p, id); !bytes.Equal(got, want) {
		t.Fatalf("%s reads %d bytes that differ from the %d written", id, len(got), len(want))
	}
}

// writeFlush writes data at off of f and publishes it.
func writeFlush(t *testing.T, f *engine.File, off int, data []byte) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.WriteAt(ctx, data, int64(off)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// newFileWith creates file id holding data, published.
func newFileWith(t *testing.T, st staging.Store, p engine.Params, id string, data []byte) {
	t.Helper()
	f := volFile(t, st, p, id, true)
	defer f.Close()
	writeFlush(t, f, 0, data)
}

// copyFile makes file dst a copy by reference of file src.
func copyFile(t *testing.T, st staging.Store, p engine.Params, dst, src string) {
	t.Helper()
	ctx := context.Background()
	x := volFile(t, st, p, src, false)
	defer x.Close()
	d := volFile(t, st, p, dst, true)
	defer d.Close()
	if err := d.CloneFrom(ctx, x); err != nil {
		t.Fatalf("copy %s to %s by reference: %v", src, dst, err)
	}
}

// overwrite writes every block of file id again, flushing n times.
func overwrite(t *testing.T, st staging.Store, p engine.Params, id string, size, n int, r *rand.Rand) []byte {
	t.Helper()
	f := volFile(t, st, p, id, false)
	defer f.Close()
	var data []byte
	for range n {
		data = randBytes(r, size)
		writeFlush(t, f, 0, data)
	}
	return data
}

// cnosUnder returns, by cno, the checkpoint objects under prefix.
func cnosUnder(t *testing.T, st staging.Store, prefix string) map[uint64][]string {
	t.Helper()
	out := map[uint64][]string{}
	for _, k := range keys(t, st, prefix) {
		if n, _, err := segment.ParseObjectName(strings.TrimPrefix(k, prefix)); err == nil {
			out[n.Cno] = append(out[n.Cno], k)
		}
	}
	return out
}

func filePrefix(id string) string { return volume.FilePrefix("", id) }

// A copy by reference D of X keeps, when X is cleaned, the objects of X it
// points at, while X's other objects that no retained checkpoint of X needs
// go; D reads back byte-exact, its own later writes included, and so does X.
func TestCopyKeepsWhatItPointsAt(t *testing.T) {
	for _, tc := range []struct {
		name      string
		format    segment.Format
		sendAhead bool
	}{
		{"stream", segment.FormatStream, false},
		{"stream send-ahead", segment.FormatStream, true},
		{"parted", segment.FormatParted, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			p := params(tc.format, tc.sendAhead)
			r := rand.New(rand.NewPCG(1, 2))
			const size = 20 << 10
			orig := randBytes(r, size)
			newFileWith(t, st, p, "x", orig)
			copyFile(t, st, p, "d", "x")
			// D writes a little of its own, twice: its own objects, one
			// checkpoint of which its retention drops.
			want := slices.Clone(orig)
			d := volFile(t, st, p, "d", false)
			for i := range 2 {
				b := randBytes(r, 700)
				writeFlush(t, d, 3000*i, b)
				copy(want[3000*i:], b)
			}
			d.Close()
			xOld := cnosUnder(t, st, filePrefix("x"))
			xNow := overwrite(t, st, p, "x", size, 3, r)
			rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range rep.Skipped {
				t.Errorf("left alone %s: %s", s.Key, s.Reason)
			}
			checkContents(t, st, p, "d", want)
			checkContents(t, st, p, "x", xNow)
			var deletedX int
			for _, k := range deletedKeys(rep) {
				if strings.HasPrefix(k, filePrefix("x")) {
					deletedX++
				}
			}
			if deletedX == 0 {
				t.Fatalf("nothing of x deleted: %v", deletedKeys(rep))
			}
			if len(rep.ForCopies) == 0 {
				t.Fatal("no object reported kept for a copy")
			}
			// Every object D points at was one of X's first checkpoint's
			// (D copied it before X was written again); those kept are
			// reported, and X's later dropped checkpoints are gone.
			after := cnosUnder(t, st, filePrefix("x"))
			for cno := range after {
				if _, old := xOld[cno]; old {
					continue
				}
				if cno != maxKey(after) {
					t.Errorf("x's checkpoint %d, dropped and not pointed at by d, still has objects %v", cno, after[cno])
				}
			}
			for _, o := range rep.ForCopies {
				if !strings.HasPrefix(o.Key, filePrefix("x")) || !exists(t, st, o.Key) {
					t.Errorf("reported kept for a copy: %s, which is not an object of x there", o.Key)
				}
			}
			// D's lineage object stays, with D's retained checkpoint.
			if len(keys(t, st, filePrefix("d")+segment.LineageDir)) == 0 {
				t.Fatal("d's lineage object was deleted")
			}
			// A second run finds nothing more to delete and breaks nothing.
			rep, err = cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Deleted) != 0 {
				t.Errorf("second run deleted %v", deletedKeys(rep))
			}
			checkContents(t, st, p, "d", want)
		})
	}
}

func maxKey(m map[uint64][]string) uint64 {
	var mx uint64
	for k := range m {
		mx = max(mx, k)
	}
	return mx
}

// An orphan (no name left) that a copy points into is not reaped, past the
// grace period too; once the copy is gone (an orphan reaped in turn), its
// marker no longer keeps the file, which is reaped as any orphan, never
// before the copy.
func TestOrphanACopyPointsInto(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatStream, false)
	ns, ids := namedFiles(t, st, "x", "d")
	r := rand.New(rand.NewPCG(3, 4))
	data := randBytes(r, 12<<10)
	newFileWith(t, st, p, ids["x"], data)
	copyFile(t, st, p, ids["d"], ids["x"])
	if _, err := ns.Unlink(ctx, namespace.RootIno, "x"); err != nil {
		t.Fatal(err)
	}
	// An orphan's grace counts from the run that first found it orphaned:
	// each run here is two hours after the one before.
	late := time.Now().Add(2 * time.Hour)
	o := cleaner.Options{Keep: 1, Grace: time.Hour, Now: func() time.Time { return late }}
	for range 2 {
		late = late.Add(2 * time.Hour)
		rep, err := cleaner.CleanVolume(ctx, st, "", o)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys(t, st, filePrefix(ids["x"]))) == 0 || !slices.Contains(rep.Referenced, ids["x"]) {
			t.Fatalf("orphan x reaped (or not reported kept: %v) while d points into it", rep.Referenced)
		}
		checkContents(t, st, p, ids["d"], data)
	}
	if _, err := ns.Unlink(ctx, namespace.RootIno, "d"); err != nil {
		t.Fatal(err)
	}
	for run := 0; ; run++ {
		late = late.Add(2 * time.Hour)
		if _, err := cleaner.CleanVolume(ctx, st, "", o); err != nil {
			t.Fatal(err)
		}
		xLeft, dLeft := len(keys(t, st, filePrefix(ids["x"]))), len(keys(t, st, filePrefix(ids["d"])))
		if xLeft == 0 && dLeft != 0 {
			t.Fatalf("run %d: x reaped while d has %d objects left", run, dLeft)
		}
		if xLeft == 0 && dLeft == 0 {
			break
		}
		if run == 2 {
			t.Fatalf("after %d runs: x has %d objects left, d %d", run+1, xLeft, dLeft)
		}
	}
	ns2, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if or, err := ns2.Orphans(ctx); err != nil || len(or) != 0 {
		t.Fatalf("namespace still holds orphans %v (%v)", or, err)
	}
}

// A copy of a copy (E of D of X) points into both; X and D written again
// and cleaned, E still reads back, and so do D and X.
func TestCopyOfACopy(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatStream, false)
	r := rand.New(rand.NewPCG(5, 6))
	const size = 16 << 10
	xData := randBytes(r, size)
	newFileWith(t, st, p, "x", xData)
	copyFile(t, st, p, "d", "x")
	dData := slices.Clone(xData)
	d := volFile(t, st, p, "d", false)
	b := randBytes(r, size/2)
	writeFlush(t, d, size/4, b)
	copy(dData[size/4:], b)
	d.Close()
	copyFile(t, st, p, "e", "d")
	xNow := overwrite(t, st, p, "x", size, 3, r)
	dNow := overwrite(t, st, p, "d", size, 3, r)
	for run := range 2 {
		rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour})
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if run == 0 && len(rep.Deleted) == 0 {
			t.Fatal("nothing deleted")
		}
		checkContents(t, st, p, "e", dData)
		checkContents(t, st, p, "d", dNow)
		checkContents(t, st, p, "x", xNow)
	}
}

// A copy whose pointers cannot be read (here its lineage object is corrupt)
// keeps the file it points into whole for the run, reported under the
// marker, and the run goes on: the copy, an orphan, is reaped, and the next
// run cleans the file.
func TestUnreadableCopyKeepsFileWhole(t *testing.T) {
	testUnreadableCopy(t, func(t *testing.T, st staging.Store, p engine.Params, dst, src string) {
		copyFile(t, st, p, dst, src)
	})
}

// contentsAt reads checkpoint cno of file id.
func contentsAt(t *testing.T, st staging.Store, p engine.Params, id string, cno uint64) []byte {
	t.Helper()
	ctx := context.Background()
	f, err := engine.OpenAt(ctx, st, filePrefix(id), cno, engine.Options{Params: p, FileID: id, FilesPrefix: volume.FilesPrefix("")})
	if err != nil {
		t.Fatalf("open %s at checkpoint %d: %v", id, cno, err)
	}
	defer f.Close()
	buf := make([]byte, f.Size())
	n, err := f.ReadAt(ctx, buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read %s at checkpoint %d: %v", id, cno, err)
	}
	return buf[:n]
}

// A copy's older checkpoint, which its own retention keeps, still points at
// objects of X that its head no longer does: X keeps them, and that
// checkpoint of the copy reads back.
func TestCopysOlderCheckpointKeeps(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatStream, false)
	r := rand.New(rand.NewPCG(7, 8))
	const size = 16 << 10
	orig := randBytes(r, size)
	newFileWith(t, st, p, "x", orig)
	copyFile(t, st, p, "d", "x")
	d := volFile(t, st, p, "d", false)
	copied := d.Stat().Cno
	dNow := randBytes(r, size)
	writeFlush(t, d, 0, dNow) // the head points at nothing of x
	d.Close()
	xNow := overwrite(t, st, p, "x", size, 3, r)
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 2, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) == 0 {
		t.Fatal("nothing deleted")
	}
	if got := contentsAt(t, st, p, "d", copied); !bytes.Equal(got, orig) {
		t.Fatalf("the copy's checkpoint %d reads %d bytes that differ from the %d copied", copied, len(got), len(orig))
	}
	checkContents(t, st, p, "d", dNow)
	checkContents(t, st, p, "x", xNow)
}

// A copy made into a file emptied after a history of its own: names of its
// old objects may be the same as the names its lineage gives to X's, but
// they are not the objects its copy points at, and once no retained
// checkpoint of its own needs them they go.
func TestCopyIntoAFileWithAHistory(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatStream, false)
	r := rand.New(rand.NewPCG(9, 10))
	const size = 12 << 10
	// x's history is longer, so that the names d's lineage gives to x
	// cover those of d's own first checkpoints.
	// written whole, then n-1 times a little at the start: the head's map
	// points into the first checkpoint's objects
	history := func(id string, n int) []byte {
		f := volFile(t, st, p, id, true)
		defer f.Close()
		data := randBytes(r, size)
		writeFlush(t, f, 0, data)
		for range n - 1 {
			b := randBytes(r, 100)
			writeFlush(t, f, 0, b)
			copy(data, b)
		}
		return data
	}
	xData := history("x", 5)
	history("d", 2)
	d := volFile(t, st, p, "d", false)
	if err := d.Truncate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d.Close()
	own := cnosUnder(t, st, filePrefix("d"))
	if len(own) == 0 {
		t.Fatal("d has no objects of its own")
	}
	x := volFile(t, st, p, "x", false)
	d = volFile(t, st, p, "d", false)
	if err := d.CloneFrom(ctx, x); err != nil {
		t.Fatalf("copy x into the emptied d: %v", err)
	}
	d.Close()
	x.Close()
	if _, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	after := cnosUnder(t, st, filePrefix("d"))
	for cno, ks := range own {
		if len(after[cno]) != 0 {
			t.Errorf("d's own objects of checkpoint %d, which no retained checkpoint of d points at, kept: %v (before %v)", cno, after[cno], ks)
		}
	}
	checkContents(t, st, p, "d", xData)
	checkContents(t, st, p, "x", xData)
}

// deleteLog is a store that records the keys deleted, in order, and calls
// onDelete (when set) before each.
type deleteLog struct {
	staging.Store
	keys     []string
	onDelete func(key string)
}

func (s *deleteLog) Delete(ctx context.Context, key string) error {
	if s.onDelete != nil {
		s.onDelete(key)
	}
	s.keys = append(s.keys, key)
	return s.Store.Delete(ctx, key)
}

// A file whose head moved after the first pass is checked again and
// planned afresh before the second pass deletes anything of it: what its
// new head names stays, and it reads back.
func TestSecondPassChecksAgain(t *testing.T) {
	ctx := context.Background()
	st := &deleteLog{Store: mem.New()}
	p := params(segment.FormatStream, false)
	r := rand.New(rand.NewPCG(7, 8))
	const size = 200 << 10 // several objects of params' 48 KiB
	newFileWith(t, st, p, "a", randBytes(r, size))
	aNow := overwrite(t, st, p, "a", size, 2, r)
	newFileWith(t, st, p, "x", randBytes(r, size))
	overwrite(t, st, p, "x", size, 2, r)
	planned := maxKey(cnosUnder(t, st, filePrefix("x"))) // x's head when planned
	var xNow []byte
	moved := false
	st.onDelete = func(key string) {
		// The first deletion of the second pass (a's objects beside its
		// part 0s): x is written twice more.
		n, _, err := segment.ParseObjectName(strings.TrimPrefix(key, filePrefix("a")))
		if moved || !strings.HasPrefix(key, filePrefix("a")) || err != nil || n.Part == 0 {
			return
		}
		moved = true
		xNow = overwrite(t, st.Store, p, "x", size, 2, r)
	}
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !moved {
		t.Fatalf("the second pass deleted nothing of a: %v", st.keys)
	}
	checkContents(t, st, p, "a", aNow)
	checkContents(t, st, p, "x", xNow)
	for _, s := range rep.Skipped {
		t.Errorf("left alone %s: %s", s.Key, s.Reason)
	}
	// Planned afresh: the checkpoint that was x's head when planned, which
	// the writes dropped, went in this run.
	if left := cnosUnder(t, st, filePrefix("x"))[planned]; len(left) > 0 {
		t.Errorf("x's checkpoint %d, dropped between the passes, still has %v: the second pass did not plan x again", planned, left)
	}
}

// A checkpoint of a copy D that D's retention drops names objects of the
// file X it was copied from; X's cleaning deletes them, D's cleaning the
// checkpoint's part 0. The part 0 goes first, whichever file is cleaned
// first: a reader holding that checkpoint open tells "dropped" (its part 0
// gone) from "lost" (an object gone under a part 0 still there) by it.
func TestDroppedCopyCheckpointPart0GoesFirst(t *testing.T) {
	ctx := context.Background()
	st := &deleteLog{Store: mem.New()}
	p := params(segment.FormatStream, false)
	r := rand.New(rand.NewPCG(3, 4))
	const size = 20 << 10
	// "a" is listed, planned and executed before "b".
	newFileWith(t, st, p, "a", randBytes(r, size))
	copyFile(t, st, p, "b", "a")
	copied := maxKey(cnosUnder(t, st, filePrefix("b")))
	aOld := cnosUnder(t, st, filePrefix("a"))
	bNow := overwrite(t, st, p, "b", size, 1, r)
	aNow := overwrite(t, st, p, "a", size, 1, r)
	if _, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	checkContents(t, st, p, "a", aNow)
	checkContents(t, st, p, "b", bNow)
	part0 := filePrefix("b") + segment.ObjectName{Cno: copied, Part: 0}.String()
	at := slices.Index(st.keys, part0)
	if at < 0 {
		t.Fatalf("part 0 of b's dropped checkpoint %d (the copy) not deleted: %v", copied, st.keys)
	}
	var aDeleted int
	for i, k := range st.keys {
		rel, ok := strings.CutPrefix(k, filePrefix("a"))
		if !ok {
			continue
		}
		n, _, err := segment.ParseObjectName(rel)
		if err != nil || aOld[n.Cno] == nil {
			continue
		}
		aDeleted++
		if i < at {
			t.Errorf("%s, which b's dropped checkpoint %d names, deleted before that checkpoint's part 0 (%s)", k, copied, part0)
		}
	}
	if aDeleted == 0 {
		t.Fatalf("nothing of a's first checkpoint was deleted: %v", st.keys)
	}
}

// A copy of a copy names every file of its source's lineage, even one the
// source no longer points into (cp X D; rm X; D written over whole): the
// cleaner reaps X, then cp D E stores E's marker under X's prefix, which no
// name reaches. A run past the grace deletes it; a young one stays (its
// copy may be in progress), and E reads back.
func TestMarkerUnderReapedFile(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatStream, false)
	ns, ids := namedFiles(t, st, "x", "d", "e")
	r := rand.New(rand.NewPCG(9, 10))
	const size = 12 << 10
	newFileWith(t, st, p, ids["x"], randBytes(r, size))
	copyFile(t, st, p, ids["d"], ids["x"])
	if _, err := ns.Unlink(ctx, namespace.RootIno, "x"); err != nil {
		t.Fatal(err)
	}
	dNow := overwrite(t, st, p, ids["d"], size, 1, r)
	late := time.Now().Add(2 * time.Hour)
	o := cleaner.Options{Keep: 1, Grace: time.Hour, Now: func() time.Time { return late }}
	for range 2 {
		late = late.Add(2 * time.Hour)
		if _, err := cleaner.CleanVolume(ctx, st, "", o); err != nil {
			t.Fatal(err)
		}
	}
	if left := keys(t, st, filePrefix(ids["x"])); len(left) != 0 {
		t.Fatalf("orphan x not reaped: %v", left)
	}
	copyFile(t, st, p, ids["e"], ids["d"])
	marker := volume.RefKey(filePrefix(ids["x"]), ids["e"])
	if left := keys(t, st, filePrefix(ids["x"])); !slices.Equal(left, []string{marker}) {
		t.Fatalf("under the reaped x after cp d e: %v, want only %s", left, marker)
	}
	// Young: kept.
	young := cleaner.Options{Keep: 1, Grace: time.Hour}
	if _, err := cleaner.CleanVolume(ctx, st, "", young); err != nil {
		t.Fatal(err)
	}
	if left := keys(t, st, filePrefix(ids["x"])); len(left) != 1 {
		t.Fatalf("a marker younger than the grace deleted: %v left", left)
	}
	late = late.Add(2 * time.Hour)
	rep, err := cleaner.CleanVolume(ctx, st, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if left := keys(t, st, filePrefix(ids["x"])); len(left) != 0 {
		t.Fatalf("under the reaped x after a run past the grace: %v (skipped %v)", left, rep.Skipped)
	}
	checkContents(t, st, p, ids["e"], dNow)
	checkContents(t, st, p, ids["d"], dNow)
}
