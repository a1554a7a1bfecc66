// Package fusefs is the filesystem users run: it bridges the kernel's FUSE
// requests (through go-fuse's fs package) to the namespace (package
// fs/namespace, held as a namespace.Names) and to one per-file engine
// (package fs/engine) per open file.
// It owns the mapping of typed errors to errno values, the table of open
// files, the background loops of a mount (namespace refresh, periodic flush)
// and the read-only view of old checkpoints.
//
// # The namespace
//
// The mount, .checkpoints included, holds the namespace as a
// namespace.Names, not as the v1 *namespace.Namespace: its reads take the
// call's context and may fail as the store does (v1 answers them from
// memory; v2, docs/namespace-v2.md, will read names from the store), and a
// failed read is mapped as any store error (Errors, below).
// What only v1 offers is asked for by type assertion, and the mount goes on
// without it: its log's seq (namespace.Sequenced; the refresh then backs off
// on use alone), its count of nodes (namespace.Counted; statfs then shows no
// file in use), and changes of attributes that land later
// (namespace.AttrsLater; each change of times is then made with SetAttr).
//
// # Objects of a volume
//
// The layout of a volume in its bucket (the descriptor, the namespace, one
// prefix per file) and the volume descriptor are package fs/volume's; a
// mount opens the descriptor, or creates it (volume.OpenDescriptor), before
// its namespace, which is the one the descriptor names (volume.OpenNames):
// v1's log, or on a volume made with namespace=v2 an nsv2.Tree with a fresh
// mount id. On v2 the mount runs no background cleaner (gc.go) and no
// periodic refresh (the Tree lets what it read expire after ns_refresh,
// refresh.go).
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
// open-file table). An open that finds the engine open already has it read
// the head again (engine.File.Refresh), and every open has the kernel drop
// its cached attributes of the file: an open that starts after a close or
// fsync returned on any mount reads that version or a later one
// (close-to-open; docs/design.md says what remains). A checkpoint is published on fsync, on close (the FUSE
// Flush request, when flush_on_close is on), after every write of an O_SYNC or
// O_DSYNC handle, every flush_interval, and at unmount. A file whose last
// handle is closed while it is still dirty (flush_on_close off, or a failed
// flush) stays in the table until a later flush succeeds: dropping it would
// lose acknowledged data.
//
// A handle that reads sequentially reads ahead through the engine (up to
// the engine's prefetchMaxWindow ahead, in ranged GETs of at most its
// prefetchMaxPiece and read_get_max_bytes: fs/engine/prefetch.go): the
// kernel asks for MountOptions.MaxReadAhead at a time (the mount raises the
// device's read-ahead to it from the kernel's default: setKernelReadAhead),
// and one ranged GET per kernel read would spend most of its time on the
// request.
//
// Files are never opened with direct_io, so the page cache serves shared
// mmap (reads and writes) as on a local filesystem.
//
// A write of a descriptor with O_APPEND set (the kernel passes the
// descriptor's flags with each write; umaskFS marks it for the handle:
// appendMark) writes at the end of the file as the engine holds it
// (engine.File.Append), not at the offset the kernel took from the size it
// caches, and a merge places those bytes at the end of the merged file
// (docs/design.md, "What a merge gives"). O_APPEND set with fcntl(F_SETFL)
// counts from then on; pwritev2's RWF_APPEND, which the kernel does not pass
// on, gives writes at the offset the kernel took from its cached size.
//
// # Unlinked files
//
// A file whose last name is removed (unlink, or a rename over it) while open
// stays readable and writable through its handles, on every mount: a program
// on another mount that holds the old version open reads it, exactly, until
// it closes it, so saving to a temporary file and renaming it over the old
// one breaks no reader anywhere. The mount that removed the name does not
// publish the file's unpublished changes (no one can reach them after the
// last close) and never deletes its data: it cannot know the handles other
// mounts hold. The file stays an orphan of the namespace until the cleaner
// (package fs/cleaner, ckptfs gc) deletes its objects, once the newest of
// them is older than the cleaner's grace period, and makes the namespace
// forget it; that grace period is how long a handle on any mount may read an
// unlinked file that no one writes. Until then the data of an unlinked file
// still counts in the bucket.
//
// # Directories
//
// Every namespace change is in the store (its log entry written) before the
// call that made it returns, so fsync of a directory has nothing left to
// write and succeeds at once; programs that save with write, fsync, rename,
// fsync(dir) may rely on it.
//
// # FIFOs, sockets and devices
//
// mkfifo and the bind of an AF_UNIX socket make namespace entries with their
// mode and no data object (mknod.go), seen by every mount of the volume and
// kept across remounts; what passes through them stays in the kernel of the
// machine that opened them. Block and character devices are refused with
// EPERM (a device number means nothing on the other machines of the bucket);
// mknod of a regular file makes an empty file, as creat does.
//
// # Old checkpoints
//
// Every retained checkpoint of every file is readable, read-only, at
//
//	<mountpoint>/.checkpoints/<path of the file>/<cno>
//
// where <cno> is the decimal checkpoint number. .checkpoints is not listed in
// the root directory (so tar, diff -r and find do not descend into it) but can
// be entered by name; the name is reserved at the root (creating, renaming to
// or linking as .checkpoints there fails with EPERM).
//
// Old checkpoints are exactly as protected as the file they belong to: every
// directory of the tree has the owner, group and mode (write bits cleared) of
// the directory it mirrors, a file's directory of checkpoints and each
// checkpoint have the file's owner and group and its read bits (r-x and r--),
// all as of now, and the kernel checks them (the mount always has
// default_permissions). So with allow_other another user can neither list a
// 0700 directory through .checkpoints nor read an old version of a file they
// may not read.
//
// Listing a file's checkpoints reads its chain once, one header read per
// checkpoint, and the mount keeps it by the head's checkpoint number; a
// listing reads the head each time, so it shows every checkpoint published
// before it began, through any mount. The lookups that follow and a lookup
// of one number cost a read of the head and at most one header
// (ckptchain.go).
//
// A checkpoint the cleaner drops (ckptfs gc --keep) stays readable for its
// --min-age after the run that dropped it. A handle that still reads it
// once its objects are gone gets ESTALE, and so does a handle of the live
// file held on a version the cleaner has since removed: the cleaner
// deletes a checkpoint's part 0 before any object it names, so an object
// missing under a part 0 that is gone is the cleaner's, and one missing
// under a part 0 still there is lost (EIO, logged).
//
// Every file also has two read-only extended attributes, read by name:
// user.ckptfs.cno (its last published checkpoint) and user.ckptfs.format.
// They are not listed (listxattr), so cp -a, rsync -X and tar --xattrs do not
// copy them onto other files.
//
// # POSIX ACLs
//
// The mount negotiates FUSE_POSIX_ACL, so the kernel reads a node's access
// ACL (getxattr of system.posix_acl_access), caches it and enforces it;
// setfacl and getfacl work as on ext4, and listxattr lists the ACLs so that
// cp -a, rsync -A and tar --acls copy them. An ACL is stored with the node's
// extended attributes in the namespace, under user.ckptfs.acl_access and
// user.ckptfs.acl_default (neither listed nor settable as such), in the
// kernel's binary format (acl.go), and parsed and checked whenever it is read
// back. The mode holds the entries it mirrors (owner: USER_OBJ; group: MASK,
// or GROUP_OBJ without a mask; other: OTHER): setting an ACL sets the mode
// from it (and one that says no more than a mode is not stored), and an ACL
// read back takes those entries from the mode, so a chmod narrows the mask as
// on ext4 (the kernel sends no setxattr after a chmod: this side keeps the
// two in line). A node (file, directory, FIFO, socket) created in a
// directory with a default ACL takes it (its access ACL narrowed by the mode
// asked for; a directory also takes the default ACL), as the kernel leaves
// to the filesystem. The
// nodes of .checkpoints carry the ACL of what they mirror with the write bits
// cleared (and, for a file's checkpoints, its read bits only).
//
// The umask applies only where the directory has no default ACL, as on
// ext4: the mount negotiates FUSE_DONT_MASK, so the kernel sends the mode
// unmasked with the umask beside it, and umaskFS carries the umask past
// go-fuse's node API (which drops it) to Create, Mkdir and Mknod.
//
// Setting an access ACL clears the setgid bit when the caller is outside the
// file's group and unprivileged, as on ext4 (FUSE_SETXATTR_EXT: the kernel
// says so in the request, and umaskFS passes it on in the flags).
//
// Limits: the kernel caches an ACL it has read and nothing tells it of a
// change made on another mount: there it may be seen only once the kernel
// forgets the node (a remount at the latest).
//
// # Mount options
//
// uid, gid, file_mode, dir_mode and umask change what stat shows, and so
// what the kernel checks (default_permissions), for every file and
// directory, including those of .checkpoints; they change nothing recorded:
// files are created with the caller's owner and chmod and chown record as
// always, which a mount without the options shows. ro, noexec, nosuid, nodev
// and noatime are given to the kernel (mount(2) flags for a mount made
// directly by root, option words for fusermount3).
//
// allow_root has no kernel option: the mount is made allow_other and every
// request that names a file from a user other than root and the mounting one
// is refused with EACCES (allowRoot), as libfuse does; requests on handles
// already open pass. The kernel's caches are not checked: a name root looked
// up is in the kernel's cache for attrTimeout, and another user's stat of it
// meanwhile is answered from it (libfuse has the same gap).
//
// auto_unmount has fusermount3 make the mount, even for root, and keep a
// watcher on a socket to this process: when the process ends, however it
// ends, the socket closes and fusermount3 unmounts (lazily), so a killed mount
// leaves an empty directory rather than "Transport endpoint is not
// connected". Unmount unmounts it itself (not lazily: a busy mount stays) and
// then lets the watcher go.
//
// # Metrics
//
// -o metrics=host:port serves Prometheus counters at /metrics, unauthenticated.
// An empty host (":9567") or 0.0.0.0 listens on every interface; the mount
// then warns in its log. Give a loopback address (127.0.0.1:9567) to keep the
// counters local.
//
// Every series carries the label volume, the store URL without user
// information or query (metricsVolume), and ckptfs_build_info names the
// build (Options.Build). docs/operations.md lists the metrics;
// docs/monitoring has a dashboard and alert rules that name them.
//
// # Several mounts of one root
//
// Each mount re-reads the namespace log every ns_refresh while it is in use,
// and less often while it is idle (below). The kernel caches names and
// attributes for at most one second (attrTimeout), so a name created, renamed
// or removed by another mount is seen here within ns_refresh plus one second
// on a mount in use. On an idle mount a name another mount created is found
// at the first look too: a lookup that misses when the log was last read
// more than twice ns_refresh ago reads it first (one small request, shared
// by concurrent misses; on a mount in use, which reads the log every
// ns_refresh, a miss costs nothing); other changes (a rename, a removal) show within ns_refresh_max
// plus one second, or sooner, since any request wakes the refresh. The size of
// a file another mount wrote follows within headTTL plus the kernel's
// attrTimeout: the head cache below.
//
// # Attributes of files not open
//
// The size and mtime of a file come from its engine while it is open here,
// and otherwise from its head object, remembered for headTTL (ns_refresh, at
// least attrTimeout) in a cache of at most headCacheEntries heads (least
// recently used first out; heads.go says what an entry costs, and so the
// bound in bytes, whatever the number of files). Concurrent reads of one
// head are one request, shared by every stat waiting for it.
//
// Reading a directory (readdir) has the heads of the files it lists read in
// the background, at most 32 at once for the whole mount and at most 4,096
// entries ahead of what the listing returned, skipping files open here or
// cached; the lookups and stats that follow (ls -l, ls -lR, readdirplus)
// wait for those reads rather than make their own. A cold ls -lR then costs
// about one round trip per 32 files instead of one per file. A read that
// fails leaves the file uncached, and its stat reads the head itself and
// reports what fails. The reads belong to the mount: Close cancels and waits
// for them.
//
// # What an idle mount costs
//
// The namespace refresh backs off: after a refresh that found nothing new,
// while no FUSE request showed use (a lookup, getattr, readdir, open or
// change: each counts in one atomic counter and never waits for a refresh)
// and the mount changed nothing, the next waits twice as long, up to
// ns_refresh_max (10s by default). A refresh that finds something, a change of
// this mount, or any such request brings the interval back to ns_refresh at
// once. Once backed off, an idle mount sends at most 86400/ns_refresh_max
// refreshes a day (8,640 with the defaults), each one small request (the
// namespace's idle refresh) — and nothing else:
//
//   - the periodic flush (flush_interval, off by default) publishes only
//     files with unpublished changes;
//   - the idle tick (every second) retries the flush of closed files still
//     dirty and forgets orphans a cleaner deleted: memory only, unless a
//     closed file is still dirty;
//   - an open file's engine keeps its own timers (a WAL lease, a writer
//     marker), only while open;
//   - the head cache and the prefetch read only when asked (a stat, a
//     listing).
//
// A store that is down makes refreshes fail; they back off the same way on an
// idle mount, and come back to ns_refresh on first use.
//
// # Errors
//
// Typed errors of the namespace, the engine, the segment codec and the store
// are turned into errno values here and only here (errnoOf). A corrupt or
// foreign object is EIO, with the reason logged; a canceled request is EINTR
// (without -o intr only a dying caller's request is canceled: interrupt.go).
// A read of the namespace that fails goes through errnoOf too; where a read
// only refines an answer already chosen (ESTALE for a replaced directory,
// staledir.go; for a reaped file, reapedFile), a failed read proves nothing
// and the answer stays errnoOf's.
//
// # Locking
//
// FS.mu guards the open-file table, the list of files unlinked here and the
// head cache; it is never held across a call to the store or to the engine,
// nor across a read of the namespace, which may wait for the store
// (pruneOrphans asks without it). engine.File and the namespace lock
// themselves; SetAttrLater, which never waits, is called under FS.mu, so
// that the check that its file is open and not closing and the record of
// the change on the file are one step for the file's close.
package fusefs
