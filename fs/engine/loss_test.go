package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// A flush whose last full pieces find the shared memory budget full (another
// file holds it) still makes progress: the flush's pieces are the stated
// overhead above the budget, and it never spins with the file held.
func TestSettleWithFullBudget(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	budget := NewBudget(16 << 20)
	p := piecesParams(12 << 20)
	a, err := Create(ctx, mem, "ba/", Options{Params: p, FileID: "ba/", Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	// Pieces copied from the pool's blocks: a piece of blocks in their
	// arena needs no room (TestArenaPieceNeedsNoRoom).
	a.noArenas = true
	pb := piecesParams(0)
	b, err := Create(ctx, mem, "bb/", Options{Params: pb, FileID: "bb/", Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	// The other file holds 4 MiB of the budget with dirty blocks.
	writeSeq(t, b, pattern(4<<20, 90), 0, 1<<20)
	data := pattern(11<<20, 91)
	writeSeq(t, a, data[:6<<20], 0, 1<<20) // one piece sent, the object open
	waitFor(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.s.takeInLocked(ctx, false)
		return a.s.tasks.Pending() == 0
	})
	// 5 MiB more: a full piece unsent, for which the budget has no room.
	writeSeq(t, a, data[6<<20:], 6<<20, 1<<20)
	a.mu.Lock()
	unsent, open := a.s.unsentB, a.s.open[classRun] != nil
	a.mu.Unlock()
	if unsent < p.ChunkSize || !open {
		t.Fatalf("setup: %d bytes unsent, object open %v: want a full piece unsent in an open object", unsent, open)
	}
	// A flush that spins never returns: a generous deadline bounds the test.
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := a.Flush(fctx); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("flush: %v", err)
		}
	case <-fctx.Done():
		t.Fatalf("the flush did not return (it spins with the file held)")
	}
	if got := readAll(t, mustOpen(t, mem, "ba/", p)); !bytes.Equal(got, data) {
		t.Fatalf("after reopen: content differs at %d", commonPrefix(got, data))
	}
}

// failingSource fails every read from the failAt-th on, until healed.
type failingSource struct {
	mu     sync.Mutex
	data   []byte
	reads  int
	failAt int // 0: never
}

func (s *failingSource) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if s.failAt > 0 && s.reads >= s.failAt {
		return 0, errors.New("source unreadable")
	}
	return bytes.NewReader(s.data).ReadAt(p, off)
}

func (s *failingSource) set(failAt int) {
	s.mu.Lock()
	s.reads, s.failAt = 0, failAt
	s.mu.Unlock()
}

// A source that fails while the flush places the last piece of an object
// sent ahead fails that flush and leaves nothing half placed: the next flush
// publishes a file that reads back whole, by value and by reference.
func TestRefFailsInLastPiece(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	p := piecesParams(12 << 20)
	f := mustCreate(t, mem, "rl/", p)
	data := pattern(8<<20, 92)
	writeSeq(t, f, data[:6<<20], 0, 1<<20) // one piece sent, the object open
	src := &failingSource{data: data[6<<20:]}
	if err := f.WriteRef(ctx, 6<<20, 2<<20, src, 0); err != nil {
		t.Fatal(err)
	}
	src.set(100) // mid-piece
	if _, err := f.Flush(ctx); err == nil {
		t.Fatalf("flush with an unreadable source succeeded")
	}
	src.set(0)
	flushAndCheck(t, mem, f, "rl/", p, data)
}

// With the WAL, a write whose log append fails leaves the file exactly as it
// was: a block it made dirty with a pooled buffer (shared by every file)
// never shows that buffer's bytes, to a read or to the next publish.
func TestWALFailedAppendLeavesFileAsItWas(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 4)
	p := walParams(segment.FormatStream)
	f, err := Create(ctx, faults, "wa/", Options{Params: p, FileID: "wa/"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bs := p.DataBlockSize
	want := pattern(3*bs, 93)
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitPublished(f)
	// Buffers another file freed, holding its bytes.
	for range 64 {
		putBlockBuf(bytes.Repeat([]byte{0xEE}, bs))
	}
	id := faults.Add(faulty.Rule{Op: staging.OpPut, KeyPrefix: "wa/" + wal.Dir, Kind: faulty.Error})
	if _, err := f.WriteAt(ctx, pattern(bs, 94), int64(bs)); err == nil { // block 1, whole
		t.Fatalf("a write whose log append failed succeeded")
	}
	if _, err := f.WriteAt(ctx, pattern(2*bs, 95), int64(3*bs)); err == nil { // past the end
		t.Fatalf("a write whose log append failed succeeded")
	}
	faults.Remove(id)
	if got := readAll(t, f); !bytes.Equal(got, want) {
		t.Fatalf("after a failed write the file reads other bytes (at %d)", commonPrefix(got, want))
	}
	if _, err := f.WriteAt(ctx, []byte("x"), int64(3*bs)-1); err != nil {
		t.Fatalf("write after the failure: %v", err)
	}
	want[3*bs-1] = 'x'
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitPublished(f)
	g := mustOpen(t, mem, "wa/", Params{Format: p.Format, DataBlockSize: bs, MetaBlockSize: p.MetaBlockSize})
	defer g.Close()
	if got := readAll(t, g); !bytes.Equal(got, want) {
		t.Fatalf("the published file differs at %d", commonPrefix(got, want))
	}
}

// liveObjects returns the keys of the objects holding f's blocks now.
func liveObjects(t *testing.T, f *File) map[string]bool {
	t.Helper()
	n := int((f.Size() + int64(f.bs) - 1) / int64(f.bs))
	pl, err := f.BlockPlacement(context.Background(), 0, n)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, x := range pl {
		if !x.Hole {
			out[x.Key] = true
		}
	}
	return out
}

// A lost answer to the completion of an object sent ahead is resolved as the
// flush resolves its own writes: the object landed, its data counts as sent,
// and it is the one the checkpoint uses (nothing is left behind).
func TestSendAheadLostCompleteAnswer(t *testing.T) {
	mem := mem.New()
	faults := faulty.New(mem, 5)
	faults.Add(faulty.Rule{Op: staging.OpCompleteMultipart, Nth: 1, Kind: faulty.LostAnswer})
	p := piecesParams(12 << 20)
	f := mustCreate(t, faults, "lc/", p)
	data := pattern(30<<20, 96)
	writeSeq(t, f, data, 0, 1<<20)
	ft := flushAndCheck(t, mem, f, "lc/", p, data)
	if faults.Injected() != 1 {
		t.Fatalf("fault fired %d times, want 1", faults.Injected())
	}
	if ft.StreamDeadBytes != 0 {
		t.Fatalf("%d bytes counted dead: the object that landed was taken for a failure", ft.StreamDeadBytes)
	}
	live := liveObjects(t, f)
	for _, o := range dataObjects(t, mem, "lc/") {
		if !live[o.Key] {
			t.Fatalf("object %s landed and was left behind", o.Key)
		}
	}
}

// After a rollback, sending ahead takes names no object has: the objects
// stored before it keep theirs, and no upload fails on a name taken.
func TestSendAheadNamesAfterRollback(t *testing.T) {
	for _, target := range []int64{1 << 20, 12 << 20} {
		t.Run(fmt.Sprint(target), func(t *testing.T) {
			ctx := context.Background()
			mem := mem.New()
			p := piecesParams(target)
			f := mustCreate(t, mem, "rn/", p)
			writeSeq(t, f, pattern(16<<20, 97), 0, 1<<20)
			waitFor(t, func() bool {
				f.mu.Lock()
				defer f.mu.Unlock()
				f.s.takeInLocked(ctx, false)
				return f.s.tasks.Pending() == 0
			})
			if len(dataObjects(t, mem, "rn/")) == 0 {
				t.Fatalf("setup: nothing was sent ahead")
			}
			if err := f.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			data := pattern(16<<20, 98)
			writeSeq(t, f, data, 0, 1<<20)
			ft := flushAndCheck(t, mem, f, "rn/", p, data)
			if ft.StreamDeadBytes != 0 || ft.Attempts != 1 {
				t.Fatalf("after a rollback: %d bytes dead, %d attempts: names already taken were used again",
					ft.StreamDeadBytes, ft.Attempts)
			}
		})
	}
}

// A block cached by pointer is never served for another object that took
// the same name (here: a writer's object that no checkpoint used was removed
// by the cleaner, and another writer created that name again).
func TestCacheNeverServesAReusedName(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	p := piecesParams(1 << 20)
	p.ConflictPolicy = ConflictFailFast
	a := mustCreate(t, mem, "cn/", p)
	b := mustOpen(t, mem, "cn/", p)
	writeSeq(t, a, pattern(1<<20, 99), 0, 1<<20) // one object sent whole
	waitFor(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.s.takeInLocked(ctx, false)
		return a.s.tasks.Pending() == 0 && len(a.dirty) < 256
	})
	readAll(t, a) // its blocks are in a's cache now
	objs := dataObjects(t, mem, "cn/")
	if len(objs) != 1 {
		t.Fatalf("setup: %d objects sent ahead, want 1", len(objs))
	}
	// No checkpoint uses it: the cleaner removes it.
	if err := mem.Delete(ctx, objs[0].Key); err != nil {
		t.Fatal(err)
	}
	want := pattern(1<<20, 100)
	writeSeq(t, b, want, 0, 1<<20)
	if _, err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if pl, _ := b.BlockPlacement(ctx, 0, 1); pl[0].Key != objs[0].Key {
		t.Fatalf("setup: the other writer's block 0 is in %s, not in the reused name %s", pl[0].Key, objs[0].Key)
	}
	a.WriteAt(ctx, []byte("late"), 1<<20)
	if _, err := a.Flush(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("flush: %v, want a conflict", err)
	}
	if got := readAll(t, a); !bytes.Equal(got, want) {
		t.Fatalf("after the rollback a reads other bytes than the winner's (at %d)", commonPrefix(got, want))
	}
}

// inflightStore counts the requests in flight at once, every kind; each
// takes a little while, as over a link, so that they overlap.
type inflightStore struct {
	staging.Store
	mu        sync.Mutex
	now, most int
}

func (s *inflightStore) enter() func() {
	s.mu.Lock()
	s.now++
	s.most = max(s.most, s.now)
	s.mu.Unlock()
	time.Sleep(time.Millisecond)
	return func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}
}

func (s *inflightStore) max() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most
}

func (s *inflightStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	defer s.enter()()
	return s.Store.Put(ctx, key, data, o)
}

func (s *inflightStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	defer s.enter()()
	return s.Store.Head(ctx, key)
}

func (s *inflightStore) CreateMultipart(ctx context.Context, key string, o staging.PutOptions) (string, error) {
	defer s.enter()()
	return s.Store.CreateMultipart(ctx, key, o)
}

func (s *inflightStore) UploadPart(ctx context.Context, key, id string, n int32, data []byte) (string, error) {
	defer s.enter()()
	return s.Store.UploadPart(ctx, key, id, n, data)
}

func (s *inflightStore) CompleteMultipart(ctx context.Context, key, id string, parts []staging.CompletedPart, c staging.Conditions) (staging.ObjectInfo, error) {
	defer s.enter()()
	return s.Store.CompleteMultipart(ctx, key, id, parts, c)
}

func (s *inflightStore) AbortMultipart(ctx context.Context, key, id string) error {
	defer s.enter()()
	return s.Store.AbortMultipart(ctx, key, id)
}

// segment_mpu_max_concurrency caps the objects or pieces in flight, always:
// the pieces sent ahead, their tails, completions and aborts, the flush's
// last pieces and its own objects.
func TestConcurrencyCapEveryRequest(t *testing.T) {
	for _, target := range []int64{1 << 20, 12 << 20, 0} {
		t.Run(fmt.Sprint(target), func(t *testing.T) {
			mem := mem.New()
			st := &inflightStore{Store: mem}
			p := piecesParams(target)
			p.Concurrency = 2
			p.MaxObjectBytes = 8 << 20
			f := mustCreate(t, st, "cc/", p)
			data := pattern(40<<20, 101)
			writeSeq(t, f, data, 0, 1<<20)
			flushAndCheck(t, mem, f, "cc/", p, data)
			if m := st.max(); m > p.Concurrency {
				t.Fatalf("%d requests in flight at once, cap %d", m, p.Concurrency)
			}
		})
	}
}

// Every object obeys segment_max_object_bytes, part 0 included, on the
// direct path and on the WAL's: a checkpoint whose index cannot fit one
// object is refused with a clear error, never stored larger.
func TestPart0ObeysMaxObjectBytes(t *testing.T) {
	for _, withWAL := range []bool{false, true} {
		t.Run(fmt.Sprint("wal=", withWAL), func(t *testing.T) {
			ctx := context.Background()
			mem := mem.New()
			p := smallParams(segment.FormatStream)
			if withWAL {
				p = walParams(segment.FormatStream)
			}
			p.MaxObjectBytes = 4 << 10
			p.DirtyLimit = 1 << 20
			f := mustCreate(t, mem, "mx/", p)
			defer f.Close()
			// One block in eight: a leaf for every few blocks, and many
			// nodes above them.
			for i := 0; i < 4000; i++ {
				if _, err := f.WriteAt(ctx, pattern(512, uint64(i)), int64(i)*8*512); err != nil {
					t.Fatal(err)
				}
			}
			_, err := f.Flush(ctx)
			if withWAL {
				waitPublished(f)
			}
			all, lerr := staging.ListAll(ctx, mem, "mx/")
			if lerr != nil {
				t.Fatal(lerr)
			}
			for _, o := range all {
				if !strings.HasPrefix(o.Key, "mx/"+wal.Dir) && !strings.HasSuffix(o.Key, "/inode") && o.Size > p.MaxObjectBytes {
					t.Fatalf("%s is %d bytes, over the %d limit (flush: %v)", o.Key, o.Size, p.MaxObjectBytes, err)
				}
			}
			if err != nil && !errors.Is(err, ErrObjectTooLarge) {
				t.Fatalf("flush: %v, want success or ErrObjectTooLarge", err)
			}
			t.Logf("flush: %v", err)
		})
	}
}

// A failfast rollback that drops changes counts a loss, which every user of
// the file sees (the FUSE layer fails the next fsync of each open
// description); a rollback that drops nothing does not.
func TestFailFastRollbackCountsLoss(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	p.ConflictPolicy = ConflictFailFast
	a := mustCreate(t, st, "lo/", p)
	b := mustOpen(t, st, "lo/", p)
	if err := a.Rollback(ctx); err != nil || a.Losses() != 0 {
		t.Fatalf("rollback of a clean file: %v, losses %d", err, a.Losses())
	}
	b.WriteAt(ctx, []byte("winner"), 0)
	if _, err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.WriteAt(ctx, []byte("lost"), 100)
	if _, err := a.Flush(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("flush: %v, want ErrConflict", err)
	}
	if a.Losses() != 1 || a.Stat().Dirty {
		t.Fatalf("after the rollback: losses %d, dirty %v; want 1 loss and a clean file", a.Losses(), a.Stat().Dirty)
	}
	a.WriteAt(ctx, []byte("again"), 200)
	if err := a.Rollback(ctx); err != nil || a.Losses() != 2 {
		t.Fatalf("rollback of a dirty file: %v, losses %d, want 2", err, a.Losses())
	}
}
