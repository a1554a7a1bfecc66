package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/link"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// getGauge counts the data GETs in flight at once and what the budget's
// readers hold when each starts.
type getGauge struct {
	staging.Store
	budget *Budget // may be nil

	mu           sync.Mutex
	now, most    int
	mostReadUsed int64
}

func (s *getGauge) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	s.mu.Lock()
	s.now++
	s.most = max(s.most, s.now)
	if s.budget != nil {
		s.mostReadUsed = max(s.mostReadUsed, s.budget.ReadUsed())
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}()
	return s.Store.Get(ctx, key, r)
}

func (s *getGauge) maxInFlight() (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most, s.mostReadUsed
}

// testLink is a link with a little latency and no bandwidth limit, so that
// GETs overlap; no test asserts a time.
var testLink = link.Profile{Name: "test", Latency: 2 * time.Millisecond}

func restoreParams() Params {
	p := DefaultParams()
	p.DataBlockSize = 64 << 10
	p.ReadGetMaxBytes = 4 << 20
	p.MaxObjectBytes = 8 << 20 // several objects: GETs never cross one
	p.DirtyLimit = 64 << 20
	p.Concurrency = 8
	return p
}

// storedFile writes size bytes of pattern seed into a new file on st and
// publishes them.
func storedFile(t *testing.T, st staging.Store, prefix string, p Params, size int, seed uint64) []byte {
	t.Helper()
	ctx := context.Background()
	f := mustCreate(t, st, prefix, p)
	data := pattern(size, seed)
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return data
}

// streamRead reads f from off to its end in reads of chunk bytes, as the
// kernel does.
func streamRead(t *testing.T, f *File, off int64, chunk int) []byte {
	t.Helper()
	var out []byte
	buf := make([]byte, chunk)
	for {
		n, err := f.ReadStream(context.Background(), buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return out
		}
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
}

// openCounted opens prefix through a link, a gauge and a counting store, and
// loads its whole block map, so that what is counted after is data.
func openCounted(t *testing.T, mem staging.Store, prefix string, p Params, b *Budget) (*File, *getGauge, *counting.Store) {
	t.Helper()
	g := &getGauge{Store: link.New(mem, testLink), budget: b}
	c := counting.New(g)
	f, err := Open(context.Background(), c, prefix, Options{Params: p, FileID: prefix, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Plan(context.Background(), 0, f.Size()); err != nil {
		t.Fatal(err)
	}
	c.Reset()
	return f, g, c
}

func TestSequentialReadFetchesAhead(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	const size = 40 << 20
	want := storedFile(t, mem, "s/", p, size, 1)
	f, g, c := openCounted(t, mem, "s/", p, nil)
	defer f.Close()

	got := streamRead(t, f, 0, 128<<10)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not what was written", len(got))
	}
	most, _ := g.maxInFlight()
	if most < 2 {
		t.Errorf("at most %d GET in flight: nothing was fetched ahead in parallel", most)
	}
	st := f.ReadStats()
	if st.GetsAhead == 0 {
		t.Errorf("no GET was sent ahead: %+v", st)
	}
	// Read to the end: everything fetched ahead was read, nothing twice.
	if rx := c.Snapshot().Op(staging.OpGet).BytesReceived; rx != size {
		t.Errorf("fetched %d bytes for a sequential read of %d", rx, size)
	}
	if st.MaxHeldAhead > prefetchFileCap {
		t.Errorf("held %d bytes ahead, over the file's cap %d", st.MaxHeldAhead, prefetchFileCap)
	}
}

func TestRandomReadsFetchOnlyTheirBlocks(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	const size = 64 << 20
	want := storedFile(t, mem, "r/", p, size, 2)
	f, _, c := openCounted(t, mem, "r/", p, nil)
	defer f.Close()

	bs := int64(p.DataBlockSize)
	rng := rand.New(rand.NewPCG(7, 7))
	blocks := map[int64]bool{}
	buf := make([]byte, 4<<10)
	for range 300 {
		off := rng.Int64N(size - int64(len(buf)))
		if _, err := f.ReadStream(context.Background(), buf, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, want[off:off+int64(len(buf))]) {
			t.Fatalf("read at %d is not what was written", off)
		}
		for b := off / bs; b <= (off+int64(len(buf))-1)/bs; b++ {
			blocks[b] = true
		}
	}
	rx := c.Snapshot().Op(staging.OpGet).BytesReceived
	if limit := int64(len(blocks)) * bs; rx > limit {
		t.Errorf("random 4 KiB reads fetched %d bytes, more than the %d blocks they touch (%d bytes)", rx, len(blocks), limit)
	}
	if st := f.ReadStats(); st.GetsAhead != 0 {
		t.Errorf("random reads fetched ahead: %+v", st)
	}
}

func TestReadAheadHoldsToBudgetShare(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	const size = 48 << 20
	want := storedFile(t, mem, "b/", p, size, 3)
	b := NewBudget(32 << 20) // a read share of 8 MiB
	f, g, _ := openCounted(t, mem, "b/", p, b)

	got := streamRead(t, f, 0, 128<<10)
	if !bytes.Equal(got, want) {
		t.Fatal("read is not what was written")
	}
	st := f.ReadStats()
	if st.GetsAhead == 0 {
		t.Fatalf("nothing fetched ahead within the share: %+v", st)
	}
	if _, mostRead := g.maxInFlight(); mostRead > b.ReadShare() {
		t.Errorf("reads held %d bytes of the budget, over their share %d", mostRead, b.ReadShare())
	}
	if st.MaxHeldAhead > b.ReadShare() {
		t.Errorf("held %d bytes ahead, over the read share %d", st.MaxHeldAhead, b.ReadShare())
	}
	// A writer finds at least three quarters of the budget whatever the
	// readers hold.
	if used := b.Used(); used > b.ReadShare() {
		t.Errorf("after the read, %d bytes are drawn, over the read share %d", used, b.ReadShare())
	}
	if !b.TryAcquire(b.Limit() - b.ReadShare()) {
		t.Error("a writer could not draw three quarters of the budget while a reader held its share")
	} else {
		b.Release(b.Limit() - b.ReadShare())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if used := b.Used(); used != 0 {
		t.Errorf("a closed file still holds %d bytes of the budget", used)
	}
}

func TestReadAheadYieldsToWriters(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	want := storedFile(t, mem, "y/", p, 16<<20, 4)
	b := NewBudget(32 << 20)
	// Writers hold all of it: the reader still reads, exactly.
	b.Force(b.Limit())
	f, _, c := openCounted(t, mem, "y/", p, b)
	defer f.Close()
	if got := streamRead(t, f, 0, 128<<10); !bytes.Equal(got, want) {
		t.Fatal("read is not what was written")
	}
	if st := f.ReadStats(); st.GetsAhead != 0 || st.MaxHeldAhead != 0 {
		t.Errorf("fetched ahead with no room in the budget: %+v", st)
	}
	if rx := c.Snapshot().Op(staging.OpGet).BytesReceived; rx != int64(len(want)) {
		t.Errorf("fetched %d bytes for %d read", rx, len(want))
	}
	if b.Used() != b.Limit() {
		t.Errorf("the reader drew from a full budget: %d used of %d", b.Used(), b.Limit())
	}
	b.Release(b.Limit())
}

func TestConcurrentReadersShareGets(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	p.CacheBytes = 64 << 20
	const size = 8 << 20
	want := storedFile(t, mem, "c/", p, size, 5)
	// Reads planned at once: a slow link keeps the first read's GETs in
	// flight while the others plan.
	slow := link.Profile{Name: "slow", Latency: 20 * time.Millisecond}
	c := counting.New(link.New(mem, slow))
	f, err := Open(context.Background(), c, "c/", Options{Params: p, FileID: "c/"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Plan(context.Background(), 0, size); err != nil {
		t.Fatal(err)
	}
	c.Reset()
	const readers = 8
	var wg sync.WaitGroup
	errs := make([]error, readers)
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			if _, err := f.ReadAt(context.Background(), buf, 0); err != nil && !errors.Is(err, io.EOF) {
				errs[i] = err
				return
			}
			if !bytes.Equal(buf, want) {
				errs[i] = errors.New("read is not what was written")
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if rx := c.Snapshot().Op(staging.OpGet).BytesReceived; rx != size {
		t.Errorf("%d readers of %d bytes fetched %d bytes: not one GET per range", readers, size, rx)
	}
}

// A reader of a file another writer rewrites reads the checkpoint it opened
// to the end, and after a rollback to the other's checkpoint reads only that
// one: nothing fetched ahead of the old map is served to the new one.
func TestRewriteDuringReadNeverMixes(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	p := restoreParams()
	p.ConflictPolicy = ConflictFailFast
	const size = 24 << 20
	old := storedFile(t, mem, "m/", p, size, 6)
	r, _, _ := openCounted(t, mem, "m/", p, nil)
	defer r.Close()

	// Half read, with flights ahead held.
	var half []byte
	buf := make([]byte, 128<<10)
	var off int64
	for off < size/2 {
		n, err := r.ReadStream(ctx, buf, off)
		if err != nil {
			t.Fatal(err)
		}
		half = append(half, buf[:n]...)
		off += int64(n)
	}
	if r.ReadStats().HeldAhead == 0 {
		t.Fatal("nothing held ahead in the middle of a sequential read")
	}

	// Another writer rewrites every block and publishes.
	w := mustOpen(t, mem, "m/", p)
	nw := pattern(size, 7)
	if _, err := w.WriteAt(ctx, nw, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.Close()

	rest := half
	for {
		n, err := r.ReadStream(ctx, buf, off)
		rest = append(rest, buf[:n]...)
		off += int64(n)
		if errors.Is(err, io.EOF) || n == 0 {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(rest, old) {
		t.Fatal("a read begun on one checkpoint returned bytes of another")
	}

	// The reader's own change loses to the other writer: it rolls back to
	// the other's checkpoint and must read only that.
	if _, err := r.WriteAt(ctx, []byte{1}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Flush(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("flush: %v, want a conflict", err)
	}
	if st := r.ReadStats(); st.HeldAhead != 0 {
		t.Errorf("a rollback kept %d bytes fetched ahead of the old map", st.HeldAhead)
	}
	if got := streamRead(t, r, 0, 128<<10); !bytes.Equal(got, nw) {
		t.Fatal("after the rollback the reader does not read the winner's checkpoint alone")
	}
}

// Reads ahead end at Close, and their goroutines with it.
func TestCloseStopsReadAhead(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	storedFile(t, mem, "x/", p, 32<<20, 8)
	b := NewBudget(256 << 20)
	// A link slow enough that flights are still out when Close comes.
	g := &getGauge{Store: link.New(mem, link.Profile{Name: "slow", Latency: 50 * time.Millisecond})}
	f, err := Open(context.Background(), g, "x/", Options{Params: p, FileID: "x/", Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 128<<10)
	for off := int64(0); off < 2<<20; off += int64(len(buf)) {
		if _, err := f.ReadStream(context.Background(), buf, off); err != nil {
			t.Fatal(err)
		}
	}
	if f.ReadStats().GetsAhead == 0 {
		t.Fatal("nothing fetched ahead")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	now := g.now
	g.mu.Unlock()
	if now != 0 {
		t.Errorf("%d GETs still in flight after Close", now)
	}
	if b.Used() != 0 {
		t.Errorf("%d bytes of the budget held after Close", b.Used())
	}
	if _, err := f.ReadStream(context.Background(), buf, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("read after close: %v, want ErrClosed", err)
	}
}

// BenchmarkRestore reads a stored file sequentially in 128 KiB reads (as the
// kernel asks) over the emulated links (and none: the engine's own ceiling):
// the engine's side of a restore, without FUSE.
func BenchmarkRestore(b *testing.B) {
	for _, prof := range []link.Profile{link.ProfileGeneral, link.ProfileDirectory, link.ProfileNone} {
		b.Run(prof.Name, func(b *testing.B) { benchRestore(b, prof) })
	}
}

func benchRestore(b *testing.B, prof link.Profile) {
	mem := mem.New()
	p := restoreParams()
	p.ReadGetMaxBytes = 16 << 20
	p.MaxObjectBytes = 64 << 20
	const size = 256 << 20
	t := &testing.T{}
	storedFile(t, mem, "bench/", p, size, 9)
	link := link.New(mem, prof)
	buf := make([]byte, 128<<10)
	b.SetBytes(size)
	for b.Loop() {
		f, err := Open(context.Background(), link, "bench/", Options{Params: p, FileID: "bench/", Budget: NewBudget(2 << 30)})
		if err != nil {
			b.Fatal(err)
		}
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := f.ReadStream(context.Background(), buf, off); err != nil && !errors.Is(err, io.EOF) {
				b.Fatal(err)
			}
		}
		f.Close()
	}
}

// More streams than are followed, read at once: every read returns what was
// written, streams dropped take what they fetched with them, and Close
// returns the whole budget.
func TestManyStreamsAtOnce(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	const size = 40 << 20
	want := storedFile(t, mem, "many/", p, size, 10)
	b := NewBudget(64 << 20)
	f, _, _ := openCounted(t, mem, "many/", p, b)
	const streams = maxReadStreams + 4
	const each = size / streams
	var wg sync.WaitGroup
	errs := make([]error, streams)
	for k := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 128<<10)
			for off := int64(k * each); off < int64((k+1)*each); off += int64(len(buf)) {
				n, err := f.ReadStream(context.Background(), buf, off)
				if err != nil && !errors.Is(err, io.EOF) {
					errs[k] = err
					return
				}
				if !bytes.Equal(buf[:n], want[off:off+int64(n)]) {
					errs[k] = errors.New("read is not what was written")
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Whether any stream was read ahead of depends on the schedule: with
	// more streams than are followed, taking turns, each may be dropped
	// before it has read enough in a row (TestSequentialReadFetchesAhead
	// covers reading ahead).
	st := f.ReadStats()
	t.Logf("read stats: %+v", st)
	if st.MaxHeldAhead > b.ReadShare() {
		t.Errorf("held %d bytes ahead, over the read share %d", st.MaxHeldAhead, b.ReadShare())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if used := b.Used(); used != 0 {
		t.Errorf("a closed file still holds %d bytes of the budget", used)
	}
}

// Two reads of one stream in flight at once, as the kernel sends them (each
// takes the next 128 KiB), with the block map loaded as they go through a
// link with latency: the stretch ahead is planned by one of them only, in
// whole pieces, so that the GETs ahead are as many as for one reader alone.
// (Two planning one stretch at once split it between them block by block, in
// many small GETs.)
func TestConcurrentReadsOfOneStreamFetchWholePieces(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	const size = 40 << 20
	want := storedFile(t, mem, "c/", p, size, 11)
	slow := link.Profile{Name: "slow", Latency: 10 * time.Millisecond}
	open := func() (*File, *counting.Store) {
		c := counting.New(link.New(mem, slow))
		f, err := Open(context.Background(), c, "c/", Options{Params: p, FileID: "c/"})
		if err != nil {
			t.Fatal(err)
		}
		return f, c
	}
	one, _ := open()
	if got := streamRead(t, one, 0, 128<<10); !bytes.Equal(got, want) {
		t.Fatal("read is not what was written")
	}
	alone := one.ReadStats()
	if err := one.Close(); err != nil {
		t.Fatal(err)
	}

	f, _ := open()
	defer f.Close()
	var next atomic.Int64
	const chunk = 128 << 10
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for k := range 2 {
		wg.Go(func() {
			buf := make([]byte, chunk)
			for {
				off := next.Add(chunk) - chunk
				if off >= size {
					return
				}
				if _, err := f.ReadStream(context.Background(), buf, off); err != nil && !errors.Is(err, io.EOF) {
					errs[k] = err
					return
				}
				if !bytes.Equal(buf, want[off:off+chunk]) {
					errs[k] = fmt.Errorf("read at %d is not what was written", off)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := f.ReadStats()
	t.Logf("one reader: %d GETs ahead; two reads at once: %d", alone.GetsAhead, st.GetsAhead)
	if st.GetsAhead == 0 {
		t.Fatalf("nothing fetched ahead: %+v", st)
	}
	if st.GetsAhead > alone.GetsAhead+2 {
		t.Errorf("two reads at once sent %d GETs ahead (%d bytes each on average); one reader sends %d",
			st.GetsAhead, st.BytesAhead/st.GetsAhead, alone.GetsAhead)
	}
}

// Readers each reading their part of one file at once (restoring a file in
// parallel): a stream's window stops where the next part's reader began, so
// that no part is fetched twice.
func TestReadersOfPartsFetchEachOnce(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	const size = 40 << 20
	const parts = 4
	const each = size / parts
	want := storedFile(t, mem, "parts/", p, size, 12)
	f, _, c := openCounted(t, mem, "parts/", p, nil)
	defer f.Close()
	var wg sync.WaitGroup
	errs := make([]error, parts)
	// Every part's reader begins before any reads far: the window of one
	// never meets a part whose reader has not started.
	var started sync.WaitGroup
	started.Add(parts)
	for k := range parts {
		wg.Go(func() {
			buf := make([]byte, 128<<10)
			for off := int64(k * each); off < int64((k+1)*each); off += int64(len(buf)) {
				_, err := f.ReadStream(context.Background(), buf, off)
				if off == int64(k*each) {
					started.Done()
					started.Wait()
				}
				if err != nil && !errors.Is(err, io.EOF) {
					errs[k] = err
					return
				}
				if !bytes.Equal(buf, want[off:off+int64(len(buf))]) {
					errs[k] = fmt.Errorf("read at %d is not what was written", off)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := f.ReadStats()
	if st.GetsAhead == 0 {
		t.Fatalf("nothing fetched ahead: %+v", st)
	}
	if rx := c.Snapshot().Op(staging.OpGet).BytesReceived; rx != size {
		t.Errorf("%d readers of a part each fetched %d bytes for %d read (%d fetched ahead)", parts, rx, size, st.BytesAhead)
	}
}

// The kernel's READs of one stream reach the engine out of order (several
// in flight, taken up by the mount's goroutines in any order): a read
// 2 MiB ahead of where the stream is, then the two it skipped. They are
// one stream, whose window keeps growing, not a new stream each time a
// read comes early, the reads after it continuing that one and its window
// starting again from nothing (a cold cat through the mount on the general
// link lost a fifth of its speed so).
func TestOutOfOrderReadsKeepOneStream(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	const size = 64 << 20
	const mib = 1 << 20
	want := storedFile(t, mem, "ooo/", p, size, 13)

	// In order, for the GETs one stream sends.
	one, _, _ := openCounted(t, mem, "ooo/", p, nil)
	if got := streamRead(t, one, 0, mib); !bytes.Equal(got, want) {
		t.Fatal("read is not what was written")
	}
	alone := one.ReadStats()
	if err := one.Close(); err != nil {
		t.Fatal(err)
	}

	f, _, c := openCounted(t, mem, "ooo/", p, nil)
	defer f.Close()
	// The first 4 MiB in order, then every 4 MiB as 2, 0, 1, 3.
	var offs []int64
	for a := int64(0); a < size; a += 4 * mib {
		order := []int64{2, 0, 1, 3}
		if a == 0 {
			order = []int64{0, 1, 2, 3}
		}
		for _, k := range order {
			offs = append(offs, a+k*mib)
		}
	}
	buf := make([]byte, mib)
	for _, off := range offs {
		if _, err := f.ReadStream(context.Background(), buf, off); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, want[off:off+mib]) {
			t.Fatalf("read at %d is not what was written", off)
		}
	}
	f.rd.mu.Lock()
	streams := len(f.rd.streams)
	f.rd.mu.Unlock()
	st := f.ReadStats()
	t.Logf("in order: %d GETs ahead; out of order: %d, %d streams", alone.GetsAhead, st.GetsAhead, streams)
	if streams != 1 {
		t.Errorf("one reader out of order was followed as %d streams", streams)
	}
	if st.GetsAhead > alone.GetsAhead+2 {
		t.Errorf("out of order, %d GETs ahead (%d bytes each on average); in order %d",
			st.GetsAhead, st.BytesAhead/max(st.GetsAhead, 1), alone.GetsAhead)
	}
	if rx := c.Snapshot().Op(staging.OpGet).BytesReceived; rx != size {
		t.Errorf("fetched %d bytes for %d read", rx, size)
	}
}
