package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// Copies by reference. CloneFrom makes an empty file a copy of another file
// of the same volume without moving its bytes: the copy's checkpoint is the
// source's latest checkpoint with another number, whose block map is the
// source's (the same root pointer), so its pointers name the source's
// objects. A lineage object (segment.Lineage) says, by cno, whose objects
// those names are: the source's lineage (when the source is itself a copy)
// followed by the source, up to the checkpoint copied. The copy's own
// checkpoints are numbered above it, so one name never means two objects;
// the copy is then written like any file (copy-on-write: a changed block
// goes into the copy's own objects, and so does the path above it), and the
// source is never changed by it.
//
// A copy costs a fixed number of requests whatever the file's size: a
// reference marker under every file of the lineage (volume.RefKey) and the
// lineage object and part 0 in parallel, then the head. The source is
// flushed first when it has unpublished changes (and its embedded part 0
// stored, when the store may not hold it yet), so that the copy holds
// exactly what the source holds at the call.

// ErrCloneUnsupported: the copy cannot be made by reference (see CloneFrom);
// the caller copies the bytes instead.
var ErrCloneUnsupported = errors.New("cannot copy by reference")

// ErrSourceMoved: a copy by reference was refused (it matches
// ErrCloneUnsupported too) because the source's head was replaced while the
// copy was made, or before, unseen by the source's File: what an open of
// the source reads now is another version, which the caller may have the
// File take (Refresh) and copy instead.
var ErrSourceMoved = errors.New("the source's head was replaced while it was copied")

// CloneFrom makes f, which must be empty (size 0, nothing written), a copy by
// reference of src, another file of the same volume opened for reading or
// writing. It returns an error matching ErrCloneUnsupported, and f is
// unchanged, when that cannot be done: the same file, either file with the
// WAL on (its records must hold the bytes), different block sizes or
// formats, a lineage MaxLineage deep, files of unknown volumes, a source
// whose changes could not be published, or another writer's head in the way.
func (f *File) CloneFrom(ctx context.Context, src *File) error {
	_, err := f.CloneTaking(ctx, src)
	return err
}

// A CopyVersion is the checkpoint of a source that a copy by reference took
// (CloneTaking): a copy made in pieces makes each later piece of it
// (CloneAgain), whatever the source shows by then, so that the copy is one
// version of its source.
type CopyVersion struct {
	src    string // the source's prefix
	etag   string // the source's head's ETag when it was taken
	ino    segment.Inode
	blocks blockCount
	// lin is the lineage of a copy of it: the source's own, then the
	// source up to ino.Cno.
	lin []segment.LineageEntry
}

// Size is the size of the version: what a whole copy of it holds.
func (v *CopyVersion) Size() int64 { return int64(v.ino.Size) }

// CloneTaking is CloneFrom, and returns the version of src the copy took:
// its size, and what CloneAgain makes f a copy of again.
func (f *File) CloneTaking(ctx context.Context, src *File) (*CopyVersion, error) {
	if err := f.cloneable(src); err != nil {
		return nil, err
	}
	sino, sblocks, setag, err := src.publishedForCopy(ctx)
	if err != nil {
		return nil, err
	}
	if sino.Cno == 0 {
		return nil, fmt.Errorf("copy %s into %s: the source has no checkpoint: %w", src.prefix, f.prefix, ErrCloneUnsupported)
	}
	v := &CopyVersion{src: src.prefix, etag: setag, ino: sino, blocks: sblocks}
	if sino.Lineage != 0 {
		l, err := src.space.Lineage(ctx, sino.Lineage)
		if err != nil {
			return nil, fmt.Errorf("copy %s into %s: %w", src.prefix, f.prefix, err)
		}
		v.lin = append(v.lin, l.Entries...)
	}
	if len(v.lin) >= segment.MaxLineage {
		return nil, fmt.Errorf("copy %s into %s: a copy of copies %d deep: %w", src.prefix, f.prefix, len(v.lin), ErrCloneUnsupported)
	}
	v.lin = append(v.lin, segment.LineageEntry{FileID: src.space.ID(), Upto: sino.Cno})
	if err := f.clone(ctx, src, v, true); err != nil {
		return nil, err
	}
	return v, nil
}

// CloneAgain makes f, which must be empty, a copy by reference of v, the
// version of src that an earlier copy into f took (CloneTaking), whatever
// src shows now. It is how a copy in pieces makes its later pieces: f
// emptied, copied again whole and cut further on.
//
// The source's head is not read again: since the first copy, what v points
// at is kept by f's own checkpoints (the cleaner keeps what a retained
// checkpoint of a copy points at, through the reference markers, and
// MinAge covers one that f's retention dropped since), and f's head, which
// must still be f's (If-Match), is replaced by one pointing at it again.
func (f *File) CloneAgain(ctx context.Context, src *File, v *CopyVersion) error {
	if err := f.cloneable(src); err != nil {
		return err
	}
	if v.src != src.prefix {
		return fmt.Errorf("copy %s into %s: the version is of %s: %w", src.prefix, f.prefix, v.src, ErrInvalid)
	}
	return f.clone(ctx, src, v, false)
}

// Shows reports whether f shows exactly the version v now: its head is the
// one v was taken from, with nothing over it (no change, no WAL record).
func (f *File) Shows(v *CopyVersion) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.prefix == v.src && f.headETag == v.etag && f.head.Cno == v.ino.Cno &&
		!f.changed && len(f.dirty) == 0 && !f.w.overlay && f.w.seq <= f.w.applied
}

// cloneable refuses a copy of src into f that can never be made by
// reference.
func (f *File) cloneable(src *File) error {
	unsupported := func(why string) error {
		return fmt.Errorf("copy %s into %s: %s: %w", src.prefix, f.prefix, why, ErrCloneUnsupported)
	}
	switch {
	case f == src || f.prefix == src.prefix:
		return unsupported("the same file")
	case f.walOn():
		return unsupported("the write-ahead log holds every byte written")
	case f.space.Files() == "" || f.space.Files() != src.space.Files():
		return unsupported("not files of one volume")
	case !segment.ValidFileID(src.space.ID()) || !segment.ValidFileID(f.space.ID()):
		return unsupported("file ids that cannot name objects")
	}
	return nil
}

// clone makes f a copy of v, checking that v is still src's head once the
// markers are stored when current (a copy of what src shows now).
func (f *File) clone(ctx context.Context, src *File, v *CopyVersion, current bool) error {
	unsupported := func(why string) error {
		return fmt.Errorf("copy %s into %s: %s: %w", src.prefix, f.prefix, why, ErrCloneUnsupported)
	}
	sino, sblocks, setag := v.ino, v.blocks, v.etag
	lin := segment.Lineage{Entries: append([]segment.LineageEntry(nil), v.lin...)}

	unlock, err := f.lockAll(ctx)
	if err != nil {
		return fmt.Errorf("copy %s into %s: %w", src.prefix, f.prefix, err)
	}
	defer unlock()
	if err := f.writable(); err != nil {
		return err
	}
	switch {
	case f.size != 0 || len(f.dirty) != 0:
		return unsupported("the copy is not empty")
	case f.format != sino.Format || f.bs != int(sino.DataBlockSize) || f.mbs != int(sino.MetaBlockSize):
		return unsupported("another format or block size")
	}
	// What was sent ahead before the file was emptied is given up.
	if err := f.s.settleLocked(ctx, false); err != nil {
		return fmt.Errorf("copy %s into %s: %w", src.prefix, f.prefix, err)
	}
	cno := max(f.head.Cno, f.usedCno, sino.Cno) + 1
	f.usedCno = cno
	lin.FileTag, lin.Cno = f.tag, cno
	linBody, err := segment.EncodeLineage(lin)
	if err != nil {
		return fmt.Errorf("copy %s into %s: %w", src.prefix, f.prefix, err)
	}
	ino := sino
	ino.Cno, ino.Parts, ino.Lineage, ino.MtimeNs = cno, 1, cno, time.Now().UnixNano()
	base := f.head
	part0 := &plannedObject{name: segment.ObjectName{Cno: cno, Part: 0}}
	body, err := f.encode(part0, &base, &ino)
	if err != nil {
		return fmt.Errorf("copy %s into %s: %w", src.prefix, f.prefix, err)
	}

	// The markers, the lineage and part 0 at once; then the head.
	var c flushCounters
	var reqs []func() error
	seen := map[string]bool{f.space.ID(): true}
	for _, e := range lin.Entries {
		if seen[e.FileID] {
			continue
		}
		seen[e.FileID] = true
		key := volume.RefKey(f.space.FilePrefix(e.FileID), f.space.ID())
		reqs = append(reqs, func() error {
			c.requests.Add(1)
			if _, err := f.st.Put(ctx, key, []byte(f.space.ID()), staging.PutOptions{}); err != nil {
				return fmt.Errorf("reference marker %s: %w", key, err)
			}
			return nil
		})
	}
	linKey := segment.LineageKey(f.prefix, cno)
	reqs = append(reqs, func() error {
		c.requests.Add(1)
		_, err := f.st.Put(ctx, linKey, linBody, staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
		if errors.Is(err, staging.ErrPrecondition) {
			// Ours, resent after a lost answer, or another writer's: the
			// bytes say (a lineage names its checkpoint and its files).
			got, gerr := segment.ReadLineage(ctx, f.st, f.prefix, f.tag, cno)
			if gerr == nil {
				if b, _ := segment.EncodeLineage(got); string(b) == string(linBody) {
					return nil
				}
			}
			return fmt.Errorf("lineage %s: another writer took checkpoint %d: %w", linKey, cno, errNameTaken)
		}
		if err != nil {
			return fmt.Errorf("lineage %s: %w", linKey, err)
		}
		return nil
	})
	reqs = append(reqs, func() error {
		return f.up.Put(ctx, f.key(part0.name), body, &c.requests)
	})
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { errs[i] = r() })
	}
	wg.Wait()
	f.s.requests.Add(c.requests.Load())
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, errNameTaken) {
			return fmt.Errorf("copy %s into %s: %w (%w)", src.prefix, f.prefix, err, ErrCloneUnsupported)
		}
		return fmt.Errorf("copy %s into %s: %w", src.prefix, f.prefix, err)
	}
	// The markers are stored: from now on the cleaner keeps what the copy
	// points at. Until now only the source's head did, so it must still be
	// the one copied, and nothing newer than it (WAL records) may be what
	// an open of the source reads. (A copy made again, CloneAgain, is of
	// what the copy's own checkpoints have kept since.)
	if current {
		var sc flushCounters
		err = src.stillCurrent(ctx, setag, &sc)
		f.s.requests.Add(sc.requests.Load())
		if err != nil {
			return fmt.Errorf("copy %s into %s: %w", src.prefix, f.prefix, err)
		}
	}
	hd := segment.Head{FileTag: f.tag, Inode: ino}
	if sblocks.known {
		hd.BlocksKnown, hd.Blocks = true, uint64(sblocks.n)
	}
	var hc flushCounters
	etag, err := f.putHead(ctx, hd, f.headETag, walMark{f.w.tracked, f.w.applied}, &hc)
	f.s.requests.Add(hc.requests.Load())
	if err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) {
			return fmt.Errorf("copy %s into %s: %w (%w)", src.prefix, f.prefix, err, ErrCloneUnsupported)
		}
		return fmt.Errorf("copy %s into %s: %w", src.prefix, f.prefix, err)
	}
	f.space.Remember(&lin)
	f.adoptHead(hd, etag)
	f.wm.Release(cno)
	f.stats.Flushes++
	f.stats.Clones++
	f.publishStatLocked()
	return nil
}

// publishedForCopy publishes what f holds (when anything changed) and
// returns its checkpoint, stored whole, and its head's ETag: the state a
// copy by reference takes. A File that shows WAL records over its head
// (another writer's, applied as an overlay, or its own not yet published)
// shows more than that checkpoint: refused, so that the caller copies the
// bytes, records included.
func (f *File) publishedForCopy(ctx context.Context) (segment.Inode, blockCount, string, error) {
	unlock, err := f.lockAll(ctx)
	if err != nil {
		return segment.Inode{}, blockCount{}, "", fmt.Errorf("copy %s: %w", f.prefix, err)
	}
	defer unlock()
	if f.changed {
		if f.walOn() {
			return segment.Inode{}, blockCount{}, "", fmt.Errorf("copy %s: changes in its write-ahead log are not published yet: %w", f.prefix, ErrCloneUnsupported)
		}
		if err := f.writable(); err != nil {
			return segment.Inode{}, blockCount{}, "", fmt.Errorf("copy %s: %w", f.prefix, err)
		}
		if _, err := f.flushLocked(ctx); err != nil {
			return segment.Inode{}, blockCount{}, "", fmt.Errorf("copy %s: publish it first: %w", f.prefix, err)
		}
	}
	if f.w.overlay || f.w.seq > f.w.applied {
		return segment.Inode{}, blockCount{}, "", fmt.Errorf("copy %s: it shows write-ahead log records %d..%d over its checkpoint: %w",
			f.prefix, f.w.applied+1, f.w.seq, ErrCloneUnsupported)
	}
	// A head that carries its part 0 may be all there is of it: a copy
	// points into that object, so it must be stored.
	var c flushCounters
	if err := f.startEnsureLocked(ctx, &c)(); err != nil {
		return segment.Inode{}, blockCount{}, "", fmt.Errorf("copy %s: %w", f.prefix, err)
	}
	f.s.requests.Add(c.requests.Load())
	count := f.headCount
	count.known = count.known && count.cno == f.head.Cno
	return f.head, count, f.headETag, nil
}

// stillCurrent checks, with no lock held, that the head of f as stored is
// still the one with ETag etag, and that no WAL record after the last one it
// holds is stored: that the checkpoint a copy by reference took is what an
// open of f reads now. Otherwise the copy is refused (ErrCloneUnsupported):
// its objects may no longer be protected by any head, and it would lack the
// records. One HEAD, and one LIST for a file written with the WAL.
func (f *File) stillCurrent(ctx context.Context, etag string, c *flushCounters) error {
	c.requests.Add(1)
	info, err := f.st.Head(ctx, volume.HeadKey(f.prefix))
	if errors.Is(err, staging.ErrNotFound) {
		return fmt.Errorf("the source's head is gone: %w", ErrCloneUnsupported)
	}
	if err == nil && info.ETag != etag {
		return fmt.Errorf("%w: %w", ErrSourceMoved, ErrCloneUnsupported)
	}
	if err != nil {
		return fmt.Errorf("read the source's head again: %w", err)
	}
	applied, tracked, err := wal.HeadApplied(info.Metadata)
	if err != nil {
		return fmt.Errorf("read the source's head again: %w", err)
	}
	if !tracked {
		return nil
	}
	c.requests.Add(1)
	pending, err := wal.After(ctx, f.st, f.prefix, applied)
	if err != nil {
		return fmt.Errorf("look for the source's write-ahead log records: %w", err)
	}
	if pending {
		return fmt.Errorf("the source's write-ahead log holds records after its checkpoint: %w", ErrCloneUnsupported)
	}
	return nil
}

// IsCopyOf reports whether f is still exactly what CloneFrom made of src as
// src is now: f's head is that copy's checkpoint, made from src's head, and
// neither file changed since. (A caller copying in pieces asks it for the
// pieces after the first, which the copy holds already.)
func (f *File) IsCopyOf(ctx context.Context, src *File) bool {
	f.mu.RLock()
	ino, changed := f.head, f.changed || len(f.dirty) > 0
	f.mu.RUnlock()
	src.mu.RLock()
	sino, schanged := src.head, src.changed || len(src.dirty) > 0
	src.mu.RUnlock()
	if changed || schanged || ino.Lineage == 0 || ino.Lineage != ino.Cno || f.space.Files() != src.space.Files() {
		return false
	}
	lin, err := f.space.Lineage(ctx, ino.Lineage)
	if err != nil {
		return false
	}
	last := lin.Entries[len(lin.Entries)-1]
	return last.FileID == src.space.ID() && last.Upto == sino.Cno && ino.Size == sino.Size
}
