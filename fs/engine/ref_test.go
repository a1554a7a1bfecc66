package engine

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// countingSource counts reads and can be closed: a closed source fails, as
// one would after the checkpoint that needed it was published.
type countingSource struct {
	mu     sync.Mutex
	data   []byte
	reads  int
	closed bool
}

func (s *countingSource) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errors.New("source closed")
	}
	s.reads++
	return bytes.NewReader(s.data).ReadAt(p, off)
}

func (s *countingSource) stats() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func (s *countingSource) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// With the seed's default limits (8 MiB dirty), a file written only by
// reference is still sent ahead: references hold no memory.
func TestWriteRefSentAheadWithDefaultLimits(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	cnt := counting.New(mem)
	p := DefaultParams()
	p.ChunkSize = 5 << 20
	f := mustCreate(t, cnt, "wr/", p)
	src := &countingSource{data: pattern(40<<20, 21)}
	for off := int64(0); off < int64(len(src.data)); off += 1 << 20 {
		if err := f.WriteRef(ctx, off, 1<<20, src, off); err != nil {
			t.Fatal(err)
		}
		if d := f.Stat().DirtyBytes; d != 0 {
			t.Fatalf("blocks by reference hold %d dirty bytes", d)
		}
	}
	// The writer itself places the blocks in objects sent ahead (their
	// pieces, and the upload's create, go up in tasks that may not have
	// run yet): an object started, or one that completed.
	f.mu.Lock()
	started := len(f.s.objs) > 0 || f.s.sentB > 0
	f.mu.Unlock()
	if !started {
		t.Fatalf("nothing sent ahead")
	}
	ft := flushAndCheck(t, mem, f, "wr/", p, src.data)
	if ft.StreamSentBytes == 0 {
		t.Fatalf("no bytes counted as sent ahead: %+v", ft)
	}
	// Stored: read from the objects, never from the source again.
	src.close()
	reads := src.stats()
	if got := readAll(t, f); !bytes.Equal(got, src.data) {
		t.Fatalf("read after the flush differs")
	}
	if src.stats() != reads {
		t.Fatalf("the source was read after its blocks were stored")
	}
}

// Written again meanwhile (by value, in part, zeroed, by reference), a block
// by reference leaves a dead slot and the latest bytes win; unaligned edges
// go by value.
func TestWriteRefRewrites(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	p := piecesParams(12 << 20)
	f := mustCreate(t, mem, "rw/", p)
	src := &countingSource{data: pattern(20<<20, 22)}
	model := make([]byte, 20<<20+100)
	if err := f.WriteRef(ctx, 100, 20<<20, src, 0); err != nil { // unaligned: edges by value
		t.Fatal(err)
	}
	copy(model[100:], src.data)
	v := pattern(4096, 23)
	f.WriteAt(ctx, v, 8192) // a whole block by value
	copy(model[8192:], v)
	f.WriteAt(ctx, []byte("partial"), 5<<20+7) // in part
	copy(model[5<<20+7:], "partial")
	f.Zero(ctx, 9<<20, 8192) // zeroed
	clear(model[9<<20 : 9<<20+8192])
	src2 := &countingSource{data: pattern(8192, 24)}
	f.WriteRef(ctx, 12<<20, 8192, src2, 0) // by reference again
	copy(model[12<<20:], src2.data)
	ft := flushAndCheck(t, mem, f, "rw/", p, model)
	if ft.StreamDeadBytes == 0 {
		t.Fatalf("no dead slot counted: %+v", ft)
	}
}

// A block whose object failed is still a reference: the flush reads it from
// the source, and nothing is lost.
func TestWriteRefObjectFailed(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 4)
	faults.Add(faulty.Rule{Op: staging.OpUploadPart, Nth: 1, Kind: faulty.Error})
	p := piecesParams(12 << 20)
	f := mustCreate(t, faults, "of/", p)
	src := &countingSource{data: pattern(16<<20, 25)}
	if err := f.WriteRef(ctx, 0, 16<<20, src, 0); err != nil {
		t.Fatal(err)
	}
	before := src.stats()
	flushAndCheck(t, mem, f, "of/", p, src.data)
	if faults.Injected() != 1 {
		t.Fatalf("fault fired %d times", faults.Injected())
	}
	if src.stats() == before {
		t.Fatalf("the flush did not read the failed object's blocks from the source")
	}
}
