package engine

import (
	"context"
	"errors"

	"github.com/ckptfs/ckptfs/blockmap"
)

// What goes on while a Flush has let go of File.mu (flushAttempt, unlocked).
//
// A Flush holds flushMu exclusively, and blocks [0, hi) shared, hi being
// past the file's end and every dirty block (flushHold.endLocked): nothing
// that the checkpoint holds can change, and reads anywhere go on. It holds
// mu exclusively only to take what it publishes (the size, the mtime, a
// snapshot of the map, the records below), to name its objects and to adopt
// the result; it takes its dirty blocks holding mu shared, a slice at a time
// (dirtySliceShared), and plans (packs, commits), sends, and frees what it
// published without mu. Meanwhile (gate.writes) a write at an offset
// (WriteAt) whose blocks are all past hi goes on too: it makes new dirty
// blocks and moves the size, which stay for the next checkpoint (a write
// that comes while the flush backs off waits). Such a write neither sends
// ahead nor writes a partial segment (those place blocks in the map the
// flush is replacing), and one that would wait for the memory budget waits
// for the flush instead (the flush frees what it published). A write into
// [0, hi) waits for the flush on its range lock; every other change
// (truncate, zero, extend, append, a write by reference) and every
// operation that takes every block (close, rollback, refresh, a copy) waits
// on flushMu. SetMtime goes on (it holds no block): the flush publishes the
// mtime it took, and a later one stays to publish.
//
// The changes a merge replays (the "since head" records) that such writes
// make go into records of their own (sinceRecords): if the head lands they
// are all that happened since it; if not, they are added to the records the
// flush set aside, so that a merge still replays everything since the head
// it builds on.

// pubGate is set (File.gate) while a Flush has let go of mu.
type pubGate struct {
	done chan struct{} // closed when the flush has mu again
	// writes: writes past hi go on; otherwise every write waits for done
	// (the flush is about to take what it publishes, or backs off).
	writes bool
	hi     uint64
}

// errFlushGate: a write past a flush's blocks needs what only the flush's
// end gives (room in the memory budget); it waits for it and prepares again.
var errFlushGate = errors.New("waits for the flush")

// openGateLocked lets go of mu for a Flush, setting the gate; closeGate
// takes mu again and lifts it.
func (f *File) openGateLocked(writes bool, hi uint64) *pubGate {
	g := &pubGate{done: make(chan struct{}), writes: writes, hi: hi}
	f.gate = g
	f.mu.Unlock()
	return g
}

func (f *File) closeGate(g *pubGate) {
	f.mu.Lock()
	f.gate = nil
	close(g.done)
}

// waitGateLocked: with a gate set that holds writes, let go of mu until it
// is lifted and say so (the caller checks again what it checked under mu).
func (f *File) waitGateLocked(ctx context.Context) (bool, error) {
	g := f.gate
	if g == nil || g.writes {
		return false, nil
	}
	return true, f.waitGateDoneLocked(ctx, g)
}

// waitGateDoneLocked lets go of mu until gate g is lifted, or ctx ends (the
// kernel's interrupt of the write waiting: it has changed nothing yet); mu
// is held again when it returns.
func (f *File) waitGateDoneLocked(ctx context.Context, g *pubGate) error {
	f.mu.Unlock()
	defer f.mu.Lock()
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dirtySliceShared calls each for every dirty block, holding mu shared a
// slice of dirtySlice blocks at a time and letting go of it between slices,
// so that a write waiting for mu waits for one slice at most. The caller
// holds nothing of mu. size, if set, is called first, under mu, with the
// number of dirty blocks. A change made between slices is to the walk what
// a range loop's own change is to it: a block made dirty meanwhile may be
// walked or not, one that left before it was reached is not, every other
// is walked once.
func (f *File) dirtySliceShared(size func(int), each func(uint64, *dirtyBlock)) {
	f.mu.RLock()
	if size != nil {
		size(len(f.dirty))
	}
	n := 0
	for fbn, d := range f.dirty {
		if n++; n%dirtySlice == 0 {
			f.mu.RUnlock()
			if f.sliceHook != nil {
				f.sliceHook()
			}
			f.mu.RLock()
		}
		each(fbn, d)
	}
	f.mu.RUnlock()
}

// flushHold is the blocks an unlocked Flush holds: [0, hi) shared, or every
// block exclusively (excl) while it merges or rolls back.
type flushHold struct {
	hi      uint64
	excl    bool
	release func()
	// dirtyEnd is past every dirty block, when counted. While a Flush
	// holds flushMu only WriteAt (and the flush itself) makes blocks dirty,
	// each below the end the write moves the file to, so that
	// max(dirtyEnd, the file's end) is past every dirty block without
	// counting them again; a merge or a rollback (excl) makes it uncounted.
	// (A write past the end still copying, whose blocks the count missed,
	// has not moved the end yet: its blocks are past the size the flush
	// publishes, and past its hold, and stay dirty.)
	dirtyEnd uint64
	counted  bool
}

// endLocked is the first block past the file's end and every dirty block:
// what a Flush holds is [0, endLocked()).
func (h *flushHold) endLocked(f *File) uint64 {
	return max(h.dirtyEnd, uint64((f.size+int64(f.bs)-1)/int64(f.bs)), 1)
}

// take takes blocks [0, hi) shared and mu, hi covering the file then; the
// caller holds nothing of f but flushMu.
func (h *flushHold) take(f *File) {
	if !h.counted {
		h.dirtyEnd = 0
		f.dirtySliceShared(nil, func(fbn uint64, _ *dirtyBlock) { h.dirtyEnd = max(h.dirtyEnd, fbn+1) })
		h.counted = true
	}
	for {
		f.mu.RLock()
		hi := h.endLocked(f)
		f.mu.RUnlock()
		release := f.ranges.lockFlush(0, hi)
		f.mu.Lock()
		if h.endLocked(f) <= hi {
			h.hi, h.excl, h.release = hi, false, release
			return
		}
		f.mu.Unlock()
		release()
	}
}

// sharedLocked makes the hold [0, hi) shared with hi covering the file as
// it is now (writes past the old hi since, an exclusive hold), taking mu
// again if it must let go of it.
func (h *flushHold) sharedLocked(f *File) {
	if !h.excl && h.endLocked(f) <= h.hi {
		return
	}
	f.mu.Unlock()
	h.release()
	h.take(f)
}

// allLocked makes the hold every block, exclusively: a merge or a rollback
// changes blocks anywhere.
func (h *flushHold) allLocked(f *File) {
	if h.excl {
		return
	}
	f.mu.Unlock()
	h.release()
	h.release = f.ranges.lock(allBlocks.lo, allBlocks.hi, true)
	h.excl, h.counted = true, false
	f.mu.Lock()
}

// sinceRecords is what a merge replays of this writer's changes since its
// head (File.written and the fields after it, merge.go).
type sinceRecords struct {
	written   map[uint64]blockmap.Value
	zeroed    map[uint64]struct{}
	minSize   int64
	partial   map[uint64]*setBytes
	writeEnd  int64
	zeroAfter []byteRange
	zeroPast  int64
	appends   appendRun
}

// takeSinceLocked sets the records aside and starts new ones, empty.
func (f *File) takeSinceLocked() sinceRecords {
	s := sinceRecords{f.written, f.zeroed, f.minSize, f.partial, f.writeEnd, f.zeroAfter, f.zeroPast, f.appends}
	f.resetRecords()
	return s
}

// resetRecords empties the records of changes since the head.
func (f *File) resetRecords() {
	f.written = make(map[uint64]blockmap.Value)
	f.zeroed = make(map[uint64]struct{})
	f.minSize = noTruncate
	f.partial = nil
	f.writeEnd = 0
	f.zeroAfter = nil
	f.zeroPast = noTruncate
	f.appends = appendRun{}
}

// putBackSinceLocked returns to the records s set aside, with the changes
// recorded since added after them: writes at offsets past hi (the only
// changes made while they were aside), which made their blocks dirty, n of
// them (dirtyPastLocked).
func (f *File) putBackSinceLocked(s sinceRecords, hi uint64, n int) {
	for fbn, v := range f.written {
		s.written[fbn] = v
	}
	for fbn := range f.dirtyPastLocked(hi, n) {
		delete(s.zeroed, fbn) // written whole or in part since
		if _, part := f.partial[fbn]; !part {
			delete(s.partial, fbn) // written whole since
		}
	}
	for fbn := range f.zeroed {
		s.zeroed[fbn] = struct{}{}
	}
	for fbn, set := range f.partial {
		old, ok := s.partial[fbn]
		if !ok {
			if s.partial == nil {
				s.partial = make(map[uint64]*setBytes)
			}
			s.partial[fbn] = set
			continue
		}
		set.each(f.bs, func(lo, hi int) { old.add(lo, hi, f.bs) })
	}
	s.minSize = min(s.minSize, f.minSize)
	s.writeEnd = max(s.writeEnd, f.writeEnd)
	s.zeroAfter = append(s.zeroAfter, f.zeroAfter...)
	s.zeroPast = min(s.zeroPast, f.zeroPast)
	if f.appends.ok {
		s.appends = f.appends
	}
	f.written, f.zeroed, f.minSize, f.partial = s.written, s.zeroed, s.minSize, s.partial
	f.writeEnd, f.zeroAfter, f.zeroPast, f.appends = s.writeEnd, s.zeroAfter, s.zeroPast, s.appends
}
