// Package fusefs is the filesystem users run: it bridges the kernel's FUSE
// requests (through go-fuse's fs package) to the namespace (package
// fs/namespace) and to one per-file engine (package fs/engine) per open file.
// It owns the volume descriptor, the mapping of typed errors to errno values,
// the table of open files, the background loops of a mount (namespace refresh,
// periodic flush, deletion of unlinked files) and the read-only view of old
// checkpoints.
//
// # Objects of a volume
//
//	<root>ckptfs.json        the volume descriptor (below); created once with
//	                         If-None-Match: *
//	<root>ns/...             the namespace log and snapshots (fs/namespace)
//	<root>f/<file-id>/...    one file's head and checkpoint objects (fs/engine)
//
// The volume descriptor is JSON. These fields are part of the format:
//
//	{
//	  "layout_version": 1,          // a mount refuses a larger number
//	  "format": "stream",           // block-pointer format of new files
//	  "data_block_size": 65536,     // of new files, when created
//	  "meta_block_size": 4096
//	}
//
// Files are addressed by id, never by path: rename and hard links move no
// data, and a lookup or open goes by inode number, so a reader that looked a
// name up before another process renamed a new version over it opens the
// version it looked up (the save-to-temp-then-replace pattern never yields
// ENOENT).
//
// # Open files and flushing
//
// All handles of one file share one engine.File (a reference count in the
// open-file table). A checkpoint is published on fsync, on close (the FUSE
// Flush request, when flush_on_close is on), after every write of an O_SYNC or
// O_DSYNC handle, every flush_interval, and at unmount. A file whose last
// handle is closed while it is still dirty (flush_on_close off, or a failed
// flush) stays in the table until a later flush succeeds: dropping it would
// lose acknowledged data.
//
// A handle that reads sequentially reads ahead through the engine in 4 MiB
// windows: the kernel asks for 128 KiB at a time, and one ranged GET per
// 128 KiB would spend most of its time on the request.
//
// Files are never opened with direct_io, so the page cache serves shared
// mmap (reads and writes) as on a local filesystem.
//
// # Unlinked files
//
// A file whose last name is removed while open stays readable and writable
// through its handles. Once no handle is left (and after a short grace period
// that covers a lookup racing the unlink), its objects are deleted and the
// namespace forgets it. This is per mount: a mount does not know about handles
// another mount holds.
//
// # Old checkpoints
//
// Every retained checkpoint of every file is readable, read-only, at
//
//	<mountpoint>/.checkpoints/<path of the file>/<cno>
//
// where <cno> is the decimal checkpoint number. .checkpoints is not listed in
// the root directory (so tar, diff -r and find do not descend into it) but can
// be entered by name. Every file also has two read-only extended attributes:
// user.ckptfs.cno (its last published checkpoint) and user.ckptfs.format.
//
// # Several mounts of one root
//
// Each mount re-reads the namespace log every ns_refresh. The kernel caches
// names and attributes for at most one second (attrTimeout), so a name created,
// renamed or removed by another mount is seen here within ns_refresh plus one
// second; the size of a file another mount wrote follows within the same time.
//
// # Errors
//
// Typed errors of the namespace, the engine, the segment codec and the store
// are turned into errno values here and only here (errnoOf). A corrupt or
// foreign object is EIO, with the reason logged; a canceled request is EINTR.
//
// # Locking
//
// FS.mu guards the open-file table and the orphan list; it is never held
// across a call to the store or to the engine. engine.File and
// namespace.Namespace lock themselves.
package fusefs
