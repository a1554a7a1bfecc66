package engine

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// blockRef is a mapped block: its number and where it is stored.
type blockRef struct {
	fbn uint64
	v   blockmap.Value
}

// PlannedGet is one ranged GET the read path makes: a stretch of blocks that
// adjoin inside one object, capped at read_get_max_bytes.
type PlannedGet struct {
	Key    string
	Object segment.ObjectName
	Off    int64 // byte offset in the object
	Len    int64
	First  uint64 // first file block
	Blocks int
	refs   []blockRef
}

// ReadPlan is what a read would cost now. It is the read path's own planner:
// ReadAt executes exactly these GETs.
type ReadPlan struct {
	Gets   []PlannedGet
	Dirty  int // blocks served from the dirty tier
	Cached int // blocks served from the data cache
	Holes  int // blocks that read as zeros
	Pinned int // blocks served from a checkpoint being published (WAL)
	// Embedded: blocks served from the copy of part 0 the head carries.
	Embedded int
	// Shared: blocks served by a GET already in flight (another read's, or
	// one sent ahead of a sequential reader) or fetched ahead and kept.
	Shared int
	// waits are the blocks a read takes from others' flights, flights the
	// flights of Gets (claimed reads only).
	waits   []flightWait
	flights []*flight
}

// Placement says where one block of the file is.
type Placement struct {
	FBN    uint64
	Dirty  bool        // in the dirty tier (its stored copy, if any, is stale)
	Hole   bool        // no block: reads as zeros
	Ptr    segment.Ptr // where it is stored (zero for a hole)
	Key    string      // the object's key
	Offset int64       // byte offset in the object
}

// ReadAt reads len(p) bytes at off. At the end of the file it returns what it
// read and io.EOF. It reads exactly the blocks asked for (ReadStream reads
// ahead of sequential readers).
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return f.readAt(ctx, p, off, false)
}

// readPlanLocked fills p (inside the file) from the dirty tier, the cache
// and what else memory holds, and plans the rest: the flights other reads
// sent, and its own GETs (nil: nothing left to read). The caller holds mu
// (shared is enough).
func (f *File) readPlanLocked(ctx context.Context, p []byte, off int64) (*ReadPlan, error) {
	// This read's own GETs are flights (claimed as they are planned): a
	// read that needs their blocks meanwhile waits for them instead of
	// asking again.
	plan, err := f.planLocked(ctx, off, int64(len(p)), true, p, claimRead)
	if err != nil {
		return nil, err
	}
	if len(plan.Gets) == 0 && len(plan.waits) == 0 {
		return nil, nil
	}
	return &plan, nil
}

// readPlanned makes plan's GETs, a few at a time, and waits for the
// flights it takes blocks from, filling p = file[off, off+len(p)) in
// blocks of bs. It needs no lock of f but the blocks' range lock.
func (f *File) readPlanned(ctx context.Context, plan *ReadPlan, p []byte, off, bs int64) error {
	fls := plan.flights
	errs := make([]error, len(fls))
	sem := make(chan struct{}, f.p.Concurrency)
	var wg sync.WaitGroup
	for i, fl := range fls {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			data, err := f.getVerifiedBS(ctx, &fl.g, bs)
			fl.data, fl.err = data, err
			f.rd.mu.Lock()
			f.rd.unregisterLocked(fl)
			f.rd.mu.Unlock()
			close(fl.done)
			if err != nil {
				errs[i] = err
				return
			}
			for j, r := range fl.g.refs {
				copyBlockInto(p, off, r.fbn, bs, data[int64(j)*bs:int64(j+1)*bs])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", f.prefix, off, err)
		}
	}
	if err := f.waitFlights(ctx, p, off, bs, plan.waits); err != nil {
		return fmt.Errorf("read %s at %d: %w", f.prefix, off, err)
	}
	return nil
}

// flightWait is a block a read takes from a flight another read sent.
type flightWait struct {
	fbn uint64
	sl  slot
}

// waitFlights copies the blocks of ws into p as their flights land. A flight
// that failed (its reader gave up, or a read ahead was ended) is no reason
// for this read to fail: it fetches those blocks itself, adjoining ones in
// one GET.
func (f *File) waitFlights(ctx context.Context, p []byte, off, bs int64, ws []flightWait) error {
	var failed []flightWait
	shared := int64(0)
	for _, w := range ws {
		w.sl.fl.wanted()
		select {
		case <-w.sl.fl.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if w.sl.fl.err != nil {
			failed = append(failed, w)
			continue
		}
		j := int64(w.sl.j)
		copyBlockInto(p, off, w.fbn, bs, w.sl.fl.data[j*bs:(j+1)*bs])
		shared++
	}
	if shared > 0 {
		f.rd.mu.Lock()
		f.rd.stats.SharedBlocks += shared
		f.rd.mu.Unlock()
	}
	for i := 0; i < len(failed); {
		// A run of blocks adjoining in one flight is one GET.
		k := i + 1
		for k < len(failed) && failed[k].sl.fl == failed[i].sl.fl && failed[k].sl.j == failed[k-1].sl.j+1 &&
			failed[k].fbn == failed[k-1].fbn+1 {
			k++
		}
		fg := &failed[i].sl.fl.g
		j0, j1 := failed[i].sl.j, failed[k-1].sl.j+1
		g := PlannedGet{Key: fg.Key, Object: fg.Object, Off: fg.Off + int64(j0)*bs, Len: int64(j1-j0) * bs,
			First: failed[i].fbn, Blocks: j1 - j0, refs: fg.refs[j0:j1]}
		data, err := f.getVerifiedBS(ctx, &g, bs)
		if err != nil {
			return err
		}
		for n := i; n < k; n++ {
			j := int64(n - i)
			copyBlockInto(p, off, failed[n].fbn, bs, data[j*bs:(j+1)*bs])
		}
		i = k
	}
	return nil
}

// copyBlockInto copies the part of block fbn (bytes blk) that overlaps
// p = file[off, off+len(p)).
func copyBlockInto(p []byte, off int64, fbn uint64, bs int64, blk []byte) {
	start := int64(fbn) * bs
	lo := max(start, off)
	hi := min(start+bs, off+int64(len(p)))
	if lo >= hi {
		return
	}
	copy(p[lo-off:hi-off], blk[lo-start:hi-start])
}

// claimKind says whether a plan claims the blocks it will GET as flights.
type claimKind int

const (
	claimNone  claimKind = iota // only a plan
	claimRead                   // a read's own GETs
	claimAhead                  // GETs ahead of a sequential reader
)

func zeroBlockIn(p []byte, off int64, fbn uint64, bs int64) {
	start := int64(fbn) * bs
	lo := max(start, off)
	hi := min(start+bs, off+int64(len(p)))
	if lo < hi {
		clear(p[lo-off : hi-off])
	}
}

// dataOffset is where data slot lives in an object of format fm.
func dataOffset(fm segment.Format, bs int64, slot uint32) int64 {
	if fm == segment.FormatParted {
		return segment.HeaderSize + int64(slot)*bs
	}
	return int64(slot) * bs
}

// getVerified is fetchVerified, and puts the verified blocks into the cache.
func (f *File) getVerified(ctx context.Context, g *PlannedGet) ([]byte, error) {
	return f.getVerifiedBS(ctx, g, int64(f.bs))
}

// getVerifiedBS is getVerified for blocks of bs bytes, for a caller that
// does not hold mu.
func (f *File) getVerifiedBS(ctx context.Context, g *PlannedGet, bs int64) ([]byte, error) {
	data, err := f.fetchVerifiedBS(ctx, g, bs)
	if err != nil {
		return nil, err
	}
	for j, r := range g.refs {
		f.cache.put(r.v, data[int64(j)*bs:int64(j+1)*bs])
	}
	return data, nil
}

// fetchVerified makes one planned GET and checks every block's CRC against
// the map, so that a corrupt or foreign object is never read as data.
func (f *File) fetchVerified(ctx context.Context, g *PlannedGet) ([]byte, error) {
	return f.fetchVerifiedBS(ctx, g, int64(f.bs))
}

// fetchVerifiedBS is fetchVerified for blocks of bs bytes, for a caller
// that does not hold mu (coldread.go).
func (f *File) fetchVerifiedBS(ctx context.Context, g *PlannedGet, bs int64) ([]byte, error) {
	data, _, err := f.st.Get(ctx, g.Key, staging.Bytes(g.Off, g.Len))
	if err != nil {
		return nil, fmt.Errorf("get %s bytes %d+%d: %w", g.Key, g.Off, g.Len, err)
	}
	if int64(len(data)) != g.Len {
		return nil, &segment.CorruptError{Key: g.Key, Err: segment.ErrSize,
			Detail: fmt.Sprintf("data range %d+%d returned %d bytes", g.Off, g.Len, len(data))}
	}
	for j, r := range g.refs {
		blk := data[int64(j)*bs : int64(j+1)*bs]
		if c := segment.Checksum(blk); c != r.v.CRC {
			return nil, &segment.CorruptError{Key: g.Key, Err: segment.ErrChecksum,
				Detail: fmt.Sprintf("block %d (slot %d) has CRC %08x, the map says %08x", r.fbn, r.v.Ptr.Slot, c, r.v.CRC)}
		}
	}
	return data, nil
}

// fetchBlocks reads the given mapped blocks into bufs (one block each).
func (f *File) fetchBlocks(ctx context.Context, refs []blockRef, bufs [][]byte) error {
	bs := int64(f.bs)
	for i, r := range refs {
		if b := f.w.pinnedBlock(r.v.Ptr); b != nil {
			copy(bufs[i], b)
			continue
		}
		if b, err := f.embedBlock(r.v); err != nil {
			return fmt.Errorf("block %d: %w", r.fbn, err)
		} else if b != nil {
			copy(bufs[i], b)
			continue
		}
		if f.cache.copyInto(r.v, func(blk []byte) { copy(bufs[i], blk) }) {
			continue
		}
		obj := r.v.Ptr.Object()
		key, err := f.readKey(ctx, obj)
		if err != nil {
			return fmt.Errorf("block %d: %w", r.fbn, err)
		}
		g := PlannedGet{Key: key, Object: obj, Off: dataOffset(f.format, bs, r.v.Ptr.Slot), Len: bs,
			First: r.fbn, Blocks: 1, refs: []blockRef{r}}
		data, err := f.getVerified(ctx, &g)
		if err != nil {
			return err
		}
		copy(bufs[i], data)
	}
	return nil
}

// Plan returns what a read of [off, off+n) would cost now: the GETs it would
// make (after loading the index nodes it needs, as the read would) and the
// blocks it would serve from memory.
func (f *File) Plan(ctx context.Context, off, n int64) (ReadPlan, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if off < 0 || n < 0 {
		return ReadPlan{}, fmt.Errorf("plan %s at %d+%d: %w", f.prefix, off, n, ErrInvalid)
	}
	if off >= f.size {
		return ReadPlan{}, nil
	}
	n = min(n, f.size-off)
	return f.planLocked(ctx, off, n, false, nil, claimNone)
}

// BlockPlacement says which object and offset holds each of the n blocks from
// block start.
func (f *File) BlockPlacement(ctx context.Context, start uint64, n int) ([]Placement, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Placement, n)
	for i := range out {
		out[i] = Placement{FBN: start + uint64(i), Hole: true}
		if f.dirty[start+uint64(i)] != nil {
			out[i].Dirty = true
		}
	}
	bs := int64(f.bs)
	err := f.tree.Scan(ctx, start, start+uint64(n), func(fbn uint64, v blockmap.Value) error {
		pl := &out[fbn-start]
		pl.Hole = false
		pl.Ptr = v.Ptr
		key, err := f.readKey(ctx, v.Ptr.Object())
		if err != nil {
			return err
		}
		pl.Key = key
		pl.Offset = dataOffset(f.format, bs, v.Ptr.Slot)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("placement of %s blocks %d+%d: %w", f.prefix, start, n, err)
	}
	for i := range out {
		if out[i].Dirty {
			out[i].Hole = false
		}
	}
	return out, nil
}

// blockCache keeps verified data blocks read from the store, by pointer and
// checksum: objects are immutable, but a name may be created again after
// the object that had it was removed (by the cleaner, when no checkpoint
// used it), and the checksum the map gives tells the two apart.
//
// It holds at most max bytes, least recently used first out, and with a
// budget every block it keeps is drawn from the budget's read share
// (TryAcquireRead): when that is full, the cache gives up its own oldest
// blocks to make room, and when it has none to give the block is not kept.
type blockCache struct {
	max    int64   // set once
	budget *Budget // set once; may be nil
	mu     sync.Mutex
	bytes  int64                      // GUARDED_BY(mu)
	lru    *list.List                 // GUARDED_BY(mu)
	idx    map[cacheKey]*list.Element // GUARDED_BY(mu)
}

type cacheKey struct {
	ptr segment.Ptr
	crc uint32
}

type cacheEntry struct {
	key  cacheKey
	data []byte
}

func newBlockCache(max int64, budget *Budget) *blockCache {
	return &blockCache{max: max, budget: budget, lru: list.New(), idx: make(map[cacheKey]*list.Element)}
}

func keyOf(v blockmap.Value) cacheKey { return cacheKey{ptr: v.Ptr, crc: v.CRC} }

func (c *blockCache) has(v blockmap.Value) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.idx[keyOf(v)]
	return ok
}

// copyInto calls fn with the cached bytes of v, if any, under the cache lock.
func (c *blockCache) copyInto(v blockmap.Value, fn func([]byte)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.idx[keyOf(v)]
	if !ok {
		return false
	}
	c.lru.MoveToFront(e)
	fn(e.Value.(*cacheEntry).data)
	return true
}

func (c *blockCache) put(v blockmap.Value, blk []byte) {
	n := int64(len(blk))
	if c.max <= 0 || n > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := keyOf(v)
	if e, ok := c.idx[k]; ok {
		c.lru.MoveToFront(e)
		return
	}
	for c.bytes+n > c.max {
		c.evictLocked()
	}
	if c.budget != nil {
		for !c.budget.TryAcquireRead(n) {
			if c.lru.Len() == 0 {
				return // the read share is held by others: not kept
			}
			c.evictLocked()
		}
	}
	c.idx[k] = c.lru.PushFront(&cacheEntry{key: k, data: append([]byte(nil), blk...)})
	c.bytes += n
}

// evictLocked drops the least recently used block; the caller holds mu and
// knows there is one.
func (c *blockCache) evictLocked() {
	e := c.lru.Back()
	ce := e.Value.(*cacheEntry)
	c.lru.Remove(e)
	delete(c.idx, ce.key)
	c.bytes -= int64(len(ce.data))
	if c.budget != nil {
		c.budget.ReleaseRead(int64(len(ce.data)))
	}
}

// clear empties the cache and returns its budget.
func (c *blockCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Init()
	clear(c.idx)
	if c.budget != nil {
		c.budget.ReleaseRead(c.bytes)
	}
	c.bytes = 0
}
