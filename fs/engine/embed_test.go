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

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// pairStore holds the first PUT until a second one arrives: two PUTs that
// are in flight together pass, one after the other they fail (timeout).
type pairStore struct {
	staging.Store
	mu      sync.Mutex
	puts    int
	second  chan struct{}
	timeout time.Duration
	failed  string
}

func newPairStore(st staging.Store) *pairStore {
	return &pairStore{Store: st, second: make(chan struct{}), timeout: 10 * time.Second}
}

func (s *pairStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	s.mu.Lock()
	s.puts++
	n := s.puts
	if n == 2 {
		close(s.second)
	}
	s.mu.Unlock()
	if n == 1 {
		select {
		case <-s.second:
		case <-time.After(s.timeout):
			s.mu.Lock()
			s.failed = "the first PUT (" + key + ") was alone in flight"
			s.mu.Unlock()
			return staging.ObjectInfo{}, errors.New(s.failed)
		}
	}
	return s.Store.Put(ctx, key, data, o)
}

func smallFileParams() Params {
	p := DefaultParams() // 4 KiB blocks
	return p
}

// A new file, 4 KiB written and flushed: exactly two PUTs (part 0 and the
// head carrying it), in flight together, and nothing else; a cold open and
// read of it on a fresh File is exactly one GET (the head).
func TestSmallFileOneRoundTrip(t *testing.T) {
	for _, c := range []struct {
		fm segment.Format
		bs int
	}{{segment.FormatStream, 4 << 10}, {segment.FormatParted, 4 << 10}, {segment.FormatStream, 64 << 10}} {
		fm := c.fm
		t.Run(fmt.Sprintf("%v-%d", fm, c.bs), func(t *testing.T) {
			ctx := context.Background()
			mem := mem.New()
			ps := newPairStore(mem)
			cs := counting.New(ps)
			p := smallFileParams()
			p.Format = fm
			p.DataBlockSize = c.bs // 64 KiB: the mount's, a part 0 over 64 KiB
			f, err := Create(ctx, cs, "s/", Options{Params: p, FileID: "s/"})
			if err != nil {
				t.Fatal(err)
			}
			data := pattern(4<<10, 5)
			if _, err := f.WriteAt(ctx, data, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Flush(ctx); err != nil {
				t.Fatalf("flush: %v (%s)", err, ps.failed)
			}
			c := cs.Snapshot()
			if c.Op(staging.OpPut).Requests != 2 || c.Total().Requests != 2 {
				t.Fatalf("create, write 4 KiB, flush: %v; want exactly 2 PUTs", c)
			}
			if ps.failed != "" {
				t.Fatal(ps.failed)
			}
			if st := f.Stat(); st.Cno != 1 || st.Blocks != 1 || !st.BlocksKnown || st.Dirty {
				t.Fatalf("stat after the flush: %+v", st)
			}
			_ = f.Close()
			// Both objects are stored.
			for _, k := range []string{volume.HeadKey("s/"), "s/0000000001.0"} {
				if _, err := mem.Head(ctx, k); err != nil {
					t.Fatalf("%s: %v", k, err)
				}
			}

			cs.Reset()
			g, err := Open(ctx, cs, "s/", Options{Params: p, FileID: "s/"})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			buf := make([]byte, len(data))
			if n, err := g.ReadAt(ctx, buf, 0); n != len(data) || !bytes.Equal(buf, data) {
				t.Fatalf("read back %d bytes (%v), equal=%v", n, err, bytes.Equal(buf, data))
			}
			if c := cs.Snapshot(); c.Op(staging.OpGet).Requests != 1 || c.Total().Requests != 1 {
				t.Fatalf("cold open and read: %v; want exactly 1 GET", c)
			}
			if st := g.Stat(); st.Blocks != 1 || !st.BlocksKnown {
				t.Fatalf("stat of the reopened file: %+v", st)
			}
			// A writer that opened the head cannot know part 0 landed: its
			// first flush reads it (one GET: there, and the same) before
			// its own head, alongside its own part 0.
			cs.Reset()
			if _, err := g.WriteAt(ctx, []byte("z"), 10); err != nil {
				t.Fatal(err)
			}
			if _, err := g.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if c := cs.Snapshot(); c.Op(staging.OpPut).Requests != 2 || c.Op(staging.OpGet).Requests != 1 || c.Total().Requests != 3 {
				t.Fatalf("first flush after an open: %v; want 1 GET (part 0 checked) and 2 PUTs (part 0, head)", c)
			}
		})
	}
}

// checkAllCheckpoints opens every checkpoint in want (by cno) and reads it
// back exactly.
func checkAllCheckpoints(t *testing.T, st staging.Store, prefix string, p Params, want map[uint64][]byte) {
	t.Helper()
	ctx := context.Background()
	for cno, w := range want {
		f, err := OpenAt(ctx, st, prefix, cno, Options{Params: p, FileID: prefix})
		if err != nil {
			t.Fatalf("open checkpoint %d: %v", cno, err)
		}
		if got := readAll(t, f); !bytes.Equal(got, w) {
			t.Fatalf("checkpoint %d reads back %d bytes, differing at %d from the %d written", cno, len(got), commonPrefix(got, w), len(w))
		}
		_ = f.Close()
	}
}

// The head lands and the PUT of part 0 fails: the checkpoint is published
// and reads back from the head; the next publish stores part 0 from the
// head's copy first, and every checkpoint reads back. With crash, the File
// is dropped without Close after the partial publish and a new one opens
// the file and writes on.
func TestEmbeddedPart0Lost(t *testing.T) {
	for _, crashed := range []bool{false, true} {
		name := "open"
		if crashed {
			name = "crash"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			mem := mem.New()
			faults := faulty.New(mem, 1)
			p := smallFileParams()
			f, err := Create(ctx, faults, "l/", Options{Params: p, FileID: "l/"})
			if err != nil {
				t.Fatal(err)
			}
			v1 := pattern(6000, 1)
			if _, err := f.WriteAt(ctx, v1, 0); err != nil {
				t.Fatal(err)
			}
			id := faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: "0000000001.0", Kind: faulty.Error})
			if _, err := f.Flush(ctx); err != nil {
				t.Fatalf("flush whose part 0 fails: %v (the head decides)", err)
			}
			faults.Remove(id)
			if faults.Injected() != 1 {
				t.Fatalf("fault fired %d times, want 1", faults.Injected())
			}
			if _, err := mem.Head(ctx, "l/0000000001.0"); !errors.Is(err, staging.ErrNotFound) {
				t.Fatalf("part 0 of checkpoint 1: %v, want it missing", err)
			}
			want := map[uint64][]byte{1: v1}
			checkAllCheckpoints(t, mem, "l/", p, want)
			if got := readAll(t, f); !bytes.Equal(got, v1) {
				t.Fatal("the writer reads back something else")
			}
			if crashed {
				// Dropped: no Close, nothing more from it.
				crash(t, f)
				f = mustOpen(t, mem, "l/", p)
			}
			defer f.Close()
			// Overwrite one block, keep the other: its leaf and block stay
			// in checkpoint 1's part 0.
			v2 := append([]byte(nil), v1...)
			copy(v2[4096:], pattern(100, 2))
			if _, err := f.WriteAt(ctx, v2[4096:4196], 4096); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Flush(ctx); err != nil {
				t.Fatalf("next flush: %v", err)
			}
			if _, err := mem.Head(ctx, "l/0000000001.0"); err != nil {
				t.Fatalf("part 0 of checkpoint 1 after the next flush: %v, want it stored", err)
			}
			want[f.Stat().Cno] = v2
			checkAllCheckpoints(t, mem, "l/", p, want)
			// And a third flush that needs nothing ensured.
			if _, err := f.WriteAt(ctx, []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
			v3 := append([]byte(nil), v2...)
			v3[0] = 'x'
			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want[f.Stat().Cno] = v3
			checkAllCheckpoints(t, mem, "l/", p, want)
			cps, err := f.Checkpoints(ctx)
			if err != nil || len(cps) != 3 {
				t.Fatalf("checkpoints: %d, %v; want 3", len(cps), err)
			}
		})
	}
}

// A writer that loses the race for the head may have stored its own part 0
// under the name the winner's head carries a copy of: the winner's next
// publish replaces it with its copy, and everything reads back.
func TestEmbeddedPart0TakenByLoser(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 1)
	p := smallFileParams()
	f, err := Create(ctx, faults, "r/", Options{Params: p, FileID: "r/"})
	if err != nil {
		t.Fatal(err)
	}
	v1 := pattern(3000, 7)
	if _, err := f.WriteAt(ctx, v1, 0); err != nil {
		t.Fatal(err)
	}
	id := faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: "0000000001.0", Kind: faulty.Error})
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	faults.Remove(id)
	// The loser's object, under the same name.
	loser := bytes.Repeat([]byte{0xee}, 5000)
	if _, err := mem.Put(ctx, "r/0000000001.0", loser, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, mustOpen(t, mem, "r/", p)); !bytes.Equal(got, v1) {
		t.Fatal("a reader took the object under the name for the head's copy")
	}
	if _, err := f.WriteAt(ctx, []byte("y"), 5000); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatalf("flush over a taken name: %v", err)
	}
	obj, _, err := mem.Get(ctx, "r/0000000001.0", staging.Whole())
	if err != nil || bytes.Equal(obj, loser) {
		t.Fatalf("checkpoint 1's part 0 is still the loser's (%v)", err)
	}
	v2 := append(append([]byte(nil), v1...), make([]byte, 2001)...)
	v2[5000] = 'y'
	checkAllCheckpoints(t, mem, "r/", p, map[uint64][]byte{1: v1, f.Stat().Cno: v2})
	_ = f.Close()
}

// A checkpoint larger than the embed limit, or of more than one object, is
// stored as before: part 0, then the head, which carries no copy.
func TestLargeCheckpointNotEmbedded(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	p := smallFileParams()
	f, err := Create(ctx, mem, "b/", Options{Params: p, FileID: "b/"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := pattern(200<<10, 3)
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	hd, info, err := segment.ReadHead(ctx, mem, volume.HeadKey("b/"), f.tag)
	if err != nil || hd.Embed != nil || info.Size != segment.HeadSize || hd.Blocks != 50 || !hd.BlocksKnown {
		t.Fatalf("head of a 200 KiB checkpoint: %d bytes, embed %d, blocks %d (%v)", info.Size, len(hd.Embed), hd.Blocks, err)
	}
	if got := readAll(t, mustOpen(t, mem, "b/", p)); !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
}

// Stat counts the blocks stored and dirty: holes are not counted, a hole
// punched or a truncate removes blocks, and the head records the count.
func TestStatBlocks(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	p := smallParams(segment.FormatStream) // 512-byte blocks
	f, err := Create(ctx, mem, "k/", Options{Params: p, FileID: "k/"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bs := int64(p.DataBlockSize)
	write := func(off, n int64) {
		t.Helper()
		if _, err := f.WriteAt(ctx, pattern(int(n), uint64(off)), off); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what string, n uint64) {
		t.Helper()
		if st := f.Stat(); st.Blocks != n || !st.BlocksKnown {
			t.Fatalf("%s: stat %+v, want %d blocks", what, st, n)
		}
	}
	want("new", 0)
	write(0, 10)
	write(1000*bs, 3*bs)
	want("dirty", 4)
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want("flushed", 4)
	write(1000*bs, 10) // rewriting a stored block adds none
	write(2*bs, 1)
	want("dirty again", 5)
	if err := f.Zero(ctx, 1000*bs, 2*bs); err != nil {
		t.Fatal(err)
	}
	want("zeroed two", 3)
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want("flushed again", 3)
	if err := f.Truncate(ctx, 1); err != nil {
		t.Fatal(err)
	}
	want("truncated", 1)
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	hd, _, err := segment.ReadHead(ctx, mem, volume.HeadKey("k/"), f.tag)
	if err != nil || !hd.BlocksKnown || hd.Blocks != 1 {
		t.Fatalf("head: %+v, %v; want 1 block recorded", hd, err)
	}
	g := mustOpen(t, mem, "k/", p)
	defer g.Close()
	if st := g.Stat(); st.Blocks != 1 || !st.BlocksKnown {
		t.Fatalf("reopened: %+v", st)
	}
}

// A version 1 head (no count): Stat reports the size's figure until the
// first flush counts the map, and the head written then records it.
func TestStatBlocksFromVersion1Head(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	p := smallParams(segment.FormatStream)
	p.EmbedMaxBytes = -1
	f, err := Create(ctx, mem, "v/", Options{Params: p, FileID: "v/"})
	if err != nil {
		t.Fatal(err)
	}
	bs := int64(p.DataBlockSize)
	for _, off := range []int64{0, 50 * bs, 99 * bs} {
		if _, err := f.WriteAt(ctx, pattern(int(bs), 1), off); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	// Rewrite the head as version 1 (what an older build wrote).
	hd, info, err := segment.ReadHead(ctx, mem, volume.HeadKey("v/"), segment.FileTag("v/"))
	if err != nil {
		t.Fatal(err)
	}
	old, err := segment.EncodeHead(segment.Head{FileTag: hd.FileTag, Inode: hd.Inode})
	if err != nil || !strings.HasPrefix(string(old), "CKPTHEAD\x01\x00") {
		t.Fatalf("version 1 head: %v", err)
	}
	if _, err := mem.Put(ctx, volume.HeadKey("v/"), old, staging.PutOptions{Conditions: staging.Conditions{IfMatch: info.ETag}, Metadata: info.Metadata}); err != nil {
		t.Fatal(err)
	}
	g := mustOpen(t, mem, "v/", p)
	defer g.Close()
	if st := g.Stat(); st.BlocksKnown || st.Blocks != 100 {
		t.Fatalf("stat at a version 1 head: %+v, want the size's 100 blocks, unknown", st)
	}
	if _, err := g.WriteAt(ctx, pattern(10, 2), 10*bs); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := g.Stat(); !st.BlocksKnown || st.Blocks != 4 {
		t.Fatalf("stat after the first flush: %+v, want 4 blocks", st)
	}
	hd, _, err = segment.ReadHead(ctx, mem, volume.HeadKey("v/"), segment.FileTag("v/"))
	if err != nil || !hd.BlocksKnown || hd.Blocks != 4 {
		t.Fatalf("head after the first flush: %+v, %v", hd, err)
	}
}

// While the head's part 0 cannot be stored from its copy, no later head is
// published (it would build on an object that is not there); once it can,
// the next flush publishes everything.
func TestEmbeddedPart0EnsureFails(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 1)
	p := smallFileParams()
	f, err := Create(ctx, faults, "n/", Options{Params: p, FileID: "n/"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v1 := pattern(5000, 3)
	if _, err := f.WriteAt(ctx, v1, 0); err != nil {
		t.Fatal(err)
	}
	id := faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: "0000000001.0"})
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("more"), 6000); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err == nil {
		t.Fatal("a flush whose base part 0 cannot be stored succeeded")
	}
	hd, _, err := segment.ReadHead(ctx, mem, volume.HeadKey("n/"), f.tag)
	if err != nil || hd.Inode.Cno != 1 {
		t.Fatalf("head after the failed flush: checkpoint %d, %v; want still 1", hd.Inode.Cno, err)
	}
	faults.Remove(id)
	if _, err := f.Flush(ctx); err != nil {
		t.Fatalf("flush once part 0 can be stored: %v", err)
	}
	v2 := append(append([]byte(nil), v1...), make([]byte, 1004)...)
	copy(v2[6000:], "more")
	checkAllCheckpoints(t, mem, "n/", p, map[uint64][]byte{1: v1, f.Stat().Cno: v2})
}
