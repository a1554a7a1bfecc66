package blockmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// countingStore counts the Get requests made of each key, by kind, in front
// of a counting.Store (totals by operation) over a memory store.
type countingStore struct {
	staging.Store
	totals  *counting.Store
	mu      sync.Mutex
	suffix  map[string]int // GUARDED_BY(mu)
	ranged  map[string]int // GUARDED_BY(mu)
	getErr  error          // GUARDED_BY(mu): fail every Get with it when set
	getWait chan struct{}  // GUARDED_BY(mu): Gets wait for it when set
}

func newCountingStore() *countingStore {
	totals := counting.New(mem.New())
	return &countingStore{Store: totals, totals: totals, suffix: map[string]int{}, ranged: map[string]int{}}
}

func (c *countingStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	c.mu.Lock()
	if r.Suffix > 0 {
		c.suffix[key]++
	} else {
		c.ranged[key]++
	}
	err, wait := c.getErr, c.getWait
	c.mu.Unlock()
	if wait != nil {
		<-wait
	}
	if err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	return c.Store.Get(ctx, key, r)
}

func (c *countingStore) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.suffix, c.ranged = map[string]int{}, map[string]int{}
	c.totals.Reset()
}

const (
	testPrefix = "f/file-1/"
	testDBS    = 512
	testMBS    = 256
	// Each data object holds blocksPerObject blocks: whole leaves of
	// sequential appends (7 entries each at 256 B), so a leaf never
	// straddles two objects.
	blocksPerObject = 7 * 20
	dataObjects     = 4
)

var testTag = segment.FileTag("file-1")

// writeCheckpoint builds checkpoint 1 of a file as the engine does: data in
// parts 1..dataObjects with the leaves over it, the index nodes above the
// leaves and the inode in part 0. It returns the inode.
func writeCheckpoint(t *testing.T, st staging.Store) segment.Inode {
	t.Helper()
	ctx := context.Background()
	tr := New(Options{MetaBlockSize: testMBS}, nil)
	builders := make([]*segment.StreamBuilder, dataObjects+1)
	data := make([][]byte, dataObjects+1)
	for p := range builders {
		b, err := segment.NewStreamBuilder(segment.ObjectName{Cno: 1, Part: uint32(p)}, testTag, testDBS, testMBS)
		if err != nil {
			t.Fatal(err)
		}
		builders[p] = b
	}
	for fbn := uint64(0); fbn < blocksPerObject*dataObjects; fbn++ {
		p := 1 + fbn/blocksPerObject
		block := make([]byte, testDBS)
		copy(block, fmt.Sprintf("block %d", fbn))
		crc := segment.Checksum(block)
		slot := builders[p].Place(fbn, crc)
		data[p] = append(data[p], block...)
		if err := tr.Set(ctx, fbn, Value{Ptr: segment.Ptr{Cno: 1, Part: uint32(p), Slot: slot}, CRC: crc}); err != nil {
			t.Fatal(err)
		}
	}
	metas := make([][][]byte, dataObjects+1)
	c, err := tr.Commit(ctx, func(n NodeImage) (segment.Ptr, error) {
		p := 0
		if n.Level == 0 {
			p = 1 + int(n.Lo/blocksPerObject)
			if (n.Hi-1)/blocksPerObject != n.Lo/blocksPerObject && n.Hi != noUpperBound {
				return segment.Ptr{}, fmt.Errorf("leaf [%d, %d) straddles objects", n.Lo, n.Hi)
			}
		}
		metas[p] = append(metas[p], n.Encoded)
		return segment.Ptr{Cno: 1, Part: uint32(p), Slot: uint32(len(metas[p]) - 1)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Height() < 3 {
		t.Fatalf("height %d: want index nodes above the leaves", c.Height())
	}
	inode := segment.Inode{
		Cno: 1, Size: blocksPerObject * dataObjects * testDBS, Format: segment.FormatStream,
		Height: uint8(c.Height()), DataBlockSize: testDBS, MetaBlockSize: testMBS,
		Root: c.Root(), Parts: dataObjects + 1,
	}
	for p, b := range builders {
		var in *segment.Inode
		if p == 0 {
			in = &inode
		}
		tail, err := b.Tail(nil, in, metas[p])
		if err != nil {
			t.Fatal(err)
		}
		key := testPrefix + b.Name().String()
		if _, err := st.Put(ctx, key, append(data[p], tail...), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return inode
}

func TestObjectLoaderColdWalkFetchesEachObjectOnce(t *testing.T) {
	ctx := context.Background()
	st := newCountingStore()
	inode := writeCheckpoint(t, st)
	st.reset()
	l := NewObjectLoader(st, testPrefix, testTag, segment.FormatStream, 1<<20)
	tr := Open(Options{MetaBlockSize: int(inode.MetaBlockSize)}, l, inode.Root, int(inode.Height))

	// Readers in parallel, each over the whole file: loads of one object
	// share one fetch.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); i < blocksPerObject*dataObjects; i++ {
				fbn := (i + uint64(g)*97) % (blocksPerObject * dataObjects)
				v, ok, err := tr.Get(ctx, fbn)
				if err != nil || !ok {
					errs <- fmt.Errorf("get %d: %v, %v", fbn, ok, err)
					return
				}
				if want := 1 + uint32(fbn/blocksPerObject); v.Ptr.Part != want || v.Ptr.Slot != uint32(fbn%blocksPerObject) {
					errs <- fmt.Errorf("get %d = %v", fbn, v)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for p := 0; p <= dataObjects; p++ {
		key := testPrefix + segment.ObjectName{Cno: 1, Part: uint32(p)}.String()
		if st.suffix[key] != 1 || st.ranged[key] != 0 {
			t.Errorf("object %s: %d suffix reads (header and meta), %d ranged reads (meta); want 1 and 0", key, st.suffix[key], st.ranged[key])
		}
	}
	objects := int64(dataObjects + 1)
	if c := st.totals.Snapshot(); c.GetSuffix != objects || c.GetRange != 0 || c.Total().Requests != objects {
		t.Errorf("store saw %v, %d suffix and %d ranged Gets; want %d suffix Gets and nothing else", c, c.GetSuffix, c.GetRange, objects)
	}
	s := l.Stats()
	if s.HeaderReads != dataObjects+1 || s.MetaReads != dataObjects+1 || s.MetaRequests != 0 || s.CachedObjects != dataObjects+1 {
		t.Errorf("stats %+v", s)
	}
	if want := int64(0); s.Evictions != want {
		t.Errorf("%d evictions with a large budget", s.Evictions)
	}
}

// A tail past the loader's guess costs a request of its own for the meta
// region, once: the guess grows to it, so the next object of its size is
// read in one round trip; a tail past segment.MaxTailGuess is not guessed.
func TestObjectLoaderTailGuess(t *testing.T) {
	ctx := context.Background()
	st := newCountingStore()
	writeCheckpoint(t, st)
	st.reset()
	l := NewObjectLoader(st, testPrefix, testTag, segment.FormatStream, 1<<20)
	l.guess = segment.HeaderSize // as after a tail past MaxTailGuess
	ref := func(part uint32) segment.Ptr { return segment.Ptr{Cno: 1, Part: part} }
	for i, s := range []struct {
		part           uint32
		suffix, ranged int
		guessGrew      bool
	}{
		{1, 1, 1, true}, // header, then the region; the guess grows to its tail
		{2, 1, 0, false},
		{3, 1, 0, false},
	} {
		if _, err := l.LoadNode(ctx, ref(s.part)); err != nil {
			t.Fatal(err)
		}
		key := testPrefix + ref(s.part).Object().String()
		if st.suffix[key] != s.suffix || st.ranged[key] != s.ranged {
			t.Errorf("step %d, object %s: %d suffix and %d ranged reads, want %d and %d", i, key, st.suffix[key], st.ranged[key], s.suffix, s.ranged)
		}
		if grew := l.guess > segment.HeaderSize; i == 0 && grew != s.guessGrew {
			t.Errorf("step %d: guess %d", i, l.guess)
		}
	}
	if s := l.Stats(); s.MetaReads != 3 || s.MetaRequests != 1 {
		t.Errorf("stats %+v, want 3 meta regions read, 1 by a request of its own", s)
	}
}

func TestObjectLoaderBudgetAndForget(t *testing.T) {
	ctx := context.Background()
	st := newCountingStore()
	writeCheckpoint(t, st)
	ref := func(part, slot uint32) segment.Ptr { return segment.Ptr{Cno: 1, Part: part, Slot: slot} }
	// Each data object holds 20 leaves of 256 B: room for two regions.
	l := NewObjectLoader(st, testPrefix, testTag, segment.FormatStream, 2*20*testMBS)
	steps := []struct {
		ref       segment.Ptr
		forget    uint32 // part to forget before the load (0: none)
		headers   int64
		evictions int64
	}{
		{ref(1, 0), 0, 1, 0},
		{ref(1, 5), 0, 1, 0},  // kept
		{ref(2, 0), 0, 2, 0},  // second region fits
		{ref(3, 0), 0, 3, 1},  // evicts part 1, the least recently used
		{ref(2, 19), 0, 3, 1}, // still kept
		{ref(1, 1), 0, 4, 2},  // fetched again, evicts part 3
		{ref(2, 3), 2, 5, 2},  // forgotten: fetched again, room left by Forget
	}
	for i, s := range steps {
		if s.forget != 0 {
			l.Forget(segment.ObjectName{Cno: 1, Part: s.forget})
		}
		b, err := l.LoadNode(ctx, s.ref)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if n, err := DecodeNode(testMBS, s.ref, b); err != nil || n.Level != 0 {
			t.Fatalf("step %d: node %v: %v", i, s.ref, err)
		}
		got := l.Stats()
		if got.HeaderReads != s.headers || got.Evictions != s.evictions || got.CachedBytes > 2*20*testMBS {
			t.Fatalf("step %d: stats %+v, want %d header reads, %d evictions", i, got, s.headers, s.evictions)
		}
	}

	none := NewObjectLoader(st, testPrefix, testTag, segment.FormatStream, 0)
	for range 2 {
		if _, err := none.LoadNode(ctx, ref(1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if s := none.Stats(); s.HeaderReads != 2 || s.CachedObjects != 0 {
		t.Fatalf("zero budget: stats %+v", s)
	}
}

func TestObjectLoaderRefusals(t *testing.T) {
	ctx := context.Background()
	st := newCountingStore()
	writeCheckpoint(t, st)
	boom := errors.New("link down")
	tests := []struct {
		name    string
		tag     uint64
		format  segment.Format
		ref     segment.Ptr
		getErr  error
		wantIs  error
		wantRef bool
	}{
		{"another file's object", testTag + 1, segment.FormatStream, segment.Ptr{Cno: 1, Part: 1}, nil, segment.ErrWrongObject, false},
		{"missing object", testTag, segment.FormatStream, segment.Ptr{Cno: 2, Part: 1}, nil, staging.ErrNotFound, false},
		{"slot past the meta blocks", testTag, segment.FormatStream, segment.Ptr{Cno: 1, Part: 1, Slot: 20}, nil, ErrCorruptNode, true},
		{"store error", testTag, segment.FormatStream, segment.Ptr{Cno: 1, Part: 2}, boom, boom, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st.mu.Lock()
			st.getErr = tc.getErr
			st.mu.Unlock()
			defer func() {
				st.mu.Lock()
				st.getErr = nil
				st.mu.Unlock()
			}()
			l := NewObjectLoader(st, testPrefix, tc.tag, tc.format, 1<<20)
			_, err := l.LoadNode(ctx, tc.ref)
			if !errors.Is(err, tc.wantIs) {
				t.Fatalf("err = %v, want %v", err, tc.wantIs)
			}
			var ce *CorruptNodeError
			if tc.wantRef && (!errors.As(err, &ce) || ce.Ref != tc.ref) {
				t.Fatalf("err = %v does not name %v", err, tc.ref)
			}
			if s := l.Stats(); s.CachedObjects != 0 && tc.getErr != nil {
				t.Fatalf("a failed fetch was kept: %+v", s)
			}
		})
	}
}

func TestObjectLoaderWaiterOutlivesCancelledFetcher(t *testing.T) {
	st := newCountingStore()
	writeCheckpoint(t, st)
	gate := make(chan struct{})
	st.mu.Lock()
	st.getWait = gate
	st.mu.Unlock()
	l := NewObjectLoader(st, testPrefix, testTag, segment.FormatStream, 1<<20)
	ref := segment.Ptr{Cno: 1, Part: 1, Slot: 2}

	cctx, cancel := context.WithCancel(context.Background())
	cancel() // the first caller's fetch fails on its context once released
	first := make(chan error, 1)
	go func() {
		_, err := l.LoadNode(cctx, ref)
		first <- err
	}()
	// Wait until the first caller's fetch is in flight, then start a
	// second caller that waits on it.
	for {
		l.mu.Lock()
		n := len(l.inflight)
		l.mu.Unlock()
		if n == 1 {
			break
		}
		runtime.Gosched()
	}
	second := make(chan error, 1)
	go func() {
		_, err := l.LoadNode(context.Background(), ref)
		second <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it reach the wait (either way it must succeed)
	st.mu.Lock()
	st.getWait = nil
	st.mu.Unlock()
	close(gate)
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: err = %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("waiting caller: %v", err)
	}
}

// A pinned object's nodes are served from memory with no request, before
// the store; unpinned, they are fetched again.
func TestObjectLoaderPin(t *testing.T) {
	ctx := context.Background()
	st := newCountingStore()
	inode := writeCheckpoint(t, st)
	name := segment.ObjectName{Cno: 1, Part: 0}
	key := testPrefix + name.String()
	h, err := segment.ReadHeader(ctx, st, key, name, testTag, segment.FormatStream)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := segment.ReadMeta(ctx, st, key, h)
	if err != nil {
		t.Fatal(err)
	}
	l := NewObjectLoader(st, testPrefix, testTag, segment.FormatStream, 1<<20)
	if err := l.Pin(name, h, meta[:len(meta)-1]); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("pin of a short region: %v, want ErrInvalidArgument", err)
	}
	if err := l.Pin(name, h, meta); err != nil {
		t.Fatal(err)
	}
	// The pinned object is served from memory even when the store lost it.
	if err := st.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	st.reset()
	b, err := l.LoadNode(ctx, inode.Root)
	if err != nil || !bytes.Equal(b, meta[int(inode.Root.Slot)*int(h.MetaBlockSize):][:h.MetaBlockSize]) {
		t.Fatalf("load of the pinned root: %v", err)
	}
	if c := st.totals.Snapshot(); c.Total().Requests != 0 {
		t.Fatalf("a pinned load made requests: %v", c)
	}
	l.Unpin(name)
	if _, err := l.LoadNode(ctx, inode.Root); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("load after unpin of a deleted object: %v, want ErrNotFound", err)
	}
}

// Peek answers from loaded nodes only.
func TestTreePeek(t *testing.T) {
	ctx := context.Background()
	st := newCountingStore()
	inode := writeCheckpoint(t, st)
	l := NewObjectLoader(st, testPrefix, testTag, segment.FormatStream, 1<<20)
	tr := Open(Options{MetaBlockSize: int(inode.MetaBlockSize)}, l, inode.Root, int(inode.Height))
	st.reset()
	if _, known := tr.Peek(3); known {
		t.Fatal("Peek knew a key of a tree not loaded")
	}
	if c := st.totals.Snapshot(); c.Total().Requests != 0 {
		t.Fatalf("Peek made requests: %v", c)
	}
	if _, _, err := tr.Get(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if present, known := tr.Peek(3); !present || !known {
		t.Fatalf("Peek after a Get of the same key: %v, %v", present, known)
	}
	empty := New(Options{MetaBlockSize: 256}, nil)
	if present, known := empty.Peek(9); present || !known {
		t.Fatalf("Peek of an empty tree: %v, %v", present, known)
	}
	if n, known := empty.Len(); n != 0 || !known {
		t.Fatalf("Len of an empty tree: %d, %v", n, known)
	}
	if _, known := tr.Len(); known {
		t.Fatal("a tree opened from a root knows its count")
	}
	n, err := tr.CountLen(ctx)
	if got, known := tr.Len(); err != nil || !known || got != n || n != blocksPerObject*dataObjects {
		t.Fatalf("CountLen = %d, %v; Len %d, %v; want %d", n, err, got, known, blocksPerObject*dataObjects)
	}
}
