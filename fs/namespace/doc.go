// Package namespace owns the namespace of a ckptfs mount: directories, names,
// modes, owners, times, symlink targets, user extended attributes, hard links
// and the file ids that name each file's data (<root>/f/<file-id>/, written by
// the file engine). Sizes and file contents are not here: they live in each
// file's own head object.
//
// # Objects
//
// The namespace is an ordered log of changes under <root>/ns/log/, one object
// per change, created with If-None-Match: * so that the store orders writers,
// compacted now and then into snapshots under <root>/ns/snap/. Keys and the
// byte layout of both objects are documented in format.go. Every mount that
// replays the same log holds the same state: changes carry their own time,
// inode numbers and directory cookies derive from log positions, and a change
// is checked against the state it follows by its writer and again, identically,
// by every reader.
//
// # Several mounts
//
// A change (Create, Rename, ...) first reads the entries this mount missed,
// checks itself against the state, and creates the next entry. If another
// writer took that seq, it reads that entry, applies it and checks itself
// again (a name taken meanwhile gives ErrExist) at the next seq. Every change
// has a random id, in its body and in the object's ckptfs-write metadata: a
// send whose answer was lost and that is resent finds its own entry and is
// not applied twice. Refresh reads what other mounts wrote; the mount calls it
// every ns_refresh.
//
// The writer of every Options.CompactEvery-th entry stores a snapshot as of
// that entry. Open loads the newest snapshot and replays the entries after
// it. Old entries are kept until a cleaner deletes those Compactable allows.
//
// # Nodes
//
// Every node has an Ino that never changes: the root is RootIno, the node a
// log entry creates is seq<<16. Directory entries have cookies that stay valid
// while other entries are removed (ReadDirAfter), for readdir offsets and
// seekdir. A file whose last name goes (Unlink, or Rename over it) stays, an
// orphan with its file id (Orphans), so that open handles, on any mount, can
// still read it. Orphans are the cleaner's: it deletes their data once older
// than its grace period and calls Forget. No mount does, since none knows the
// handles of the others.
//
// # For the FUSE layer
//
//   - Errors are sentinel values (ErrExist, ErrNotExist, ErrNotEmpty, ...)
//     wrapped with context; map them with errors.Is. No errno is chosen here.
//     Errors from the store come wrapped as they are (context.Canceled too).
//   - Mode holds permission bits only; the type is Kind.
//   - A file's mtime: the head's (the last checkpoint) unless Node.MtimeSetNs
//     is later, in which case Node.MtimeNs (set by utimens).
//   - Lookup, GetNode, ReadDir, ReadDirAfter, GetXattr, ListXattr and Orphans
//     read memory only and never wait for the store.
//
// # Locking
//
// A Namespace is safe for concurrent use. One mutex serialises Refresh and
// every change and is held across their store calls (a change waits for the
// one before it); a second one guards the state and is held only in memory,
// so reads never wait for the network.
package namespace
