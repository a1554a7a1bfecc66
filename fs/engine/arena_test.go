package engine

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A long sequential writer's pieces go from the blocks' arenas: only what
// comes before the stream is long, and the last pieces at the flush, are
// copied into piece buffers.
func TestArenaSequentialWriterNotCopied(t *testing.T) {
	st := mem.New()
	p := piecesParams(12 << 20)
	f := mustCreate(t, st, "aw/", p)
	data := pattern(40<<20, 31)
	writeSeq(t, f, data, 0, 1<<20)
	flushAndCheck(t, st, f, "aw/", p, data)
	got := f.Stats().PieceCopyBytes
	if got > int64(len(data))/4 {
		t.Errorf("%d of %d bytes copied into piece buffers", got, len(data))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, mustOpen(t, st, "aw/", p)); !bytes.Equal(got, data) {
		t.Fatalf("after reopen: content differs at %d", commonPrefix(got, data))
	}
}

// partsHeld holds every part upload until opened, and keeps a copy of
// each part's body as the store was handed it.
type partsHeld struct {
	staging.Store
	open chan struct{}
	mu   sync.Mutex
	held []string          // parts waiting, key#n
	got  map[string][]byte // bodies, by key#n
}

func (s *partsHeld) UploadPart(ctx context.Context, key, id string, n int32, data []byte) (string, error) {
	k := fmt.Sprintf("%s#%d", key, n)
	s.mu.Lock()
	s.held = append(s.held, k)
	s.mu.Unlock()
	<-s.open
	s.mu.Lock()
	s.got[k] = bytes.Clone(data)
	s.mu.Unlock()
	return s.Store.UploadPart(ctx, key, id, n, data)
}

func (s *partsHeld) waiting() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.held)
}

// A piece in flight is the bytes that were placed in it: blocks changed
// (written again, zeroed, cut away and written anew) while their arena slots
// are in flight take buffers of their own, and a slot is reused only once
// the piece over it is in. The file reads back the latest bytes.
func TestArenaPieceInFlightUnchanged(t *testing.T) {
	for _, change := range []string{"write", "zero", "truncate"} {
		t.Run(change, func(t *testing.T) {
			ctx := context.Background()
			hs := &partsHeld{Store: mem.New(), open: make(chan struct{}), got: map[string][]byte{}}
			p := piecesParams(64 << 20)
			budget := NewBudget(1 << 30)
			f, err := Create(ctx, hs, "af/", Options{Params: p, FileID: "af/", Budget: budget})
			if err != nil {
				t.Fatal(err)
			}
			storeEmptyHead(t, f)
			data := pattern(24<<20, 32)
			writeSeq(t, f, data, 0, 1<<20)
			waitFor(t, func() bool { return len(hs.waiting()) >= 3 })
			held := hs.waiting()
			// Blocks of the second and third pieces, in flight.
			want, marker := changeHeld(t, f, change, data, 6<<20, 11<<20)
			close(hs.open)
			flushAndCheck(t, hs, f, "af/", p, want)
			hs.mu.Lock()
			for _, k := range held {
				body := hs.got[k]
				if body == nil {
					t.Errorf("part %s held but never sent", k)
				}
				if i := bytes.Index(body, marker[:4096]); i >= 0 {
					t.Errorf("part %s in flight holds bytes written after it was placed, at %d", k, i)
				}
				if len(body) > 0 && !bytes.Contains(data, body[:64<<10]) {
					t.Errorf("part %s in flight does not start with bytes of the file as placed", k)
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

// changeHeld changes f, whose first bytes (data) are in flight, by change:
// "write" writes a marker at lo and at hi, "zero" zeroes [lo, hi),
// "truncate" cuts the file to nothing and writes 1 MiB of the marker anew
// (less than a piece: the write does not wait for what is held). It returns
// what f holds then and the marker.
func changeHeld(t *testing.T, f *File, change string, data []byte, lo, hi int) ([]byte, []byte) {
	t.Helper()
	ctx := context.Background()
	marker := bytes.Repeat([]byte{0xEE}, 64<<10)
	want := slices.Clone(data)
	switch change {
	case "write":
		for _, off := range []int{lo, hi} {
			if _, err := f.WriteAt(ctx, marker, int64(off)); err != nil {
				t.Fatal(err)
			}
			copy(want[off:], marker)
		}
	case "zero":
		if err := f.Zero(ctx, int64(lo), int64(hi-lo)); err != nil {
			t.Fatal(err)
		}
		clear(want[lo:hi])
	case "truncate":
		if err := f.Truncate(ctx, 0); err != nil {
			t.Fatal(err)
		}
		want = bytes.Repeat(marker, 16)
		writeSeq(t, f, want, 0, 1<<20)
	default:
		t.Fatalf("no change %q", change)
	}
	return want, marker
}

// keepCount counts the parts a store kept.
type keepCount struct {
	staging.Store
	mu   sync.Mutex
	kept int
}

func (k *keepCount) PutKept(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, bool, error) {
	info, kept, err := staging.PutGiven(ctx, k.Store, key, data, o)
	if kept {
		k.mu.Lock()
		k.kept++
		k.mu.Unlock()
	}
	return info, kept, err
}

func (k *keepCount) UploadPartKept(ctx context.Context, key, id string, n int32, data []byte) (string, bool, error) {
	etag, kept, err := staging.UploadPartGiven(ctx, k.Store, key, id, n, data)
	if kept {
		k.mu.Lock()
		k.kept++
		k.mu.Unlock()
	}
	return etag, kept, err
}

// A piece the memory store keeps is never reused: another file written
// after it (whose arenas and pieces come from the same pools) leaves the
// first one's bytes as they were.
func TestKeptPiecesNotReused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target int64
	}{{"pieces", 12 << 20}, {"whole objects", 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) { testKeptNotReused(t, piecesParams(tc.target)) })
	}
}

func testKeptNotReused(t *testing.T, p Params) {
	st := &keepCount{Store: mem.New()}
	a := mustCreate(t, st, "ka/", p)
	da := pattern(30<<20, 41)
	writeSeq(t, a, da, 0, 1<<20)
	flushAndCheck(t, st, a, "ka/", p, da)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if st.kept == 0 {
		t.Fatal("the store kept no piece")
	}
	b := mustCreate(t, st, "kb/", p)
	db := pattern(30<<20, 42)
	writeSeq(t, b, db, 0, 1<<20)
	flushAndCheck(t, st, b, "kb/", p, db)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, mustOpen(t, st, "ka/", p)); !bytes.Equal(got, da) {
		t.Fatalf("the first file changed at %d", commonPrefix(got, da))
	}
}
