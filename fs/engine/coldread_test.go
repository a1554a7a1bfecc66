package engine

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// pauseGetStore holds the first GET of one range of one key until the test
// lets it go: what a test does meanwhile happens while that request is in
// flight, with no sleep. gets counts the GETs of the range, held or not.
type pauseGetStore struct {
	staging.Store
	key     string
	off     int64
	f       atomic.Pointer[File] // whose mu must not be held at the GET
	once    sync.Once
	reached chan bool // the held GET arrived; true if f.mu was held then
	release chan struct{}
	gets    atomic.Int32
}

func newPauseGetStore(st staging.Store, key string, off int64) *pauseGetStore {
	return &pauseGetStore{Store: st, key: key, off: off, reached: make(chan bool, 1), release: make(chan struct{})}
}

func (s *pauseGetStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if key == s.key && r.Off == s.off {
		s.gets.Add(1)
		s.once.Do(func() {
			f := s.f.Load()
			s.reached <- f != nil && f.mu.held()
			<-s.release
		})
	}
	return s.Store.Get(ctx, key, r)
}

// coldFixture is a file of 64 KiB of pattern(…, 7) stored in one
// checkpoint by a writer w, and a File f opened on it cold (nothing of its
// map loaded) through a store that holds the GET of block fbn's data.
type coldFixture struct {
	st    staging.Store
	w, f  *File
	pause *pauseGetStore
	want  []byte // what the file holds, as the test changes it
	bs    int64
	p     Params
}

const coldPrefix = "cr/"

func newColdFixture(t *testing.T, fbn uint64) *coldFixture {
	t.Helper()
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	w := mustCreate(t, st, coldPrefix, p)
	t.Cleanup(func() { w.Close() })
	want := pattern(lockRuleSize, 7)
	if _, err := w.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pl := placementOf(t, st, p, fbn)
	pause := newPauseGetStore(st, pl.Key, pl.Offset)
	f := mustOpen(t, pause, coldPrefix, p)
	pause.f.Store(f)
	t.Cleanup(func() { f.Close() })
	if present, known := f.tree.Peek(fbn); known {
		t.Fatalf("the map of a File just opened knows block %d (present %v): not cold", fbn, present)
	}
	return &coldFixture{st: st, w: w, f: f, pause: pause, want: bytes.Clone(want), bs: int64(p.DataBlockSize), p: p}
}

// placementOf is where block fbn of the stored file is, asked of a File of
// its own (so that the File under test loads nothing).
func placementOf(t *testing.T, st staging.Store, p Params, fbn uint64) Placement {
	t.Helper()
	r := mustOpen(t, st, coldPrefix, p)
	defer r.Close()
	pl, err := r.BlockPlacement(context.Background(), fbn, 1)
	if err != nil || pl[0].Hole || pl[0].Key == "" {
		t.Fatalf("placement of block %d: %+v, %v", fbn, pl, err)
	}
	return pl[0]
}

// goWrite starts a write of p at off on f and returns its result's channel.
func goWrite(f *File, p []byte, off int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := f.WriteAt(context.Background(), p, off)
		done <- err
	}()
	return done
}

// awaitPausedGET waits for the held GET and fails if File.mu was held.
func (x *coldFixture) awaitPausedGET(t *testing.T) {
	t.Helper()
	if held := <-x.pause.reached; held {
		close(x.pause.release)
		t.Fatal("the read-modify-write's GET was made with File.mu held")
	}
}

// awaitWaitingForAll returns once an operation waits for every block of f,
// or a flush for [0, end) shared: it cannot have run, and will run next.
func awaitWaitingForAll(f *File) {
	for {
		f.ranges.mu.Lock()
		for _, w := range f.ranges.waiting {
			// A flush shares [0, end), the others take every block.
			if w.lo == allBlocks.lo && (w.hi == allBlocks.hi || !w.excl) {
				f.ranges.mu.Unlock()
				return
			}
		}
		f.ranges.mu.Unlock()
		runtime.Gosched()
	}
}

// mustRead checks what f reads, and what a File opened afresh on the store
// reads.
func (x *coldFixture) mustRead(t *testing.T, what string, f *File) {
	t.Helper()
	mustEqual(t, what, readAll(t, f), x.want)
}

// A partial write over a cold block reads the block without File.mu: a
// write of other blocks that writes a partial segment (changing the map's
// nodes and other entries) goes on while that read is in flight, and a
// flush waits for the write; the bytes are what the writes in either order
// give.
func TestColdWriteWhilePartialSegment(t *testing.T) {
	ctx := context.Background()
	const fbn = 40
	x := newColdFixture(t, fbn)
	f := x.f
	mine := []byte("partial")
	off := int64(fbn)*x.bs + 7
	done := goWrite(f, mine, off)
	x.awaitPausedGET(t)

	// Other blocks, past the dirty limit: the write makes a partial segment.
	other := pattern(int(x.p.DirtyLimit)+4*int(x.bs), 9)
	if _, err := f.WriteAt(ctx, other, 2*lockRuleSize); err != nil {
		t.Fatal(err)
	}
	if got := f.Stats().Partials; got == 0 {
		t.Fatalf("no partial segment was written while the read was held")
	}
	flushed := make(chan error, 1)
	go func() {
		_, err := f.Flush(ctx)
		flushed <- err
	}()
	awaitWaitingForAll(f)

	close(x.pause.release)
	if err := <-done; err != nil {
		t.Fatalf("the partial write: %v", err)
	}
	if err := <-flushed; err != nil {
		t.Fatalf("flush: %v", err)
	}
	x.want = append(x.want, make([]byte, lockRuleSize)...)
	x.want = append(x.want, other...)
	copy(x.want[off:], mine)
	x.mustRead(t, "the file written", f)
	r := mustOpen(t, x.st, coldPrefix, x.p)
	defer r.Close()
	x.mustRead(t, "the checkpoint", r)
	if n := x.pause.gets.Load(); n != 1 {
		t.Fatalf("block %d was fetched %d times, want 1 (nothing changed it)", fbn, n)
	}
}

// A refresh that would adopt another writer's checkpoint, one that changed
// the very block a partial write is reading, waits for the write (it needs
// every block): the write applies over the checkpoint the File had, the
// refresh then finds changes of the File's own and leaves them, and the
// flush merges them over the other writer's checkpoint. The result is the
// serial order: the other writer's checkpoint, then the partial write.
func TestColdWriteWhileRefreshAdopts(t *testing.T) {
	ctx := context.Background()
	const fbn = 40
	x := newColdFixture(t, fbn)
	f := x.f
	mine := []byte("partial")
	off := int64(fbn)*x.bs + 7
	done := goWrite(f, mine, off)
	x.awaitPausedGET(t)

	// Another writer (another File on the store) rewrites the block whole,
	// and another one, and publishes.
	theirs := pattern(int(x.bs), 11)
	for _, b := range []int64{fbn, fbn + 3} {
		if _, err := x.w.WriteAt(ctx, theirs, b*x.bs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := x.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	type result struct {
		changed bool
		err     error
	}
	refreshed := make(chan result, 1)
	go func() {
		changed, err := f.Refresh(ctx)
		refreshed <- result{changed, err}
	}()
	awaitWaitingForAll(f)

	close(x.pause.release)
	if err := <-done; err != nil {
		t.Fatalf("the partial write: %v", err)
	}
	if r := <-refreshed; r.err != nil || r.changed {
		t.Fatalf("refresh after the write: changed %v, %v; want false (changes of its own), nil", r.changed, r.err)
	}
	// Before the flush f shows the checkpoint it had, and its write.
	old := bytes.Clone(x.want)
	copy(old[off:], mine)
	mustEqual(t, "the file before its flush", readAll(t, f), old)

	if _, err := f.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	copy(x.want[fbn*x.bs:], theirs)
	copy(x.want[(fbn+3)*x.bs:], theirs)
	copy(x.want[off:], mine)
	x.mustRead(t, "the file after its flush", f)
	r := mustOpen(t, x.st, coldPrefix, x.p)
	defer r.Close()
	x.mustRead(t, "the merged checkpoint", r)
}

// The check after the read catches a change of the block's mapping that
// the range lock rules out today: the map's value of the block is changed
// by hand while its GET is in flight, and the write reads the block again
// (its new value) before applying.
func TestColdWriteRereadsAChangedBlock(t *testing.T) {
	ctx := context.Background()
	const fbn, other = 40, 90
	x := newColdFixture(t, fbn)
	f := x.f
	mine := []byte("partial")
	off := int64(fbn)*x.bs + 7
	done := goWrite(f, mine, off)
	x.awaitPausedGET(t)

	f.mu.Lock()
	v, ok, err := f.tree.Get(ctx, other)
	if err == nil && ok {
		err = f.tree.Set(ctx, fbn, v)
	}
	f.mu.Unlock()
	if err != nil || !ok {
		close(x.pause.release)
		t.Fatalf("point block %d at block %d's value: %v (mapped %v)", fbn, other, err, ok)
	}

	close(x.pause.release)
	if err := <-done; err != nil {
		t.Fatalf("the partial write: %v", err)
	}
	copy(x.want[fbn*x.bs:(fbn+1)*x.bs], x.want[other*x.bs:(other+1)*x.bs])
	copy(x.want[off:], mine)
	x.mustRead(t, "the file", f)
}

// A truncate into a cold block, a zero of part of one, and a zero of a
// range that grows the file from inside its last block read the block
// without File.mu, and give the bytes a serial order gives.
func TestColdTruncateAndZero(t *testing.T) {
	ctx := context.Background()
	const bs = 512 // smallParams
	at := int64(40*bs + 100)
	end := int64(lockRuleSize)
	cases := []struct {
		name string
		fbn  uint64
		op   func(f *File) error
		want func(b []byte) []byte
	}{
		{"truncate", 40, func(f *File) error { return f.Truncate(ctx, at) },
			func(b []byte) []byte { return b[:at] }},
		{"zero", 40, func(f *File) error { return f.Zero(ctx, at, 50) },
			func(b []byte) []byte { clear(b[at : at+50]); return b }},
		{"zero range, growing", uint64(end/bs - 1), func(f *File) error { return f.ZeroRange(ctx, end-100, 300, false) },
			func(b []byte) []byte { clear(b[end-100:]); return append(b, make([]byte, 200)...) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := newColdFixture(t, c.fbn)
			f := x.f
			done := make(chan error, 1)
			go func() { done <- c.op(f) }()
			x.awaitPausedGET(t)
			// A write below the blocks held goes on meanwhile.
			low := pattern(int(x.bs)+10, 13)
			if _, err := f.WriteAt(ctx, low, 3); err != nil {
				t.Fatal(err)
			}
			close(x.pause.release)
			if err := <-done; err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			copy(x.want[3:], low)
			x.want = c.want(x.want)
			x.mustRead(t, "the file", f)
			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			r := mustOpen(t, x.st, coldPrefix, x.p)
			defer r.Close()
			x.mustRead(t, "the checkpoint", r)
		})
	}
}
