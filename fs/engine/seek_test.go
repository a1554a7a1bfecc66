package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func TestSeekDataHole(t *testing.T) {
	p := smallParams(segment.FormatStream) // 512-byte blocks
	bs := int64(p.DataBlockSize)
	type step struct {
		kind string // "w" write, "z" zero, "t" truncate, "f" flush
		off  int64
		n    int64
	}
	type seek struct {
		off  int64
		data int64 // -1: ErrNoData
		hole int64 // -1: ErrNoData
	}
	cases := []struct {
		name  string
		steps []step
		seeks []seek
	}{
		{"all hole", []step{{"t", 10 * bs, 0}}, []seek{
			{0, -1, 0}, {5*bs + 3, -1, 5*bs + 3}, {10 * bs, -1, -1}, {20 * bs, -1, -1},
		}},
		{"hole at start and end, flushed", []step{{"t", 10 * bs, 0}, {"w", 3 * bs, 2 * bs}, {"f", 0, 0}}, []seek{
			{0, 3 * bs, 0}, {3*bs + 7, 3*bs + 7, 5 * bs}, {4 * bs, 4 * bs, 5 * bs}, {5 * bs, -1, 5 * bs}, {9 * bs, -1, 9 * bs},
		}},
		{"hole at start and end, dirty", []step{{"t", 10 * bs, 0}, {"w", 3 * bs, 2 * bs}}, []seek{
			{0, 3 * bs, 0}, {3*bs + 7, 3*bs + 7, 5 * bs}, {5 * bs, -1, 5 * bs},
		}},
		{"data to the end: the end is a hole", []step{{"w", 0, 3*bs + 100}}, []seek{
			{0, 0, 3*bs + 100}, {3 * bs, 3 * bs, 3*bs + 100}, {3*bs + 100, -1, -1},
		}},
		{"hole in the middle, flushed and dirty mixed", []step{
			{"w", 0, 2 * bs}, {"f", 0, 0}, {"w", 2 * bs, bs}, {"w", 6 * bs, bs}, {"f", 0, 0}, {"w", 7 * bs, bs},
		}, []seek{
			{0, 0, 3 * bs}, {bs, bs, 3 * bs}, {3 * bs, 6 * bs, 3 * bs}, {5*bs + 1, 6 * bs, 5*bs + 1}, {6 * bs, 6 * bs, 8 * bs},
		}},
		{"zeroed range is a hole", []step{{"w", 0, 8 * bs}, {"f", 0, 0}, {"z", 2 * bs, 3 * bs}}, []seek{
			{0, 0, 2 * bs}, {2 * bs, 5 * bs, 2 * bs}, {4*bs + 9, 5 * bs, 4*bs + 9}, {5 * bs, 5 * bs, 8 * bs},
		}},
		{"zeroed after flush, then flushed", []step{{"w", 0, 8 * bs}, {"z", 0, 7 * bs}, {"f", 0, 0}}, []seek{
			{0, 7 * bs, 0}, {7 * bs, 7 * bs, 8 * bs},
		}},
		{"truncated away", []step{{"w", 0, 8 * bs}, {"f", 0, 0}, {"t", 2 * bs, 0}, {"t", 8 * bs, 0}}, []seek{
			{0, 0, 2 * bs}, {2 * bs, -1, 2 * bs}, {8 * bs, -1, -1},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f, err := Create(ctx, mem.New(), "s/", Options{Params: p, FileID: "s/"})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, s := range c.steps {
				switch s.kind {
				case "w":
					_, err = f.WriteAt(ctx, pattern(int(s.n), 1), s.off)
				case "z":
					err = f.Zero(ctx, s.off, s.n)
				case "t":
					err = f.Truncate(ctx, s.off)
				case "f":
					_, err = f.Flush(ctx)
				}
				if err != nil {
					t.Fatalf("%s %d+%d: %v", s.kind, s.off, s.n, err)
				}
			}
			for _, s := range c.seeks {
				for _, w := range []struct {
					what string
					fn   func(context.Context, int64) (int64, error)
					want int64
				}{{"data", f.SeekData, s.data}, {"hole", f.SeekHole, s.hole}} {
					got, err := w.fn(ctx, s.off)
					if w.want < 0 {
						if !errors.Is(err, ErrNoData) {
							t.Errorf("seek %s at %d: %d, %v; want ErrNoData", w.what, s.off, got, err)
						}
						continue
					}
					if err != nil || got != w.want {
						t.Errorf("seek %s at %d: %d, %v; want %d", w.what, s.off, got, err, w.want)
					}
				}
			}
		})
	}
}

// Seeking in a huge sparse file with two small pieces takes a few map
// lookups, whatever the size: here a 5 GiB file of 512-byte blocks (ten
// million blocks) answers with a handful of node loads.
func TestSeekSparseHugeFile(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	cs := counting.New(mem)
	p := smallParams(segment.FormatStream)
	f := mustCreate(t, cs, "h/", p)
	const size = 5 << 30
	if err := f.Truncate(ctx, size); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{1 << 20, 4 << 30} {
		if _, err := f.WriteAt(ctx, []byte("piece"), off); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	g := mustOpen(t, cs, "h/", p)
	defer g.Close()
	cs.Reset()
	bs := int64(p.DataBlockSize)
	for _, c := range []struct {
		off, data, hole int64
	}{{0, 1 << 20, 0}, {1 << 20, 1 << 20, 1<<20 + bs}, {1<<20 + bs, 4 << 30, 1<<20 + bs}, {4 << 30, 4 << 30, 4<<30 + bs}} {
		d, err := g.SeekData(ctx, c.off)
		if err != nil || d != c.data {
			t.Fatalf("seek data at %d: %d, %v; want %d", c.off, d, err, c.data)
		}
		h, err := g.SeekHole(ctx, c.off)
		if err != nil || h != c.hole {
			t.Fatalf("seek hole at %d: %d, %v; want %d", c.off, h, err, c.hole)
		}
	}
	if _, err := g.SeekData(ctx, 4<<30+bs); !errors.Is(err, ErrNoData) {
		t.Fatalf("seek data past the last piece: %v, want ErrNoData", err)
	}
	if n := cs.Snapshot().Total().Requests; n > 4 {
		t.Fatalf("seeking made %d requests; a sparse file's map is a few nodes", n)
	}
}
