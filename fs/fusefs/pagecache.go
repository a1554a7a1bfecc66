package fusefs

import (
	"slices"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
)

// Keeping the kernel's pages across opens.
//
// The kernel drops a FUSE file's cached pages at every open unless the open
// answers FOPEN_KEEP_CACHE. Dropping them makes a second read of a restored
// checkpoint a second download; keeping them when they may hold bytes of
// another checkpoint would show a reader a mix of two. So an open keeps them
// exactly when they are known to be the bytes the file holds now:
//
//   - While the file's engine stays open, every byte the kernel cached came
//     through it: writes go through the page cache to the engine, reads come
//     from it. They stay exact until the engine takes content that did not
//     come through the kernel (engine.File.ForeignChanges: a conflict's
//     rollback or merge, a reload, a copy by reference). An open keeps them
//     if that count has not moved since the pages were last known exact (the
//     last open, which otherwise had the kernel drop them).
//   - When the engine closes clean with the count unmoved, the pages are the
//     bytes of the version it showed last (engine.Version: its checkpoint
//     and the last WAL record of another writer applied over it):
//     pageVers remembers it by file id. The next open, on a new engine
//     that read the head (and the records of a live writer's WAL) from the
//     store again, keeps them only if it shows that same version and
//     nothing is dirty (a WAL replayed at the open makes it dirty). A newer
//     checkpoint written by another mount has another number, and an
//     acknowledged write in a live writer's WAL another record: the pages
//     go. The checkpoint number alone would not do: records applied over
//     an unmoved head change the bytes and not the number.
//   - An O_TRUNC open never keeps them (the kernel empties them itself).
//
// A flush that merged another mount's checkpoint into this one's writes, or
// rolled back to it, changes bytes the kernel may hold while handles are
// open: the mount then has the kernel drop the file's pages at once
// (dropStalePages), so that reads on those handles see the merged file.
//
// An open of a file whose engine is open already has it read the head again
// (engine.File.Refresh, close-to-open): when that takes another mount's
// checkpoint or records, the count moves and the open drops the pages, for
// every handle of the file here.

// pageVerEntries bounds pageVers: about 90 bytes an entry. A file
// whose entry was dropped is read again at its next open, nothing more.
const pageVerEntries = 1 << 16

// pagesState is what an open file knows of the kernel's pages of its file;
// GUARDED_BY(FS.mu).
type pagesState struct {
	known   bool   // an open has answered for this engine
	foreign uint64 // the engine's ForeignChanges when the pages were last known exact
	// inodes are the kernel's inodes of the file that were opened on
	// this engine: those whose pages dropStalePages drops.
	inodes []*fs.Inode
}

// openFlags is the FUSE open flags of a new handle on of: FOPEN_KEEP_CACHE
// when the kernel's pages of the file are known to be its bytes now.
func (fsys *FS) openFlags(of *openFile, in *fs.Inode, flags uint32) uint32 {
	foreign := of.f.ForeignChanges()
	st := of.f.Stat()
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	var keep bool
	if of.pages.known {
		keep = of.pages.foreign == foreign
	} else {
		ver, ok := fsys.pageVers[of.id]
		keep = ok && ver == st.Version && st.Cno != 0 && !st.Dirty
	}
	// Kept or dropped, the pages are exact from here on.
	of.pages.known, of.pages.foreign = true, foreign
	of.pages.noteLocked(in)
	if !keep || flags&syscall.O_TRUNC != 0 {
		return 0
	}
	return fuse.FOPEN_KEEP_CACHE
}

// pagesClosedLocked records, as of's engine closes, which version of the
// file the kernel's pages hold, if they are known exact. FS.mu held.
func (fsys *FS) pagesClosedLocked(of *openFile, orphan bool) {
	st := of.f.Stat()
	if orphan || !of.pages.known || of.pages.foreign != of.f.ForeignChanges() || st.Dirty || st.Cno == 0 {
		delete(fsys.pageVers, of.id)
		return
	}
	if _, ok := fsys.pageVers[of.id]; !ok && len(fsys.pageVers) >= pageVerEntries {
		for id := range fsys.pageVers { // any one
			delete(fsys.pageVers, id)
			break
		}
	}
	fsys.pageVers[of.id] = st.Version
}

// noteLocked adds in to the inodes whose pages are dropped. FS.mu held.
func (ps *pagesState) noteLocked(in *fs.Inode) {
	if in != nil && !slices.Contains(ps.inodes, in) {
		ps.inodes = append(ps.inodes, in)
	}
}

// dropStalePages has the kernel drop the pages of of's file if its engine
// took content other than its own writes since they were last known exact
// (a flush merged or rolled back to another mount's checkpoint). No lock is
// held: the kernel may send requests for the file (a dirty page of a shared
// mapping written back) before it answers.
func (fsys *FS) dropStalePages(of *openFile) {
	foreign := of.f.ForeignChanges()
	fsys.mu.Lock()
	if !of.pages.known || of.pages.foreign == foreign {
		fsys.mu.Unlock()
		return
	}
	of.pages.foreign = foreign
	inodes := slices.Clone(of.pages.inodes)
	fsys.mu.Unlock()
	for _, in := range inodes {
		// ENOENT: the kernel forgot the inode, and its pages with it.
		if errno := in.NotifyContent(0, 0); errno != 0 && errno != syscall.ENOENT {
			fsys.log.Warn("dropping the kernel's stale pages of a file failed", zap.String("file", of.id), zap.Error(errno))
		}
	}
}

// dropPagesLater has the kernel drop the pages and the size it caches of
// of's file, once the write being answered is: an append the engine placed
// past the size the kernel gave it left the kernel's pages holding its bytes
// where the file does not. Not before the answer: the kernel holds the
// pages the write filled until then.
func (fsys *FS) dropPagesLater(of *openFile) {
	fsys.mu.Lock()
	inodes := slices.Clone(of.pages.inodes)
	fsys.mu.Unlock()
	fsys.tasks.goFn(func() {
		for _, in := range inodes {
			if errno := in.NotifyContent(0, 0); errno != 0 && errno != syscall.ENOENT {
				fsys.log.Warn("dropping the kernel's pages of a file after an append failed", zap.String("file", of.id), zap.Error(errno))
			}
		}
	})
}

// dropCachedAttrs has the kernel forget the attributes it caches of in, an
// inode of of's file being opened, so that the size and mtime it uses next
// (a read past the size it knew is cut there, an fstat) are the engine's as
// the open left it, not an answer up to attrTimeout old. Only attributes: an
// invalidation without pages takes no lock of the inode in the kernel, so it
// is safe inside the open, which the kernel may serve holding the inode
// (O_TRUNC). ENOENT: the kernel forgot the inode already.
func (fsys *FS) dropCachedAttrs(of *openFile, in *fs.Inode) {
	if in == nil {
		return
	}
	if errno := in.NotifyContent(-1, 0); errno != 0 && errno != syscall.ENOENT && errno != syscall.ENOSYS {
		fsys.log.Debug("dropping the kernel's cached attributes of a file failed", zap.String("file", of.id), zap.Error(errno))
	}
}
