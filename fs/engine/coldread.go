package engine

import (
	"context"
	"fmt"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
)

// Reading a block before changing part of it, without File.mu held.
//
// A partial write over a block that is not dirty, the tail a shrinking
// truncate zeroes, and the edges of a zeroed range first need the bytes the
// block has (read-modify-write). Reading them may look the block up in a map
// whose nodes are not loaded yet and GET the block: store requests, which
// are not made under File.mu (doc.go, Locking). So the change takes what it
// needs under mu, lets mu go, reads, takes mu again and checks that what it
// read is still what the block holds, reading again if not:
//
//  1. Under mu (coldBlocks.readyLocked), each block is looked up in memory
//     only: past the end or a hole (zeros), or its map value, which is
//     served at once from the WAL publish's pinned part 0, the head's
//     embedded part 0 or the block cache. A value whose bytes are not in
//     memory is noted with the map it came from (f.tree, the lineage); a
//     map whose path to the block is not loaded is snapshotted
//     (blockmap.Tree.Snapshot: O(1), and a snapshot may be read while the
//     tree it came from changes under mu).
//  2. Without mu (coldBlocks.fetch): the snapshot is looked up (loading its
//     nodes, which the map it came from shares), or the value's bytes are
//     fetched and verified against its CRC.
//  3. Under mu again, step 1 is repeated. A block whose map value (in the
//     same map, of the same lineage) is the one fetched takes the fetched
//     bytes; a block that changed is looked up again; one that became dirty
//     is the change's to use as it is. The change applies only when every
//     block it needs is ready in one hold of mu, and copies the bytes in
//     that same hold (coldBlocks.fillLocked).
//
// What the check is for. While a change holds a block's range lock
// exclusively, and has taken the WAL's lease (every change calls walLog
// first), nothing changes that block's mapping or makes it dirty: a flush,
// its merge or rollback, a refresh, a WAL publish or recovery, Rollback,
// Close, a clone and LetGoWAL hold every block; a truncate or a zero holds
// the blocks it changes (a shrinking truncate every block from the new
// end); walLog adopts a head and applies another writer's records only
// while no lease is held, which no change holding a block after its own
// walLog meets; partial segments and sending ahead place only dirty blocks;
// a publish that lands unpins part 0 (its bytes are then in the store) and
// drops the head's embedded copy the same way. What does change meanwhile:
// the size (a write elsewhere extending the file, a truncate growing it
// from below the block: the block past the old end was zeros and is a hole
// now), the map's other entries and nodes (copy-on-write, the block's value
// unchanged), the cache. The comparison in step 3 is therefore the one the
// rules make sufficient (same map, same lineage, same value, and zeros
// still zeros), and it also catches a change those rules do not foresee:
// a test changes the block's value by hand while its GET is held
// (coldread_test.go) and the write reads it again.

// coldBlocks are the blocks one change reads before it applies: at most a
// handful (the edges of a write or a zeroed range, a truncate's last block).
type coldBlocks struct {
	bs []*coldBlock
	// walk, when set, is the walk of the map the change makes under mu
	// (a truncate's cut, the deletes of a zeroed range), made first on a
	// snapshot without mu so that the nodes it needs are loaded (the
	// snapshot shares them with f.tree). walkTree is the map it was
	// snapshotted from and walked says it was; walkSnap is the snapshot
	// until then.
	walk     func(ctx context.Context, t *blockmap.Tree) error
	walkTree *blockmap.Tree
	walkSnap *blockmap.Tree
	walked   bool
}

// coldBlock is what was found of one block, and the map it was found in.
type coldBlock struct {
	fbn  uint64
	tree *blockmap.Tree // f.tree when it was looked up
	lin  uint64         // f.linCno then
	// snap: the path to fbn was not in memory; look it up in this snapshot
	// of tree without mu. Cleared once looked up.
	snap *blockmap.Tree
	// looked: the lookup is done; mapped and v are its answer.
	looked bool
	mapped bool
	v      blockmap.Value
	// data is v's bytes once read, verified (one block); pooled says it
	// came from getBlockBuf. err: the lookup or the read failed.
	data   []byte
	pooled bool
	err    error
	cached bool // data was put into the block cache
	// bs and format are f's then (read without mu by fetch).
	bs     int
	format segment.Format
}

func (c *coldBlocks) get(fbn uint64) *coldBlock {
	for _, b := range c.bs {
		if b.fbn == fbn {
			return b
		}
	}
	return nil
}

func (c *coldBlocks) set(b *coldBlock) {
	for i, o := range c.bs {
		if o.fbn == b.fbn {
			o.release()
			c.bs[i] = b
			return
		}
	}
	c.bs = append(c.bs, b)
}

// release returns the pooled buffers. The caller is done with c.
func (c *coldBlocks) release() {
	for _, b := range c.bs {
		b.release()
	}
	c.bs = nil
}

func (b *coldBlock) release() {
	if b.pooled {
		putBlockBuf(b.data)
	}
	b.data, b.pooled = nil, false
}

// lookKind is how a block reads now, from memory only.
type lookKind int

const (
	lookZero    lookKind = iota // past the end, or a hole
	lookMapped                  // stored: v
	lookUnknown                 // the path to it in the map is not loaded
)

// lookLocked looks block fbn of a file of the given size (f.size, or the
// size a change will have given it when it fills the block) up with mu
// held, never making a request.
func (f *File) lookLocked(fbn uint64, size int64) (blockmap.Value, lookKind, error) {
	if int64(fbn)*int64(f.bs) >= size {
		return blockmap.Value{}, lookZero, nil
	}
	present, known := f.tree.Peek(fbn)
	switch {
	case !known:
		return blockmap.Value{}, lookUnknown, nil
	case !present:
		return blockmap.Value{}, lookZero, nil
	}
	// Every node on the path is in memory (Peek): Get loads nothing.
	v, ok, err := f.tree.Get(context.Background(), fbn)
	if err != nil || !ok {
		return blockmap.Value{}, lookZero, err
	}
	return v, lookMapped, nil
}

// matches says whether b was found in f's map as it is now.
func (b *coldBlock) matches(f *File) bool {
	return b != nil && b.tree == f.tree && b.lin == f.linCno.Load()
}

// readyLocked says whether every block of fbns that is not dirty can be
// filled now from memory or from what was read (fillLocked), the file being
// of the given size then, and the map walked (walk), with mu held
// exclusively (a snapshot of the map may be taken). What is missing is
// noted for fetch.
func (c *coldBlocks) readyLocked(f *File, fbns []uint64, size int64) bool {
	ready := true
	for _, fbn := range fbns {
		if f.dirty[fbn] != nil {
			continue // the change uses the dirty block as it is
		}
		if !c.readyOneLocked(f, fbn, size) {
			ready = false
		}
	}
	if c.walk != nil && (c.walkTree != f.tree || !c.walked) {
		// Nodes once loaded stay loaded, and changes under mu add only
		// loaded nodes: a walk of this very map is not needed again.
		c.walkTree, c.walkSnap, c.walked = f.tree, f.tree.Snapshot(), false
		ready = false
	}
	return ready
}

func (c *coldBlocks) readyOneLocked(f *File, fbn uint64, size int64) bool {
	b := c.get(fbn)
	v, how, err := f.lookLocked(fbn, size)
	switch {
	case err != nil || how == lookZero:
		return true
	case how == lookUnknown:
		if b.matches(f) && !b.looked && b.err != nil {
			return true // the lookup failed: fillLocked returns its error
		}
		c.set(&coldBlock{fbn: fbn, tree: f.tree, lin: f.linCno.Load(), snap: f.tree.Snapshot(),
			bs: f.bs, format: f.format})
		return false
	}
	if b.matches(f) && b.looked && b.mapped && b.v == v && (b.data != nil || b.err != nil) {
		if b.data != nil && !b.cached {
			// Put in the cache now that it is known to be the block's.
			f.cache.put(v, b.data)
			b.cached = true
		}
		return true
	}
	nb := &coldBlock{fbn: fbn, tree: f.tree, lin: f.linCno.Load(), looked: true, mapped: true, v: v,
		bs: f.bs, format: f.format}
	// The bytes may be in memory: the copy keeps them (a read ahead may
	// evict the cache's copy before the change applies).
	if mem, err := f.memBlockLocked(v); err != nil {
		nb.err = err
	} else if mem != nil {
		nb.data, nb.pooled = getBlockBuf(f.bs), true
		copy(nb.data, mem)
	} else if !f.cache.copyInto(v, func(blk []byte) {
		nb.data, nb.pooled = getBlockBuf(f.bs), true
		copy(nb.data, blk)
	}) {
		c.set(nb)
		return false
	}
	nb.cached = true
	c.set(nb)
	return true
}

// memBlockLocked returns v's bytes if f holds them in memory apart from the
// cache: the WAL publish's pinned part 0, or the head's embedded copy of
// its part 0. The caller holds mu.
func (f *File) memBlockLocked(v blockmap.Value) ([]byte, error) {
	if b := f.w.pinnedBlock(v.Ptr); b != nil {
		return b, nil
	}
	return f.embedBlock(v)
}

// fetch does, without mu, what readyLocked noted: a lookup in a snapshot of
// the map, or the read of a value's bytes. A failure is kept on its block
// (fillLocked returns it if the block is still as it was).
func (c *coldBlocks) fetch(ctx context.Context, f *File) {
	if c.walkSnap != nil {
		// A failure is met again by the walk under mu, which returns it.
		_ = c.walk(ctx, c.walkSnap)
		c.walkSnap, c.walked = nil, true
	}
	for _, b := range c.bs {
		switch {
		case b.snap != nil:
			// Only the lookup: where its value leads may be in memory (a
			// pinned or embedded part 0), which the next readyLocked sees.
			v, ok, err := b.snap.Get(ctx, b.fbn)
			b.snap = nil
			if err != nil {
				b.err = err
				continue
			}
			b.looked, b.mapped, b.v = true, ok, v
		case b.looked && b.mapped && b.data == nil && b.err == nil:
			b.data, b.err = f.fetchBlock(ctx, b.fbn, b.v, b.lin, b.bs, b.format)
		}
	}
}

// fetchBlock GETs one block of the map of lineage lin and verifies it. It
// takes no lock: what it needs of f is given.
func (f *File) fetchBlock(ctx context.Context, fbn uint64, v blockmap.Value, lin uint64, bs int, fm segment.Format) ([]byte, error) {
	obj := v.Ptr.Object()
	key, _, err := f.space.Key(ctx, lin, obj)
	if err != nil {
		return nil, fmt.Errorf("block %d: %w", fbn, err)
	}
	g := PlannedGet{Key: key, Object: obj, Off: dataOffset(fm, int64(bs), v.Ptr.Slot), Len: int64(bs),
		First: fbn, Blocks: 1, refs: []blockRef{{fbn: fbn, v: v}}}
	return f.fetchVerifiedBS(ctx, &g, int64(bs))
}

// fillLocked fills buf with block fbn as f holds it now, from memory or
// from what c read, with mu held; ok is false when that needs a request
// (the caller did not make c ready for fbn in this hold of mu).
func (c *coldBlocks) fillLocked(f *File, fbn uint64, buf []byte) (ok bool, err error) {
	if c == nil {
		return false, nil
	}
	v, how, err := f.lookLocked(fbn, f.size)
	b := c.get(fbn)
	switch {
	case err != nil:
		return true, err
	case how == lookZero:
		clear(buf)
		return true, nil
	case how == lookUnknown:
		if b.matches(f) && !b.looked && b.err != nil {
			return true, b.err
		}
		return false, nil
	}
	if !b.matches(f) || !b.looked || !b.mapped || b.v != v {
		return false, nil
	}
	if b.err != nil {
		return true, b.err
	}
	if b.data == nil {
		return false, nil
	}
	copy(buf, b.data)
	return true, nil
}

// readColdLocked makes c ready for the blocks fbns of a file of the given
// size (readyLocked), letting mu go for the requests it makes: the caller
// holds mu exclusively, and holds it again on return, but whatever it
// looked at before may have changed if mu was let go (relocked).
func (f *File) readColdLocked(ctx context.Context, c *coldBlocks, fbns []uint64, size int64) (relocked bool) {
	for !c.readyLocked(f, fbns, size) {
		f.mu.Unlock()
		c.fetch(ctx, f)
		f.mu.Lock()
		relocked = true
	}
	return relocked
}

// partEdges are the blocks that [off, off+n) covers only in part: at most
// its first and its last.
func partEdges(off, n, bs int64) []uint64 {
	if n <= 0 {
		return nil
	}
	end := off + n
	first, last := off/bs, (end-1)/bs
	var out []uint64
	if off%bs != 0 || end < (first+1)*bs {
		out = append(out, uint64(first))
	}
	if last != first && end%bs != 0 {
		out = append(out, uint64(last))
	}
	return out
}
