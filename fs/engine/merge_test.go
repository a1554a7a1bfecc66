package engine

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// mergeOp is one change of a two-writer test: a write of n bytes of val at
// off, a truncate to off (trunc), a zeroed range of n bytes at off, or an
// append of n bytes of val (app).
type mergeOp struct {
	trunc, zero, app bool
	off, n           int64
	val              byte
}

func wr(off, n int64, val byte) mergeOp { return mergeOp{off: off, n: n, val: val} }
func tr(size int64) mergeOp             { return mergeOp{trunc: true, off: size} }
func zr(off, n int64) mergeOp           { return mergeOp{zero: true, off: off, n: n} }
func ap(n int64, val byte) mergeOp      { return mergeOp{app: true, n: n, val: val} }

// apply applies op to a model of the file's bytes.
func (op mergeOp) apply(b []byte) []byte {
	switch {
	case op.trunc:
		if op.off <= int64(len(b)) {
			return b[:op.off]
		}
		return append(b, make([]byte, op.off-int64(len(b)))...)
	case op.zero:
		for i := op.off; i < op.off+op.n && i < int64(len(b)); i++ {
			b[i] = 0
		}
		return b
	case op.app:
		return append(b, bytes.Repeat([]byte{op.val}, int(op.n))...)
	}
	if end := op.off + op.n; end > int64(len(b)) {
		b = append(b, make([]byte, end-int64(len(b)))...)
	}
	for i := op.off; i < op.off+op.n; i++ {
		b[i] = op.val
	}
	return b
}

// do applies op to f.
func (op mergeOp) do(ctx context.Context, f *File) error {
	switch {
	case op.trunc:
		return f.Truncate(ctx, op.off)
	case op.zero:
		return f.Zero(ctx, op.off, op.n)
	case op.app:
		_, _, err := f.Append(ctx, bytes.Repeat([]byte{op.val}, int(op.n)))
		return err
	}
	_, err := f.WriteAt(ctx, bytes.Repeat([]byte{op.val}, int(op.n)), op.off)
	return err
}

// storeDirty moves every dirty block into objects (a partial
// segment), as the dirty-data limit does.
func storeDirty(t *testing.T, f *File) {
	t.Helper()
	f.mu.Lock()
	err := f.writePartialLocked(context.Background())
	f.mu.Unlock()
	if err != nil {
		t.Fatalf("partial segment: %v", err)
	}
}

// TestMergeIsSerial: a flush that meets another writer's checkpoint
// publishes what the serial order "their checkpoint, then this writer's
// changes in order" gives, byte for byte, whether this writer's blocks are
// still dirty, stored in partial segments after each change, or sent ahead.
func TestMergeIsSerial(t *testing.T) {
	const bs = 512
	base := int64(6*bs + 100) // 6 blocks and a part of one, all 'X'
	cases := []struct {
		name         string
		theirs, ours []mergeOp
	}{
		{"they truncate to 0, we write the head of a block", []mergeOp{tr(0)}, []mergeOp{wr(0, 300, 'a')}},
		{"they truncate to 0, we write across blocks", []mergeOp{tr(0)}, []mergeOp{wr(100, 3*bs, 'a')}},
		{"they append, we write in the middle", []mergeOp{wr(base, 4*bs, 'b')}, []mergeOp{wr(2*bs+10, 50, 'a')}},
		{"both write parts of one block", []mergeOp{wr(3*bs+200, 100, 'b')}, []mergeOp{wr(3*bs+10, 50, 'a')}},
		{"they truncate inside a block, we write before the cut", []mergeOp{tr(2*bs + 300)}, []mergeOp{wr(2*bs+10, 50, 'a')}},
		{"they truncate, we write past their end", []mergeOp{tr(bs + 7)}, []mergeOp{wr(4*bs+3, 20, 'a')}},
		{"they append, we truncate inside a block and write after", []mergeOp{wr(base, 3*bs, 'b')}, []mergeOp{tr(2*bs + 100), wr(3*bs, 40, 'a')}},
		{"they append, we truncate to our size", []mergeOp{wr(base, 3*bs, 'b')}, []mergeOp{tr(base), wr(10, 10, 'a')}},
		{"they append, we truncate up", []mergeOp{wr(base, 3*bs, 'b')}, []mergeOp{tr(base + bs), wr(10, 10, 'a')}},
		{"they write, we truncate down then up", []mergeOp{wr(bs, 2*bs, 'b')}, []mergeOp{tr(bs + 50), tr(4 * bs)}},
		{"they truncate and write, we write whole and part blocks", []mergeOp{tr(0), wr(0, 2*bs+30, 'b')}, []mergeOp{wr(bs-20, 2*bs+40, 'a')}},
		{"they write, we write, truncate and write again", []mergeOp{wr(0, base, 'b')}, []mergeOp{wr(bs+1, 2*bs, 'a'), tr(2 * bs), wr(bs+100, 10, 'c')}},
		{"they write, we zero part of a block", []mergeOp{wr(0, base, 'b')}, []mergeOp{zr(bs+10, 100), zr(3*bs, bs)}},
		{"both append", []mergeOp{ap(8, 'b')}, []mergeOp{ap(8, 'a')}},
		{"both append, ours in pieces across blocks", []mergeOp{ap(bs+30, 'b')}, []mergeOp{ap(100, 'a'), ap(2*bs, 'c'), ap(7, 'd')}},
		{"they append whole blocks, we append", []mergeOp{ap(3*bs-100, 'b')}, []mergeOp{ap(2*bs+5, 'a')}},
		{"they truncate inside a block, we append", []mergeOp{tr(2*bs + 300)}, []mergeOp{ap(bs+20, 'a')}},
		{"they truncate to 0, we append", []mergeOp{tr(0)}, []mergeOp{ap(3*bs, 'a')}},
		{"they truncate, we write then append", []mergeOp{tr(bs + 7)}, []mergeOp{wr(10, 20, 'a'), ap(bs, 'c')}},
		{"they truncate below our write, we write past it then append", []mergeOp{tr(bs + 7)}, []mergeOp{wr(3*bs, 20, 'a'), ap(bs, 'c')}},
		{"they append, we zero a block then append", []mergeOp{ap(2*bs, 'b')}, []mergeOp{zr(bs, bs), ap(bs+1, 'a')}},
		{"they truncate, we zero a block then append over it", []mergeOp{tr(bs)}, []mergeOp{zr(2*bs, bs), ap(3*bs, 'a')}},
		{"they append, we truncate then append", []mergeOp{ap(bs, 'b')}, []mergeOp{tr(bs + 10), ap(20, 'a')}},
	}
	variants := []struct {
		name  string
		p     func() Params
		store bool
	}{
		{"dirty", func() Params { return smallParams(segment.FormatStream) }, false},
		{"stored", func() Params { return smallParams(segment.FormatStream) }, true},
		{"sent-ahead", func() Params {
			p := sendWholeParams()
			p.StreamSegmentBytes = 2 * bs
			return p
		}, false},
	}
	for _, c := range cases {
		for _, v := range variants {
			t.Run(c.name+"/"+v.name, func(t *testing.T) {
				ctx := context.Background()
				st := mem.New()
				p := v.p()
				p.ConflictPolicy = ConflictRetry
				model := bytes.Repeat([]byte{'X'}, int(base))
				w := mustCreate(t, st, "m/", p)
				writeFlush(t, w, model, 0)
				w.Close()
				a := mustOpen(t, st, "m/", p) // this writer
				b := mustOpen(t, st, "m/", p) // the winner
				defer a.Close()
				defer b.Close()
				for _, op := range c.theirs {
					if err := op.do(ctx, b); err != nil {
						t.Fatal(err)
					}
					model = op.apply(model)
				}
				if _, err := b.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				for _, op := range c.ours {
					if err := op.do(ctx, a); err != nil {
						t.Fatal(err)
					}
					model = op.apply(model)
					if v.store {
						storeDirty(t, a)
					}
				}
				ft, err := a.Flush(ctx)
				if err != nil {
					t.Fatalf("flush: %v", err)
				}
				if ft.Attempts < 2 {
					t.Fatalf("the flush met no conflict (%d attempts)", ft.Attempts)
				}
				mustEqual(t, "this writer after the merge", readAll(t, a), model)
				mustEqual(t, "a fresh open", readAll(t, mustOpen(t, st, "m/", p)), model)
				mustEqual(t, "the winner, reopened", readAll(t, mustOpen(t, st, "m/", p)), model)
			})
		}
	}
}

// TestMergeZeroPastEnd: a writer that zeroed a range past its own end
// (fallocate PUNCH_HOLE or ZERO_RANGE with KEEP_SIZE) merges onto a winner
// with bytes there as zeroing after it would: the winner's bytes in the
// range are zeros, this writer's later writes there are laid over, and the
// rest is the winner's.
func TestMergeZeroPastEnd(t *testing.T) {
	ctx := context.Background()
	st, p, a, b := twoOnThousand(t)
	theirs := writeFlushed(t, b, 1000, 9000, 'b') // several blocks past a's end
	mine := []mergeOp{wr(0, 1, 'a'), zr(900, 5100), wr(3000, 100, 'c'), zr(7500, 20)}
	for _, op := range mine {
		if err := op.do(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	want := theirs
	for _, op := range mine {
		want = op.apply(want)
	}
	mustEqual(t, "this writer after the merge", readAll(t, a), want)
	mustEqual(t, "a fresh open", readAll(t, mustOpen(t, st, "z/", p)), want)
	if a.Losses() != 0 {
		t.Fatalf("%d changes counted as lost", a.Losses())
	}
}

// twoOnThousand opens two writers, a and b, on a file "z/" of 1,000 × 'X'.
func twoOnThousand(t *testing.T) (*mem.Store, Params, *File, *File) {
	t.Helper()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	w := mustCreate(t, st, "z/", p)
	writeFlush(t, w, bytes.Repeat([]byte{'X'}, 1000), 0)
	w.Close()
	return st, p, mustOpen(t, st, "z/", p), mustOpen(t, st, "z/", p)
}

// writeFlushed writes n bytes of val at off through f, publishes them and
// returns what f then holds.
func writeFlushed(t *testing.T, f *File, off, n int64, val byte) []byte {
	t.Helper()
	writeFlush(t, f, bytes.Repeat([]byte{val}, int(n)), off)
	return readAll(t, f)
}

// TestMergeZeroPastEndTooManyGivesWay: past maxZeroAfter disjoint ranges
// zeroed past its end, a writer keeps only the lowest offset they reached
// and cannot merge onto a winner with bytes there; its flush fails and it
// reads the winner.
func TestMergeZeroPastEndTooManyGivesWay(t *testing.T) {
	ctx := context.Background()
	_, _, a, b := twoOnThousand(t)
	want := writeFlushed(t, b, 1000, 2000, 'b')
	if _, err := a.WriteAt(ctx, []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	for i := range int64(maxZeroAfter + 1) {
		if err := a.Zero(ctx, 1000+i*50, 10); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Flush(ctx); err == nil {
		t.Fatalf("flush merged %d ranges zeroed past the writer's end", maxZeroAfter+1)
	}
	mustEqual(t, "after giving way", readAll(t, a), want)
	if a.Losses() == 0 {
		t.Fatalf("dropped changes not counted as lost")
	}
}

// TestSetBytes: the record of bytes set in one block, spans and past
// maxSetSpans a bitmap, against a plain array, through adds and cuts.
func TestSetBytes(t *testing.T) {
	const bs = 512
	r := rand.New(rand.NewPCG(modelSeed(t), 3))
	bitmaps := 0
	for run := 0; run < 200; run++ {
		s := &setBytes{}
		var want [bs]bool
		for k := 0; k < 60; k++ {
			if r.IntN(8) == 0 {
				from := r.IntN(bs)
				s.cut(from)
				for i := from; i < bs; i++ {
					want[i] = false
				}
			} else {
				lo := r.IntN(bs)
				hi := lo + 1 + r.IntN(min(bs-lo, 1+r.IntN(40)))
				s.add(lo, hi, bs)
				for i := lo; i < hi; i++ {
					want[i] = true
				}
			}
			var got [bs]bool
			prev := -1
			s.each(bs, func(lo, hi int) {
				if lo <= prev || lo >= hi || hi > bs {
					t.Fatalf("run %d: span [%d, %d) after one ending at %d", run, lo, hi, prev)
				}
				prev = hi
				for i := lo; i < hi; i++ {
					got[i] = true
				}
			})
			if got != want {
				t.Fatalf("run %d step %d: record differs from the bytes set", run, k)
			}
			if s.bits == nil && len(s.spans) > maxSetSpans {
				t.Fatalf("run %d: %d spans kept, the bound is %d", run, len(s.spans), maxSetSpans)
			}
			empty := true
			for _, b := range want {
				empty = empty && !b
			}
			if s.empty() != empty {
				t.Fatalf("run %d: empty() = %v", run, s.empty())
			}
		}
		if s.bits != nil {
			bitmaps++
		}
	}
	if bitmaps == 0 {
		t.Fatalf("no record became a bitmap")
	}
}

// TestMergeAfterAcknowledgedSameSizeTruncate: a truncate to the size the
// file has changes nothing, and a flush after it finds nothing to publish;
// it returns all the same, so the truncate is acknowledged. Another
// writer's checkpoint after that is not cut by it: a merge of this
// writer's next change replays only what came after the flush. (The
// crash-and-fault campaign: an O_CREAT file truncated to 0 and fsynced,
// written through the other mount, then written and fsynced here, lost the
// other mount's bytes.)
func TestMergeAfterAcknowledgedSameSizeTruncate(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int64{0, 1000} {
		st := mem.New()
		p := smallParams(segment.FormatStream)
		w := mustCreate(t, st, "t/", p)
		if size > 0 {
			writeFlush(t, w, bytes.Repeat([]byte{'X'}, int(size)), 0)
		}
		w.Close()
		a := mustOpen(t, st, "t/", p)
		b := mustOpen(t, st, "t/", p)
		if err := a.Truncate(ctx, size); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// The other writer, after that flush returned.
		writeFlush(t, b, bytes.Repeat([]byte{'b'}, 3000), size)
		if _, err := a.WriteAt(ctx, []byte("aa"), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Flush(ctx); err != nil {
			t.Fatalf("size %d: flush: %v", size, err)
		}
		want := append(bytes.Repeat([]byte{'X'}, int(size)), bytes.Repeat([]byte{'b'}, 3000)...)
		copy(want, "aa")
		mustEqual(t, "after the merge", readAll(t, a), want)
		c := mustOpen(t, st, "t/", p)
		mustEqual(t, "read afresh", readAll(t, c), want)
	}
}

// TestMergeAppendsAgain: a writer that appends, merges onto another's
// appends, and appends again after its checkpoint merges again as the
// first time: each of its appends lands past the other's published before
// its flush, and its size (Stat) is the merged file's after each.
func TestMergeAppendsAgain(t *testing.T) {
	ctx := context.Background()
	st, p, a, b := twoOnThousand(t)
	defer a.Close()
	defer b.Close()
	want := bytes.Repeat([]byte{'X'}, 1000)
	for i, n := range []int64{8, 700} {
		ours, theirs := ap(n, byte('a'+i)), ap(n+3, byte('c'+i))
		if err := ours.do(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := theirs.do(ctx, b); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		want = ours.apply(theirs.apply(want))
		ft, err := a.Flush(ctx)
		if err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
		if ft.Attempts < 2 {
			t.Fatalf("flush %d met no conflict", i)
		}
		if got := a.Stat().Size; got != int64(len(want)) {
			t.Fatalf("after merge %d this writer's size is %d, want %d", i, got, len(want))
		}
		mustEqual(t, "this writer after the merge", readAll(t, a), want)
		if _, err := b.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mustEqual(t, "a fresh open", readAll(t, mustOpen(t, st, "z/", p)), want)
}
