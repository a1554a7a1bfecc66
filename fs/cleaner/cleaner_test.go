package cleaner_test

import (
	"bytes"
	"context"
	"errors"
	"io"
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
	"github.com/ckptfs/ckptfs/fs/writermark"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

func params(f segment.Format, sendAhead bool) engine.Params {
	p := engine.DefaultParams()
	p.Format = f
	p.DataBlockSize = 512
	p.MetaBlockSize = 256
	p.MaxObjectBytes = 48 << 10
	p.DirtyLimit = 24 << 10
	p.ReadGetMaxBytes = 8 << 10
	p.CacheBytes = 16 << 10
	p.NodeCacheBytes = 32 << 10
	p.Concurrency = 4
	if sendAhead {
		p.StreamSegmentBytes = 8 << 10
	}
	return p
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// history is a file written through several checkpoints, with its contents
// at each.
type history struct {
	id       string
	prefix   string
	p        engine.Params
	contents map[uint64][]byte
	cnos     []uint64 // published, oldest first
}

// writeHistory publishes n checkpoints of one file: rewrites, extensions and
// truncations, so that later checkpoints share objects with earlier ones and
// leave others unreferenced.
func writeHistory(t *testing.T, st staging.Store, id string, p engine.Params, n int, seed uint64) *history {
	t.Helper()
	ctx := context.Background()
	h := &history{id: id, prefix: volume.FilePrefix("", id), p: p, contents: map[uint64][]byte{}}
	f, err := engine.Create(ctx, st, h.prefix, engine.Options{Params: p, FileID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(seed, 1))
	var model []byte
	for i := range n {
		switch {
		case i%4 == 3 && len(model) > 2000:
			size := len(model) / 2
			if err := f.Truncate(ctx, int64(size)); err != nil {
				t.Fatal(err)
			}
			model = model[:size]
		default:
			off := r.IntN(len(model) + 1)
			data := randBytes(r, 3000+r.IntN(20000))
			if _, err := f.WriteAt(ctx, data, int64(off)); err != nil {
				t.Fatal(err)
			}
			if end := off + len(data); end > len(model) {
				model = append(model, make([]byte, end-len(model))...)
			}
			copy(model[off:], data)
		}
		ft, err := f.Flush(ctx)
		if err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
		h.contents[ft.Cno] = slices.Clone(model)
		h.cnos = append(h.cnos, ft.Cno)
	}
	return h
}

// checkAt fails unless checkpoint cno of the file reads back what was
// written then.
func (h *history) checkAt(t *testing.T, st staging.Store, cno uint64) {
	t.Helper()
	ctx := context.Background()
	f, err := engine.OpenAt(ctx, st, h.prefix, cno, engine.Options{Params: h.p, FileID: h.id})
	if err != nil {
		t.Fatalf("open checkpoint %d: %v", cno, err)
	}
	defer f.Close()
	buf := make([]byte, f.Size())
	n, err := f.ReadAt(ctx, buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read checkpoint %d: %v", cno, err)
	}
	if !bytes.Equal(buf[:n], h.contents[cno]) {
		t.Fatalf("checkpoint %d: read %d bytes that differ from the %d written", cno, n, len(h.contents[cno]))
	}
}

func (h *history) chain(t *testing.T, st staging.Store) []uint64 {
	t.Helper()
	f, err := engine.Open(context.Background(), st, h.prefix, engine.Options{Params: h.p, FileID: h.id})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cps, err := f.Checkpoints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, c := range cps {
		out = append(out, c.Inode.Cno)
	}
	return out
}

func keys(t *testing.T, st staging.Store, prefix string) []string {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func TestKeepRetainsNewestAndTheyReadBack(t *testing.T) {
	const n = 7
	for _, tc := range []struct {
		name      string
		format    segment.Format
		sendAhead bool
		keep      int
	}{
		{"stream keep all", segment.FormatStream, true, 0},
		{"stream keep 1", segment.FormatStream, true, 1},
		{"stream keep 3", segment.FormatStream, true, 3},
		{"parted keep 2", segment.FormatParted, false, 2},
		{"stream no send-ahead keep 3", segment.FormatStream, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mem.New()
			h := writeHistory(t, st, "file1", params(tc.format, tc.sendAhead), n, 7)
			other := writeHistory(t, st, "file2", params(tc.format, tc.sendAhead), 3, 8)
			before := keys(t, st, "")
			rep, err := cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{Keep: tc.keep, Grace: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Files != 2 || rep.Checkpoints != n+3 {
				t.Fatalf("report: %d files, %d checkpoints; want 2 and %d", rep.Files, rep.Checkpoints, n+3)
			}
			want := n
			if tc.keep > 0 {
				want = tc.keep
			}
			chain := h.chain(t, st)
			// Keep is a floor: a checkpoint whose part 0 a retained one
			// points into stays (see the package doc).
			if len(chain) < want || !slices.Equal(chain, reversed(h.cnos)[:len(chain)]) {
				t.Fatalf("checkpoints after gc %v, want at least the newest %d of %v", chain, want, h.cnos)
			}
			otherChain := other.chain(t, st)
			if len(chain)+len(otherChain) != rep.Retained {
				t.Fatalf("chains after gc %v and %v, but gc retained %d checkpoints", chain, otherChain, rep.Retained)
			}
			for _, cno := range chain {
				h.checkAt(t, st, cno)
			}
			for _, cno := range otherChain {
				other.checkAt(t, st, cno)
			}
			after := keys(t, st, "")
			if len(before)-len(after) != len(rep.Deleted) {
				t.Fatalf("%d objects before, %d after, report says %d deleted", len(before), len(after), len(rep.Deleted))
			}
			if tc.keep > 0 && tc.keep < n && len(rep.Deleted) == 0 {
				t.Fatal("dropping checkpoints deleted nothing")
			}
			if tc.keep == 0 && len(rep.Deleted) != 0 {
				t.Fatalf("keeping everything deleted %v", rep.Deleted)
			}
			// A second run finds nothing more.
			rep, err = cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{Keep: tc.keep, Grace: time.Hour})
			if err != nil || len(rep.Deleted) != 0 {
				t.Fatalf("second run: %v, deleted %v", err, rep.Deleted)
			}
		})
	}
}

func reversed(s []uint64) []uint64 {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

func TestDryRunDeletesNothing(t *testing.T) {
	st := mem.New()
	h := writeHistory(t, st, "f", params(segment.FormatStream, true), 5, 3)
	if _, err := st.CreateMultipart(context.Background(), h.prefix+"0000000099.1", staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := keys(t, st, "")
	later := time.Now().Add(48 * time.Hour)
	rep, err := cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{Keep: 1, DryRun: true, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) == 0 || len(rep.Aborted) != 1 {
		t.Fatalf("dry run reports %d deletions and %d aborts; want some and 1", len(rep.Deleted), len(rep.Aborted))
	}
	if after := keys(t, st, ""); !slices.Equal(before, after) {
		t.Fatalf("dry run changed the objects:\nbefore %v\nafter  %v", before, after)
	}
	ups, err := st.ListMultipartUploads(context.Background(), "")
	if err != nil || len(ups) != 1 {
		t.Fatalf("uploads after a dry run: %v, %v", ups, err)
	}
	for _, cno := range h.cnos {
		h.checkAt(t, st, cno)
	}
}

// A flush whose head write fails leaves its part 0 behind: kept while it is
// above the head (a writer could still publish it) and within the grace
// period, deleted once a later checkpoint passes it.
func TestFailedFlushLeftover(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 1)
	p := params(segment.FormatStream, false)
	const id = "ff"
	prefix := volume.FilePrefix("", id)
	f, err := engine.Create(ctx, faults, prefix, engine.Options{Params: p, FileID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := bytes.Repeat([]byte("checkpoint"), 700)
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	ft, err := f.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	good := ft.Cno
	if _, err := f.WriteAt(ctx, []byte("second"), 100); err != nil {
		t.Fatal(err)
	}
	faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: "/inode", Times: 1})
	if _, err := f.Flush(ctx); err == nil {
		t.Fatal("flush with a failing head write succeeded")
	}
	leftover := prefix + segment.ObjectName{Cno: good + 1}.String()
	if _, err := mem.Head(ctx, leftover); err != nil {
		t.Fatalf("the failed flush left no part 0 at %s: %v", leftover, err)
	}
	// Above the head and young: kept, even with MinAge 0.
	rep, err := cleaner.CleanVolume(ctx, mem, "", cleaner.Options{Keep: 1, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 0 {
		t.Fatalf("deleted work above the head: %v", rep.Deleted)
	}
	// The next flush takes a new number; the leftover is now below the head.
	ft, err = f.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ft.Cno <= good+1 {
		t.Fatalf("retry published %d, want above the failed %d", ft.Cno, good+1)
	}
	rep, err = cleaner.CleanVolume(ctx, mem, "", cleaner.Options{Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, d := range rep.Deleted {
		deleted = append(deleted, d.Key)
	}
	if !slices.Contains(deleted, leftover) {
		t.Fatalf("deleted %v; want the failed flush's part 0 %s", deleted, leftover)
	}
	want := slices.Clone(data)
	copy(want[100:], "second")
	g, err := engine.Open(ctx, mem, prefix, engine.Options{Params: p, FileID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got := make([]byte, len(want))
	if _, err := g.ReadAt(ctx, got, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file differs after gc")
	}
}

// Objects sent ahead for a checkpoint not yet published are above the head:
// gc leaves them however short MinAge is, and the flush that publishes them
// still works.
func TestSentAheadSurvives(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatStream, true)
	const id = "sa"
	prefix := volume.FilePrefix("", id)
	f, err := engine.Create(ctx, st, prefix, engine.Options{Params: p, FileID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(5, 5))
	data := randBytes(r, 64<<10)
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if len(keys(t, st, prefix)) < 2 {
		t.Fatal("nothing was sent ahead")
	}
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 0 {
		t.Fatalf("deleted objects sent ahead: %v", rep.Deleted)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := engine.Open(ctx, st, prefix, engine.Options{Params: p, FileID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got := make([]byte, len(data))
	if _, err := g.ReadAt(ctx, got, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data sent ahead before gc reads back wrong")
	}
	// Past the grace period and its marker's TTL (as if it had died), a
	// writer's abandoned objects go, and its dead marker.
	if _, err := f.WriteAt(ctx, data, 1<<20); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Hour)
	rep, err = cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) == 0 {
		t.Fatal("abandoned objects past the grace period were kept")
	}
	for _, d := range rep.Deleted {
		if !strings.Contains(d.Reason, "abandoned") && !strings.Contains(d.Key, "/"+volume.WritersDir) {
			t.Fatalf("deleted %s: %s; want only abandoned work", d.Key, d.Reason)
		}
	}
}

func TestAbandonedUploads(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	key := volume.FilesPrefix("") + "u/0000000003.1"
	if _, err := st.CreateMultipart(ctx, key, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		elapsed time.Duration
		aborted int
	}{
		{"fresh", 0, 0},
		{"within grace", 59 * time.Minute, 0},
		{"past grace", 61 * time.Minute, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := time.Now().Add(tc.elapsed)
			rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, Now: func() time.Time { return at }})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Aborted) != tc.aborted {
				t.Fatalf("aborted %v, want %d", rep.Aborted, tc.aborted)
			}
			ups, err := st.ListMultipartUploads(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(ups) != 1-tc.aborted {
				t.Fatalf("%d uploads left, want %d", len(ups), 1-tc.aborted)
			}
		})
	}
}

func TestUnknownObjectsLeftAlone(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	h := writeHistory(t, st, "k", params(segment.FormatStream, false), 3, 4)
	odd := []string{h.prefix + "notes.txt", volume.FilesPrefix("") + "headless/0000000001.0", volume.FilesPrefix("") + "stray"}
	for _, k := range odd {
		if _, err := st.Put(ctx, k, []byte("x"), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	var skipped []string
	for _, s := range rep.Skipped {
		skipped = append(skipped, s.Key)
	}
	slices.Sort(skipped)
	want := slices.Sorted(slices.Values(odd))
	if !slices.Equal(skipped, want) {
		t.Fatalf("left alone %v, want %v", skipped, want)
	}
	for _, k := range odd {
		if _, err := st.Head(ctx, k); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
}

// A corrupt part 0 on the chain stops the file's cleaning with an error
// naming it, and deletes nothing of that file.
func TestCorruptCheckpointDeletesNothing(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	h := writeHistory(t, st, "c", params(segment.FormatStream, false), 4, 6)
	key := h.prefix + segment.ObjectName{Cno: h.cnos[1]}.String()
	b, _, err := st.Get(ctx, key, staging.Whole())
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-100] ^= 0xff
	if _, err := st.Put(ctx, key, b, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := keys(t, st, "")
	_, err = cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1})
	if !errors.Is(err, segment.ErrCorrupt) || !strings.Contains(err.Error(), key) {
		t.Fatalf("gc over a corrupt part 0: %v; want ErrCorrupt naming %s", err, key)
	}
	if after := keys(t, st, ""); !slices.Equal(before, after) {
		t.Fatal("gc deleted objects of a file whose chain it could not read")
	}
}

// An orphaned file (its last name removed, as a mount that died leaves it)
// is kept within the grace period, then deleted whole and forgotten; a named
// file beside it is untouched.
func TestOrphanedFile(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var hist = map[string]*history{}
	for i, name := range []string{"gone", "kept"} {
		n, err := ns.Create(ctx, namespace.RootIno, name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		hist[name] = writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 2, uint64(i))
	}
	if _, err := ns.Unlink(ctx, namespace.RootIno, "gone"); err != nil {
		t.Fatal(err)
	}
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
			at := time.Now().Add(tc.elapsed)
			rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, DryRun: tc.dry, Now: func() time.Time { return at }})
			if err != nil {
				t.Fatal(err)
			}
			left := len(keys(t, st, hist["gone"].prefix))
			if tc.reaped != (left == 0) {
				t.Fatalf("orphan has %d objects left; want reaped=%v (report %v)", left, tc.reaped, rep.Orphans)
			}
			if tc.dry && len(rep.Orphans) != 1 {
				t.Fatalf("dry run reports orphans %v; want one", rep.Orphans)
			}
			for _, cno := range hist["kept"].cnos {
				hist["kept"].checkAt(t, st, cno)
			}
		})
	}
	ns2, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := ns2.Orphans(ctx); err != nil || len(o) != 0 {
		t.Fatalf("namespace still holds orphans %v (%v)", o, err)
	}
}

// WAL records the head's checkpoint holds are deleted; later ones (changes
// acknowledged and not yet published) and the lease are kept.
func TestWALRecords(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatStream, false)
	p.WAL = true
	prefix := volume.FilesPrefix("") + "w/"
	o := engine.Options{Params: p, FileID: "w"}
	f, err := engine.Create(ctx, st, prefix, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := f.WriteAt(ctx, []byte("abc"), int64(i*10)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.Close() // waits for the publish: the head holds records 1..3
	tag := segment.FileTag("w")
	put := func(key string, body []byte) {
		if _, err := st.Put(ctx, key, body, staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	covered := wal.RecordKey(prefix, 2)
	pending := wal.RecordKey(prefix, 9)
	owner := prefix + wal.Dir + wal.OwnerName
	put(covered, wal.Encode(tag, wal.Record{Seq: 2, Ops: []wal.Op{{Kind: wal.OpWrite, Data: []byte("x")}}}))
	put(pending, wal.Encode(tag, wal.Record{Seq: 9, Ops: []wal.Op{{Kind: wal.OpWrite, Data: []byte("y")}}}))
	put(owner, []byte(`{}`))
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, d := range rep.Deleted {
		deleted = append(deleted, d.Key)
	}
	if !slices.Contains(deleted, covered) || slices.Contains(deleted, pending) || slices.Contains(deleted, owner) {
		t.Fatalf("deleted %v: want %s and neither %s nor %s", deleted, covered, pending, owner)
	}
	for _, k := range []string{pending, owner} {
		if _, err := st.Head(ctx, k); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	if _, err := st.Head(ctx, covered); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("%s still there: %v", covered, err)
	}
}

// clockStore is a store whose LastModified times are the fake clock's, and
// that tells of every writer marker stored.
type clockStore struct {
	staging.Store
	clk     *fakeclock.Clock
	mu      sync.Mutex
	mod     map[string]time.Time
	markers chan string
}

func newClockStore(clk *fakeclock.Clock) *clockStore {
	return &clockStore{Store: mem.New(), clk: clk, mod: map[string]time.Time{}, markers: make(chan string, 1000)}
}

func (s *clockStore) stamp(key string) {
	s.mu.Lock()
	s.mod[key] = s.clk.Now()
	s.mu.Unlock()
}

func (s *clockStore) fix(info staging.ObjectInfo) staging.ObjectInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.mod[info.Key]; ok {
		info.LastModified = t
	}
	return info
}

func (s *clockStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	info, err := s.Store.Put(ctx, key, data, o)
	if err == nil {
		s.stamp(key)
		if strings.Contains(key, "/"+volume.WritersDir) {
			s.markers <- key
		}
	}
	return s.fix(info), err
}

func (s *clockStore) CompleteMultipart(ctx context.Context, key, id string, parts []staging.CompletedPart, c staging.Conditions) (staging.ObjectInfo, error) {
	info, err := s.Store.CompleteMultipart(ctx, key, id, parts, c)
	if err == nil {
		s.stamp(key)
	}
	return s.fix(info), err
}

func (s *clockStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	b, info, err := s.Store.Get(ctx, key, r)
	return b, s.fix(info), err
}

func (s *clockStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	info, err := s.Store.Head(ctx, key)
	return s.fix(info), err
}

func (s *clockStore) List(ctx context.Context, prefix, after string, max int) (staging.ListPage, error) {
	pg, err := s.Store.List(ctx, prefix, after, max)
	for i := range pg.Objects {
		pg.Objects[i] = s.fix(pg.Objects[i])
	}
	return pg, err
}

// passTime moves the clock by d in steps of a third of the marker TTL,
// waiting at each step for the renewal of the one writer holding objects.
func passTime(t *testing.T, st *clockStore, d time.Duration) {
	t.Helper()
	step := writermark.DefaultTTL / 3
	for passed := time.Duration(0); passed < d; passed += step {
		st.clk.Advance(step)
		select {
		case <-st.markers:
		case <-time.After(time.Minute):
			t.Fatal("the writer marker was not renewed")
		}
	}
}

func readBack(t *testing.T, st staging.Store, prefix, id string, p engine.Params) []byte {
	t.Helper()
	g, err := engine.Open(context.Background(), st, prefix, engine.Options{Params: p, FileID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got := make([]byte, g.Size())
	if _, err := g.ReadAt(context.Background(), got, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read back: %v", err)
	}
	return got
}

// A writer keeps objects sent ahead for longer than the grace period before
// its flush: its renewed marker keeps them from the cleaner, and the file
// reads back exactly.
func TestLiveWriterPastGrace(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New()
	st := newClockStore(clk)
	p := params(segment.FormatStream, true)
	const id = "lw"
	prefix := volume.FilePrefix("", id)
	f, err := engine.Create(ctx, st, prefix, engine.Options{Params: p, FileID: id, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := randBytes(rand.New(rand.NewPCG(7, 7)), 64<<10)
	// A first checkpoint, so that the file has a head (Create stores none).
	if _, err := f.WriteAt(ctx, data[:100], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Over the dirty limit: the write waits for its objects sent ahead.
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if len(keys(t, st, prefix)) < 4 {
		t.Fatal("nothing was sent ahead")
	}
	<-st.markers // stored before the first object
	passTime(t, st, 2*time.Hour)
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 0 || rep.Writers != 1 {
		t.Fatalf("gc deleted %v, saw %d live writers; want nothing deleted and one writer", rep.Deleted, rep.Writers)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, st, prefix, id, p); !bytes.Equal(got, data) {
		t.Fatal("file reads back wrong")
	}
	// Closed, the writer leaves nothing a cleaner must keep.
	f.Close()
	if ks := keys(t, st, prefix+volume.WritersDir); len(ks) != 0 {
		t.Fatalf("markers left after close: %v", ks)
	}
}

// Two writers of one file: the second publishes first, which leaves the
// first one's objects sent ahead below the head. The cleaner runs past
// MinAge; the first writer rebases onto the second's checkpoint and
// publishes a head naming its objects, and the file reads back as both
// wrote it.
func TestRebasedWriterKeepsObjects(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New()
	st := newClockStore(clk)
	p := params(segment.FormatStream, true)
	const id = "two"
	prefix := volume.FilePrefix("", id)
	o := engine.Options{Params: p, FileID: id, Clock: clk}
	a, err := engine.Create(ctx, st, prefix, o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r := rand.New(rand.NewPCG(8, 8))
	if _, err := a.WriteAt(ctx, randBytes(r, 2000), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := engine.Open(ctx, st, prefix, o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	da := randBytes(r, 64<<10)
	if _, err := a.WriteAt(ctx, da, 0); err != nil {
		t.Fatal(err)
	}
	<-st.markers // a's marker
	db := randBytes(r, 4000)
	const offB = 100 << 10
	if _, err := b.WriteAt(ctx, db, offB); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for len(st.markers) > 0 { // b's, if it held one
		<-st.markers
	}
	passTime(t, st, 30*time.Minute)
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour, MinAge: 10 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rep.Deleted {
		t.Logf("deleted %s: %s", d.Key, d.Reason)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, offB+len(db))
	copy(want, da)
	copy(want[offB:], db)
	if got := readBack(t, st, prefix, id, p); !bytes.Equal(got, want) {
		t.Fatal("file reads back wrong")
	}
}

// Writer markers as the cleaner sees them: a live one keeps the objects and
// uploads of its range whatever their age; once dead, they go, and the
// marker itself once dead for longer than the grace period; a marker that
// does not decode is reported and keeps its file's objects.
func TestWriterMarkers(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatStream, false)
	live := writeHistory(t, st, "live", p, 2, 1)
	bad := writeHistory(t, st, "bad", p, 2, 2)
	put := func(key string, body []byte) {
		t.Helper()
		if _, err := st.Put(ctx, key, body, staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	head := live.cnos[len(live.cnos)-1]
	marker := live.prefix + volume.WritersDir + "w1"
	put(marker, writermark.Encode(writermark.Marker{Lo: head, TTL: time.Hour}))
	below := live.prefix + segment.ObjectName{Cno: head, Part: 7}.String() // rebased onto, say
	above := live.prefix + segment.ObjectName{Cno: head + 1, Part: 1}.String()
	put(below, []byte("x"))
	put(above, []byte("x"))
	upload := live.prefix + segment.ObjectName{Cno: head + 1, Part: 2}.String()
	if _, err := st.CreateMultipart(ctx, upload, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	badMarker := bad.prefix + volume.WritersDir + "w2"
	put(badMarker, []byte("not a marker"))
	badAbove := bad.prefix + segment.ObjectName{Cno: bad.cnos[len(bad.cnos)-1] + 1, Part: 1}.String()
	put(badAbove, []byte("x"))

	exists := func(key string) bool {
		_, err := st.Head(ctx, key)
		return err == nil
	}
	gc := func(after time.Duration) *cleaner.Report {
		t.Helper()
		at := time.Now().Add(after)
		rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: 10 * time.Minute, Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// Live: past the grace period and MinAge, nothing of its range goes.
	rep := gc(30 * time.Minute)
	if rep.Writers != 2 || len(rep.Aborted) != 0 {
		t.Fatalf("live writers %d, aborted %v; want 2 and none", rep.Writers, rep.Aborted)
	}
	for _, k := range []string{marker, below, above, badMarker, badAbove} {
		if !exists(k) {
			t.Fatalf("%s deleted under a live marker", k)
		}
	}
	var skipped []string
	for _, s := range rep.Skipped {
		skipped = append(skipped, s.Key)
	}
	if !slices.Equal(skipped, []string{badMarker}) {
		t.Fatalf("left alone %v; want the bad marker", skipped)
	}
	for _, cno := range live.cnos[len(live.cnos)-1:] {
		live.checkAt(t, st, cno)
	}
	// Dead for longer than its TTL plus the grace period: its objects, its
	// upload and the marker go; the bad marker still keeps its file's.
	rep = gc(2 * time.Hour)
	for _, k := range []string{marker, below, above} {
		if exists(k) {
			t.Fatalf("%s kept under a dead marker", k)
		}
	}
	if len(rep.Aborted) != 1 || rep.Aborted[0].Key != upload {
		t.Fatalf("aborted %v; want %s", rep.Aborted, upload)
	}
	if !exists(badMarker) || !exists(badAbove) {
		t.Fatal("a marker that does not decode, or its file's object above the head, was deleted")
	}
}

// An orphaned file that a live writer marker shows still written (a handle
// of another mount) is not reaped, however old its objects; once the marker
// is dead it is.
func TestOrphanWithLiveWriter(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := ns.Create(ctx, namespace.RootIno, "open", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	h := writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 2, 3)
	if _, err := ns.Unlink(ctx, namespace.RootIno, "open"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, h.prefix+volume.WritersDir+"w", writermark.Encode(writermark.Marker{Lo: 1, TTL: 2 * time.Hour}), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after  time.Duration
		reaped bool
	}{{90 * time.Minute, false}, {3 * time.Hour, true}} {
		at := time.Now().Add(tc.after)
		rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		if left := len(keys(t, st, h.prefix)); tc.reaped != (left == 0) {
			t.Fatalf("after %v: %d objects left, orphans reaped %v; want reaped=%v", tc.after, left, rep.Orphans, tc.reaped)
		}
	}
}

// A head that carries its part 0 whose object never landed: the cleaner
// reads the checkpoint from the head, deletes nothing it needs (the older
// checkpoint its untouched block points into included), and the file reads
// back; after the next flush stores the object, the same holds.
func TestEmbeddedHeadPart0Missing(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 1)
	p := params(segment.FormatStream, false)
	h := &history{id: "e", prefix: volume.FilesPrefix("") + "e/", p: p, contents: map[uint64][]byte{}}
	f, err := engine.Create(ctx, faults, h.prefix, engine.Options{Params: p, FileID: h.id})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(off int, data []byte, lose bool) {
		t.Helper()
		if _, err := f.WriteAt(ctx, data, int64(off)); err != nil {
			t.Fatal(err)
		}
		var id faulty.RuleID
		if lose {
			id = faults.Add(faulty.Rule{Op: staging.OpPut, Match: func(k string) bool { return strings.HasSuffix(k, ".0") }})
		}
		ft, err := f.Flush(ctx)
		if lose {
			faults.Remove(id)
		}
		if err != nil {
			t.Fatal(err)
		}
		model := slices.Clone(h.contents[f.Stat().Cno-1])
		if len(h.cnos) > 0 {
			model = slices.Clone(h.contents[h.cnos[len(h.cnos)-1]])
		}
		if end := off + len(data); end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[off:], data)
		h.contents[ft.Cno] = model
		h.cnos = append(h.cnos, ft.Cno)
	}
	write(0, bytes.Repeat([]byte("a"), 3000), false)
	write(0, []byte("b"), true) // checkpoint 2: in its head only
	if _, err := mem.Head(ctx, h.prefix+"0000000002.0"); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("part 0 of checkpoint 2: %v, want it missing", err)
	}
	for round := range 2 {
		rep, err := cleaner.CleanVolume(ctx, mem, "", cleaner.Options{Keep: 1, Grace: time.Hour})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if rep.Checkpoints < 1 {
			t.Fatalf("round %d: report %+v", round, rep)
		}
		last := h.cnos[len(h.cnos)-1]
		h.checkAt(t, mem, last)
		if round == 0 {
			write(2000, []byte("c"), false) // stores checkpoint 2's part 0 first
			if _, err := mem.Head(ctx, h.prefix+"0000000002.0"); err != nil {
				t.Fatalf("part 0 of checkpoint 2 after the next flush: %v", err)
			}
		}
	}
}

// A failed flush's part 0 is a checkpoint a reader may open by number (its
// blocks the flush did not rewrite point into older objects): the cleaner
// deletes it before the objects it points into, as it does a dropped
// checkpoint's part 0, so that a reader finding an object gone under it
// finds the checkpoint gone too.
func TestFailedFlushPart0GoesFirst(t *testing.T) {
	ctx := context.Background()
	st := &deleteLog{Store: mem.New()}
	faults := faulty.New(st, 1)
	p := params(segment.FormatStream, false)
	const id = "fp"
	prefix := volume.FilePrefix("", id)
	f, err := engine.Create(ctx, faults, prefix, engine.Options{Params: p, FileID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(5, 6))
	const size = 200 << 10 // several objects of params' 48 KiB
	writeFlush(t, f, 0, randBytes(r, size))
	first := f.Stat().Cno
	if _, err := f.WriteAt(ctx, []byte("second"), 100); err != nil {
		t.Fatal(err)
	}
	faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: "/inode", Times: 1})
	if _, err := f.Flush(ctx); err == nil {
		t.Fatal("flush with a failing head write succeeded")
	}
	failed := prefix + segment.ObjectName{Cno: first + 1}.String()
	if !exists(t, st, failed) {
		t.Fatalf("the failed flush left no part 0 at %s", failed)
	}
	// Everything written again: nothing of the first checkpoint is live.
	want := randBytes(r, size)
	writeFlush(t, f, 0, want)
	f.Close() // its writer marker goes with it
	if _, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	at := slices.Index(st.keys, failed)
	if at < 0 {
		t.Fatalf("the failed flush's part 0 %s was not deleted: %v", failed, st.keys)
	}
	var older int
	for i, k := range st.keys {
		n, _, err := segment.ParseObjectName(strings.TrimPrefix(k, prefix))
		if err != nil || n.Cno != first || n.Part == 0 {
			continue
		}
		older++
		if i < at {
			t.Errorf("%s, which the failed flush's part 0 points into, deleted before it", k)
		}
	}
	if older == 0 {
		t.Fatalf("nothing of checkpoint %d beside its part 0 was deleted: %v", first, st.keys)
	}
	if got := readBack(t, st, prefix, id, p); !bytes.Equal(got, want) {
		t.Fatal("file differs after gc")
	}
}
