package cleaner_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/engine/fakeclock"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// listHook calls after once, right after the first listing of the
// volume's files (the cleaner's own).
type listHook struct {
	staging.Store
	once  *sync.Once
	after func()
}

func (h listHook) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	pg, err := h.Store.List(ctx, prefix, startAfter, max)
	if prefix == volume.FilesPrefix("") {
		h.once.Do(h.after)
	}
	return pg, err
}

// A copy by reference made after the cleaner listed the volume, of a
// checkpoint that a newer publish then pushes out of Keep: its objects are
// old, but they were referenced until now, so the run deletes nothing of
// them, and the next run sees the copy's marker and keeps them. With a zero
// minimum age the reference markers read again right before deleting keep
// them as well.
func TestCopyAfterListingKeepsItsObjects(t *testing.T) {
	for _, minAge := range []time.Duration{10 * time.Minute, 0} {
		t.Run("min age "+minAge.String(), func(t *testing.T) {
			ctx := context.Background()
			clk := fakeclock.New()
			st := newClockStore(clk)
			p := params(segment.FormatStream, false)
			r := rand.New(rand.NewPCG(1, 2))
			const size = 40 << 10
			first := randBytes(r, size)
			newFileWith(t, st, p, "x", first)
			clk.Advance(24 * time.Hour) // the checkpoint is old
			hooked := listHook{Store: st, once: &sync.Once{}, after: func() {
				copyFile(t, st, p, "d", "x")
				overwrite(t, st, p, "x", size, 1, r)
			}}
			o := cleaner.Options{Keep: 1, Grace: time.Hour, MinAge: minAge, Now: clk.Now}
			rep, err := cleaner.CleanVolume(ctx, hooked, "", o)
			if err != nil {
				t.Fatal(err)
			}
			checkContents(t, st, p, "d", first)
			for range 3 {
				clk.Advance(time.Hour)
				if rep, err = cleaner.CleanVolume(ctx, st, "", o); err != nil {
					t.Fatal(err)
				}
				checkContents(t, st, p, "d", first)
			}
			if len(rep.ForCopies) == 0 {
				t.Fatalf("nothing kept for the copy: %v", rep.ForCopies)
			}
		})
	}
}

// wholeHistory publishes n checkpoints of file id, each written whole, so
// that none shares an object with another; it returns their contents by
// cno.
func wholeHistory(t *testing.T, st staging.Store, p engine.Params, id string, n int, seed uint64) map[uint64][]byte {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed))
	f := volFile(t, st, p, id, true)
	defer f.Close()
	out := map[uint64][]byte{}
	for range n {
		data := randBytes(r, 20<<10)
		if _, err := f.WriteAt(context.Background(), data, 0); err != nil {
			t.Fatal(err)
		}
		ft, err := f.Flush(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out[ft.Cno] = data
	}
	return out
}

func oldest(m map[uint64][]byte) uint64 {
	return slices.Min(slices.Collect(maps.Keys(m)))
}

// An old checkpoint that Keep drops stays readable for MinAge after the run
// that dropped it (a reader of another mount that opened it can finish),
// then goes.
func TestDroppedCheckpointReadableForMinAge(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New()
	st := newClockStore(clk)
	p := params(segment.FormatStream, false)
	hist := wholeHistory(t, st, p, "h", 3, 5)
	first := oldest(hist)
	clk.Advance(24 * time.Hour) // every checkpoint is old
	o := cleaner.Options{Keep: 1, Grace: time.Hour, MinAge: 10 * time.Minute, Now: clk.Now}
	for _, step := range []time.Duration{0, 5 * time.Minute, 4 * time.Minute} {
		clk.Advance(step)
		if _, err := cleaner.CleanVolume(ctx, st, "", o); err != nil {
			t.Fatal(err)
		}
		if got := contentsAt(t, st, p, "h", first); !bytes.Equal(got, hist[first]) {
			t.Fatalf("the dropped checkpoint reads %d bytes that differ", len(got))
		}
	}
	clk.Advance(2 * time.Minute) // 11 minutes since it was dropped
	rep, err := cleaner.CleanVolume(ctx, st, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if left := cnosUnder(t, st, filePrefix("h")); len(left) != 1 {
		t.Fatalf("checkpoints with objects left after the minimum age: %v (deleted %v)", left, deletedKeys(rep))
	}
	checkContents(t, st, p, "h", hist[slices.Max(slices.Collect(maps.Keys(hist)))])
	if left := keys(t, st, volume.GCPrefix("")); len(left) != 0 {
		t.Fatalf("pending records left once nothing is pending: %v", left)
	}
}

// A dry run records nothing: a real run after it counts the grace from its
// own finding, not from the dry run's.
func TestDryRunRecordsNothing(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New()
	st := newClockStore(clk)
	p := params(segment.FormatStream, false)
	hist := wholeHistory(t, st, p, "h", 3, 6)
	first := oldest(hist)
	clk.Advance(24 * time.Hour)
	o := cleaner.Options{Keep: 1, Grace: time.Hour, MinAge: 10 * time.Minute, Now: clk.Now}
	dry := o
	dry.DryRun = true
	before := keys(t, st, "")
	if _, err := cleaner.CleanVolume(ctx, st, "", dry); err != nil {
		t.Fatal(err)
	}
	if after := keys(t, st, ""); !slices.Equal(before, after) {
		t.Fatalf("a dry run changed the bucket:\n%v\n%v", before, after)
	}
	clk.Advance(11 * time.Minute)
	rep, err := cleaner.CleanVolume(ctx, st, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 0 {
		t.Fatalf("the first real run deleted %v", deletedKeys(rep))
	}
	if got := contentsAt(t, st, p, "h", first); !bytes.Equal(got, hist[first]) {
		t.Fatal("the dropped checkpoint does not read back")
	}
	if recs := keys(t, st, volume.GCPrefix("")); len(recs) != 1 {
		t.Fatalf("pending records %v; want the file's", recs)
	}
	clk.Advance(11 * time.Minute)
	if rep, err = cleaner.CleanVolume(ctx, st, "", o); err != nil || len(rep.Deleted) == 0 {
		t.Fatalf("the second real run deleted %v, %v", deletedKeys(rep), err)
	}
}

// headSwap publishes a saved head right after the cleaner first reads the
// head it replaces.
type headSwap struct {
	staging.Store
	key  string
	once *sync.Once
	swap func()
}

func (h headSwap) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	b, info, err := h.Store.Get(ctx, key, r)
	if key == h.key {
		h.once.Do(h.swap)
	}
	return b, info, err
}

// A head published between the plan and the deletes names objects the plan
// judged abandoned (above the head it read, old, no writer marker): the
// file is left as it is this run, and reads back at its new head.
func TestHeadPublishedAfterPlanKeepsItsObjects(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New()
	st := newClockStore(clk)
	p := params(segment.FormatStream, false)
	r := rand.New(rand.NewPCG(3, 3))
	const size = 100 << 10 // several objects, none carried by the head
	newFileWith(t, st, p, "x", randBytes(r, size))
	head := filePrefix("x") + "inode"
	save := func() ([]byte, staging.ObjectInfo) {
		b, info, err := st.Get(ctx, head, staging.Whole())
		if err != nil {
			t.Fatal(err)
		}
		return b, info
	}
	old, oldInfo := save()
	second := overwrite(t, st, p, "x", size, 1, r)
	newer, newInfo := save()
	// The head as it was before the second flush published: the second
	// checkpoint's objects lie above it, as a flush's do until its head.
	if _, err := st.Put(ctx, head, old, staging.PutOptions{Metadata: oldInfo.Metadata}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	swapped := headSwap{Store: st, key: head, once: &sync.Once{}, swap: func() {
		if _, err := st.Put(ctx, head, newer, staging.PutOptions{Metadata: newInfo.Metadata}); err != nil {
			t.Error(err)
		}
	}}
	o := cleaner.Options{Keep: 1, Grace: time.Hour, Now: clk.Now}
	if _, err := cleaner.CleanVolume(ctx, swapped, "", o); err != nil {
		t.Fatal(err)
	}
	checkContents(t, st, p, "x", second)
	// The next run plans on the new head, and the file still reads back.
	if _, err := cleaner.CleanVolume(ctx, st, "", o); err != nil {
		t.Fatal(err)
	}
	checkContents(t, st, p, "x", second)
}

// namedFiles creates names in a fresh namespace and returns their file ids.
func namedFiles(t *testing.T, st staging.Store, names ...string) (*namespace.Namespace, map[string]string) {
	t.Helper()
	ctx := context.Background()
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	ids := map[string]string{}
	for _, name := range names {
		n, err := ns.Create(ctx, namespace.RootIno, name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = n.FileID
	}
	return ns, ids
}

func orphansOf(t *testing.T, st staging.Store) []namespace.Orphan {
	t.Helper()
	ns, err := namespace.Open(context.Background(), st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	o, err := ns.Orphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// A copy keeps its source's objects only while a retained checkpoint of
// the copy names them: cp X D, D written over whole, rm X: X is reaped. And
// two orphans that hold each other (cp X D, cp D X, rm X D) are reaped
// together.
func TestCopyKeepsSourceOnlyWhileRetained(t *testing.T) {
	ctx := context.Background()
	p := params(segment.FormatStream, false)
	const size = 12 << 10
	reapAll := func(t *testing.T, clk *fakeclock.Clock, st staging.Store, gone ...string) {
		t.Helper()
		o := cleaner.Options{Keep: 1, Grace: time.Hour, Now: clk.Now}
		for run := 0; ; run++ {
			if _, err := cleaner.CleanVolume(ctx, st, "", o); err != nil {
				t.Fatal(err)
			}
			left := 0
			for _, id := range gone {
				left += len(keys(t, st, filePrefix(id)))
			}
			if left == 0 && len(orphansOf(t, st)) == 0 {
				return
			}
			if run == 3 {
				t.Fatalf("after %d runs: %d objects of %v left, orphans %v", run+1, left, gone, orphansOf(t, st))
			}
			clk.Advance(2 * time.Hour)
		}
	}
	t.Run("copy written over", func(t *testing.T) {
		clk := fakeclock.New()
		st := newClockStore(clk)
		ns, ids := namedFiles(t, st, "x", "d")
		r := rand.New(rand.NewPCG(7, 8))
		newFileWith(t, st, p, ids["x"], randBytes(r, size))
		copyFile(t, st, p, ids["d"], ids["x"])
		now := overwrite(t, st, p, ids["d"], size, 1, r)
		if _, err := ns.Unlink(ctx, namespace.RootIno, "x"); err != nil {
			t.Fatal(err)
		}
		reapAll(t, clk, st, ids["x"])
		checkContents(t, st, p, ids["d"], now)
	})
	t.Run("orphans holding each other", func(t *testing.T) {
		clk := fakeclock.New()
		st := newClockStore(clk)
		ns, ids := namedFiles(t, st, "x", "d")
		r := rand.New(rand.NewPCG(9, 10))
		newFileWith(t, st, p, ids["x"], randBytes(r, size))
		copyFile(t, st, p, ids["d"], ids["x"])
		// cp D X: X truncated, then a copy of D.
		x := volFile(t, st, p, ids["x"], false)
		if err := x.Truncate(ctx, 0); err != nil {
			t.Fatal(err)
		}
		dd := volFile(t, st, p, ids["d"], false)
		if err := x.CloneFrom(ctx, dd); err != nil {
			t.Fatal(err)
		}
		dd.Close()
		x.Close()
		for _, name := range []string{"x", "d"} {
			if _, err := ns.Unlink(ctx, namespace.RootIno, name); err != nil {
				t.Fatal(err)
			}
		}
		reapAll(t, clk, st, ids["x"], ids["d"])
	})
}

// refuseNS refuses every change of the namespace log, as a policy without
// s3:PutObject on ns/ would.
type refuseNS struct{ staging.Store }

var errDenied = errors.New("AccessDenied")

func (s refuseNS) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.HasPrefix(key, "ns/") {
		return staging.ObjectInfo{}, errDenied
	}
	return s.Store.Put(ctx, key, data, o)
}

// A run whose forget is refused, after it deleted the orphan's objects,
// fails; the next run forgets the orphan, which has no objects left: the
// namespace does not keep it for ever, and nothing of it is left.
func TestForgetRefusedLeaksNothing(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New()
	st := newClockStore(clk)
	ns, ids := namedFiles(t, st, "x")
	newFileWith(t, st, params(segment.FormatStream, false), ids["x"], randBytes(rand.New(rand.NewPCG(1, 1)), 20<<10))
	if _, err := ns.Unlink(ctx, namespace.RootIno, "x"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	o := cleaner.Options{Grace: 0, Now: clk.Now}
	if _, err := cleaner.CleanVolume(ctx, refuseNS{st}, "", o); !errors.Is(err, errDenied) {
		t.Fatalf("run with the forget refused: %v; want %v", err, errDenied)
	}
	if left := keys(t, st, filePrefix(ids["x"])); len(left) != 0 {
		t.Fatalf("objects left after the first run: %v", left)
	}
	if len(orphansOf(t, st)) != 1 {
		t.Fatal("the refused forget was applied")
	}
	clk.Advance(time.Minute)
	if _, err := cleaner.CleanVolume(ctx, st, "", o); err != nil {
		t.Fatal(err)
	}
	if or := orphansOf(t, st); len(or) != 0 {
		t.Fatalf("orphans left: %v", or)
	}
	if left := keys(t, st, volume.GCPrefix("")); len(left) != 0 {
		t.Fatalf("pending records left: %v", left)
	}
}

// An orphan is reaped only once NSLag has passed since a run first found
// it orphaned, Grace or no Grace: another mount's view of the namespace may
// still name it until then.
func TestGCOrphanNamespaceLag(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New()
	st := newClockStore(clk)
	ns, ids := namedFiles(t, st, "x")
	newFileWith(t, st, params(segment.FormatStream, false), ids["x"], randBytes(rand.New(rand.NewPCG(2, 2)), 20<<10))
	if _, err := ns.Unlink(ctx, namespace.RootIno, "x"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(24 * time.Hour) // its objects are old
	o := cleaner.Options{Grace: time.Minute, NSLag: cleaner.DefaultNSLag, Now: clk.Now}
	for _, step := range []time.Duration{0, 2 * time.Minute, cleaner.DefaultNSLag - 3*time.Minute} {
		clk.Advance(step)
		rep, err := cleaner.CleanVolume(ctx, st, "", o)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Orphans) != 0 || len(keys(t, st, filePrefix(ids["x"]))) == 0 {
			t.Fatalf("orphan reaped within the namespace lag (%v)", rep.Orphans)
		}
	}
	clk.Advance(2 * time.Minute)
	rep, err := cleaner.CleanVolume(ctx, st, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Orphans) != 1 || len(keys(t, st, filePrefix(ids["x"]))) != 0 || len(orphansOf(t, st)) != 0 {
		t.Fatalf("orphan not reaped past the namespace lag: %v", rep.Orphans)
	}
}

// countPuts counts the objects stored under gc/.
type countPuts struct {
	staging.Store
	mu   sync.Mutex
	puts int
}

func (c *countPuts) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.HasPrefix(key, volume.GCPrefix("")) {
		c.mu.Lock()
		c.puts++
		c.mu.Unlock()
	}
	return c.Store.Put(ctx, key, data, o)
}

// A pending record is stored when what is pending changes, not at every
// run; one that does not decode is reported, counts as empty (the grace
// starts again) and is stored anew.
func TestPendingRecordStoredOnChange(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New()
	cs := newClockStore(clk)
	st := &countPuts{Store: cs}
	p := params(segment.FormatStream, false)
	hist := wholeHistory(t, cs, p, "h", 3, 7)
	first := oldest(hist)
	clk.Advance(24 * time.Hour)
	o := cleaner.Options{Keep: 1, Grace: time.Hour, MinAge: 10 * time.Minute, Now: clk.Now}
	run := func() *cleaner.Report {
		t.Helper()
		rep, err := cleaner.CleanVolume(ctx, st, "", o)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	run()
	clk.Advance(time.Minute)
	run()
	if st.puts != 1 {
		t.Fatalf("%d records stored by two runs; want 1", st.puts)
	}
	key := volume.PendingFilesPrefix("") + "h"
	if _, err := cs.Put(ctx, key, []byte("not a record"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute) // past MinAge since the first run
	rep := run()
	if !slices.ContainsFunc(rep.Skipped, func(o cleaner.Object) bool { return o.Key == key }) || len(rep.Deleted) != 0 {
		t.Fatalf("with a corrupt record: skipped %v, deleted %v", rep.Skipped, deletedKeys(rep))
	}
	if got := contentsAt(t, cs, p, "h", first); !bytes.Equal(got, hist[first]) {
		t.Fatal("the dropped checkpoint does not read back")
	}
	clk.Advance(11 * time.Minute)
	if rep = run(); len(rep.Deleted) == 0 {
		t.Fatal("nothing deleted once the grace passed again")
	}
	if left := keys(t, cs, volume.GCPrefix("")); len(left) != 0 {
		t.Fatalf("records left: %v", left)
	}
}

// An orphan planned for reaping that a handle still open copies before
// the execution (its reference marker appears) is kept, and so is the copy.
func TestOrphanCopiedAfterPlanKept(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New()
	st := newClockStore(clk)
	p := params(segment.FormatStream, false)
	ns, ids := namedFiles(t, st, "x", "d")
	data := randBytes(rand.New(rand.NewPCG(4, 4)), 20<<10)
	newFileWith(t, st, p, ids["x"], data)
	if _, err := ns.Unlink(ctx, namespace.RootIno, "x"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	o := cleaner.Options{Keep: 1, Now: clk.Now}
	plan, err := cleaner.PlanVolume(ctx, st, "", o)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	if got := plan.Report().Orphans; len(got) != 1 {
		t.Fatalf("plan reaps %v; want x", got)
	}
	copyFile(t, st, p, ids["d"], ids["x"])
	if _, err := plan.Execute(ctx); err != nil {
		t.Fatal(err)
	}
	checkContents(t, st, p, ids["d"], data)
	for range 2 {
		clk.Advance(time.Hour)
		if _, err := cleaner.CleanVolume(ctx, st, "", o); err != nil {
			t.Fatal(err)
		}
		checkContents(t, st, p, ids["d"], data)
	}
}
