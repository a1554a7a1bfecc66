// Package writermark is the writer-marker protocol: how a live writer shows
// the cleaner (fs/cleaner, `ckptfs gc`) the objects it may still publish. It
// is a contract between the two: the engine (fs/engine) keeps its writer's
// marker with a Keeper, the cleaner reads a file's markers with ReadAll and
// Read and obeys Stored.Live and Stored.Covers.
//
// Objects sent ahead and partial segments are stored long before the head
// names them, and a writer whose flush lost a race to another mount rebases
// and publishes objects that are by then below the other writer's head. Age
// cannot tell such objects from a dead writer's leftovers, so a writer that
// holds objects no published head names keeps a marker under the file's
// prefix (volume.WriterKey):
//
//	<prefix>writers/<writer-id>     one per open writer (engine.File) of the file
//
// # The marker
//
// The marker is a small JSON object (at most MaxBytes). These fields are
// part of the format:
//
//	{"v":1,"lo":<cno>,"ttl_ms":<ms>,"host":"<name>","pid":<n>}
//
//	v       format version, 1
//	lo      the lowest checkpoint number of the objects the writer may still
//	        name in a head it publishes (>= 1); it names none below
//	ttl_ms  how long the marker lives unrenewed, 1 s .. MaxTTL
//	host    host name of the writer (informative, at most 255 bytes)
//	pid     process id of the writer (informative)
//
// A body that does not decode (Decode refuses it with ErrBad) protects every
// object of its file for MaxTTL.
//
// # The cleaner's side
//
// A marker is live while the store's LastModified of it is within its TTL (the
// store's clock, never a time the writer wrote). The cleaner deletes no object
// with a checkpoint number at or above lo of a live marker of its file, reads
// a file's markers again right before deleting that file's objects and at
// least every Recheck while it deletes, and removes a marker that is dead by
// more than its grace period. A writer never stores a marker again under a
// key that may have died (it takes a new writer id), so that removal never
// hits a marker renewed meanwhile.
//
// # The writer's side (Keeper)
//
// The writer stores its marker before the first object it will not name in
// the very next head (objects sent ahead, partial segments, the data parts of
// a flush), renews it every TTL/3 while it holds such objects (a goroutine the
// Keeper owns; no request per write), lets it go when a published head names
// them all or they are given up (deleted TTL/3 later unless needed again, so a
// file flushed often keeps one marker), and deletes it on Close.
//
// The writer counts its marker as live only for TTL - TTL/3 after the start
// of the PUT that stored it (the rest covers a cleaner whose clock is ahead
// of the store's). If it ran out while the writer held objects, a cleaner may
// have deleted some: before its next head, the writer stores the marker
// again, waits out any cleaner still acting on what it read before
// (2 x Recheck), and checks (HEAD) every object of its own the head would
// name (Keeper.Check; the engine fails such a flush with a
// *engine.LostObjectError if one is missing, and no head names it).
package writermark
