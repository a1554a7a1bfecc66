package engine

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/wal"
)

// Block buffers are pooled by size: a writer at GiB/s would otherwise make the
// garbage collector the bottleneck.
var blockPools sync.Map // int -> *sync.Pool

func getBlockBuf(n int) []byte {
	p, ok := blockPools.Load(n)
	if !ok {
		p, _ = blockPools.LoadOrStore(n, &sync.Pool{New: func() any { b := make([]byte, n); return &b }})
	}
	b := *(p.(*sync.Pool).Get().(*[]byte))
	return b
}

func putBlockBuf(b []byte) {
	if b == nil {
		return
	}
	if p, ok := blockPools.Load(len(b)); ok {
		p.(*sync.Pool).Put(&b)
	}
}

// Piece buffers (copies of blocks on their way to the store) are pooled by
// capacity, a power of two: allocating and zeroing a fresh 16 MiB for every
// piece was most of what sending ahead cost the writer. Stores do not keep
// the slices they are given (the Store contract), so a buffer is reused once
// its request returns.
var piecePools [48]sync.Pool

// allocPiece returns a buffer of length n with room for extra more bytes.
// Its bytes are not zeroed: callers fill all n.
func allocPiece(n, extra int) []byte {
	c := bits.Len(uint(n + extra - 1)) // capacity class: 1<<c >= n+extra
	if p, ok := piecePools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	b := make([]byte, n, 1<<c)
	adviseHuge(b)
	return b
}

// freePiece returns a buffer from allocPiece.
func freePiece(b []byte) {
	c := bits.Len(uint(cap(b) - 1))
	if cap(b) == 1<<c && c < len(piecePools) {
		piecePools[c].Put(&b)
	}
}

// MaxFileSize bounds offsets: block numbers must fit the map's keys and
// int64 arithmetic must not overflow.
const MaxFileSize = 1 << 60

// WriteAt writes p at off, extending the file as needed. A partial block is
// read, modified and written back; if reading it fails, the write fails and
// nothing of it is applied to that block.
//
// Writes to disjoint blocks run at once: a write holds its blocks (the range
// lock) and File.mu only to prepare them and, afterwards, to account for
// them; it copies its bytes in between, with File.mu released. A prepared
// block is busy until then: sending ahead, partial segments and the
// completion check leave busy blocks alone.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, _, err := f.write(ctx, p, off, false)
	return n, err
}

// Append writes p at the end of the file, as a write to a descriptor opened
// with O_APPEND does, and returns where it wrote. The end is the file's size
// here when the write is applied (after the WAL's lease is taken, which may
// read another writer's changes), whatever the caller last knew of it. A
// merge places appends at the end of the winner's file (appendRun).
func (f *File) Append(ctx context.Context, p []byte) (int64, int, error) {
	if err := f.flushMu.RLockCtx(ctx); err != nil { // waits for a Flush (flushgate.go)
		return 0, 0, fmt.Errorf("append to %s: waiting for its flush: %w", f.prefix, err)
	}
	defer f.flushMu.RUnlock()
	for {
		f.mu.Lock()
		off := f.size
		f.mu.Unlock()
		n, moved, err := f.write(ctx, p, off, true)
		if !moved {
			return off, n, err
		}
		// The size changed between the look and the write (the WAL's
		// lease read another writer's records): look again.
	}
}

// write is WriteAt, or Append when app: then off is the size the caller
// found, and moved says the size is no longer off (nothing was written).
func (f *File) write(ctx context.Context, p []byte, off int64, app bool) (int, bool, error) {
	if off < 0 || off+int64(len(p)) > MaxFileSize {
		return 0, false, fmt.Errorf("write %s at %d: %w", f.prefix, off, ErrInvalid)
	}
	if len(p) == 0 {
		return 0, false, nil
	}
	bs := int64(f.bs)
	release, err := f.ranges.lockCtx(ctx, uint64(off/bs), uint64((off+int64(len(p))+bs-1)/bs), true)
	if err != nil {
		return 0, false, fmt.Errorf("write %s at %d: waiting for the blocks: %w", f.prefix, off, err)
	}
	defer release()
	var log *wal.Log
	if f.walOn() {
		var err error
		if log, err = f.walLog(ctx); err != nil {
			return 0, false, fmt.Errorf("write %s at %d: %w", f.prefix, off, err)
		}
	}

	// The rest of a block written in part that is not dirty is read first,
	// without mu (coldread.go); what is checked under mu is checked again
	// each time mu is taken.
	var cold coldBlocks
	defer cold.release()
	edges := partEdges(off, int64(len(p)), bs)
	f.mu.Lock()
	var segs []writeSeg
	var perr error
	var prevEdits uint64
	var prevEnd int64
	for {
		if err := f.writable(); err != nil {
			f.mu.Unlock()
			return 0, false, err
		}
		if app && f.size != off {
			f.mu.Unlock()
			return 0, true, nil
		}
		if waited, err := f.waitGateLocked(ctx); err != nil {
			f.mu.Unlock()
			return 0, false, fmt.Errorf("write %s at %d: waiting for a flush: %w", f.prefix, off, err)
		} else if waited {
			continue // a Flush takes what it publishes (flushgate.go)
		}
		if !cold.readyLocked(f, edges, f.size) {
			f.mu.Unlock()
			cold.fetch(ctx, f)
			f.mu.Lock()
			continue
		}
		prevEdits, prevEnd = f.edits, f.writeEnd
		segs, perr = f.prepareLocked(ctx, p, off, &cold)
		if g := f.gate; g != nil && errors.Is(perr, errFlushGate) {
			// No room in the budget while a Flush publishes: it frees
			// what it published; prepare again after it.
			f.unprepareLocked(segs)
			if err := f.waitGateDoneLocked(ctx, g); err != nil {
				f.mu.Unlock()
				return 0, false, fmt.Errorf("write %s at %d: waiting for a flush: %w", f.prefix, off, err)
			}
			continue
		}
		break
	}
	if app && perr == nil {
		f.noteAppendLocked(off, off+int64(len(p)), prevEdits, prevEnd)
	}
	// Sending ahead needs each whole block's checksum: the copy computes it
	// while the bytes are in the CPU's cache.
	sums := f.sendAheadOn()
	f.mu.Unlock()

	// With the WAL, what was prepared is logged before it is applied (the
	// blocks it made dirty hold the bytes they had, so a failed append
	// leaves the file as it was) and the write is acknowledged once the
	// record holding it is stored.
	var seq uint64
	mtime := time.Now()
	if log != nil && len(segs) > 0 {
		last := segs[len(segs)-1]
		var err error
		seq, err = log.Append(ctx, []wal.Op{{Kind: wal.OpWrite, Off: off, Data: p[:last.src+last.n], MtimeNs: mtime.UnixNano()}})
		if err != nil {
			f.mu.Lock()
			f.unprepareLocked(segs)
			f.mu.Unlock()
			return 0, false, fmt.Errorf("write %s at %d: %w", f.prefix, off, err)
		}
	}

	// The copy, with only the blocks held.
	n := f.copiers.Add(1)
	for {
		m := f.maxCopiers.Load()
		if n <= m || f.maxCopiers.CompareAndSwap(m, n) {
			break
		}
	}
	if f.copyHook != nil {
		f.copyHook()
	}
	done := 0
	var crcs []uint32
	if sums {
		crcs = make([]uint32, len(segs))
	}
	for i, sg := range segs {
		copy(sg.d.buf[sg.in:sg.in+sg.n], p[sg.src:sg.src+sg.n])
		if sums && sg.n == f.bs {
			crcs[i] = segment.Checksum(sg.d.buf)
		}
		done = sg.src + sg.n
	}
	f.copiers.Add(-1)

	f.mu.Lock()
	defer f.mu.Unlock()
	for i, sg := range segs {
		sg.d.busy--
		if sums && sg.n == f.bs {
			sg.d.crc, sg.d.crcValid = crcs[i], true
		}
	}
	if done > 0 {
		if end := off + int64(done); end > f.size {
			f.size = end
		}
		f.stats.BytesWritten += int64(done)
		f.mtime = mtime
		f.changed = true
		f.w.seq = max(f.w.seq, seq)
	}
	if perr != nil {
		return done, false, perr
	}
	// What follows moves data toward the store; the write itself has
	// succeeded (its data is in the dirty tier, and the flush writes it if
	// anything here fails), so failures are logged, not returned.
	if f.gate != nil {
		// A Flush's requests are out: its blocks' map is being replaced,
		// so nothing is placed now; the next write after it sends.
		return done, false, nil
	}
	if f.sendAheadOn() {
		if err := f.s.sendAheadLocked(ctx); err != nil {
			f.log.Debug("send ahead failed; data stays dirty", zap.Error(err))
		}
	}
	if f.dirtyB > f.p.DirtyLimit {
		if err := f.relieveLocked(ctx); err != nil {
			f.log.Warn("partial segment failed; data stays dirty", zap.Error(err))
		}
	}
	return done, false, nil
}

// writeSeg is one block's part of a write: p[src:src+n] goes to d.buf[in:].
// What preparing it changed is kept so that a write that is not applied
// (its log append failed) leaves the file as it was.
type writeSeg struct {
	d          *dirtyBlock
	in, n, src int
	fbn        uint64
	fresh      bool    // the write made the block dirty
	wasZeroed  bool    // and it was in zeroed then
	ref        *refSrc // the reference a whole-block write replaced
	set        setUndo // what recording the bytes set changed (merge.go)
	prevEnd    int64   // writeEnd before the write
}

// unprepareLocked undoes prepareLocked for a write that is not applied. A
// buffer whose bytes the write was to fill (a new block written whole, or a
// reference replaced whole) comes from a pool shared by every file: it must
// never be read, so the block goes back to what it was.
func (f *File) unprepareLocked(segs []writeSeg) {
	bs := int64(f.bs)
	if len(segs) > 0 {
		f.writeEnd = segs[0].prevEnd
	}
	for _, sg := range segs {
		d := sg.d
		d.busy--
		f.undoSetLocked(sg.fbn, sg.set)
		switch {
		case sg.fresh:
			f.s.clearUnsent(sg.fbn)
			f.freeDirtyBuf(d)
			f.dirtyB -= bs
			f.undirtyLocked(d)
			delete(f.dirty, sg.fbn)
			if sg.wasZeroed {
				f.zeroed[sg.fbn] = struct{}{}
			}
		case sg.ref != nil:
			f.freeDirtyBuf(d)
			f.dirtyB -= bs
			d.buf, d.ref = nil, sg.ref
		}
	}
}

// prepareLocked makes every block of a write of p at off dirty and busy,
// reading the rest of a partial block first (from cold, made ready in this
// hold of mu; with nil, or a block cold does not hold, under mu: a replay);
// it stops at the first block it cannot prepare, returning the blocks
// before it and the error.
func (f *File) prepareLocked(ctx context.Context, p []byte, off int64, cold *coldBlocks) ([]writeSeg, error) {
	bs := int64(f.bs)
	seq := f.streamAt(off, int64(len(p)))
	segs := make([]writeSeg, 0, (len(p)+f.bs-1)/f.bs+1)
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		fbn := uint64(pos / bs)
		in := int(pos % bs)
		n := min(len(p)-done, f.bs-in)
		d := f.dirty[fbn]
		sg := writeSeg{in: in, n: n, src: done, fbn: fbn, prevEnd: f.writeEnd}
		if d == nil {
			var buf []byte
			var err error
			a := f.arenaFor(fbn, seq)
			if a != nil {
				buf = a.carve()
			} else if buf, err = f.allocBlock(ctx); err != nil {
				return segs, fmt.Errorf("write %s at %d: %w", f.prefix, pos, err)
			}
			if n < f.bs {
				// Read-modify-write: the rest of the block keeps its bytes.
				ok, err := cold.fillLocked(f, fbn, buf)
				if !ok {
					err = f.readBlockLocked(ctx, fbn, buf)
				}
				if err != nil {
					if a != nil {
						a.release() // the slot stays unused
					} else {
						f.freeBlock(buf)
					}
					return segs, fmt.Errorf("write %s at %d: read block %d: %w", f.prefix, pos, fbn, err)
				}
			}
			sg.set = f.noteSetLocked(fbn, in, in+n)
			d = &dirtyBlock{buf: buf, arena: a}
			f.dirty[fbn] = d
			f.markDirtyLocked(fbn, d)
			f.dirtyB += bs
			_, sg.wasZeroed = f.zeroed[fbn]
			sg.fresh = true
			delete(f.zeroed, fbn)
			if f.sendAheadOn() {
				f.s.markUnsent(fbn)
			}
		} else {
			f.s.touchLocked(d)
			f.ownLocked(d)
			if d.ref != nil {
				if n == f.bs {
					buf, err := f.allocBlock(ctx)
					if err != nil {
						return segs, fmt.Errorf("write %s at %d: %w", f.prefix, pos, err)
					}
					sg.ref = d.ref
					d.buf, d.ref = buf, nil
					f.dirtyB += bs
				} else if err := f.materializeLocked(ctx, d); err != nil {
					return segs, fmt.Errorf("write %s at %d: block %d by reference: %w", f.prefix, pos, fbn, err)
				}
			}
			sg.set = f.noteSetLocked(fbn, in, in+n)
		}
		f.writeEnd = max(f.writeEnd, pos+int64(n))
		d.seq = seq
		d.busy++
		sg.d = d
		segs = append(segs, sg)
		done += n
	}
	return segs, nil
}

// readBlockLocked fills buf with block fbn as the file holds it now, ignoring
// the dirty tier (the caller checked it): zeros past the end or in a hole.
func (f *File) readBlockLocked(ctx context.Context, fbn uint64, buf []byte) error {
	if int64(fbn)*int64(f.bs) >= f.size {
		clear(buf)
		return nil
	}
	v, ok, err := f.tree.Get(ctx, fbn)
	if err != nil {
		return err
	}
	if !ok {
		clear(buf)
		return nil
	}
	return f.fetchBlocks(ctx, []blockRef{{fbn: fbn, v: v}}, [][]byte{buf})
}

// Truncate sets the size. Growing adds a hole that reads as zeros; shrinking
// drops the blocks past the end and zeroes the tail of the last block, so that
// growing again later reads zeros there too.
func (f *File) Truncate(ctx context.Context, size int64) error {
	if size < 0 || size > MaxFileSize {
		return fmt.Errorf("truncate %s to %d: %w", f.prefix, size, ErrInvalid)
	}
	release, err := f.changeHold(ctx, uint64(size/int64(f.bs)), allBlocks.hi)
	if err != nil {
		return fmt.Errorf("truncate %s to %d: %w", f.prefix, size, err)
	}
	defer release()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writable(); err != nil {
		return err
	}
	if size == f.size {
		// Nothing changes here, but a merge cuts the winner's bytes past
		// size all the same (noteTruncateLocked). The next flush publishes
		// it: a flush that returned with the record kept would leave a
		// later merge to replay the truncate after another writer's
		// checkpoint made since, which the acknowledged truncate came
		// before (its bytes would be cut). With the WAL no other writer's
		// checkpoint comes between.
		f.noteTruncateLocked(size, f.ownedLocked(uint64(size/int64(f.bs))))
		if !f.walOn() {
			f.changed = true
		}
		return nil
	}
	now := time.Now()
	if err := f.logLocked(ctx, wal.Op{Kind: wal.OpTruncate, Off: size, MtimeNs: now.UnixNano()}); err != nil {
		return fmt.Errorf("truncate %s to %d: %w", f.prefix, size, err)
	}
	if size < f.size {
		f.rd.reset() // what was fetched ahead past the new end is of no use
	}
	// The block cut in part is read, and the map's nodes the cut needs
	// are loaded, without mu (coldread.go).
	var cold coldBlocks
	defer cold.release()
	for f.readColdLocked(ctx, &cold, f.truncateEdgeLocked(size, &cold), f.size) {
		if err := f.writable(); err != nil {
			return err
		}
	}
	if err := f.truncateLocked(ctx, size, &cold); err != nil {
		f.walApplyFailedLocked(err)
		return err
	}
	f.mtime = now
	f.changed = true
	return nil
}

// truncateEdgeLocked is the block a truncate to size zeroes in part, if
// any, and sets c to walk the map's cut.
func (f *File) truncateEdgeLocked(size int64, c *coldBlocks) []uint64 {
	bs := int64(f.bs)
	if size >= f.size {
		c.walk = nil
		return nil
	}
	keep := uint64((size + bs - 1) / bs)
	c.walk = func(ctx context.Context, t *blockmap.Tree) error { return t.Truncate(ctx, keep) }
	if size%bs == 0 {
		return nil
	}
	return []uint64{uint64(size / bs)}
}

// truncateLocked is Truncate with the blocks and mu held; cold is as for
// zeroInBlockLocked.
func (f *File) truncateLocked(ctx context.Context, size int64, cold *coldBlocks) error {
	// Whether the new last block is wholly ours, before zeroing its tail
	// makes it dirty.
	owned := f.ownedLocked(uint64(size / int64(f.bs)))
	if size == f.size {
		f.noteTruncateLocked(size, owned)
		return nil
	}
	if size > f.size {
		f.noteTruncateLocked(size, owned)
		f.size = size
		f.mtime = time.Now()
		f.changed = true
		return nil
	}
	bs := int64(f.bs)
	if in := size % bs; in != 0 {
		// Zero the tail of the new last block.
		fbn := uint64(size / bs)
		if err := f.zeroInBlockLocked(ctx, fbn, int(in), f.bs, cold); err != nil {
			return fmt.Errorf("truncate %s to %d: %w", f.prefix, size, err)
		}
	}
	keep := uint64((size + bs - 1) / bs) // blocks [0, keep) stay
	if err := f.tree.Truncate(ctx, keep); err != nil {
		return fmt.Errorf("truncate %s to %d: %w", f.prefix, size, err)
	}
	for fbn, d := range f.dirty {
		if fbn >= keep {
			f.dropDirtyLocked(fbn, d)
		}
	}
	for fbn := range f.written {
		if fbn >= keep {
			delete(f.written, fbn)
		}
	}
	f.size = size
	f.noteTruncateLocked(size, owned)
	f.mtime = time.Now()
	f.changed = true
	return nil
}

// walApplyFailedLocked: a change logged but not (wholly) applied leaves
// memory behind the log; the next Flush recovers by replaying it.
func (f *File) walApplyFailedLocked(err error) {
	if f.walOn() && f.w.log != nil {
		f.w.failed = err
		f.changed = true
	}
}

// zeroInBlockLocked zeroes bytes [from, to) of block fbn, making it dirty.
// A block not dirty is read from cold, made ready in this hold of mu (with
// nil, or a block cold does not hold, under mu: a replay, a merge).
func (f *File) zeroInBlockLocked(ctx context.Context, fbn uint64, from, to int, cold *coldBlocks) error {
	d := f.dirty[fbn]
	if d == nil {
		if _, how, err := f.lookLocked(fbn, f.size); err == nil && how == lookZero {
			return nil // a hole is zeros already
		}
		buf, err := f.allocBlock(ctx)
		if err != nil {
			return err
		}
		ok, err := cold.fillLocked(f, fbn, buf)
		if !ok {
			// Not read ahead: read under mu.
			var v blockmap.Value
			if v, ok, err = f.tree.Get(ctx, fbn); err == nil && !ok {
				f.freeBlock(buf)
				return nil // a hole is zeros already
			}
			if err == nil {
				err = f.fetchBlocks(ctx, []blockRef{{fbn: fbn, v: v}}, [][]byte{buf})
			}
		}
		if err != nil {
			f.freeBlock(buf)
			return fmt.Errorf("read block %d: %w", fbn, err)
		}
		d = &dirtyBlock{buf: buf}
		f.dirty[fbn] = d
		f.dirtyB += int64(f.bs)
		if f.sendAheadOn() {
			f.s.markUnsent(fbn)
		}
	} else {
		f.s.touchLocked(d)
		f.ownLocked(d)
		if err := f.materializeLocked(ctx, d); err != nil {
			return fmt.Errorf("block %d by reference: %w", fbn, err)
		}
	}
	clear(d.buf[from:to])
	return nil
}

// Zero makes [off, off+n) read as zeros without changing the size: whole
// blocks become holes (their storage is dropped from the map), partial ones
// are zeroed in place.
func (f *File) Zero(ctx context.Context, off, n int64) error {
	if off < 0 || n < 0 || off+n > MaxFileSize {
		return fmt.Errorf("zero %s at %d+%d: %w", f.prefix, off, n, ErrInvalid)
	}
	release, err := f.changeHold(ctx, uint64(off/int64(f.bs)), uint64((off+n)/int64(f.bs))+1)
	if err != nil {
		return fmt.Errorf("zero %s at %d+%d: %w", f.prefix, off, n, err)
	}
	defer release()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writable(); err != nil {
		return err
	}
	if min(off+n, f.size) <= off {
		f.noteZeroAfterLocked(off, off+n) // see zeroLocked
		return nil
	}
	now := time.Now()
	if err := f.logLocked(ctx, wal.Op{Kind: wal.OpZero, Off: off, Len: n, MtimeNs: now.UnixNano()}); err != nil {
		return fmt.Errorf("zero %s at %d+%d: %w", f.prefix, off, n, err)
	}
	var cold coldBlocks
	defer cold.release()
	for f.readColdLocked(ctx, &cold, f.zeroEdgesLocked(off, n, f.size, &cold), f.size) {
		if err := f.writable(); err != nil {
			return err
		}
	}
	if err := f.zeroLocked(ctx, off, n, &cold); err != nil {
		f.walApplyFailedLocked(err)
		return err
	}
	f.mtime = now
	return nil
}

// zeroEdgesLocked are the blocks a zero of [off, off+n) in a file of the
// given size zeroes in part, and sets c to walk the map where it deletes
// whole blocks.
func (f *File) zeroEdgesLocked(off, n, size int64, c *coldBlocks) []uint64 {
	bs := int64(f.bs)
	end := min(off+n, size)
	c.walk = nil
	if end <= off {
		return nil
	}
	if lo, hi := uint64((off+bs-1)/bs), uint64(end/bs); lo < hi {
		c.walk = func(ctx context.Context, t *blockmap.Tree) error {
			return t.Scan(ctx, lo, hi, func(uint64, blockmap.Value) error { return nil })
		}
	}
	return partEdges(off, end-off, bs)
}

// zeroLocked is Zero with the blocks and mu held; cold is as for
// zeroInBlockLocked.
func (f *File) zeroLocked(ctx context.Context, off, n int64, cold *coldBlocks) error {
	end := min(off+n, f.size)
	if off+n > end && n > 0 {
		// Past this writer's end nothing is zeroed here, but the winner of
		// a merge may have bytes there: the merge zeroes them.
		f.noteZeroAfterLocked(max(off, end), off+n)
	}
	bs := int64(f.bs)
	for pos := off; pos < end; {
		fbn := uint64(pos / bs)
		in := pos % bs
		m := min(end-pos, bs-in)
		if m == bs {
			if err := f.tree.Delete(ctx, fbn); err != nil {
				return fmt.Errorf("zero %s block %d: %w", f.prefix, fbn, err)
			}
			f.noteSetLocked(fbn, 0, f.bs)
			if d := f.dirty[fbn]; d != nil {
				f.dropDirtyLocked(fbn, d)
			}
			delete(f.written, fbn)
			f.zeroed[fbn] = struct{}{}
		} else {
			u := f.noteSetLocked(fbn, int(in), int(in+m))
			if err := f.zeroInBlockLocked(ctx, fbn, int(in), int(in+m), cold); err != nil {
				f.undoSetLocked(fbn, u)
				return fmt.Errorf("zero %s at %d: %w", f.prefix, pos, err)
			}
		}
		pos += m
	}
	if end > off {
		f.mtime = time.Now()
		f.changed = true
	}
	return nil
}

// dropDirtyLocked removes a dirty block (truncated or zeroed away); a copy of
// it in an open object becomes a dead slot.
func (f *File) dropDirtyLocked(fbn uint64, d *dirtyBlock) {
	f.s.touchLocked(d)
	f.s.clearUnsent(fbn)
	if d.buf != nil {
		f.freeDirtyBuf(d)
		f.dirtyB -= int64(f.bs)
	}
	f.undirtyLocked(d)
	delete(f.dirty, fbn)
}

// markDirtyLocked counts a block that just became dirty: unmapped when the
// map does not hold it (asked of the nodes in memory only; a block past the
// head's end when they cannot tell), so Stat counts it among the blocks.
func (f *File) markDirtyLocked(fbn uint64, d *dirtyBlock) {
	present, known := f.tree.Peek(fbn)
	if !known {
		present = int64(fbn)*int64(f.bs) < int64(f.head.Size)
	}
	if !present {
		d.unmapped = true
		f.dirtyUnmapped++
	}
}

// placedLocked notes that fbn was put in the map (added: it was not there):
// a dirty block of it is counted by the map now.
func (f *File) placedLocked(fbn uint64, added bool) {
	if !added {
		return
	}
	if d := f.dirty[fbn]; d != nil && d.unmapped {
		d.unmapped = false
		f.dirtyUnmapped--
	}
}

// undirtyLocked notes that d leaves the dirty tier.
func (f *File) undirtyLocked(d *dirtyBlock) {
	if d != nil && d.unmapped {
		d.unmapped = false
		f.dirtyUnmapped--
	}
}

// allocBlock returns a buffer for a new dirty block, drawn from the mount's
// memory budget: when the budget is full the file first relieves itself (a
// partial segment), then waits for room that other files release.
func (f *File) allocBlock(ctx context.Context) ([]byte, error) {
	if b := f.budget; b != nil && !b.TryAcquire(int64(f.bs)) {
		if f.gate != nil {
			// A write past a Flush's blocks: neither a partial segment
			// nor a wait under mu, which the flush needs to free room.
			return nil, errFlushGate
		}
		// Blocks of another writer's records (a WAL overlay) are not ours
		// to write out.
		if len(f.dirty) > 0 && !f.w.overlay {
			if err := f.relieveAllLocked(ctx); err != nil {
				f.log.Warn("relieving the memory budget failed; waiting for room", zap.Error(err))
			}
		}
		if err := b.Acquire(ctx, int64(f.bs)); err != nil {
			return nil, fmt.Errorf("wait for memory: %w", err)
		}
	}
	return getBlockBuf(f.bs), nil
}

// freeBlock returns a dirty block's buffer and its share of the budget.
func (f *File) freeBlock(b []byte) {
	putBlockBuf(b)
	if f.budget != nil {
		f.budget.Release(int64(len(b)))
	}
}

// maxStreams is how many sequential streams a file follows at once (several
// writers, or one that interleaves a log with its data).
const maxStreams = 16

// streamAt returns the sequential stream a write of n bytes at off extends,
// or a new one.
func (f *File) streamAt(off, n int64) *seqStream {
	s, ok := f.streams[off]
	if ok {
		delete(f.streams, off)
	} else {
		if len(f.streams) >= maxStreams {
			var oldest int64 = -1
			for end, st := range f.streams {
				if oldest < 0 || st.last < f.streams[oldest].last {
					oldest = end
				}
			}
			f.endFill(f.streams[oldest])
			delete(f.streams, oldest)
		}
		s = &seqStream{}
	}
	f.tick++
	s.last = f.tick
	s.end = off + n
	s.bytes += n
	f.streams[s.end] = s
	return s
}
