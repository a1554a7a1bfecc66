package engine

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// wholeParams: objects sent ahead whole, in one request each (a target
// within one piece), Stream or Parted.
func wholeParams(f segment.Format) Params {
	p := piecesParams(4 << 20)
	p.Format = f
	return p
}

// A long sequential writer's whole objects go from the blocks' arenas, each
// object one arena, its header and tail in the arena's room: only what comes
// before the stream is long is copied. Without arenas every byte is.
func TestArenaWholeObjectsNotCopied(t *testing.T) {
	for _, fm := range []segment.Format{segment.FormatStream, segment.FormatParted} {
		t.Run(fm.String(), func(t *testing.T) {
			for _, noArenas := range []bool{false, true} {
				st := &keepCount{Store: mem.New()}
				p := wholeParams(fm)
				f := mustCreate(t, st, "ww/", p)
				f.noArenas = noArenas
				data := pattern(40<<20, 41)
				writeSeq(t, f, data, 0, 1<<20)
				flushAndCheck(t, st, f, "ww/", p, data)
				got := f.Stats().PieceCopyBytes
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				sent := len(dataObjects(t, st, "ww/"))
				t.Logf("arenas off %v: %d objects sent ahead, %d of %d bytes copied, %d bodies kept", noArenas, sent, got, len(data), st.kept)
				if sent < 5 {
					t.Fatalf("%d objects sent ahead: the test sends too little", sent)
				}
				if !noArenas && got > int64(len(data))/4 {
					t.Errorf("%d of %d bytes copied into object buffers", got, len(data))
				}
				if noArenas && got < int64(len(data))/2 {
					t.Errorf("without arenas only %d of %d bytes copied: the test does not tell", got, len(data))
				}
			}
		})
	}
}

// With the mount's shape (64 KiB blocks, objects above a block's worth of
// leaves), a target's worth of blocks waits before a whole object goes and
// one is left over, so the block that makes a stream long always follows a
// waiting one: its arena must start all the same, or every byte is copied.
func TestArenaWholeObjectsAfterWaitingBlocks(t *testing.T) {
	for _, fm := range []segment.Format{segment.FormatStream, segment.FormatParted} {
		t.Run(fm.String(), func(t *testing.T) {
			st := &keepCount{Store: mem.New()}
			p := DefaultParams()
			p.Format = fm
			p.DataBlockSize = 64 << 10
			p.ChunkSize = 16 << 20
			p.StreamSegmentBytes = 16 << 20 // whole objects, Stream too
			p.DirtyLimit = 64 << 20
			f, err := Create(context.Background(), st, "wa/", Options{Params: p, FileID: "wa/", Budget: NewBudget(256 << 20)})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			data := pattern(128<<20, 43)
			writeSeq(t, f, data, 0, 1<<20)
			flushAndCheck(t, st, f, "wa/", p, data)
			got := f.Stats().PieceCopyBytes
			t.Logf("%d of %d bytes copied, %d objects", got, len(data), len(dataObjects(t, st, "wa/")))
			// The first object and the one that ends in the first arena.
			if got > 3*p.StreamSegmentBytes {
				t.Errorf("%d of %d bytes copied into object buffers", got, len(data))
			}
		})
	}
}

// putsHeld holds every whole-object PUT (not the head, not part 0s) until
// opened, and keeps a copy of each body as the store was handed it.
type putsHeld struct {
	staging.Store
	open chan struct{}
	mu   sync.Mutex
	held []string
	got  map[string][]byte
}

func (s *putsHeld) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	n, _, err := segment.ParseObjectName(key[len("wh/"):])
	if err != nil || n.Part == 0 {
		return s.Store.Put(ctx, key, data, o)
	}
	s.mu.Lock()
	s.held = append(s.held, key)
	s.mu.Unlock()
	<-s.open
	s.mu.Lock()
	s.got[key] = bytes.Clone(data)
	s.mu.Unlock()
	return s.Store.Put(ctx, key, data, o)
}

func (s *putsHeld) waiting() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.held)
}

// A whole object in flight is the bytes placed in it: blocks changed while
// their arena is in flight take buffers of their own; the file reads back
// the latest bytes, and the budget is whole again after Close.
func TestArenaWholeObjectInFlightUnchanged(t *testing.T) {
	for _, fm := range []segment.Format{segment.FormatStream, segment.FormatParted} {
		for _, change := range []string{"write", "zero", "truncate"} {
			t.Run(fm.String()+"/"+change, func(t *testing.T) {
				ctx := context.Background()
				hs := &putsHeld{Store: mem.New(), open: make(chan struct{}), got: map[string][]byte{}}
				p := wholeParams(fm)
				budget := NewBudget(1 << 30)
				f, err := Create(ctx, hs, "wh/", Options{Params: p, FileID: "wh/", Budget: budget})
				if err != nil {
					t.Fatal(err)
				}
				storeEmptyHead(t, f)
				data := pattern(16<<20, 42)
				writeSeq(t, f, data, 0, 1<<20)
				waitFor(t, func() bool { return len(hs.waiting()) >= 2 })
				held := hs.waiting()
				want, marker := changeHeld(t, f, change, data, 5<<20, 9<<20)
				close(hs.open)
				flushAndCheck(t, hs, f, "wh/", p, want)
				hs.mu.Lock()
				for _, k := range held {
					body := hs.got[k]
					if body == nil {
						t.Errorf("object %s held but never sent", k)
						continue
					}
					if i := bytes.Index(body, marker[:4096]); i >= 0 {
						t.Errorf("object %s in flight holds bytes written after it was placed, at %d", k, i)
					}
					h, err := segment.DecodeHeader(body[len(body)-segment.HeaderSize:])
					if fm == segment.FormatParted {
						h, err = segment.DecodeHeader(body[:segment.HeaderSize])
					}
					if err != nil || h.Size() != int64(len(body)) {
						t.Errorf("object %s: header %+v, %v, for %d bytes", k, h, err, len(body))
					}
				}
				hs.mu.Unlock()
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				if used := budget.Used(); used != 0 {
					t.Errorf("%d bytes of the budget held after Close", used)
				}
			})
		}
	}
}
