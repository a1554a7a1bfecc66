package engine

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/wal"
)

// walUnderAttempts bounds how often walUnderLocked opens the file again
// because another writer published while it published the records.
const walUnderAttempts = 3

// walUnderLocked runs before a flush of a writer without the WAL: records a
// WAL writer stored after what this writer holds (its head's mark, or its
// overlay) are acknowledged changes made before this flush began, and go
// under this writer's changes, as a published checkpoint would: they are
// published first, as a replay publishes them (on a file opened again at
// the head), so that the flush finds that checkpoint, merges onto it and
// carries its mark. Left after the flush's checkpoint, the WAL writer's
// publish, lost to it, would replay them over it: a truncate acknowledged
// before this writer's fsync began would cut bytes the fsync acknowledged.
// A failure leaves the records to their writer (the order is then the
// other one) and is only logged. The caller holds every block and mu.
func (f *File) walUnderLocked(ctx context.Context) {
	if f.walOn() || f.readOnly || f.w.log != nil || !f.w.tracked || !f.changed ||
		f.p.ConflictPolicy != ConflictRetry {
		return
	}
	for try := 1; try <= walUnderAttempts; try++ {
		seqs, err := wal.List(ctx, f.st, f.prefix)
		if err != nil {
			f.log.Warn("flush: the write-ahead log could not be listed; its records replay after this writer's changes",
				zap.String("file", f.prefix), zap.Error(err))
			return
		}
		if len(after(seqs, f.w.seq)) == 0 {
			return
		}
		done, err := f.publishWALRecords(ctx)
		if err != nil {
			f.log.Warn("flush: the write-ahead log's records could not be published first; they replay after this writer's changes",
				zap.String("file", f.prefix), zap.Error(err))
			return
		}
		if done {
			return
		}
	}
}

// publishWALRecords opens the file again at its head, with the records
// after it (replayed and published when no live writer holds the lease;
// applied in memory otherwise, an overlay), and publishes the overlay as a
// checkpoint holding those records. It reports false when another writer
// published first (the caller looks again).
func (f *File) publishWALRecords(ctx context.Context) (bool, error) {
	o := f.opts
	o.MapHint = nil
	o.ReadOnly = false
	o.Params = f.p
	o.Params.ConflictPolicy = ConflictFailFast
	r, err := Open(ctx, f.st, f.prefix, o)
	if err != nil {
		return false, err
	}
	defer r.Close()
	// r is flushed directly (not by Flush, which would look for records
	// again on its behalf).
	_, err = func() (FlushTiming, error) {
		defer r.ranges.lock(allBlocks.lo, allBlocks.hi, true)()
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.w.overlay {
			// A live writer's records: published as its replay would
			// publish them; the writer's next publish conflicts and
			// replays its later ones on this checkpoint.
			r.w.overlay = false
			r.changed = r.w.seq > r.w.applied
		}
		return r.flushLocked(ctx)
	}()
	if err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// overlayIsBaseLocked makes what an overlay applied part of what this file
// builds on, not its own changes, for a merge: a writer without the WAL
// that changes a file showing a live WAL writer's records merges its own
// changes onto a checkpoint holding those records (walUnderLocked), and
// must not lay the records' bytes over the later ones it holds (a
// truncate's cut, say) as if it had written them. Every block the records
// made dirty or a hole is set by no byte of this writer's until it writes
// there (an empty entry of partial), and no truncate or end is its own.
// The caller holds every block and mu, and f has no changes of its own.
func (f *File) overlayIsBaseLocked() {
	f.partial = map[uint64]*setBytes{} // the records' bytes, none ours
	mark := func(fbn uint64) { f.partial[fbn] = &setBytes{} }
	for fbn := range f.dirty {
		mark(fbn)
	}
	for fbn := range f.written {
		mark(fbn)
	}
	for fbn := range f.zeroed {
		mark(fbn)
	}
	f.minSize = noTruncate
	f.writeEnd = 0
	f.zeroAfter = nil
	f.zeroPast = noTruncate
	f.appends = appendRun{}
}
