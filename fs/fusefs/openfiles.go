package fusefs

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
)

// openFile is one file's engine shared by all its handles.
type openFile struct {
	id    string
	ready chan struct{} // closed when f or err is set
	f     *engine.File
	err   error
	refs  int // GUARDED_BY(FS.mu)
	// writers counts the handles open for writing; GUARDED_BY(FS.mu).
	// With the WAL, the last one's release lets the lease go while
	// readers keep the engine open (engine.File.LetGoWAL).
	writers int
	// closing is set while the engine closes (it may wait for a WAL
	// publish and release the WAL's lease) and closed when it has: an open
	// meanwhile waits, so two engines of one file never overlap.
	closing chan struct{} // GUARDED_BY(FS.mu)
	// attrs are the attribute changes made with setAttrLater that the
	// next fsync or close waits for; GUARDED_BY(FS.mu).
	attrs []*namespace.Pending
	// pages is what is known of the kernel's pages of the file
	// (pagecache.go); GUARDED_BY(FS.mu).
	pages pagesState
}

// snapshotFiles lists the files whose engine is open.
func (fsys *FS) snapshotFiles() []*openFile {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	out := make([]*openFile, 0, len(fsys.files))
	for _, of := range fsys.files {
		if of.closing != nil {
			continue
		}
		select {
		case <-of.ready:
			if of.f != nil {
				out = append(out, of)
			}
		default:
		}
	}
	return out
}

// acquire returns the shared engine of file id, opening it on first use (and
// creating its head if the namespace names a file whose head was never
// written). Release it with release.
func (fsys *FS) acquire(ctx context.Context, id string) (*openFile, error) {
	of, _, err := fsys.acquireFile(ctx, id, false)
	return of, err
}

// acquireFile is acquire, and says whether the engine was opened by this
// call (fresh: it read the head just now) rather than shared. An open for
// reading (reading) has a fresh engine load the map's first path from the
// head this mount last read of the file while it reads the head again
// (engine.MapHint): a cold read's first bytes then wait one round trip
// less.
func (fsys *FS) acquireFile(ctx context.Context, id string, reading bool) (*openFile, bool, error) {
	fsys.mu.Lock()
	of := fsys.files[id]
	for of != nil && of.closing != nil {
		ch := of.closing
		fsys.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		fsys.mu.Lock()
		of = fsys.files[id]
	}
	if of != nil {
		of.refs++
		fsys.mu.Unlock()
		<-of.ready
		if of.err != nil {
			fsys.mu.Lock()
			of.refs--
			fsys.mu.Unlock()
			return nil, false, of.err
		}
		return of, false, nil
	}
	of = &openFile{id: id, ready: make(chan struct{}), refs: 1}
	fsys.files[id] = of
	opts := fsys.engineOptions(id)
	if h, ok := fsys.heads.peek(id); ok && reading && h.hint.Height > 0 {
		hint := h.hint
		opts.MapHint = &hint
	}
	fsys.mu.Unlock()

	start := time.Now()
	f, err := engine.Open(ctx, fsys.st, fsys.prefix(id), opts)
	if errors.Is(err, engine.ErrNotExist) {
		// An unlinked file whose data a cleaner deleted must not be
		// brought back: only a file still named once the namespace is read
		// again is opened empty here (one made before heads were stored at
		// create and never written, or one whose create on another mount
		// has not stored its head yet). Its empty head is stored now, with
		// If-None-Match, as a create stores it: the file's format is
		// whichever landed first, this mount's or the creator's (which then
		// opens this one), before either writes; a file made here with no
		// head, in this mount's format, could not build on a head of the
		// other format landing before its first publish.
		if err = fsys.missingHead(ctx, id, start); err == nil {
			o := fsys.engineOptions(id)
			o.StoreHead = !fsys.cfg.ReadOnly
			f, err = engine.Create(ctx, fsys.st, fsys.prefix(id), o)
			if errors.Is(err, engine.ErrExists) {
				f, err = engine.Open(ctx, fsys.st, fsys.prefix(id), fsys.engineOptions(id))
			}
		}
	}
	of.f, of.err = f, err
	close(of.ready)
	if err != nil {
		fsys.mu.Lock()
		delete(fsys.files, id)
		fsys.mu.Unlock()
		return nil, false, err
	}
	return of, true, nil
}

// adopt registers f, just created, as the open engine of file id with one
// reference.
func (fsys *FS) adopt(id string, f *engine.File) *openFile {
	// A new file's inode has no pages in the kernel yet: they are exact.
	of := &openFile{id: id, ready: make(chan struct{}), f: f, refs: 1,
		pages: pagesState{known: true, foreign: f.ForeignChanges()}}
	close(of.ready)
	fsys.mu.Lock()
	fsys.files[id] = of
	fsys.mu.Unlock()
	return of
}

// release drops one reference. The last one flushes the file when flush is
// set and it is dirty, then closes its engine unless it is still dirty.
func (fsys *FS) release(ctx context.Context, of *openFile, flush bool) error {
	fsys.mu.Lock()
	of.refs--
	last := of.refs == 0
	fsys.mu.Unlock()
	if !last {
		return nil
	}
	var err error
	if flush && of.f.Stat().Dirty && !fsys.isOrphan(of.id) {
		if _, err = fsys.flush(ctx, of); err != nil {
			fsys.log.Warn("flush at last close failed; data stays dirty", zap.String("file", of.id), zap.Error(err))
		}
	}
	fsys.closeIfIdle(of)
	return err
}

// closeIfIdle closes the engine of of if no handle holds it and nothing in it
// waits to be published (or the file is unlinked, so nothing needs to be).
func (fsys *FS) closeIfIdle(of *openFile) {
	orphan := fsys.isOrphan(of.id)
	if !orphan && of.f.Stat().Dirty {
		return
	}
	fsys.mu.Lock()
	if fsys.files[of.id] != of || of.refs != 0 || of.closing != nil {
		fsys.mu.Unlock()
		return
	}
	of.closing = make(chan struct{})
	fsys.mu.Unlock()
	of.f.Close()
	fsys.mu.Lock()
	if fsys.files[of.id] == of {
		delete(fsys.files, of.id)
	}
	fsys.pagesClosedLocked(of, orphan)
	if !orphan {
		st := of.f.Stat()
		h := statHead(st)
		h.seen = time.Now()
		fsys.heads.put(of.id, h)
	}
	close(of.closing)
	fsys.mu.Unlock()
}

func (fsys *FS) isOrphan(id string) bool {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	_, ok := fsys.orphans[id]
	return ok
}

// unlinked says whether file id has no name left, here or on any mount
// whose changes this one has read.
func (fsys *FS) unlinked(ctx context.Context, id string) (bool, error) {
	if fsys.isOrphan(id) {
		return true, nil
	}
	return fsys.ns.Orphaned(ctx, id)
}

// orphaned records that file id lost its last name here.
func (fsys *FS) orphaned(n namespace.Node) {
	if n.Kind != namespace.KindFile || n.Nlink != 0 || n.FileID == "" {
		return
	}
	fsys.mu.Lock()
	fsys.orphans[n.FileID] = struct{}{}
	fsys.heads.remove(n.FileID)
	fsys.mu.Unlock()
}

// pruneOrphans forgets the unlinked files that no handle holds here and that
// the namespace no longer holds as orphans: a cleaner deleted them. The
// namespace is asked without fsys.mu held (its reads may wait for the
// store); one it cannot answer about stays remembered until the next time.
// A file forgotten by the namespace stays forgotten, so only a handle
// opened meanwhile keeps it here.
func (fsys *FS) pruneOrphans(ctx context.Context) {
	fsys.mu.Lock()
	var idle []string
	for id := range fsys.orphans {
		if fsys.files[id] == nil {
			idle = append(idle, id)
		}
	}
	fsys.mu.Unlock()
	var gone []string
	for _, id := range idle {
		if o, err := fsys.ns.Orphaned(ctx, id); err == nil && !o {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	for _, id := range gone {
		if fsys.files[id] == nil {
			delete(fsys.orphans, id)
		}
	}
}
