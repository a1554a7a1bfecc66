package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// mustCreate creates a file and stores its empty head at once, as a
// publish of nothing would, so that other Files can open it before its
// first flush (Create itself sends nothing: see create_test.go).
func mustCreate(t *testing.T, st staging.Store, prefix string, p Params) *File {
	t.Helper()
	f, err := Create(context.Background(), st, prefix, Options{Params: p, FileID: prefix})
	if err != nil {
		t.Fatalf("create %s: %v", prefix, err)
	}
	storeEmptyHead(t, f)
	return f
}

// storeEmptyHead stores the head of a file Create made and never published
// (created with If-None-Match).
func storeEmptyHead(t *testing.T, f *File) {
	t.Helper()
	if f.headETag != "" {
		return // with the WAL, Create stored it
	}
	var c flushCounters
	f.mu.Lock()
	defer f.mu.Unlock()
	etag, err := f.putHead(context.Background(), f.currentHeadLocked(), "", walMark{}, &c)
	if err != nil {
		t.Fatalf("store the head of %s: %v", f.prefix, err)
	}
	f.headETag = etag
}

func mustOpen(t *testing.T, st staging.Store, prefix string, p Params) *File {
	t.Helper()
	f, err := Open(context.Background(), st, prefix, Options{Params: p, FileID: prefix})
	if err != nil {
		t.Fatalf("open %s: %v", prefix, err)
	}
	return f
}

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}

func readAll(t *testing.T, f *File) []byte {
	t.Helper()
	buf := make([]byte, f.Size())
	n, err := f.ReadAt(context.Background(), buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read all: %v", err)
	}
	return buf[:n]
}

func TestOpenMissingIsErrNotExist(t *testing.T) {
	if _, err := Open(context.Background(), mem.New(), "b/", Options{FileID: "b/"}); !errors.Is(err, ErrNotExist) {
		t.Fatalf("open missing: %v, want ErrNotExist", err)
	}
}

func TestOpenRefusesAnotherFilesHead(t *testing.T) {
	st := mem.New()
	mustCreate(t, st, "a/", smallParams(segment.FormatStream))
	_, err := Open(context.Background(), st, "a/", Options{FileID: "not-a"})
	if !errors.Is(err, segment.ErrWrongObject) {
		t.Fatalf("open with another id: %v, want ErrWrongObject", err)
	}
}

// Writing four times the dirty limit without a flush keeps the dirty tier
// within the limit plus one write, and everything reads back before and
// after the flush and a reopen.
func TestDirtyLimitHolds(t *testing.T) {
	for _, fm := range []segment.Format{segment.FormatStream, segment.FormatParted} {
		t.Run(fm.String(), func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			p := smallParams(fm)
			f := mustCreate(t, st, "d/", p)
			data := pattern(int(4*p.DirtyLimit)+777, 1)
			const w = 3000
			for off := 0; off < len(data); off += w {
				end := min(off+w, len(data))
				if _, err := f.WriteAt(ctx, data[off:end], int64(off)); err != nil {
					t.Fatal(err)
				}
				if d := f.Stat().DirtyBytes; d > p.DirtyLimit+w+int64(p.DataBlockSize) {
					t.Fatalf("after %d bytes: %d dirty bytes, limit %d", end, d, p.DirtyLimit)
				}
			}
			if f.Stats().Partials == 0 {
				t.Fatalf("no partial segment written")
			}
			if got := readAll(t, f); !bytes.Equal(got, data) {
				t.Fatalf("before flush: content differs")
			}
			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, f); !bytes.Equal(got, data) {
				t.Fatalf("after flush: content differs")
			}
			g := mustOpen(t, st, "d/", p)
			if got := readAll(t, g); !bytes.Equal(got, data) {
				t.Fatalf("after reopen: content differs")
			}
		})
	}
}

func TestTwoWriters(t *testing.T) {
	for _, policy := range []ConflictPolicy{ConflictFailFast, ConflictRetry} {
		t.Run(fmt.Sprint(policy), func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			p := smallParams(segment.FormatStream)
			p.ConflictPolicy = policy
			a := mustCreate(t, st, "w/", p)
			b := mustOpen(t, st, "w/", p)
			// b's write covers whole blocks: the later writer wins block by
			// block, so a's bytes around them stay.
			bs := p.DataBlockSize
			da, db := pattern(10*bs+300, 2), pattern(6*bs, 3)
			if _, err := a.WriteAt(ctx, da, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := b.WriteAt(ctx, db, int64(2*bs)); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Flush(ctx); err != nil {
				t.Fatalf("first flush: %v", err)
			}
			foreign := b.ForeignChanges()
			_, err := b.Flush(ctx)
			// Rolled back to the winner or merged with it: b's content is
			// not only its own writes any more.
			if b.ForeignChanges() == foreign {
				t.Fatalf("ForeignChanges did not move when the flush met another writer's checkpoint (%v)", err)
			}
			fresh := func() []byte { return readAll(t, mustOpen(t, st, "w/", p)) }
			switch policy {
			case ConflictFailFast:
				var ce *ConflictError
				if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) {
					t.Fatalf("second flush: %v, want a ConflictError", err)
				}
				// b rolled back: it reads the winner.
				if got := readAll(t, b); !bytes.Equal(got, da) {
					t.Fatalf("loser does not read the winner after rollback")
				}
				if got := fresh(); !bytes.Equal(got, da) {
					t.Fatalf("fresh open does not read the winner")
				}
			case ConflictRetry:
				if err != nil {
					t.Fatalf("second flush: %v", err)
				}
				want := append([]byte(nil), da...)
				copy(want[2*bs:], db)
				if got := fresh(); !bytes.Equal(got, want) {
					t.Fatalf("fresh open does not read the later writer's data over the first's")
				}
			}
		})
	}
}

// TestForeignChangesOwnWork: a file's own writes, truncates and flushes do
// not count as foreign changes; a rollback and a copy by reference do.
func TestForeignChangesOwnWork(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	f := createIn(t, st, "o", p)
	storeEmptyHead(t, f)
	src := createIn(t, st, "s", p)
	writeFlush(t, src, pattern(5000, 7), 0)
	start := f.ForeignChanges()
	steps := []struct {
		name  string
		do    func() error
		moves bool
	}{
		{"write", func() error { _, err := f.WriteAt(ctx, pattern(3*p.DataBlockSize, 5), 0); return err }, false},
		{"flush", func() error { _, err := f.Flush(ctx); return err }, false},
		{"truncate", func() error { return f.Truncate(ctx, 100) }, false},
		{"flush again", func() error { _, err := f.Flush(ctx); return err }, false},
		{"write, then rollback", func() error {
			if _, err := f.WriteAt(ctx, pattern(10, 6), 0); err != nil {
				return err
			}
			return f.Rollback(ctx)
		}, true},
		{"emptied, then a copy by reference", func() error {
			if err := f.Truncate(ctx, 0); err != nil {
				return err
			}
			return f.CloneFrom(ctx, src)
		}, true},
	}
	for _, s := range steps {
		before := f.ForeignChanges()
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if moved := f.ForeignChanges() != before; moved != s.moves {
			t.Fatalf("%s: ForeignChanges moved %v, want %v (from %d)", s.name, moved, s.moves, start)
		}
	}
}

func TestCorruptObjectRefused(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	p.EmbedMaxBytes = -1 // the stored object is damaged: read it, not the head's copy
	f := mustCreate(t, st, "c/", p)
	data := pattern(20000, 4)
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pl, err := f.BlockPlacement(ctx, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	obj, info, err := st.Get(ctx, pl[0].Key, staging.Whole())
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), obj...)
	bad[pl[0].Offset+10] ^= 0xff
	if _, err := st.Put(ctx, pl[0].Key, bad, staging.PutOptions{Conditions: staging.Conditions{IfMatch: info.ETag}}); err != nil {
		t.Fatal(err)
	}
	g := mustOpen(t, st, "c/", p)
	buf := make([]byte, p.DataBlockSize)
	_, err = g.ReadAt(ctx, buf, 3*int64(p.DataBlockSize))
	if !errors.Is(err, segment.ErrChecksum) || !strings.Contains(err.Error(), pl[0].Key) {
		t.Fatalf("read of a corrupt block: %v, want a checksum error naming %s", err, pl[0].Key)
	}
	// A block the damage does not touch still reads.
	if _, err := g.ReadAt(ctx, buf, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read of an intact block: %v", err)
	}
	// A write that needs the corrupt block's old bytes fails, and changes nothing.
	if _, err := g.WriteAt(ctx, []byte{1, 2, 3}, 3*int64(p.DataBlockSize)+5); !errors.Is(err, segment.ErrChecksum) {
		t.Fatalf("partial write over a corrupt block: %v, want a checksum error", err)
	}
}

// Eight goroutines reading and writing one file, for the race detector; each
// writer owns a stripe and checks it reads back its own bytes.
func TestConcurrentReadWrite(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	f := mustCreate(t, st, "r/", p)
	const stripe = 9000
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			mine := make([]byte, stripe)
			base := int64(g * stripe)
			for i := range 300 {
				off := r.IntN(stripe - 100)
				n := 1 + r.IntN(100)
				b := pattern(n, uint64(g*1000+i))
				if _, err := f.WriteAt(ctx, b, base+int64(off)); err != nil {
					errs <- err
					return
				}
				copy(mine[off:], b)
				got := make([]byte, n)
				if _, err := f.ReadAt(ctx, got, base+int64(off)); err != nil && !errors.Is(err, io.EOF) {
					errs <- err
					return
				}
				if !bytes.Equal(got, b) {
					errs <- fmt.Errorf("goroutine %d: read back differs", g)
					return
				}
				if i%50 == 0 {
					if _, err := f.Flush(ctx); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Disjoint writes to one file run at once: two writers of their own ranges
// are both in their copy phase together (each waits there for the other; if
// writes were serialised, the first would wait in vain), and everything eight
// writers wrote reads back, before and after a flush.
func TestDisjointWritesInParallel(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := piecesParams(12 << 20)
	p.DirtyLimit = 1 << 30
	f := mustCreate(t, st, "pw/", p)
	var (
		mu       sync.Mutex
		inside   int
		together = make(chan struct{})
	)
	met := false
	f.copyHook = func() {
		mu.Lock()
		inside++ // writes in their copy phase now
		if inside == 2 && !met {
			met = true
			close(together)
		}
		mu.Unlock()
		select {
		case <-together:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		inside--
		mu.Unlock()
	}
	const per = 4 << 20
	want := make([]byte, 8*per)
	var wg sync.WaitGroup
	for g := range 8 {
		data := pattern(per, uint64(g+100))
		copy(want[g*per:], data)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i += 1 << 20 {
				if _, err := f.WriteAt(ctx, data[i:i+1<<20], int64(g*per+i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-together:
	default:
		t.Fatalf("no two writes were in their copy phase at once: disjoint writes are serialised")
	}
	if n := f.Stats().ParallelWrites; n < 2 {
		t.Fatalf("ParallelWrites %d, want at least 2", n)
	}
	if got := readAll(t, f); !bytes.Equal(got, want) {
		t.Fatalf("content differs before the flush")
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, mustOpen(t, st, "pw/", p)); !bytes.Equal(got, want) {
		t.Fatalf("content differs after the flush")
	}
}
