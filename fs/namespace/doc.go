// Package namespace owns the namespace of a ckptfs mount: directories, names,
// modes, owners, times, symlink targets, user extended attributes, hard links
// and the file ids that name each file's data (<root>/f/<file-id>/, written by
// the file engine). Sizes and file contents are not here: they live in each
// file's own head object.
//
// # FIFOs and sockets
//
// Mknod makes a FIFO or a Unix socket file (KindFIFO, KindSocket): a node
// with its mode, owner and times and no data, linked, renamed and removed
// like a symlink (it goes with its last name). Log entries that make one,
// and snapshots while the volume holds one, are in envelope version 3
// (format.go), so that builds before FIFOs refuse such a volume instead of
// misreading it; a volume without them is written as before.
//
// # Device nodes
//
// MknodDevice makes a character or block device node (KindCharDev,
// KindBlockDev): such a node with its device number (major and minor,
// within Linux's 12 and 20 bits) besides. Entries that make one, and
// snapshots while the volume holds one, are in envelope version 4, which
// builds before devices refuse (those of version 3 included). The number
// is stored, not trusted: mounts are nodev, so a node read from the bucket
// never opens a device.
//
// # The fence
//
// When the volume is upgraded to namespace v2 (ckptfs upgrade, fs/upgrade),
// its log ends in a fence (fence.go): an entry of envelope version 5 at the
// next seq, which builds before it refuse as unknown. A mount applies what
// is before it, then fails every change and refresh with ErrFenced, naming
// the upgrade, and logs it once; Open refuses a fenced log unless
// Options.ReadFenced.
//
// # One interface: Names
//
// The namespace's users (the mount, .checkpoints, the cleaner, fsck, ls,
// cp) hold a Names (names.go), which *Namespace implements: the reads take
// a context and return an error, since v2 (docs/namespace-v2.md, to come)
// keeps each name in an object of its own and will answer a read of a name
// not cached from the store. What only this log-based namespace has
// is asked for by type assertion (Sequenced, Counted, AttrsLater) by the
// one caller that needs it, which goes on without it; Compact, Compactable
// and Wait are *Namespace's only. The rest of this page is *Namespace: v1,
// one ordered log.
//
// # Objects
//
// The namespace is an ordered log of changes under <root>/ns/log/, one object
// per change, created with If-None-Match: * so that the store orders writers,
// compacted now and then into snapshots under <root>/ns/snap/. Keys and the
// byte layout of both objects are documented in format.go. Every mount that
// replays the same log holds the same state: entries carry their own time,
// inode numbers and directory cookies derive from log positions (the entry
// and the op's place in it), and every op is checked against the state it
// follows by its writer and again, identically, by every reader.
//
// # Changes: optimistic append and group commit
//
// A change (Create, Rename, ...) is queued for the committer, a goroutine of
// the Namespace; changes queued while an entry is being written go together
// into the next one (up to maxBatchOps ops or maxBatchBytes of them encoded),
// so that concurrent changes cost one PUT between them. The committer
// checks each change in order against the state the ones before it leave (a
// change that fails is answered with its error, ErrExist etc., and left out)
// and creates the next entry, seq = state+1, with If-None-Match.
//
// It does so without reading the log first while the tail is trusted: the
// mount confirmed, less than Options.TailTrust ago (1 minute), that its
// state was the end of the log (its own append landed; a listing after the
// state found nothing more; or a GET of the next entry found none while the
// previous confirmation was trusted). Otherwise it lists the log first. If
// another writer took the seq, the committer reads that entry, applies it,
// reads on and checks its changes again (a name taken meanwhile gives
// ErrExist) at the next seq. A change refused by its check is answered only
// once its state is known to be the end of the log: the entry after it
// landed, or one GET found no entry after it. Every entry has a random id,
// in its body and in the object's ckptfs-write metadata: a send whose answer
// was lost and that is resent finds its own entry and is not applied twice.
// A change at a trusted tail thus costs one PUT, whatever the length of the
// log.
//
// Why appending at a trusted tail is safe although the log is trimmed:
// entries are deleted only once a snapshot covers them AND the store's
// LastModified of them is older than Options.TrimGrace (10 minutes). An
// entry created after our confirmation cannot have been deleted before
// confirmation+TrimGrace, and we trust a confirmation for TailTrust only,
// which must be at most TrimGrace/4 (Open refuses more); the difference
// absorbs clock skew between the mount, the trimmer and the store. So an
// If-None-Match at state+1 can never succeed on a seq that was used and
// then deleted: that seq was either still there (and refuses us) or never
// used. A mount that looked away longer lists the log, sees the gap left by
// trimming and loads the snapshot.
//
// # Refresh
//
// Refresh reads what other mounts wrote; the mount calls it every
// ns_refresh and compares Seq before and after to know whether anything
// changed. When nothing did it costs one GET (of the entry after the state,
// not found), no listing, however long the log. When it finds an entry it
// applies it and lists the log after it, to read a burst of entries in one
// round trip and confirm the tail. With an untrusted tail it lists.
//
// # Snapshots and trimming
//
// A mount writes a snapshot of its state once the ops it applied since the
// newest snapshot it knows reach max(Options.CompactEvery, nodes/4), so that
// the cost of snapshots per op stays bounded as the namespace grows (two
// mounts may occasionally write one each: harmless, If-None-Match per seq).
// After writing one at S, the mount deletes in the background the log
// entries below S (entry S itself stays, so that a lagging mount finds an
// entry past the gap rather than an empty log it would append to at a used
// seq) and the snapshots below S, those older than TrimGrace only, listing
// page by page. Any mount may trim; deleting a missing key is fine. Close
// stops the trimming. Open loads the newest snapshot and replays the entries
// after it: a bounded start.
//
// # Nodes
//
// Every node has an Ino that never changes: the root is RootIno, the node
// the i-th op of log entry seq creates is seq<<16 | i. Directory entries
// have cookies that stay valid while other entries are removed
// (ReadDirAfter), for readdir offsets and seekdir. A file whose last name
// goes (Unlink, or Rename over it) stays, an orphan with its file id
// (Orphans, Orphaned), so that open handles, on any mount, can still read
// it. Orphans are the cleaner's: it deletes their data once older than its
// grace period and calls Forget. No mount does, since none knows the handles
// of the others.
//
// Memory: about 290 bytes per file (node, name of a dozen bytes, file id)
// and 70 bytes per further name (a hard link), measured on 100,000 files
// (TestMemoryPerNode); a mount of a million files holds about 300 MB.
//
// # For the FUSE layer
//
//   - Errors are sentinel values (ErrExist, ErrNotExist, ErrNotEmpty, ...)
//     wrapped with context; map them with errors.Is. No errno is chosen here.
//     Errors from the store come wrapped as they are (context.Canceled too).
//   - Mode holds permission bits only; the type is Kind.
//   - A file's mtime: the head's (the last checkpoint) unless Node.MtimeSetNs
//     is later, in which case Node.MtimeNs (set by utimens).
//   - Lookup, GetNode, ReadDir, ReadDirAfter, GetXattr, ListXattr, Named,
//     Orphans and Orphaned read memory only and never wait for the store:
//     their context is not used and they fail only as the state says
//     (ErrNotExist, ...). Callers still pass the call's context and handle
//     an error as the store's (Names), for the implementations that read.
//   - A change whose caller is interrupted while it is only queued returns
//     the context's error and changes nothing; once its entry is being sent
//     it finishes, and the caller waits for the outcome unless it is gone
//     (WithGone). Wait waits for the changes and the trimming under way;
//     Close, at unmount, also stops the trimming.
//
// # Locking
//
// A Namespace is safe for concurrent use. One mutex serialises the
// application of the log (the committer, which holds it across its store
// calls, and the apply step of Refresh, which reads the store without it); a
// second one guards the state and is held only in memory, so reads never
// wait for the network. A snapshot is encoded without the second, so reads
// do not wait for it either.
package namespace
