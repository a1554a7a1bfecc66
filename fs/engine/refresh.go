package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// Close-to-open while a File stays open.
//
// A File reads the checkpoint its map is at. The FUSE layer shares one File
// between every handle of a mount, so a new open of a file that is open
// already would read what the File took when it was first opened, however
// old. Refresh is what such an open calls: it brings the File to the file as
// stored now, so that an open that starts after a close or fsync returned on
// any mount reads that version or a later one.

// Version names the content a File shows, for caches of its bytes filled
// through another File of the same file (the kernel's pages kept across
// opens): two Files that show the same Version show the same bytes. It moves
// with every change a reader takes from the store: a new checkpoint, and
// each record of another writer's WAL applied over it.
type Version struct {
	Cno uint64 // the head's checkpoint
	WAL uint64 // the last WAL record applied over it (the head's own when none)
}

// refreshAttempts bounds how often Refresh starts again when the File moved
// (another Refresh, a publish landing) between its reads and its lock.
const refreshAttempts = 3

// Refresh brings f to the file as stored now, and reports whether what f
// shows changed (ForeignChanges moves with it). It costs one HEAD of the head
// object; when the head moved, one GET of it; when the head says the file is
// written with the WAL and f does not hold the log, one LIST of the records
// after those f shows, and a GET of each new one.
//
// It acts only when f holds nothing unpublished of its own (nothing changed,
// no WAL publish in flight or failed): then a moved head is taken, and
// records stored after those f shows are applied in memory, read-only, as
// at an Open that finds a live writer (overlayLocked) — whether or not that
// writer still lives: a reader never publishes here, and the next Open or
// first change replays them as it does for any record. A File with changes
// of its own keeps them, and its next flush meets the new head (merges or
// rolls back). A read-only File (a read-only mount) takes a moved head but
// never records, as Open does.
//
// Nothing is locked while the head and the listing are read; the records
// are read and applied holding every block and mu, as a replay does.
func (f *File) Refresh(ctx context.Context) (bool, error) {
	for try := 1; ; try++ {
		changed, again, err := f.refreshOnce(ctx)
		if err != nil || !again || try >= refreshAttempts {
			return changed, err
		}
	}
}

// refreshMark is what Refresh needs of f before it reads the store: the
// state the last exclusive hold of mu left (publishStatLocked).
type refreshMark struct {
	skip   bool   // closed, opened at a checkpoint, or changes of its own not yet published
	etag   string // of the head f shows
	seq    uint64 // the last WAL record f shows
	leased bool   // f holds the WAL's lease: the records are its own
}

// refreshMarkLocked is the refreshMark of f now; mu held exclusively (or f
// owned alone).
func (f *File) refreshMarkLocked() refreshMark {
	m := refreshMark{skip: f.closed || f.pinned || f.ownUnpublishedLocked(), etag: f.headETag, seq: f.w.seq}
	// Close clears the log under logMu alone, after it marked f closed
	// under mu: a closed file's log is not read here.
	if !f.closed {
		m.leased = f.w.log != nil
	}
	return m
}

// refreshOnce is one attempt of Refresh; again says that f moved between
// the reads and the lock, so what was read may be older than f is now. It
// takes no lock unless there is something to apply: an open of a file being
// flushed (which holds mu across its uploads) does not wait for the flush.
func (f *File) refreshOnce(ctx context.Context) (changed, again bool, err error) {
	m := *f.mark.Load()
	etag, seq, leased := m.etag, m.seq, m.leased
	if m.skip {
		return false, false, nil
	}
	info, err := f.st.Head(ctx, volume.HeadKey(f.prefix))
	if errors.Is(err, staging.ErrNotFound) {
		// Never published (or deleted by the cleaner once unlinked):
		// nothing newer to take.
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("refresh %s: read head: %w", f.prefix, err)
	}
	var hd *segment.Head
	if info.ETag != etag {
		h, hinfo, err := f.readHead(ctx)
		if errors.Is(err, ErrNotExist) {
			return false, false, nil
		}
		if err != nil {
			return false, false, fmt.Errorf("refresh %s: %w", f.prefix, err)
		}
		hd, info = &h, hinfo
	}
	applied, tracked, err := wal.HeadApplied(info.Metadata)
	if err != nil {
		return false, false, fmt.Errorf("refresh %s: %w", f.prefix, err)
	}
	var seqs []uint64
	// A read-only file shows the records too (an overlay): it never holds
	// the lease.
	if tracked && !leased {
		from := max(seq, applied)
		if hd != nil {
			from = applied // the new head replaces what f shows
		}
		pending, err := wal.After(ctx, f.st, f.prefix, from)
		if err != nil {
			return false, false, fmt.Errorf("refresh %s: %w", f.prefix, err)
		}
		if pending {
			if seqs, err = wal.List(ctx, f.st, f.prefix); err != nil {
				return false, false, fmt.Errorf("refresh %s: %w", f.prefix, err)
			}
			// A first record past the next one: the writer published,
			// deleted the records its checkpoint holds and wrote again
			// after the head was looked at. The records left, over the
			// head looked at, would miss the deleted ones' writes. So
			// does none past it, the record wal.After found gone: the
			// writer published and deleted it between the two looks.
			if len(seqs) == 0 || seqs[len(seqs)-1] <= from || gapAfter(seqs, from) {
				moved, err := f.headMoved(ctx, info.ETag)
				if err != nil {
					return false, false, fmt.Errorf("refresh %s: %w", f.prefix, err)
				}
				if moved {
					return false, true, nil
				}
			}
		} else {
			// Nothing pending may also be a writer that published, and
			// deleted its records, after the head was looked at (as at
			// an open, openReplay): then the head has moved. So with a
			// head just read: the records after it may be in a newer
			// one, and taking it without them would show less than the
			// writer's acknowledged writes.
			moved, err := f.headMoved(ctx, info.ETag)
			if err != nil {
				return false, false, fmt.Errorf("refresh %s: %w", f.prefix, err)
			}
			if moved {
				return false, true, nil
			}
		}
	}
	if hd == nil && len(seqs) == 0 {
		return false, false, nil
	}

	unlock, err := f.lockAll(ctx)
	if err != nil {
		return false, false, fmt.Errorf("refresh %s: %w", f.prefix, err)
	}
	defer unlock()
	if f.closed || f.ownUnpublishedLocked() {
		return false, false, nil
	}
	if f.headETag != etag || f.w.seq != seq {
		return false, true, nil
	}
	if hd != nil {
		f.adoptHead(*hd, info.ETag)
		f.w.overlay = false
		f.w.applied, f.w.tracked = applied, tracked || f.w.tracked
		f.w.seq = applied
		changed = true
	}
	todo := after(seqs, f.w.seq)
	if len(todo) == 0 {
		return changed, false, nil
	}
	if err := f.overlayMoreLocked(ctx, todo); err != nil {
		return true, false, fmt.Errorf("refresh %s: %w", f.prefix, err)
	}
	return true, false, nil
}

// ownUnpublishedLocked says whether f holds changes of its own not yet in a
// published checkpoint. The caller holds mu (shared is enough).
func (f *File) ownUnpublishedLocked() bool {
	return f.changed || f.w.failed != nil || (f.w.pub != nil && !f.w.pub.finished)
}

// overlayMoreLocked applies the records todo (ascending, after f.w.seq) in
// memory, read-only, over what f shows (its head, or its head and records
// applied before): an overlay (overlayLocked). A record gone by the time it
// is read was published by its writer, and deleted: the head is read again
// and the overlay made from it. A failure keeps what was applied, a prefix
// of the writer's records in order (a state the file had). The caller holds
// every block and mu, and f has no changes of its own.
func (f *File) overlayMoreLocked(ctx context.Context, todo []uint64) error {
	f.w.overlay = true
	last, err := f.applyRecordsLocked(ctx, todo)
	f.w.seq = max(f.w.seq, last)
	f.changed = false // the writer's changes, not ours to publish
	f.foreign.Add(1)
	f.overlayIsBaseLocked()
	if err == nil {
		return nil
	}
	if !errors.Is(err, staging.ErrNotFound) {
		return fmt.Errorf("read the write-ahead log of another writer: %w", err)
	}
	if err := f.reloadLocked(ctx); err != nil {
		return fmt.Errorf("read the write-ahead log of another writer: %w", err)
	}
	f.w.seq = f.w.applied
	seqs, err := wal.List(ctx, f.st, f.prefix)
	if err != nil {
		return fmt.Errorf("read the write-ahead log of another writer: %w", err)
	}
	return f.overlayLocked(ctx, seqs)
}
