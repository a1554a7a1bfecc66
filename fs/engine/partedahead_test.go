package engine

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A sequential writer of either format sends objects ahead once it has a
// target's worth of blocks: the dirty tier stays near the objects in
// flight instead of growing to the whole file, the flush writes only the
// rest, and every object is laid out in the file's format (a Parted one
// header first), so the checkpoint reads back after a reopen.
func TestSendAheadWholeObjects(t *testing.T) {
	const (
		target = 256 << 10
		size   = 4 << 20
		write  = 64 << 10
	)
	for _, tt := range []struct {
		name   string
		format segment.Format
	}{
		{"parted", segment.FormatParted},
		{"stream", segment.FormatStream},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			p := DefaultParams()
			p.Format = tt.format
			p.StreamSegmentBytes = target // up to one piece: whole objects
			p.DirtyLimit = 64 << 20       // the limit never decides here
			p.Concurrency = 4
			f := mustCreate(t, st, "w/", p)
			defer f.Close()
			data := pattern(size, 7)
			// Objects in flight hold their blocks until they are taken in:
			// at most the tasks running and one more being filled.
			bound := int64(p.Concurrency+2) * target
			var most int64
			for off := 0; off < size; off += write {
				if _, err := f.WriteAt(ctx, data[off:off+write], int64(off)); err != nil {
					t.Fatal(err)
				}
				most = max(most, f.Stat().DirtyBytes)
			}
			if most > bound {
				t.Errorf("dirty bytes reached %d while writing %d: want at most %d (objects sent ahead)", most, size, bound)
			}
			ft, err := f.Flush(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ft.StreamSentBytes < size-2*target {
				t.Errorf("sent ahead %d of %d bytes, want at least %d", ft.StreamSentBytes, size, size-2*target)
			}
			if ft.StreamFlushBytes > 2*target {
				t.Errorf("the flush wrote %d data bytes itself, want at most %d", ft.StreamFlushBytes, 2*target)
			}
			checkObjectsLaidOut(t, st, "w/", f.tag, tt.format)
			g := mustOpen(t, st, "w/", p)
			defer g.Close()
			if got := readAll(t, g); !bytes.Equal(got, data) {
				t.Fatalf("after reopen: content differs")
			}
		})
	}
}

// checkObjectsLaidOut decodes every checkpoint object under prefix in
// format fm.
func checkObjectsLaidOut(t *testing.T, st staging.Store, prefix string, tag uint64, fm segment.Format) {
	t.Helper()
	ctx := context.Background()
	page, err := st.List(ctx, prefix, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range page.Objects {
		rest := strings.TrimPrefix(o.Key, prefix)
		name, _, err := segment.ParseObjectName(rest)
		if err != nil {
			continue // the head, markers
		}
		body, _, err := st.Get(ctx, o.Key, staging.Range{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := segment.DecodeObject(o.Key, body, name, tag, fm); err != nil {
			t.Errorf("object %s: %v", o.Key, err)
		}
		n++
	}
	if n < 2 {
		t.Errorf("%d objects under %s, want the ones sent ahead and part 0", n, prefix)
	}
}

// With nothing sent ahead, a writer past the dirty limit writes a partial
// segment at each crossing: each one stores the blocks dirty since the one
// before, never the file again, so what reaches the store stays near what
// was written however many segments there are.
func TestPartialSegmentsStoreEachBlockOnce(t *testing.T) {
	const (
		limit = 256 << 10
		write = 64 << 10
	)
	for _, tt := range []struct {
		name   string
		format segment.Format
		size   int
	}{
		{"parted 1 MiB", segment.FormatParted, 1 << 20},
		{"parted 8 MiB", segment.FormatParted, 8 << 20},
		{"stream 8 MiB", segment.FormatStream, 8 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			p := DefaultParams()
			p.Format = tt.format
			p.StreamSegmentBytes = 0
			p.DirtyLimit = limit
			f := mustCreate(t, st, "p/", p)
			defer f.Close()
			data := pattern(tt.size, 3)
			for off := 0; off < tt.size; off += write {
				if _, err := f.WriteAt(ctx, data[off:off+write], int64(off)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			s := f.Stats()
			// A crossing is a write past the limit: every limit+write bytes.
			if want := tt.size/(limit+write) - 1; s.Partials < want {
				t.Errorf("%d partial segments, want at least %d", s.Partials, want)
			}
			// Data, plus headers, summaries and leaves: a few per cent.
			if most := int64(tt.size) * 21 / 20; s.BytesUploaded > most {
				t.Errorf("%d bytes stored for %d written, want at most %d", s.BytesUploaded, tt.size, most)
			}
			g := mustOpen(t, st, "p/", p)
			defer g.Close()
			if got := readAll(t, g); !bytes.Equal(got, data) {
				t.Fatalf("after reopen: content differs")
			}
		})
	}
}
