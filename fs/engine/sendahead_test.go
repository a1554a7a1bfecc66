package engine

import (
	"bytes"
	"context"
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

// piecesParams send ahead in pieces of 5 MiB (the store's minimum part).
func piecesParams(target int64) Params {
	p := DefaultParams()
	p.DataBlockSize = 4 << 10
	p.MetaBlockSize = 4 << 10
	p.ChunkSize = 5 << 20
	p.StreamSegmentBytes = target
	p.MaxObjectBytes = 64 << 20
	p.DirtyLimit = 256 << 20
	p.Concurrency = 4
	return p
}

// dataObjects lists the objects under prefix other than the head and part 0s.
func dataObjects(t *testing.T, st staging.Store, prefix string) []staging.ObjectInfo {
	t.Helper()
	all, err := staging.ListAll(context.Background(), st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []staging.ObjectInfo
	for _, o := range all {
		if !strings.HasSuffix(o.Key, "/inode") && !strings.HasSuffix(o.Key, ".0") && !strings.Contains(o.Key, "/"+volume.WritersDir) {
			out = append(out, o)
		}
	}
	return out
}

func writeSeq(t *testing.T, f *File, data []byte, off int64, w int) {
	t.Helper()
	for i := 0; i < len(data); i += w {
		end := min(i+w, len(data))
		if _, err := f.WriteAt(context.Background(), data[i:end], off+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
}

func flushAndCheck(t *testing.T, st staging.Store, f *File, prefix string, p Params, want []byte) FlushTiming {
	t.Helper()
	ft, err := f.Flush(context.Background())
	if err != nil {
		t.Fatalf("flush: %v", err)
	}
	if got := readAll(t, f); !bytes.Equal(got, want) {
		t.Fatalf("after flush: content differs")
	}
	if got := readAll(t, mustOpen(t, st, prefix, p)); !bytes.Equal(got, want) {
		t.Fatalf("after reopen: content differs")
	}
	return ft
}

// The three regimes of stream_segment_bytes.
func TestSendAheadRegimes(t *testing.T) {
	data := pattern(24<<20, 11)
	cases := []struct {
		name      string
		target    int64
		objects   bool // objects stored before the flush
		multipart bool
	}{
		{"off", 0, false, false},
		{"whole", 1 << 20, true, false},
		{"pieces", 12 << 20, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := mem.New()
			cnt := counting.New(mem)
			p := piecesParams(c.target)
			f := mustCreate(t, cnt, "sa/", p)
			writeSeq(t, f, data, 0, 1<<20)
			// Let tasks in flight finish; a write takes in their results.
			waitFor(t, func() bool {
				f.mu.Lock()
				defer f.mu.Unlock()
				f.s.takeInLocked(context.Background(), false)
				return f.s.tasks.Pending() == 0
			})
			objs := dataObjects(t, mem, "sa/")
			n := cnt.Snapshot()
			if got := len(objs) > 0; got != c.objects {
				t.Fatalf("objects stored before the flush: %d, want some: %v", len(objs), c.objects)
			}
			if got := n.Op(staging.OpCreateMultipart).Requests > 0; got != c.multipart {
				t.Fatalf("multipart uploads: %d, want some: %v", n.Op(staging.OpCreateMultipart).Requests, c.multipart)
			}
			for _, o := range objs {
				if c.target > 0 && o.Size > c.target {
					t.Fatalf("object %s is %d bytes, over the %d target", o.Key, o.Size, c.target)
				}
			}
			before := cnt.Snapshot()
			ft := flushAndCheck(t, mem, f, "sa/", p, data)
			// Requests made by the flush (nothing was in flight when it began;
			// flushAndCheck reads only after it).
			flushReqs := cnt.Snapshot().Sub(before).Total().Requests - cnt.Snapshot().Sub(before).Op(staging.OpGet).Requests
			if int64(ft.Requests) != flushReqs {
				t.Fatalf("FlushTiming.Requests %d, the store saw %d", ft.Requests, flushReqs)
			}
			if c.objects && ft.StreamSentBytes == 0 {
				t.Fatalf("nothing counted as sent ahead: %+v", ft)
			}
			if !c.objects && ft.StreamSentBytes != 0 {
				t.Fatalf("sent ahead with the target 0: %+v", ft)
			}
			// The counters add up to the data the store holds.
			var stored int64
			for _, o := range dataObjects(t, mem, "sa/") {
				stored += dataBytesOf(t, mem, o.Key)
			}
			part0 := dataBytesOf(t, mem, "sa/"+segment.ObjectName{Cno: ft.Cno}.String())
			if got := ft.StreamSentBytes + ft.StreamFlushBytes; got != stored+part0 {
				t.Fatalf("sent %d + flush %d = %d, the store holds %d data bytes", ft.StreamSentBytes, ft.StreamFlushBytes, got, stored+part0)
			}
		})
	}
}

func dataBytesOf(t *testing.T, st staging.Store, key string) int64 {
	t.Helper()
	name, _, err := segment.ParseObjectName(key[strings.LastIndex(key, "/")+1:])
	if err != nil {
		t.Fatal(err)
	}
	h, err := segment.ReadHeader(context.Background(), st, key, name, segment.FileTag("sa/"), segment.FormatStream)
	if err != nil {
		t.Fatal(err)
	}
	return h.DataBytes()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached in 30 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// gate holds uploads of data objects until opened, and counts how many are
// held at once.
type gate struct {
	staging.Store
	mu      sync.Mutex
	open    chan struct{}
	held    int
	maxHeld int
	panicOn int32 // UploadPart number that panics, once
}

func newGate(inner staging.Store) *gate { return &gate{Store: inner, open: make(chan struct{})} }

func (g *gate) hold(key string) {
	if strings.HasSuffix(key, "/inode") || strings.HasSuffix(key, ".0") || strings.Contains(key, "/"+volume.WritersDir) {
		return
	}
	g.mu.Lock()
	g.held++
	g.maxHeld = max(g.maxHeld, g.held)
	g.mu.Unlock()
	<-g.open
	g.mu.Lock()
	g.held--
	g.mu.Unlock()
}

func (g *gate) stats() (held, maxHeld int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, g.maxHeld
}

func (g *gate) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	g.hold(key)
	return g.Store.Put(ctx, key, data, o)
}

func (g *gate) UploadPart(ctx context.Context, key, id string, n int32, data []byte) (string, error) {
	g.mu.Lock()
	boom := g.panicOn != 0 && n == g.panicOn
	if boom {
		g.panicOn = 0
	}
	g.mu.Unlock()
	if boom {
		panic("injected upload panic")
	}
	g.hold(key)
	return g.Store.UploadPart(ctx, key, id, n, data)
}

// At most segment_mpu_max_concurrency objects in flight; the writer waits
// for room.
func TestSendAheadConcurrencyCap(t *testing.T) {
	mem := mem.New()
	g := newGate(mem)
	p := piecesParams(1 << 20)
	p.Concurrency = 2
	f := mustCreate(t, g, "cc/", p)
	data := pattern(12<<20, 12)
	done := make(chan struct{})
	go func() {
		defer close(done)
		writeSeq(t, f, data, 0, 256<<10)
	}()
	waitFor(t, func() bool { h, _ := g.stats(); return h == 2 })
	select {
	case <-done:
		t.Fatalf("the writer finished with every upload held: it did not wait for room")
	case <-time.After(100 * time.Millisecond):
	}
	if _, m := g.stats(); m > 2 {
		t.Fatalf("%d uploads in flight at once, cap 2", m)
	}
	close(g.open)
	<-done
	flushAndCheck(t, mem, f, "cc/", p, data)
	if _, m := g.stats(); m > 2 {
		t.Fatalf("%d uploads in flight at once, cap 2", m)
	}
}

// A block written again while its object is open leaves a dead slot, and the
// flush writes its last bytes.
func TestSendAheadDeadSlot(t *testing.T) {
	mem := mem.New()
	p := piecesParams(12 << 20)
	f := mustCreate(t, mem, "ds/", p)
	ctx := context.Background()
	data := pattern(16<<20, 13)
	writeSeq(t, f, data[:6<<20], 0, 1<<20) // one piece placed in the open object
	again := pattern(4096, 14)
	if _, err := f.WriteAt(ctx, again, 0); err != nil { // block 0, already placed
		t.Fatal(err)
	}
	copy(data, again)
	writeSeq(t, f, data[6<<20:], 6<<20, 1<<20)
	ft := flushAndCheck(t, mem, f, "ds/", p, data)
	if ft.StreamDeadBytes < 4096 {
		t.Fatalf("dead bytes %d, want at least one block", ft.StreamDeadBytes)
	}
	// The first object's summary marks slot 0 dead.
	objs := dataObjects(t, mem, "ds/")
	if len(objs) == 0 {
		t.Fatal("no object was sent ahead")
	}
	name, _, _ := segment.ParseObjectName(objs[0].Key[len("ds/"):])
	h, err := segment.ReadHeader(ctx, mem, objs[0].Key, name, segment.FileTag("ds/"), segment.FormatStream)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := segment.ReadSummary(ctx, mem, objs[0].Key, h)
	if err != nil {
		t.Fatal(err)
	}
	if sum[0].FBN != 0 || !sum[0].Dead {
		t.Fatalf("summary entry 0 of %s: %+v, want block 0 dead", objs[0].Key, sum[0])
	}
	// Block 0 is read from where the flush put it, not the dead slot.
	pl, err := f.BlockPlacement(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if pl[0].Key == objs[0].Key && pl[0].Ptr.Slot == 0 {
		t.Fatalf("block 0 still points at its dead slot")
	}
}

// A block written again after its object closed, while it is in flight,
// fails the gen check when the object completes: it stays dirty and the
// flush writes it.
func TestSendAheadGenCheck(t *testing.T) {
	mem := mem.New()
	g := newGate(mem)
	p := piecesParams(1 << 20) // whole objects
	f := mustCreate(t, g, "hc/", p)
	ctx := context.Background()
	data := pattern(2<<20, 15)
	writeSeq(t, f, data, 0, 256<<10)
	waitFor(t, func() bool { h, _ := g.stats(); return h > 0 })
	again := pattern(4096, 16)
	if _, err := f.WriteAt(ctx, again, 4096); err != nil { // block 1, in flight
		t.Fatal(err)
	}
	copy(data[4096:], again)
	close(g.open)
	ft := flushAndCheck(t, mem, f, "hc/", p, data)
	if ft.StreamDeadBytes < 4096 {
		t.Fatalf("dead bytes %d, want at least one block", ft.StreamDeadBytes)
	}
	pl, _ := f.BlockPlacement(ctx, 0, 2)
	if pl[0].Ptr.Cno == 0 || pl[1].Ptr.Object() == pl[0].Ptr.Object() && pl[1].Ptr.Slot == 1 {
		t.Fatalf("block 1 still points where it was first sent: %+v", pl)
	}
}

// Leaves sent with their data are not written again by the flush.
func TestSendAheadCleanLeaves(t *testing.T) {
	mem := mem.New()
	p := piecesParams(12 << 20)
	f := mustCreate(t, mem, "cl/", p)
	data := pattern(40<<20, 17)
	writeSeq(t, f, data, 0, 1<<20)
	ft := flushAndCheck(t, mem, f, "cl/", p, data)
	key := "cl/" + segment.ObjectName{Cno: ft.Cno}.String()
	h, err := segment.ReadHeader(context.Background(), mem, key, segment.ObjectName{Cno: ft.Cno}, segment.FileTag("cl/"), segment.FormatStream)
	if err != nil {
		t.Fatal(err)
	}
	leaves := (40 << 20) / 4096 / 127
	if int(h.MetaBlocks) > leaves/2 {
		t.Fatalf("part 0 holds %d index nodes for a file of about %d leaves: leaves sent ahead were written again", h.MetaBlocks, leaves)
	}
}

// An object that cannot complete is aborted; it is not an error of the flush.
func TestSendAheadAbortIsNotAnError(t *testing.T) {
	for _, target := range []int64{1 << 20, 12 << 20} {
		t.Run(fmt.Sprint(target), func(t *testing.T) {
			mem := mem.New()
			faults := faulty.New(mem, 3)
			faults.Add(faulty.Rule{Op: staging.OpUploadPart, Nth: 2, Kind: faulty.Error})
			faults.Add(faulty.Rule{Op: staging.OpPut, Match: func(k string) bool { return !strings.HasSuffix(k, "/inode") && !strings.HasSuffix(k, ".0") }, Nth: 3, Kind: faulty.Error})
			p := piecesParams(target)
			f := mustCreate(t, faults, "ab/", p)
			data := pattern(30<<20, 18)
			writeSeq(t, f, data, 0, 1<<20)
			ft := flushAndCheck(t, mem, f, "ab/", p, data)
			if faults.Injected() == 0 {
				t.Fatalf("no fault fired")
			}
			if ft.StreamDeadBytes == 0 {
				t.Fatalf("the failed object's bytes are not counted dead: %+v", ft)
			}
			ups, err := mem.ListMultipartUploads(context.Background(), "ab/")
			if err != nil || len(ups) != 0 {
				t.Fatalf("open uploads after the flush: %v, %v", ups, err)
			}
		})
	}
}

// A panic in an upload task is raised again in the call that next takes the
// object in.
func TestSendAheadPanicReraised(t *testing.T) {
	mem := mem.New()
	g := newGate(mem)
	close(g.open)
	g.panicOn = 1
	p := piecesParams(12 << 20)
	f := mustCreate(t, g, "pa/", p)
	data := pattern(8<<20, 19)
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		writeSeq(t, f, data, 0, 1<<20)
		time.Sleep(50 * time.Millisecond)
		f.Flush(context.Background())
	}()
	if recovered == nil || !strings.Contains(fmt.Sprint(recovered), "injected upload panic") {
		t.Fatalf("recovered %v, want the task's panic", recovered)
	}
}

// An object whose leaves split past the spare before it closes is given up:
// aborted, its blocks still dirty, counted dead.
func TestSendAheadGiveUp(t *testing.T) {
	mem := mem.New()
	p := piecesParams(0)
	p.MetaBlockSize = 256 // 7 entries a leaf: leaves split fast
	const n = 1280        // blocks of one 5 MiB piece
	// Room for the piece, its summary and its leaves with the spare, and
	// not for twice the leaves.
	p.MaxObjectBytes = int64(n)*(4096+16) + 256 + int64(withSpare(n/7+2))*256
	p.StreamSegmentBytes = p.MaxObjectBytes
	f := mustCreate(t, mem, "gu/", p)
	ctx := context.Background()
	model := make([]byte, 2*n*4096)
	// Even blocks first: one piece of scattered blocks, placed.
	for i := 0; i < n; i++ {
		b := pattern(4096, uint64(i))
		f.WriteAt(ctx, b, int64(2*i)*4096)
		copy(model[2*i*4096:], b)
	}
	// Odd blocks split every leaf of that object before it closes.
	for i := 0; i < n; i++ {
		b := pattern(4096, uint64(n+i))
		f.WriteAt(ctx, b, int64(2*i+1)*4096)
		copy(model[(2*i+1)*4096:], b)
	}
	ft := flushAndCheck(t, mem, f, "gu/", p, model)
	if ft.StreamDeadBytes < int64(n)*4096 {
		t.Fatalf("dead bytes %d: the given-up object's %d bytes are not counted", ft.StreamDeadBytes, n*4096)
	}
	ups, _ := mem.ListMultipartUploads(ctx, "gu/")
	if len(ups) != 0 {
		t.Fatalf("the given-up upload is still open: %v", ups)
	}
}

// Large runs and scattered small blocks do not share objects.
func TestIsolation(t *testing.T) {
	for _, target := range []int64{0, 1 << 20, 12 << 20} {
		t.Run(fmt.Sprint(target), func(t *testing.T) {
			mem := mem.New()
			p := piecesParams(target)
			f := mustCreate(t, mem, "is/", p)
			ctx := context.Background()
			const runStart = 10000 // blocks
			runLen := 3000
			model := make([]byte, (runStart+runLen)*4096)
			var small []uint64
			for i := 0; i < runLen; i++ {
				b := pattern(4096, uint64(i))
				f.WriteAt(ctx, b, int64(runStart+i)*4096)
				copy(model[(runStart+i)*4096:], b)
				if i%10 == 0 { // a scattered small write between the big ones
					fbn := uint64(i/10) * 31
					s := pattern(4096, uint64(100000+i))
					f.WriteAt(ctx, s, int64(fbn)*4096)
					copy(model[fbn*4096:], s)
					small = append(small, fbn)
				}
			}
			flushAndCheck(t, mem, f, "is/", p, model)
			runObjs := map[string]bool{}
			pl, err := f.BlockPlacement(ctx, runStart, runLen)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range pl {
				runObjs[x.Key] = true
			}
			for _, fbn := range small {
				pl, _ := f.BlockPlacement(ctx, fbn, 1)
				if runObjs[pl[0].Key] {
					t.Fatalf("small block %d shares object %s with the run", fbn, pl[0].Key)
				}
			}
		})
	}
}
