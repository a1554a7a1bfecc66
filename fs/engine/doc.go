// Package engine is the per-file engine of ckptfs: one checkpointed file on a
// store prefix, with a dirty-block tier, the read planner, and the flush that
// publishes checkpoints. The FUSE layer calls it; it never sees errno values.
//
// # Objects of one file
//
// A file lives under a prefix (the namespace gives "<root>/f/<file-id>/"):
//
//	<prefix>inode          the head: the latest checkpoint's inode and the data
//	                       blocks it stores (segment.EncodeHead), and for a small
//	                       checkpoint a copy of its part 0 (embed.go); created by
//	                       the first publish with If-None-Match: * (Create sends
//	                       nothing without the WAL) and replaced only with
//	                       If-Match on the ETag last seen
//	<prefix><cno>.<part>   checkpoint objects (package segment); part 0 of a
//	                       checkpoint carries its inode and the index nodes above
//	                       the leaves
//
// # Checkpoint numbers and parts
//
// A writer takes the checkpoint number of its next checkpoint (cno) once, when it
// first writes an object after the last checkpoint: the head's cno plus one.
// Every object it writes for that checkpoint (partial segments written under
// dirty-memory pressure, data parts of the flush) is named <cno>.<part> with a
// part number taken from a counter that only grows, so no attempt reuses a name.
// Every object is created with If-None-Match: *, so an object name is owned by
// exactly one writer: a second writer that picked the same name fails its create
// and reserves new part numbers past the ones it found taken (sending ahead
// moves to a new checkpoint number). A rollback forgets the checkpoint being
// built, but not the numbers used: the next one is past the head's and past
// every number this writer named an object with, so no name is taken twice.
//
// Part 0 is the checkpoint. If an attempt's part 0 was stored but the head was
// not (the flush failed between the two), that part 0 is never reused, because
// later writes may have changed what it should hold: the next attempt takes the
// next checkpoint number. Checkpoint numbers therefore grow but may skip; every
// part 0 names the inode it was built on, so the chain of checkpoints is
// followed from the head, never guessed from numbers.
//
// # What a flush does
//
//  1. The dirty blocks are inserted with a placeholder in a snapshot of the
//     block map (File.tree stays as it was for reads until the checkpoint
//     lands), which fixes the map's structure (it depends on keys only), so
//     each dirty block knows its leaf.
//  2. Blocks are packed into objects leaf by leaf: a leaf is never split from
//     its data, and an object never exceeds segment_max_object_bytes. The last
//     object becomes part 0.
//  3. Pointers are set, and the map is committed: leaves go into the object
//     holding their data, or are reused from an object already stored when
//     their bytes are unchanged (content-addressed by xxh3), or go into part 0
//     with the nodes above the leaves.
//  4. Data parts are uploaded, several at once (objects larger than one
//     segment_mpu_chunk_size go up as multipart pieces in parallel), then part
//     0, then the head; a checkpoint that is part 0 alone and small sends
//     part 0 and the head (carrying a copy of it) at once (embed.go). The
//     file's uploader (package fs/upload) makes these requests, and those
//     of sending ahead's tasks: every one holds one of its
//     segment_mpu_max_concurrency slots (those beyond it wait for one).
//     Every object obeys segment_max_object_bytes: a part 0 whose
//     index nodes do not fit is refused (ErrObjectTooLarge), on the WAL's
//     publish too.
//
// A Flush (flushattempt.go) runs steps 1 to 4 without File.mu: the blocks
// it publishes do not change meanwhile (it holds their range) and the
// snapshot is its own. It holds File.mu exclusively only to take what it
// publishes (the size, the mtime, the snapshot, in O(1)), to name its
// objects, and to apply the result, which makes the dirty tier the blocks
// written past it meanwhile (found below the file's end) without walking
// those it published; it takes its dirty blocks under File.mu shared, a
// slice of dirtySlice blocks at a time. So no hold of File.mu by a flush
// grows with the blocks it publishes (what goes on meanwhile is under
// Locking). A WAL publish, a replay and a copy run the steps under File.mu,
// holding every block. A flush that fails leaves every block dirty and the
// in-memory map as it was (its placements were made in the snapshot), so a
// later flush writes everything and nothing is lost.
//
// # Conflicts
//
// The head is replaced with If-Match. A precondition failure is first checked
// against the write id (metadata "ckptfs-write") now on the head: if it is the
// id of this attempt, the write landed and its answer was lost, and the flush
// succeeded. Otherwise another writer published: with ConflictFailFast the
// flush returns a *ConflictError and the in-memory state rolls back to the
// winner's checkpoint; with ConflictRetry the changes made since the last
// checkpoint are merged onto the winner's as if made after it, in order
// (merge.go: the bytes this writer set, its truncates, its furthest write),
// and the flush is retried with backoff. A rollback that drops
// changes counts a loss (Losses): every open file description that was open
// then fails its next fsync or close (ErrLost), not only the one whose flush
// lost.
//
// # Reading: the block cache, reading ahead, shared GETs
//
// A read plans its blocks (ReadPlan: dirty, pinned, embedded, cached, in
// flight, holes, and the ranged GETs for the rest, each a run of adjoining
// blocks of one object of at most read_get_max_bytes) and checks every block
// fetched against the CRC its leaf records. What it keeps:
//
//   - The block cache: verified blocks, keyed by pointer (cno, part, slot) and
//     CRC, least recently used first out, at most CacheBytes per file. With a
//     mount's Budget every cached block is drawn from the budget's read share
//     (a quarter of it, shared by every file's cache and reads ahead); a full
//     share makes the cache give up its own oldest blocks, and a block that
//     finds no room is not kept. The cache lives as long as the File: it is
//     emptied at Close (its budget returned) and by a rollback.
//   - Flights (prefetch.go): every GET of the read path registers its blocks,
//     by the same key, before it is sent, so concurrent reads of the same
//     blocks (several readers of one checkpoint, a reader and the read ahead
//     of its stream) make one GET. ReadStream (the FUSE layer's reads) follows
//     sequential streams (their reads may come somewhat out of order, as the
//     kernel's do) and, past prefetchProve bytes read in a row or from the
//     first read of a stream that begins at offset 0, fetches
//     ahead of them (twice what the stream read, from prefetchMinWindow to
//     prefetchMaxWindow, in pieces planned as reads are, at most
//     prefetchInFlight in flight per file, but one a read waits for goes at
//     once; prefetch.go says how); those flights are kept, drawn from the
//     read share (only what TryAcquireRead gives: a read never waits for the
//     budget and never takes a writer's room), until the
//     stream has read past them, the stream is dropped, a truncate shrinks the
//     file, or a rollback or Close ends them (Close waits for their
//     goroutines). Other reads, and ReadAt, fetch exactly their blocks.
//
// What a read of another mount's newer checkpoint sees: a File reads the
// checkpoint its map is at (the one it opened, or published, or rolled back
// to) and nothing else. Its cache and flights are keyed by where each block
// is stored and its CRC, so a map that names a newer checkpoint's objects
// finds none of the older bytes; and a name created again after the cleaner
// removed an unused object (the one way a key could meet other bytes) is
// told apart by the CRC, and forgotten anyway at the rollback that brought
// that map. A File never mixes two checkpoints in one read: a read holds mu
// shared while it plans and copies, and the map changes only under mu
// exclusive. A reader moves to a newer checkpoint when it is opened again,
// or when Refresh (refresh.go), which the FUSE layer calls at every open of
// a file it holds open already (close-to-open), takes it.
//
// # Locking
//
// LOCK ORDERING. A goroutine that holds one of these takes only those below
// it, never one above. Every mutex of a file's engine, and of the packages
// whose locks it takes:
//
//  1. walState.markMu: the closing mark of the WAL (ending); taken with
//     nothing held (Close before its range lock, LetGoWAL outside it), then
//     logMu or the log's wal.Log.mu.
//  2. File.flushMu (flushgate.go): held exclusively by Flush (the direct
//     path) for its whole length, and shared by every other change but
//     WriteAt and SetMtime (Truncate, Zero, ZeroRange, Extend, Append,
//     WriteRef) and by every operation that takes every block (lockAll:
//     Close, Rollback, Refresh, a copy) for theirs; taken before the range
//     lock, never while holding a block. A shared holder with a context
//     stops waiting when it ends (flushlock.go), as does a request for
//     blocks (rangeLock.lockCtx): an operation stuck behind a long flush
//     answers the kernel's interrupt, having changed nothing.
//  3. The range lock (File.ranges, rangelock.go): blocks, not a mutex held
//     across calls. A write takes its blocks exclusively, a read shares its
//     blocks, a truncate or zero takes the blocks it changes, a flush shares
//     blocks [0, end) (the file's end and every dirty block; every block
//     exclusively while it merges or rolls back), and a rollback or a
//     close takes them all: overlapping operations are serialised and
//     disjoint ones are not. rangeLock.mu guards its held and waiting lists,
//     inside lock and its release only.
//  4. walState.logMu: walState.log, taking the lease (walLog); log is set
//     under logMu and mu, read under either.
//  5. File.mu (stateMu, statemu.go): the file's state, every field of File
//     marked GUARDED_BY(mu), and those of sender, walState, publish and
//     embedObj marked GUARDED_BY(File.mu). Readers shared, every change
//     exclusive.
//  6. Taken inside File.mu (shared or not), each held for its own work only
//     and none while taking another of this group but where it says:
//     readers.mu (prefetch.go: flights and streams, held ahead; then
//     Budget.mu), blockCache.mu (read.go: its blocks and bytes; then
//     Budget.mu), wal.Log.mu and wal.Log.closeMu (package wal: the log's
//     batches and lease; closeMu before mu), writermark.Keeper.mu
//     (fs/writermark: the writer marker, held across the marker's own PUT
//     and DELETE), volume.ObjectSpace.mu (the lineages read), and the
//     block map's blockmap slot.mu (one lazy load, held across its GET)
//     before blockmap.ObjectLoader.mu (its cache of index regions),
//     upload.Uploader.qmu (fs/upload: the tasks waiting for a slot),
//     upload.Tasks.mu (the sender's tasks' results) and
//     upload.Multipart.mu (an upload's parts).
//  7. Budget.mu (budget.go): the mount's memory budget, shared by files; a
//     leaf.
//
// Never File.mu while holding a lock of 6 or 7. The WAL log's goroutine
// asks mayRetake, which only tries File.mu (a Close of the log under mu
// waits for that goroutine). fakeclock's mu is the tests' clock.
//
// No store request under File.mu. The rule (pebble's for DB.mu: care is
// taken to avoid holding it during IO): a request, or a wait for one made by
// another goroutine, is not made while File.mu is held, shared or
// exclusive; an operation takes what it needs under the lock, sends without
// it, and applies the result under it again, re-validating what may have
// changed. A flush takes what it publishes under the lock (its dirty
// blocks, shared and a slice at a time; a snapshot of the map), packs it
// into the snapshot, commits the map and sends it all without the lock,
// and applies the result under the lock; writes past the blocks it holds
// ([0, end)), and reads anywhere, go on meanwhile; a write into them
// waits for it on its range lock, and every other change waits on flushMu
// (flushgate.go says what such a write may not do meanwhile, and how what
// a merge replays of it is kept). The rule is checked by the package's
// tests (lockcheck_test.go, lockrule_test.go); the paths that still break
// it are listed in docs/engine-locks.md and are rows of
// TestNoStoreRequestUnderMu: a read holds mu shared across its map loads
// (its GETs go after it lets go, holding its blocks' range lock:
// readPlanned), a write may wait for uploads holding it (sendahead.go), and a
// flush still sends the last pieces of what was sent ahead, and merges onto
// another writer's checkpoint, under mu (a Flush waits for the uploads in
// flight without it, behind a gate that holds writes: takeInWaitLocked).
//
// A change to part of a block that is not dirty (a partial write, the block a
// shrinking truncate cuts, the edges of a zeroed range) reads the block first
// without mu (coldread.go): under mu it looks the block up in memory (a map
// whose path is not loaded is snapshotted, in O(1)), without mu it looks the
// block up in the snapshot and GETs it, and under mu again it compares what
// it read with the block's map value now (same map, same lineage, same value;
// zeros still zeros) and reads again if they differ; it applies only in a
// hold of mu where every block it needs is ready. The map nodes a truncate's
// cut and a zero's deletes walk are loaded the same way, on a snapshot. What
// keeps the value from changing meanwhile is the block's range lock, held
// exclusively: every operation that changes a block's mapping or makes it
// dirty holds that block's range (a refresh, a WAL publish or replay,
// Rollback, Close, a clone, and a flush's merge or rollback hold every block;
// a truncate or a zero the blocks it changes; a flush shares the blocks it
// publishes, which no change holds meanwhile). The one exception, walLog,
// adopts a head and applies another writer's records holding only its own
// change's blocks, but only while the WAL's lease is not held, and every
// change takes the lease before it reads: no change holding a block meets it.
// Partial segments and sending ahead place only dirty blocks. So the
// comparison is what the range lock makes sufficient, and it also catches a
// change these rules miss (coldread_test.go makes one by hand). A replay or a
// merge, which hold mu throughout, still read under it.
//
// Because a flush still holds File.mu while it merges (and the flushes of
// a WAL publish, a replay or a copy while they settle what was sent ahead), nothing that must answer while the store is stalled
// takes File.mu: every exclusive hold ends in its Unlock publishing a
// snapshot of what Stat returns (an atomic pointer), which Stat and Size
// read without a lock. The snapshot is the
// state some critical section left, never a change half made, and a write
// that has returned is in it; during a flush it shows the state before it
// (dirty, the old checkpoint). A write holds File.mu to prepare its blocks
// (making them dirty and busy) and again to account for them, and copies
// its bytes in between without it, so writes to disjoint blocks copy at
// once; a busy block is left alone by sending ahead, partial segments and
// the completion check. Close bounds its waits on the store by the WAL
// lease's TTL: a publish in flight that has not landed by then is cancelled
// (its records replay at the next open).
//
// File coordinates parts that own their behaviour: the sender (sendahead.go,
// sendobj.go), the readers (prefetch.go), the WAL state (wal.go), a flush
// attempt (flushattempt.go) and a read's planner (readplan.go); the
// uploader (File.up, package fs/upload) makes every object's requests (a
// whole PUT or a multipart upload, the check of a lost answer, the abort),
// takes no lock of File's, and is called without File.mu but on the paths
// docs/engine-locks.md lists (the aborts of a rollback and of Close;
// sending ahead begins an upload under it, but the store's upload is
// created by its first piece's task). Their state
// is guarded by File.mu but the readers' (readers.mu) and the WAL's lease
// (logMu, markMu); each says what of File.mu its methods are called with.
// The dirty accounting's invariants are written on its fields and checked by
// checkInvariants (invariants.go), in the tests at the end of every
// exclusive hold of File.mu.
//
// # The bytes of a sequential writer
//
// A long sequential stream's blocks are carved from arenas of one piece each
// (or, when objects are sent whole, of one object's blocks with room for its
// header and tail; arena.go), and a piece of consecutive slots, or an object
// that is one arena, goes to the store as it lies:
// a write's bytes are copied once, from the kernel's buffer into the arena,
// and checksummed by that write while they are in the CPU's cache. A block
// changed while its slot may be in flight first takes a buffer of its own
// (its gen has moved, so the copy in flight no longer counts as its bytes).
package engine
