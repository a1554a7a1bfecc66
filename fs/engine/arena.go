package engine

import (
	"sync/atomic"

	"github.com/ckptfs/ckptfs/segment"
)

// Sending a long sequential stream without copying it (sent ahead in
// multipart pieces, or in whole objects: a target within one piece, and
// always for Parted).
//
// A block a long stream makes dirty gets its buffer from the stream's arena:
// one piece's worth of memory (segment_mpu_chunk_size), carved block by
// block in file order. When the sender places a piece whose blocks are
// consecutive slots of one arena, the piece is those slots as they lie: the
// bytes go from the kernel's write into the arena and from there to the
// store, copied once. Any other piece (scattered blocks, the last piece of
// an object, which carries the tail) is copied into a piece buffer as
// before.
//
// When objects are sent whole, an arena holds one object's blocks
// (sender.wholeBlocks: as many as surely fit the target with their leaves)
// and room for the rest of the object: a Parted header before the slots, the
// tail after them. An object that is exactly one arena's blocks, in order,
// is the arena's memory, header and tail written into its room; any other
// is copied as before, and one that begins inside an arena ends at its end,
// so that the next begins with the next arena.
//
// A slot may be in a piece in flight, so a block never changes in its slot:
// before a write, zero or merge changes a block that has one, the block
// takes a buffer of its own (ownLocked; touchLocked has moved its gen, so
// the piece's copy no longer counts as the block's). An arena is freed when
// nothing holds it: its carved blocks still in the dirty tier, the pieces in
// flight over it, and the stream it fills (until the stream carves past its
// end, ends, or the file flushes, rolls back or closes).
//
// An arena is drawn whole from the mount's budget when it is made (a stream
// that finds no room for it takes blocks from the pool, one at a time, as
// any other write does) and returned whole when freed; its blocks draw
// nothing more. File.dirtyB still counts every dirty block.
type arena struct {
	buf []byte // the slots
	// raw is the allocation: the slots from front, and room after them. An
	// arena of whole objects (wholeArenaLocked) holds one object's blocks,
	// with room for a Parted header before them and the tail after.
	raw    []byte
	front  int
	held   int64 // drawn from the budget
	bs     int
	first  uint64       // the block of slot 0
	carved int          // slots handed out; set to the end when it stops filling
	refs   atomic.Int32 // carved blocks holding a slot, pieces in flight, the filling stream
	kept   atomic.Bool  // a store keeps slots of it: never back to the pool
	budget *Budget
}

// newArena returns an arena of n blocks from first, held by its stream.
func newArena(bs, n int, first uint64, b *Budget) *arena {
	return newRoomyArena(bs, n, 0, 0, first, b)
}

// newRoomyArena is newArena with front bytes of room before the slots and
// tail after them, all drawn from b by the caller (held).
func newRoomyArena(bs, n, front, tail int, first uint64, b *Budget) *arena {
	raw := allocPiece(front+bs*n, tail)
	end := front + bs*n
	a := &arena{raw: raw, buf: raw[front:end:end], front: front, held: int64(front + bs*n + tail), bs: bs, first: first, budget: b}
	a.refs.Store(1)
	return a
}

// next is the block the next slot is for.
func (a *arena) next() uint64 { return a.first + uint64(a.carved) }

func (a *arena) full() bool { return a.carved*a.bs == len(a.buf) }

// carve hands the next slot to a new dirty block.
func (a *arena) carve() []byte {
	i := a.carved
	a.carved++
	a.refs.Add(1)
	return a.buf[i*a.bs : (i+1)*a.bs : (i+1)*a.bs]
}

// slots is n slots from slot i, for a piece (which holds a reference).
func (a *arena) slots(i, n int) []byte {
	a.refs.Add(1)
	return a.buf[i*a.bs : (i+n)*a.bs : (i+n)*a.bs]
}

// release drops one reference; the last frees the memory and its budget.
func (a *arena) release() {
	switch n := a.refs.Add(-1); {
	case n == 0:
		if a.budget != nil {
			a.budget.Release(a.held)
		}
		if !a.kept.Load() {
			freePiece(a.raw)
		}
	case n < 0:
		panic("engine: arena released more often than held")
	}
}

// arenaFor returns the arena a new dirty block fbn of stream seq is carved
// from, or nil for a block from the pool: a short stream, sending ahead off
// or in whole objects, a block that does not follow the stream's arena, or
// no room in the budget for a new one. A new arena of pieces starts only
// where a piece would: when the block before it is not waiting to be sent
// (or is the end of the stream's last arena), so that the sender's pieces
// and the arenas fall on the same blocks. An arena of whole objects starts
// after waiting blocks too: a whole object is sent only once a target's
// worth waits, so some always wait when a stream becomes long. The object
// that takes them is copied, the next ends at the arena's end
// (wholeArenaLocked), and the objects fall on the arenas from then on.
func (f *File) arenaFor(fbn uint64, seq *seqStream) *arena {
	bs := int64(f.bs)
	perPiece := int(f.p.ChunkSize / bs)
	front, tail := 0, 0
	if f.sendsWhole() {
		// One whole object's blocks, with room for its header and tail.
		perPiece, tail = f.s.wholeBlocks()
		if f.format == segment.FormatParted {
			front = segment.HeaderSize
		}
	}
	if seq == nil || f.noArenas || !f.sendAheadOn() || perPiece < 2 ||
		seq.bytes < int64(f.s.runBlocks())*bs {
		return nil
	}
	a := seq.fill
	if a != nil && !a.full() && a.next() == fbn {
		return a
	}
	follows := a != nil && a.next() == fbn
	if _, waiting := f.s.unsent[fbn-1]; fbn > 0 && waiting && !follows && !f.sendsWhole() {
		return nil
	}
	if f.budget != nil && !f.budget.TryAcquire(int64(front+tail)+int64(perPiece)*bs) {
		return nil
	}
	f.endFill(seq)
	seq.fill = newRoomyArena(f.bs, perPiece, front, tail, fbn, f.budget)
	return seq.fill
}

// endFill stops seq's arena filling.
func (f *File) endFill(seq *seqStream) {
	if a := seq.fill; a != nil {
		seq.fill = nil
		a.carved = len(a.buf) / a.bs
		a.release()
	}
}

// endFillsLocked stops every stream's arena filling: at a flush, a
// rollback and Close, so that an idle file holds no memory beyond its
// dirty blocks.
func (f *File) endFillsLocked() {
	for _, s := range f.streams {
		f.endFill(s)
	}
}

// ownLocked gives d a buffer of its own in place of its arena slot, before
// d changes: the slot may be in a piece in flight.
func (f *File) ownLocked(d *dirtyBlock) {
	if d.arena == nil {
		return
	}
	b := getBlockBuf(f.bs)
	copy(b, d.buf)
	if f.budget != nil {
		f.budget.Force(int64(f.bs))
	}
	d.arena.release()
	d.arena, d.buf = nil, b
}

// freeDirtyBuf frees a dirty block's buffer: its slot, or a pool buffer and
// its share of the budget. The caller clears or replaces d.buf.
func (f *File) freeDirtyBuf(d *dirtyBlock) {
	if d.arena != nil {
		d.arena.release()
		d.arena = nil
		return
	}
	f.freeBlock(d.buf)
}

// arenaRunLocked returns the arena whose consecutive slots from i hold
// blocks, in order: a piece that needs no copy. Nil for the last piece of
// an object (its tail follows the data in the same buffer).
func (s *sender) arenaRunLocked(blocks []uint64, last bool) (*arena, int) {
	f := s.f
	if last || len(blocks) == 0 {
		return nil, 0
	}
	a := f.dirty[blocks[0]].arena
	if a == nil {
		return nil, 0
	}
	for i, fbn := range blocks {
		if d := f.dirty[fbn]; d.arena != a || d.ref != nil || fbn != blocks[0]+uint64(i) {
			return nil, 0
		}
	}
	return a, int(blocks[0] - a.first)
}
