package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// TestZeroRange: ZeroRange zeroes its range, keeps the size or grows it to
// the range's end, and the whole blocks it covers leave the map: the next
// checkpoint stores fewer blocks.
func TestZeroRange(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	bs := int64(p.DataBlockSize)
	f := mustCreate(t, st, "z/", p)
	defer f.Close()
	want := pattern(int(20*bs), 4)
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := f.Stat(); s.Blocks != 20 || !s.BlocksKnown {
		t.Fatalf("stored blocks %d (known %v), want 20", s.Blocks, s.BlocksKnown)
	}
	steps := []struct {
		off, n int64
		keep   bool
	}{
		{bs + 100, 4 * bs, true},         // blocks 2..4 whole, edges in 1 and 5
		{10 * bs, 2 * bs, false},         // inside: the size stays
		{20*bs - 50, 3 * bs, true},       // past the end, kept: zeroes the last 50 bytes only
		{20*bs - 10, 2*bs + 7, false},    // past the end: grows to 22 blocks and 7 bytes
		{30 * bs, 0, false},              // nothing, the size stays
		{30 * bs, bs, true},              // past the end, kept: nothing
		{0, 0, true},                     // nothing
		{22*bs + 7, 3*bs + 1, false},     // from the end: a hole of 3 blocks and a byte
		{int64(len(want)) - 1, 1, false}, // the last byte
	}
	for _, s := range steps {
		if err := f.ZeroRange(ctx, s.off, s.n, s.keep); err != nil {
			t.Fatalf("ZeroRange(%d, %d, %v): %v", s.off, s.n, s.keep, err)
		}
		end := s.off + s.n
		if !s.keep && end > int64(len(want)) {
			want = append(want, make([]byte, end-int64(len(want)))...)
		}
		clear(want[min(s.off, int64(len(want))):min(end, int64(len(want)))])
		if got := readAll(t, f); !bytes.Equal(got, want) {
			t.Fatalf("after ZeroRange(%d, %d, %v): %d bytes, want %d (equal prefix %d)", s.off, s.n, s.keep, len(got), len(want), commonPrefix(got, want))
		}
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Blocks 2, 3, 4, 10 and 11 are holes now; 20 and past never held data.
	if s := f.Stat(); s.Blocks != 15 || !s.BlocksKnown {
		t.Fatalf("stored blocks after the punches %d (known %v), want 15", s.Blocks, s.BlocksKnown)
	}
	g := mustOpen(t, st, "z/", p)
	defer g.Close()
	if got := readAll(t, g); !bytes.Equal(got, want) {
		t.Fatalf("reopened: %d bytes, want %d (equal prefix %d)", len(got), len(want), commonPrefix(got, want))
	}
	if s := g.Stat(); s.Blocks != 15 {
		t.Fatalf("reopened: stored blocks %d, want 15", s.Blocks)
	}
	if err := f.ZeroRange(ctx, -1, 10, true); err == nil {
		t.Fatal("ZeroRange at -1 succeeded")
	}
	if err := f.ZeroRange(ctx, MaxFileSize-5, 10, false); err == nil {
		t.Fatal("ZeroRange past MaxFileSize succeeded")
	}
}

// TestWALZeroRange: a zeroed range that grows the file is one WAL record
// (the zero and the new size together), replayed after a crash.
func TestWALZeroRange(t *testing.T) {
	ctx := context.Background()
	for _, fm := range []segment.Format{segment.FormatStream, segment.FormatParted} {
		t.Run(fm.String(), func(t *testing.T) {
			st := mem.New()
			o := Options{Params: walParams(fm), FileID: "a/"}
			bs := int64(o.Params.DataBlockSize)
			f, err := Create(ctx, st, "a/", o)
			if err != nil {
				t.Fatal(err)
			}
			want := pattern(int(12*bs), 5)
			if _, err := f.WriteAt(ctx, want, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			waitPublished(f)
			before, err := walList(st, "a/")
			if err != nil {
				t.Fatal(err)
			}
			if err := f.ZeroRange(ctx, 2*bs+3, 3*bs, true); err != nil {
				t.Fatal(err)
			}
			if err := f.ZeroRange(ctx, 11*bs, 4*bs+9, false); err != nil {
				t.Fatal(err)
			}
			after, err := walList(st, "a/")
			if err != nil {
				t.Fatal(err)
			}
			// Records the publish covers are deleted in the background:
			// count those after the last one before.
			if n := len(newRecords(before, after)); n != 2 {
				t.Fatalf("%d WAL records for two zeroed ranges, want 2 (%v, then %v)", n, before, after)
			}
			clear(want[2*bs+3 : 5*bs+3])
			clear(want[11*bs:])
			want = append(want, make([]byte, 3*bs+9)...)
			crash(t, f)

			g, err := Open(ctx, st, "a/", o)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer g.Close()
			if got := readAll(t, g); !bytes.Equal(got, want) {
				t.Fatalf("after the crash: %d bytes, want %d (equal prefix %d)", len(got), len(want), commonPrefix(got, want))
			}
			// Replayed and published: blocks 3, 4 and 11 are holes.
			if s := g.Stat(); s.Dirty || s.Blocks != 9 {
				t.Fatalf("after replay: dirty %v, %d blocks stored, want clean and 9", s.Dirty, s.Blocks)
			}
		})
	}
}

// newRecords is the records of after numbered past every one of before.
func newRecords(before, after []uint64) []uint64 {
	var last uint64
	for _, s := range before {
		last = max(last, s)
	}
	var out []uint64
	for _, s := range after {
		if s > last {
			out = append(out, s)
		}
	}
	return out
}

// TestWALZeroRangeOneRecord: the two changes of a zeroed range that grows
// the file decode from one record.
func TestWALZeroRangeOneRecord(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "a/"}
	f, err := Create(ctx, st, "a/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(ctx, []byte("0123456789"), 0); err != nil {
		t.Fatal(err)
	}
	seqs, err := walList(st, "a/")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ZeroRange(ctx, 5, 100, false); err != nil {
		t.Fatal(err)
	}
	after, err := walList(st, "a/")
	if fresh := newRecords(seqs, after); err != nil || len(fresh) != 1 {
		t.Fatalf("records %v then %v (%v), want one more", seqs, after, err)
	}
	seq := after[len(after)-1]
	key := wal.RecordKey("a/", seq)
	b, _, err := st.Get(ctx, key, staging.Whole())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := wal.Decode(key, seq, f.tag, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Ops) != 2 || rec.Ops[0].Kind != wal.OpTruncate || rec.Ops[0].Off != 105 ||
		rec.Ops[1].Kind != wal.OpZero || rec.Ops[1].Off != 5 || rec.Ops[1].Len != 100 {
		t.Fatalf("record ops %+v, want a truncate to 105 then a zero of [5, 105)", rec.Ops)
	}
}

// TestZeroRangeMerge: under ConflictRetry a punch is replayed onto another
// writer's newer checkpoint like a write of zeros: the later writer wins
// block by block, the other writer's blocks elsewhere stay.
func TestZeroRangeMerge(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	p.ConflictPolicy = ConflictRetry
	bs := int64(p.DataBlockSize)
	a := mustCreate(t, st, "m/", p)
	defer a.Close()
	base := pattern(int(16*bs), 6)
	if _, err := a.WriteAt(ctx, base, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustOpen(t, st, "m/", p)
	defer b.Close()
	// b writes blocks 0 and 4 (inside a's punch, which comes later and wins
	// there) and publishes first.
	db := pattern(int(bs), 7)
	for _, off := range []int64{0, 4 * bs} {
		if _, err := b.WriteAt(ctx, db, off); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// a punches [3 blocks and 100 bytes, 6 blocks and 100 bytes): blocks 4
	// and 5 whole, the edges of 3 and 6 zeroed in place.
	if err := a.ZeroRange(ctx, 3*bs+100, 3*bs, true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatalf("flush over the other writer's checkpoint: %v", err)
	}
	want := append([]byte(nil), base...)
	copy(want[0:], db)
	clear(want[3*bs+100 : 6*bs+100])
	c := mustOpen(t, st, "m/", p)
	defer c.Close()
	if got := readAll(t, c); !bytes.Equal(got, want) {
		t.Fatalf("merged: %d bytes, want %d (equal prefix %d)", len(got), len(want), commonPrefix(got, want))
	}
	if s := c.Stat(); s.Blocks != 14 {
		t.Fatalf("merged: %d blocks stored, want 14", s.Blocks)
	}
}

// TestZeroRangeGrowingMerge: a zeroed range that grows the file past its
// end, where another writer wrote meanwhile, merges as zeros written there
// (the later writer wins), not as a rollback.
func TestZeroRangeGrowingMerge(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	p.ConflictPolicy = ConflictRetry
	bs := int64(p.DataBlockSize)
	a := mustCreate(t, st, "g/", p)
	defer a.Close()
	base := pattern(int(16*bs), 8)
	if _, err := a.WriteAt(ctx, base, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustOpen(t, st, "g/", p)
	defer b.Close()
	more := pattern(int(4*bs), 9)
	if _, err := b.WriteAt(ctx, more, 16*bs); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.ZeroRange(ctx, 15*bs+100, 4*bs, false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatalf("flush over the other writer's longer checkpoint: %v", err)
	}
	want := append(append([]byte(nil), base...), more...)
	clear(want[15*bs+100 : 19*bs+100])
	c := mustOpen(t, st, "g/", p)
	defer c.Close()
	if got := readAll(t, c); !bytes.Equal(got, want) {
		t.Fatalf("merged: %d bytes, want %d (equal prefix %d)", len(got), len(want), commonPrefix(got, want))
	}
}

// TestExtendMerge: fallocate's mode 0 grows and never cuts: extending over
// another writer's longer checkpoint keeps all of its bytes, and extending
// past it gives the longer size, as "theirs, then our extend" does.
func TestExtendMerge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extend int64 // blocks
	}{{"inside theirs", 18}, {"past theirs", 24}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			p := smallParams(segment.FormatStream)
			p.ConflictPolicy = ConflictRetry
			bs := int64(p.DataBlockSize)
			a := mustCreate(t, st, "g/", p)
			defer a.Close()
			base := pattern(int(16*bs), 8)
			if _, err := a.WriteAt(ctx, base, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			b := mustOpen(t, st, "g/", p)
			defer b.Close()
			more := pattern(int(4*bs), 9)
			if _, err := b.WriteAt(ctx, more, 16*bs); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.Extend(ctx, tc.extend*bs); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Flush(ctx); err != nil {
				t.Fatalf("flush over the other writer's longer checkpoint: %v", err)
			}
			want := append(append([]byte(nil), base...), more...)
			if n := tc.extend * bs; n > int64(len(want)) {
				want = append(want, make([]byte, n-int64(len(want)))...)
			}
			c := mustOpen(t, st, "g/", p)
			defer c.Close()
			if got := readAll(t, c); !bytes.Equal(got, want) {
				t.Fatalf("merged: %d bytes, want %d (equal prefix %d)", len(got), len(want), commonPrefix(got, want))
			}
		})
	}
}
