// Package wal is the write-ahead log of one file: with it on, a write is
// acknowledged only once it is durable in a record on the store, and a file
// opened after a crash replays the records its last checkpoint does not cover.
// The package owns the record format, the record names, the lease that keeps
// one writer per log, group commit, and the deletion of records a published
// checkpoint covers. What the ops mean to the file (replay) is the engine's.
//
// All integers are little-endian. The diagrams below, and the constants in the
// code that implement them, are part of the format.
//
// # Objects
//
// Under a file's prefix (the namespace gives "<root>/f/<file-id>/"), next to
// its checkpoint objects:
//
//	<prefix>wal/<seq>    one record; seq in decimal zero-padded to 20 digits, so
//	                     that names sort as numbers ("wal/00000000000000000042")
//	<prefix>wal/owner    the lease: which writer appends to this log, until when
//
// A record is created with If-None-Match: * and carries the metadata
// "ckptfs-write" (the writer's random id), so a record name is owned by one
// writer, and a writer whose answer was lost can tell its own record from
// another's. Records are never replaced.
//
// # Record
//
//	+-----------+----------------------------+----------------------------+-----+---------+
//	| header    | op 1                       | op 2                       | ... | trailer |
//	| 32        | 32 + data (OpWrite only)   | 32 + data (OpWrite only)   |     | 4       |
//	+-----------+----------------------------+----------------------------+-----+---------+
//	|<------------------- at most MaxRecordSize = 32 MiB in all ------------------------->|
//
// Header (32 bytes):
//
//	off size field
//	  0   8  magic "CKPTWAL1"
//	  8   2  version (Version = 1)
//	 10   2  reserved, zero
//	 12   4  op count
//	 16   8  file tag: segment.FileTag of the file's id (a record copied
//	         under another file's prefix is refused)
//	 24   8  seq: the seq of the record's name (a record renamed is refused)
//
// Op header (32 bytes), followed by Len bytes of data for OpWrite only:
//
//	off size field
//	  0   1  kind: 1 write, 2 truncate, 3 zero, 4 mtime
//	  1   7  reserved, zero
//	  8   8  off (int64): write and zero: the offset; truncate: the new size;
//	         mtime: zero
//	 16   8  len (int64): write: the length of the data that follows; zero:
//	         the length zeroed; truncate and mtime: zero
//	 24   8  mtime: Unix nanoseconds (int64), the file's mtime after the op
//
// Offsets and lengths are >= 0 and off+len <= 1<<60 (MaxOffset).
//
// Trailer (4 bytes): CRC-32C (Castagnoli, segment.Checksum) of every byte
// before it.
//
// A record is at most MaxRecordSize (32 MiB) bytes, header to trailer: a
// reader refuses a larger object before reading its body (one small ranged
// GET tells its size: staging.GetLimited), and Append refuses ops that would
// make one (ErrRecordTooLarge; the engine appends writes of at most one
// FUSE write, the mount's MaxWrite, and BatchBytes is at most
// MaxRecordSize). The owner object is read the same way, bounded to
// maxOwnerBytes.
//
// A record is exactly the sum of its parts: Decode refuses trailing bytes,
// so a record has one encoding and a decoded record re-encodes to its bytes.
//
// # Lease (the owner object)
//
// JSON, at most maxOwnerBytes, written by the writer that holds the log.
// Version 2 (OwnerVersion), what this build writes:
//
//	{"v": 2, "writer": "<random id>", "host": "<hostname>", "pid": 1234,
//	 "pidns": 4026531836, "start": 81234567, "boot": "<kernel boot id>",
//	 "expires": "<RFC 3339, nanoseconds>", "closing": true}
//
//	field    meaning
//	v        the format's version; absent: version 1
//	writer   the log's random id (required)
//	host     os.Hostname of the writer
//	pid      its pid, in its own PID namespace (1 .. 2^31-1, required)
//	pidns    the inode of its PID namespace (/proc/self/ns/pid); left out
//	         when unknown, or when its /proc is not of that namespace
//	start    when it started, in clock ticks since boot (field 22 of
//	         /proc/<pid>/stat); left out when unknown
//	boot     the kernel's boot id (/proc/sys/kernel/random/boot_id)
//	expires  the lease is the writer's until then (required)
//	closing  the writer takes no more changes and lets the lease go once
//	         what it logged is published (Log.Closing); left out when false
//
// Version 1 had no "v" and no "pidns" (a "pidns" in it is ignored). Unknown
// fields are ignored, so a newer version is read for who holds the lease
// and until when.
//
// Open takes the lease: it creates the owner object (If-None-Match: *), or
// replaces one whose writer is gone (If-Match on the ETag it read), and
// otherwise fails with a *BusyError; with Options.BusyWait it first tries
// again, with backoff, while the holder says it is closing (its file's last
// handle was closed and its last publish is in flight: it lets go within
// that time), and for a second while it does not (it may be about to). A
// writer is gone when its lease
// expired, or when that it died is certain: the lease is of version 2; it
// ran on this very boot of this host, in this very PID namespace (two
// containers sharing the host's network or UTS namespace share host name
// and boot id, not pids), with a known start time; and its pid now names no
// process, a zombie (a process that died and that its parent has not reaped
// yet: state 'Z' or 'X' in /proc/<pid>/stat), or a process with another
// start time (the pid was reused: a restarted container often gets its old
// pid back). Then a crash is noticed at once, not after the TTL; anything
// that cannot be verified (a version 1 lease, another namespace, an
// unreadable /proc) waits for expiry. A lease of this very process (pid and
// start time) is another log of it: busy.
//
// Held tells, without taking anything, whether a writer that may be alive
// holds the lease: unlike Open it counts an expired lease as held unless its
// writer is known gone, since a store outage stops renewals of a live
// writer too. A reader that must not act on a live writer's behalf (replay
// and publish its records) asks it first.
// An owner object that does not
// parse is treated as held until its last modification plus the TTL, since a
// live writer rewrites it every TTL/3.
//
// The Log renews the lease every TTL/3 with If-Match on the ETag of its last
// write. A renewal that fails otherwise than by a precondition is retried at
// the next tick. A precondition failure whose owner object is gone or names
// another writer means the lease was taken (by an opener that found it
// expired, say after a store outage, and may have replayed and published
// this log's records). The Log then takes it back, and appends go on, when:
// no writer that may be alive holds it (the owner object is gone, or its
// lease is stale as for Open); no record is stored that this log did not
// number (a seq at or above its next one: another writer appended); and
// Options.Retake, the file's say, agrees (its head is unchanged, or one
// checkpoint built on it holding only this log's records). The take-back
// is a create (If-None-Match) or a replace (If-Match on the ETag read).
// While a live writer holds the lease, Append fails with ErrLeaseLost and
// the Log tries again at each tick (and when an Append fails so); when
// another writer appended or changed the file, the lease is lost for good.
// Appends in flight meanwhile are not stopped: records are kept apart by
// their names. Close deletes the owner object if it still names this
// writer, and then the records a published checkpoint covers.
//
// Two writers that both believe they hold the lease (clocks apart, a writer
// paused past its TTL) cannot overwrite each other's records: the second
// create of a name fails, and the log that lost fails with ErrTaken. But a
// taker lists the log once, publishes a checkpoint that says it holds every
// record up to its own, and deletes them, which frees their names: a record
// the old holder stores after that listing is never replayed. So a record is
// acknowledged only while the lease is provably this log's: its PUT returned
// before the send time of the last write of the owner object that landed
// (the take, a renewal with If-Match on our own last write, a take-back)
// plus two thirds of the TTL, on this process's monotonic clock. A record
// stored later waits, its Append with it, until a renewal sent after it
// landed lands (no taker came between: acknowledged), or the lease is found
// lost, taken back, or the Log closes (its Append fails with ErrLeaseLost
// and the record is deleted). A taker takes the lease once its wall clock is
// past the expiry the holder wrote (the send time plus the TTL, on the
// holder's wall clock): the last third of the TTL is the margin for the two
// clocks, which must agree within it.
//
// # Group commit
//
// Append does not start a goroutine. An Append adds its ops to the batch being
// filled (a batch holds ops up to BatchBytes of encoded record; one Append's
// ops are never split). If fewer than MaxInFlight records are being PUT, the
// caller becomes the leader of the oldest batch not yet sent: it assigns the
// batch the next seq, encodes it and PUTs it, detached from its own context so
// that one caller's cancel does not fail the ops of the others. Otherwise it
// waits until its batch is done or a slot frees. Every batch waiting to be sent
// has at least one Append waiting on it, and every finished PUT wakes them
// all, so a batch never waits for a sender that will not come.
//
// Seqs are assigned in the order batches are sent and PUTs complete in any
// order. A PUT that fails fails the ops of its record and its seq is skipped:
// the next record takes the next seq. The record may be stored all the same
// (an answer lost) or in part (an upload cut short, on a server that keeps
// what it received), so it is deleted; if that delete fails too, a replay
// applies a whole one as any other and skips one cut short at the log's end.
// A precondition failure on our own record is a retried request whose first
// try landed: whole, it is success; cut short, it is deleted and stored again.
// Decode tells a record cut short (ErrTruncated: every strict prefix of a
// record is one) from one damaged otherwise.
//
// # The head's mark
//
// A file's head object (package segment, "Head object") written with the
// log on carries the metadata "ckptfs-wal" (HeadMeta): the seq, in decimal,
// of the last record its checkpoint holds ("0": none yet). Its presence says
// the file has been written with the log, so that any opener, with the log
// or without, looks for records to replay; a writer without the log carries
// it forward. Records up to it are published (Covered); later ones are
// acknowledged changes not yet published. HeadApplied reads it, MarkHead
// writes it; what replays the records is the engine's.
//
// # Cleanup
//
// Covered(n) says records with seq <= n are in a published checkpoint. A
// goroutine of the Log deletes them, off the caller's path; a delete that fails
// is retried at the next Covered and at Close. A record left behind harms
// nothing: replay skips the records a checkpoint covers, and a later log finds
// it at Open and deletes it at its next Covered.
package wal
