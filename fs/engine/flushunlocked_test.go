package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// flushUnlockedParams: nothing sent ahead and no partial segment, so that
// the flush stores every block itself.
func flushUnlockedParams() Params {
	p := smallParams(segment.FormatStream)
	p.StreamSegmentBytes = 0
	p.DirtyLimit = 1 << 20
	return p
}

// While a flush's objects are held by a stalled store, reads of the file
// (stored blocks and the dirty blocks being published) answer, and so does
// a write past the end; a write into the blocks published waits for the
// flush. Both go into the next checkpoint: the flush publishes what it
// took, and the next flush the rest.
func TestFlushLetsReadsGoOn(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	st := newStallStore(base)
	p := flushUnlockedParams()
	const size = 32 << 10
	stored := storedFile(t, base, "fu/", p, size, 5)
	f := mustOpen(t, st, "fu/", p)
	defer f.Close()
	before := f.Stat()
	fresh := pattern(8<<10, 6)
	if _, err := f.WriteAt(ctx, fresh, 4<<10); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(stored)
	copy(want[4<<10:], fresh)

	flushed := make(chan struct{})
	var ft FlushTiming
	var ferr error
	go func() {
		defer close(flushed)
		ft, ferr = f.Flush(ctx)
	}()
	watchdog(t, "flush reaching the store", st.stalled)

	// A write into the blocks being published waits for the flush: started
	// now, it lands after it. A write past them goes on.
	inside := pattern(1<<10, 7)
	wrote := make(chan error, 1)
	go func() {
		_, err := f.WriteAt(ctx, inside, 0)
		wrote <- err
	}()
	past := pattern(1<<10, 9)
	pastDone := make(chan struct{})
	var perr error
	go func() {
		defer close(pastDone)
		_, perr = f.WriteAt(ctx, past, size)
	}()
	select {
	case <-pastDone:
	case <-time.After(30 * time.Second):
		close(st.release)
		<-flushed
		t.Fatal("a write past the end waited for the stalled flush (no answer in 30s)")
	}
	if perr != nil {
		t.Fatalf("write past the end during the flush: %v", perr)
	}

	read := make(chan struct{})
	var got []byte
	var rerr error
	go func() {
		defer close(read)
		got = make([]byte, size+len(past))
		_, rerr = f.ReadAt(ctx, got, 0)
	}()
	select {
	case <-read:
	case <-time.After(30 * time.Second):
		close(st.release)
		<-flushed
		t.Fatal("a read waited for the stalled flush (no answer in 30s)")
	}
	if rerr != nil {
		t.Fatalf("read during the flush: %v", rerr)
	}
	if !bytes.Equal(got, append(bytes.Clone(want), past...)) {
		t.Errorf("a read during the flush is not what was written")
	}
	select {
	case err := <-wrote:
		t.Fatalf("a write returned (%v) while the flush it waits for was stalled", err)
	default:
	}
	if s := f.Stat(); s.Cno != before.Cno {
		t.Errorf("during the flush: checkpoint %d, want %d (not published yet)", s.Cno, before.Cno)
	}

	close(st.release)
	watchdog(t, "flush after the store answers", flushed)
	if ferr != nil {
		t.Fatalf("flush: %v", ferr)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("write after the flush: %v", err)
	}
	if s := f.Stat(); !s.Dirty || s.Cno != ft.Cno {
		t.Errorf("after the flush: Dirty %v at %d; want dirty (the writes since) at %d", s.Dirty, s.Cno, ft.Cno)
	}
	// The checkpoint published holds what was written before the flush.
	g := mustOpen(t, base, "fu/", p)
	if g.Size() != size {
		t.Errorf("checkpoint %d: size %d, want %d (the writes came after it)", ft.Cno, g.Size(), size)
	}
	buf := make([]byte, size)
	if _, err := g.ReadAt(ctx, buf, 0); err != nil || !bytes.Equal(buf, want) {
		t.Errorf("checkpoint %d: read %v, bytes equal %v", ft.Cno, err, bytes.Equal(buf, want))
	}
	g.Close()

	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	g = mustOpen(t, base, "fu/", p)
	defer g.Close()
	copy(want, inside)
	want = append(want, past...)
	buf = make([]byte, len(want))
	if _, err := g.ReadAt(ctx, buf, 0); err != nil || !bytes.Equal(buf, want) {
		t.Errorf("the next checkpoint: read %v, bytes equal %v", err, bytes.Equal(buf, want))
	}
}

// An mtime set while a flush's requests are out (SetMtime takes mu, not a
// block) is not lost when the flush adopts its checkpoint: the file stays
// dirty and the next flush publishes it.
func TestFlushKeepsMtimeSetMeanwhile(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	st := newStallStore(base)
	p := flushUnlockedParams()
	f := mustCreate(t, st, "fm/", p)
	defer f.Close()
	if _, err := f.WriteAt(ctx, pattern(8<<10, 8), 0); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan struct{})
	var ferr error
	go func() {
		defer close(flushed)
		_, ferr = f.Flush(ctx)
	}()
	watchdog(t, "flush reaching the store", st.stalled)
	mtime := time.Unix(1_700_000_000, 0)
	set := make(chan error, 1)
	go func() { set <- f.SetMtime(ctx, mtime) }()
	select {
	case err := <-set:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		close(st.release)
		<-flushed
		t.Fatal("SetMtime waited for the stalled flush (no answer in 30s)")
	}
	close(st.release)
	watchdog(t, "flush after the store answers", flushed)
	if ferr != nil {
		t.Fatal(ferr)
	}
	if !f.Stat().Dirty {
		t.Errorf("after the flush: clean, want dirty (an mtime set during it)")
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	g := mustOpen(t, base, "fm/", p)
	defer g.Close()
	if s := g.Stat(); !s.Mtime.Equal(mtime) {
		t.Errorf("the next checkpoint's mtime %v, want %v (set during the flush before)", s.Mtime, mtime)
	}
}

// A flush that meets another writer's checkpoint while a write past its
// blocks went on merges onto it everything this writer did since its head,
// the write past the end too; the next flush publishes that write, and
// nothing is lost of either writer.
func TestFlushConflictWithWritePastEnd(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	st := newStallStore(base)
	p := flushUnlockedParams()
	const size = 32 << 10
	stored := storedFile(t, base, "fc/", p, size, 11)
	f := mustOpen(t, st, "fc/", p)
	defer f.Close()
	other := mustOpen(t, base, "fc/", p)
	ours, theirs, past := pattern(2<<10, 12), pattern(2<<10, 13), pattern(3<<10, 14)
	if _, err := f.WriteAt(ctx, ours, 2<<10); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan struct{})
	var ferr error
	go func() {
		defer close(flushed)
		_, ferr = f.Flush(ctx)
	}()
	watchdog(t, "flush reaching the store", st.stalled)
	// The other writer publishes first, at other blocks.
	if _, err := other.WriteAt(ctx, theirs, 20<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	other.Close()
	if _, err := f.WriteAt(ctx, past, size+1000); err != nil {
		t.Fatal(err)
	}
	close(st.release)
	watchdog(t, "flush after the store answers", flushed)
	if ferr != nil {
		t.Fatalf("flush: %v", ferr)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(stored)
	copy(want[2<<10:], ours)
	copy(want[20<<10:], theirs)
	want = append(want, make([]byte, 1000)...)
	want = append(want, past...)
	g := mustOpen(t, base, "fc/", p)
	defer g.Close()
	if g.Size() != int64(len(want)) {
		t.Fatalf("size %d, want %d", g.Size(), len(want))
	}
	buf := make([]byte, len(want))
	if _, err := g.ReadAt(ctx, buf, 0); err != nil || !bytes.Equal(buf, want) {
		t.Errorf("after the merge: read %v, bytes equal %v", err, bytes.Equal(buf, want))
	}
	if n := f.Losses(); n != 0 {
		t.Errorf("%d losses, want none", n)
	}
}

// Flushes one after another name consecutive checkpoints: a published
// attempt spends no number past its own.
func TestFlushCnosConsecutive(t *testing.T) {
	ctx := context.Background()
	f := mustCreate(t, mem.New(), "fn/", flushUnlockedParams())
	defer f.Close()
	var last uint64
	for i := range 4 {
		if _, err := f.WriteAt(ctx, pattern(600, uint64(i)), int64(i)*600); err != nil {
			t.Fatal(err)
		}
		ft, err := f.Flush(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && ft.Cno != last+1 {
			t.Errorf("flush %d made checkpoint %d, want %d", i, ft.Cno, last+1)
		}
		last = ft.Cno
	}
}

// While a flush plans (packs its blocks into the map and commits it)
// without mu, a write past its blocks and a read answer, and a write into
// them waits for it. The checkpoint is the file as the flush took it; the
// write past it, near the end or far past it (a sparse file grown during
// the flush), stays dirty for the next one.
func TestFlushPlansWithoutMu(t *testing.T) {
	for _, tc := range []struct {
		name string
		gap  int64 // from the end to the write past it
	}{
		{"write at the end", 0},
		{"write far past the end", 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			base := mem.New()
			p := flushUnlockedParams()
			const size = 32 << 10
			stored := storedFile(t, base, "fp/", p, size, 15)
			f := mustOpen(t, base, "fp/", p)
			defer f.Close()
			first, inside, past := pattern(4<<10, 16), pattern(4<<10, 17), pattern(1<<10, 18)
			if _, err := f.WriteAt(ctx, first, 4<<10); err != nil {
				t.Fatal(err)
			}
			wrote := make(chan error, 1)
			var once bool
			f.planHook = func() {
				if once {
					return
				}
				once = true
				// A write into the blocks the flush publishes waits for it...
				go func() {
					_, err := f.WriteAt(ctx, inside, 4<<10)
					wrote <- err
				}()
				waitFor(t, func() bool {
					f.ranges.mu.Lock()
					defer f.ranges.mu.Unlock()
					return len(f.ranges.waiting) > 0
				})
				// ...one past them, and a read, go on.
				if _, err := f.WriteAt(ctx, past, size+tc.gap); err != nil {
					t.Error(err)
				}
				got := make([]byte, 8<<10)
				if _, err := f.ReadAt(ctx, got, 0); err != nil {
					t.Error(err)
				} else if want := append(bytes.Clone(stored[:4<<10]), first...); !bytes.Equal(got, want) {
					t.Error("a read while the flush plans is not what was written before it")
				}
				if err := f.checkInvariants(); err != nil {
					t.Error(err)
				}
			}
			ft, err := f.Flush(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !once {
				t.Fatal("the flush did not plan")
			}
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
			if err := f.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			if s := f.Stat(); !s.Dirty || s.Cno != ft.Cno {
				t.Errorf("after the flush: Dirty %v at %d; want dirty (the writes since) at %d", s.Dirty, s.Cno, ft.Cno)
			}
			want := bytes.Clone(stored)
			copy(want[4<<10:], first)
			g := mustOpen(t, base, "fp/", p)
			buf := make([]byte, size)
			if g.Size() != size {
				t.Errorf("checkpoint %d: size %d, want %d (the write past the end came after the flush took the file)", ft.Cno, g.Size(), size)
			} else if _, err := g.ReadAt(ctx, buf, 0); err != nil || !bytes.Equal(buf, want) {
				t.Errorf("checkpoint %d: read %v, bytes equal %v", ft.Cno, err, bytes.Equal(buf, want))
			}
			g.Close()

			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			copy(want[4<<10:], inside)
			want = append(want, make([]byte, min(tc.gap, 1<<10))...)
			g = mustOpen(t, base, "fp/", p)
			defer g.Close()
			if g.Size() != size+tc.gap+int64(len(past)) {
				t.Fatalf("the next checkpoint: size %d, want %d", g.Size(), size+tc.gap+int64(len(past)))
			}
			buf = make([]byte, len(want))
			if _, err := g.ReadAt(ctx, buf, 0); err != nil || !bytes.Equal(buf, want) {
				t.Errorf("the next checkpoint: read %v, bytes equal %v", err, bytes.Equal(buf, want))
			}
			buf = make([]byte, len(past))
			if _, err := g.ReadAt(ctx, buf, size+tc.gap); err != nil || !bytes.Equal(buf, past) {
				t.Errorf("the next checkpoint, the write past the end: read %v, bytes equal %v", err, bytes.Equal(buf, past))
			}
		})
	}
}

// A flush of more dirty blocks than it takes in one hold of mu (it takes
// them in slices) while a writer keeps writing past them: every checkpoint
// holds what was written before its flush began, and nothing written during
// a flush is lost.
func TestFlushSlicesWithWritesPast(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	p := flushUnlockedParams()
	p.DirtyLimit = 64 << 20
	p.MaxObjectBytes = 1 << 20
	bs := int64(p.DataBlockSize)
	size := 3 * dirtySlice * bs
	f := mustCreate(t, base, "fw/", p)
	defer f.Close()
	want := pattern(int(size), 19)
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		var flushed FlushTiming
		var ferr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			flushed, ferr = f.Flush(ctx)
		}()
		// Writes past the end until the flush returns.
		before := f.Size()
		for i := uint64(0); ; i++ {
			select {
			case <-done:
			default:
				b := pattern(int(bs)+100, uint64(round)*1000+i)
				if _, err := f.WriteAt(ctx, b, f.Size()); err != nil {
					t.Fatal(err)
				}
				want = append(want, b...)
				continue
			}
			break
		}
		if ferr != nil {
			t.Fatal(ferr)
		}
		if err := f.checkInvariants(); err != nil {
			t.Fatal(err)
		}
		g := mustOpen(t, base, "fw/", p)
		if g.Size() < before || g.Size() > int64(len(want)) {
			t.Fatalf("round %d: checkpoint %d of %d bytes, want from %d to %d", round, flushed.Cno, g.Size(), before, len(want))
		}
		got := make([]byte, g.Size())
		if _, err := g.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want[:len(got)]) {
			t.Fatalf("round %d: checkpoint %d: read %v, bytes equal %v", round, flushed.Cno, err, bytes.Equal(got, want[:len(got)]))
		}
		g.Close()
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	g := mustOpen(t, base, "fw/", p)
	defer g.Close()
	got := make([]byte, len(want))
	if _, err := g.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want) || g.Size() != int64(len(want)) {
		t.Fatalf("the last checkpoint: size %d of %d, read %v, bytes equal %v", g.Size(), len(want), err, bytes.Equal(got, want))
	}
}

// Writes past the end between the slices in which a flush walks its dirty
// blocks (when it counts them, and when it takes them), enough to make the
// map of dirty blocks grow under the walk: the flush publishes exactly the
// blocks dirty when it took them, and the blocks written meanwhile stay
// dirty, all of them, for the next checkpoint.
func TestFlushWalkWithWritesBetweenSlices(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	p := flushUnlockedParams()
	p.DirtyLimit = 64 << 20
	p.MaxObjectBytes = 1 << 20
	bs := int64(p.DataBlockSize)
	size := 2*dirtySlice*bs + 100
	f := mustCreate(t, base, "fs/", p)
	defer f.Close()
	want := pattern(int(size), 20)
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	var counted, took bool
	var taken int64 // the size when the flush took the file
	f.sliceHook = func() {
		// The flush counts its dirty blocks before it holds them, and
		// takes them with its gate set (the hook runs on its goroutine).
		switch {
		case f.gate == nil && !counted:
			counted = true
		case f.gate != nil && !took:
			took, taken = true, f.Size()
		default:
			return
		}
		// As many blocks again as there are dirty: the map grows. The
		// write begins at a block past the end: the last block is the
		// flush's once it holds its blocks.
		want = append(want, make([]byte, (int64(len(want))+bs-1)/bs*bs-int64(len(want)))...)
		more := pattern(len(want), uint64(len(want)))
		if _, err := f.WriteAt(ctx, more, int64(len(want))); err != nil {
			t.Error(err)
		}
		want = append(want, more...)
	}
	ft, err := f.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.sliceHook = nil
	if !counted || !took {
		t.Fatalf("the flush walked its dirty blocks in slices: counting %v, taking %v; want both", counted, took)
	}
	if err := f.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if s, n := f.Stat(), (int64(len(want))-taken+bs-1)/bs; s.DirtyBytes != n*bs {
		t.Errorf("after the flush: %d dirty bytes, want %d (the %d blocks written while it took the file)", s.DirtyBytes, n*bs, n)
	}
	g := mustOpen(t, base, "fs/", p)
	got := make([]byte, g.Size())
	if g.Size() != taken {
		t.Errorf("checkpoint %d: size %d, want %d", ft.Cno, g.Size(), taken)
	} else if _, err := g.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want[:taken]) {
		t.Errorf("checkpoint %d: read %v, bytes equal %v", ft.Cno, err, bytes.Equal(got, want[:taken]))
	}
	g.Close()
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	g = mustOpen(t, base, "fs/", p)
	defer g.Close()
	got = make([]byte, len(want))
	if _, err := g.ReadAt(ctx, got, 0); err != nil || g.Size() != int64(len(want)) || !bytes.Equal(got, want) {
		t.Fatalf("the next checkpoint: size %d of %d, read %v, bytes equal %v", g.Size(), len(want), err, bytes.Equal(got, want))
	}
}

// A write held by a Flush's gate (the flush is about to take what it
// publishes, or backs off) ends when its context does — the kernel's
// interrupt of a dying caller — with nothing written, rather than waiting
// for the flush however long its store takes. Before, it waited on the gate
// alone.
func TestWriteWaitingForFlushGateInterrupted(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	p := flushUnlockedParams()
	const size = 32 << 10
	stored := storedFile(t, base, "fg/", p, size, 5)
	f := mustOpen(t, base, "fg/", p)
	defer f.Close()

	f.mu.Lock()
	g := f.openGateLocked(false, 0) // a gate that holds every write
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		_, werr = f.WriteAt(wctx, pattern(1<<10, 7), 0)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		f.closeGate(g) // let the write go, so that the file closes
		f.mu.Unlock()
		<-done
		t.Fatal("a write held by the gate still waited 30s after its context ended")
	}
	f.closeGate(g)
	f.mu.Unlock()
	if !errors.Is(werr, context.Canceled) {
		t.Fatalf("write held by the gate, its context cancelled: %v; want context.Canceled", werr)
	}
	if f.Stat().Dirty {
		t.Fatal("the interrupted write left the file dirty")
	}
	got := make([]byte, size)
	if _, err := f.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, stored) {
		t.Fatalf("after the interrupted write: read %v, bytes as stored %v", err, bytes.Equal(got, stored))
	}
	if _, err := f.WriteAt(ctx, pattern(1<<10, 8), 0); err != nil {
		t.Fatalf("a write once the gate is lifted: %v", err)
	}
}
