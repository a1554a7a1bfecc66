package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/ckptfs/ckptfs/wal"
)

// Punching and zeroing ranges (fallocate's FALLOC_FL_PUNCH_HOLE and
// FALLOC_FL_ZERO_RANGE) is what the block map does anyway: a hole is blocks
// not in the map. Whole blocks of the range leave the map (the next
// checkpoint stores nothing for them, and its block count drops); a partial
// block at either edge is zeroed in place, as a write of zeros would, and is
// dirty. Both are one change of the WAL (OpZero, after an OpTruncate in the
// same record when the size grows), and a merge under ConflictRetry replays them
// as it replays writes: the blocks made holes are deleted from the winner's
// map (File.zeroed), the edge blocks are this writer's dirty blocks.

// ZeroRange makes [off, off+n) read as zeros. With keepSize the size does
// not change (the part of the range past the end is nothing to zero); without
// it a range ending past the end grows the file to off+n, the new part a hole.
// Nothing is reserved: holes cost nothing, so there is no space to reserve.
func (f *File) ZeroRange(ctx context.Context, off, n int64, keepSize bool) error {
	if off < 0 || n < 0 || off > MaxFileSize-n {
		return fmt.Errorf("zero %s at %d+%d: %w", f.prefix, off, n, ErrInvalid)
	}
	if keepSize {
		return f.Zero(ctx, off, n)
	}
	bs := int64(f.bs)
	// Growing moves the end: hold every block from off on, as a truncate
	// holds those past the new size.
	release, err := f.changeHold(ctx, uint64(off/bs), allBlocks.hi)
	if err != nil {
		return fmt.Errorf("zero %s at %d+%d: %w", f.prefix, off, n, err)
	}
	defer release()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writable(); err != nil {
		return err
	}
	end := off + n
	var ops []wal.Op
	now := time.Now()
	// The size grows first, so that the whole range is zeroed inside the
	// file: a merge then replays it as zeros written there, over whatever
	// another writer put past this one's old end (the later writer wins).
	if end > f.size {
		ops = append(ops, wal.Op{Kind: wal.OpTruncate, Off: end, MtimeNs: now.UnixNano()})
	}
	if n > 0 && (off < f.size || len(ops) > 0) {
		ops = append(ops, wal.Op{Kind: wal.OpZero, Off: off, Len: n, MtimeNs: now.UnixNano()})
	}
	if len(ops) == 0 {
		return nil
	}
	// One record: a replay applies both or neither.
	if err := f.logLocked(ctx, ops...); err != nil {
		return fmt.Errorf("zero %s at %d+%d: %w", f.prefix, off, n, err)
	}
	// The blocks zeroed in part are read without mu (coldread.go), as
	// they read once the size has grown.
	var cold coldBlocks
	defer cold.release()
	for f.readColdLocked(ctx, &cold, f.zeroEdgesLocked(off, n, max(f.size, end), &cold), max(f.size, end)) {
		if err := f.writable(); err != nil {
			return err
		}
	}
	for _, op := range ops {
		var err error
		if op.Kind == wal.OpZero {
			err = f.zeroLocked(ctx, op.Off, op.Len, &cold)
		} else {
			f.growLocked(op.Off)
		}
		if err != nil {
			f.walApplyFailedLocked(err)
			return err
		}
	}
	f.mtime = now
	f.changed = true
	return nil
}

// growLocked extends the file to size as a write ending there does: a merge
// keeps the longer of the two files (writeEnd), where a truncate would cut
// another writer's bytes past size. (A replay of the record applies its
// OpTruncate, on the one writer the lease allows.)
func (f *File) growLocked(size int64) {
	f.size = size
	f.writeEnd = max(f.writeEnd, size)
	f.edits++
	f.changed = true
}

// Extend grows the file to size when it is shorter (fallocate's mode 0),
// the new part a hole; it never cuts. A merge treats it as a write ending at
// size, which keeps the longer of the two files, where a truncate to size
// would cut another writer's bytes past it. The WAL logs it as the truncate
// it is on this writer.
func (f *File) Extend(ctx context.Context, size int64) error {
	if size < 0 || size > MaxFileSize {
		return fmt.Errorf("extend %s to %d: %w", f.prefix, size, ErrInvalid)
	}
	release, err := f.changeHold(ctx, uint64(size/int64(f.bs)), allBlocks.hi)
	if err != nil {
		return fmt.Errorf("extend %s to %d: %w", f.prefix, size, err)
	}
	defer release()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writable(); err != nil {
		return err
	}
	if size <= f.size {
		return nil
	}
	now := time.Now()
	if err := f.logLocked(ctx, wal.Op{Kind: wal.OpTruncate, Off: size, MtimeNs: now.UnixNano()}); err != nil {
		return fmt.Errorf("extend %s to %d: %w", f.prefix, size, err)
	}
	f.growLocked(size)
	f.mtime = now
	return nil
}
