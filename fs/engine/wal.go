package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// The write-ahead log (Params.WAL; package wal owns the records).
//
// With the WAL on, a write, truncate, zero or mtime change is acknowledged
// only once a WAL record holding it is stored; concurrent writes share
// records (group commit). The order of records is the order of the changes
// wherever it matters: a change logs while it holds its blocks (the range
// lock), so two changes to the same blocks log one after the other, and only
// changes to disjoint blocks, which commute, share or race records.
//
// The head's metadata wal.HeadMeta names the last record its checkpoint holds
// (records have one sequence per file). Opening a file replays the records
// after it, in order, and publishes them on the direct path; an interrupted
// replay replays again the same way, because the head moves only when the
// checkpoint holding them is published. Records a published checkpoint holds
// are deleted off the critical path; a failed delete leaves a record the
// next head already says is held, which harms nothing.
//
// A flush with the WAL is a WAL publish: everything dirty is packed into one
// object, part 0, which stays pinned in memory (reads, and the read half of
// partial writes, are served from it) while a goroutine uploads it and then
// the head; Flush returns at once, and reads and writes go on. A checkpoint
// that does not fit one object goes the direct way, in parts. Nothing is sent
// ahead with the WAL. A publish that fails (or loses to a writer without the
// WAL) leaves the file to be recovered by the next Flush: the head is read
// again and every record after it is replayed, so nothing acknowledged is
// lost.
//
// One writer at a time: the first change takes the WAL's lease (package wal);
// a second writer gets wal.ErrBusy. An open that replays lets the lease go
// once the replay is published, so that it never keeps it from a writer that
// may still run (wal.Options.Retake: mayRetake).
//
// A file opened while a live writer holds the lease never shows less than
// that writer's durable records: it applies them in memory, read-only
// (overlayLocked), as they stand at the open. The blocks are dirty but not
// this file's changes (walState.overlay): nothing of them is published or
// written, even under memory pressure. The first change after the writer is
// gone takes the lease and makes them this file's to publish, with what the
// writer logged since (walLog). ViewWAL gives a stat the same size and mtime
// without keeping data.

// ErrWALNotEmpty: Create found WAL records under a prefix that has no file.
var ErrWALNotEmpty = errors.New("write-ahead log is not empty")

// walState is the WAL part of a File: the log and its lease, the publish in
// flight and what the head says of the records. pinnedBlock and unpinLocked
// are called with f.mu held (exclusively for unpinLocked); options,
// closeWait, torn and deleteCovered read only what is set once; close takes
// logMu itself.
type walState struct {
	f *File // set once by newFile
	// GUARDED_BY(File.mu)
	tracked bool   // the head carries wal.HeadMeta (or will, from the next publish)
	applied uint64 // wal.HeadMeta of the head: records <= applied are published
	seq     uint64 // the last record whose changes are in memory
	pub     *publish
	failed  error // a publish that did not land; the next Flush recovers
	// overlay: the records (applied, seq] are another writer's, applied in
	// memory to read them (see overlayLocked); their blocks are dirty but
	// not this file's changes, and nothing of them may reach the store.
	overlay bool

	// pubCtx is the context of WAL publishes; Close cancels it when a
	// publish does not land within closeWait. Set by newFile, then read only.
	pubCtx    context.Context
	pubCancel context.CancelFunc

	// logMu orders taking the lease. log is set under logMu and File.mu
	// (or by Open, which owns the file alone) and read under either.
	logMu sync.Mutex
	log   *wal.Log

	// markMu orders the closing mark: Close sets ending and marks the log;
	// LetGoWAL takes its own mark back only while ending is not set.
	markMu sync.Mutex
	ending bool
}

// publish is one WAL publish in flight: part 0 pinned in memory.
type publish struct {
	name    segment.ObjectName
	ino     segment.Inode
	etag    string // the head it replaces
	applied uint64
	body    *objectBody
	bufs    [][]byte // by slot: the blocks, owned by the publish
	owned   []bool   // by slot: a dirty block's buffer (else a copy of one by reference)
	held    int64    // budget held for the copies
	done    chan struct{}
	// blocks is the count of the checkpoint's blocks, if known.
	blocks      int64
	blocksKnown bool
	// ensure is an embedded part 0 the checkpoint builds on whose object is
	// not known to be stored: stored before the head (embed.go).
	ensure *embedObj
	// GUARDED_BY(File.mu)
	finished bool
}

// walMark is what a head written now says of the WAL: nothing (a file never
// written with it), or the last record its checkpoint holds.
type walMark struct {
	tracked bool
	applied uint64
}

func (f *File) walOn() bool { return f.p.WAL && !f.readOnly }

func (w *walState) options() wal.Options {
	f := w.f

	return wal.Options{Tag: f.tag, BatchBytes: f.p.WALBatchBytes, MaxInFlight: f.p.WALMaxInFlight,
		LeaseTTL: f.p.WALLeaseTTL, Logger: f.log, Shared: f.walShared, Retake: f.mayRetake}
}

// mayRetake says whether this writer's log may take back a lease another
// opener took and let go (wal.Options.Retake): the head is the one this file
// builds on, or one checkpoint built on it that holds records of this log
// and no others (through is the last this log numbered), which is what a
// replay of them publishes. A publish of this file's own that landed
// unseen looks the same, and is the same. Anything else means another
// writer changed the file.
func (f *File) mayRetake(ctx context.Context, through uint64) (bool, error) {
	hd, info, err := f.readHead(ctx)
	if err != nil {
		return false, err
	}
	ino := hd.Inode
	applied, _, err := wal.HeadApplied(info.Metadata)
	if err != nil {
		return false, nil
	}
	// The log's goroutine asks this; a Close of the log under mu (walLog's
	// failure paths) waits for that goroutine, so mu is only tried, until
	// the renewal's deadline or that Close cancels ctx.
	for !f.mu.TryRLock() {
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("check the head of %s: %w", f.prefix, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	etag, base, known := f.headETag, f.head, f.w.applied
	f.mu.RUnlock()
	if info.ETag == etag {
		return true, nil
	}
	if applied <= known || applied > through || ino.Cno <= base.Cno {
		return false, nil
	}
	name := segment.ObjectName{Cno: ino.Cno, Part: 0}
	h, err := segment.ReadHeader(ctx, f.st, f.key(name), name, f.tag, ino.Format)
	if err != nil {
		return false, fmt.Errorf("read checkpoint %d of %s: %w", ino.Cno, f.prefix, err)
	}
	return h.Base == base, nil
}

// walLog returns the file's log, taking the lease on first use. A head not
// yet marked as written with the WAL is marked first (rewritten with the same
// inode), so that a crash before the first publish still leaves openers a
// reason to look for records.
func (f *File) walLog(ctx context.Context) (*wal.Log, error) {
	f.w.logMu.Lock()
	defer f.w.logMu.Unlock()
	if f.w.log != nil {
		return f.w.log, nil
	}
	// A writer of another mount whose file's last handle closed holds the
	// lease until its last publish lands: the change waits for it.
	o := f.w.options()
	o.BusyWait = f.w.closeWait()
	log, err := wal.Open(ctx, f.st, f.prefix, o)
	if err != nil {
		return nil, fmt.Errorf("take the write-ahead log of %s: %w", f.prefix, err)
	}
	// The head may have moved since this file was opened: a writer that held
	// the lease published and let it go. Changes must build on its
	// checkpoint, and record numbers go on past the ones it holds, whose
	// records may be deleted already. (Every change takes the lease first,
	// so nothing here has changed yet.)
	hd, info, err := f.readHead(ctx)
	if err != nil {
		_ = log.Close(ctx)
		return nil, fmt.Errorf("take the write-ahead log of %s: %w", f.prefix, err)
	}
	ino := hd.Inode
	applied, tracked, err := wal.HeadApplied(info.Metadata)
	if err != nil {
		_ = log.Close(ctx)
		return nil, fmt.Errorf("take the write-ahead log of %s: %w", f.prefix, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Record numbers go on past every one this file has seen, even records
	// deleted since (an overlay's).
	seen := f.w.seq
	if info.ETag != f.headETag {
		if f.changed {
			_ = log.Close(ctx)
			return nil, fmt.Errorf("take the write-ahead log of %s: checkpoint %d was published by another writer: %w", f.prefix, ino.Cno, ErrConflict)
		}
		// The writer published: its checkpoint replaces what this file
		// showed of it (an overlay included).
		f.adoptHead(hd, info.ETag)
		f.w.overlay = false
		f.w.applied, f.w.tracked = applied, tracked || f.w.tracked
		f.w.seq = applied
	}
	if f.w.overlay {
		// The records read from a writer that has gone are this file's to
		// publish now, as a replay's would be.
		f.w.overlay = false
		f.changed = f.w.seq > f.w.applied
	}
	// Records after those in memory were left by a writer that died after
	// this file was opened: applied now, as at an open, and published with
	// the next checkpoint. Nothing here has changed but by records (every
	// change takes the lease first), and mu keeps readers out meanwhile.
	last, err := f.applyRecordsLocked(ctx, after(log.Found(), f.w.seq))
	if err != nil {
		f.adopt(f.head, f.headETag)
		f.w.seq = f.w.applied
		_ = log.Close(ctx)
		return nil, fmt.Errorf("take the write-ahead log of %s: apply the records a writer left: %w", f.prefix, err)
	}
	if last > 0 {
		f.w.seq, f.w.tracked = last, true
		f.changed = true
	}
	log.SetNext(max(seen, f.w.seq) + 1)
	if !f.w.tracked {
		if err := f.markHeadLocked(ctx); err != nil {
			_ = log.Close(ctx)
			return nil, err
		}
	}
	f.w.log = log
	return log, nil
}

// markHeadLocked rewrites the head with wal.HeadMeta. A head another writer
// replaced meanwhile is adopted first when nothing here changed.
func (f *File) markHeadLocked(ctx context.Context) error {
	var c flushCounters
	for try := 0; ; try++ {
		etag, err := f.putHead(ctx, f.rewrittenHeadLocked(), f.headETag, walMark{true, f.w.applied}, &c)
		if err == nil {
			f.headETag = etag
			f.w.tracked = true
			return nil
		}
		var ce *ConflictError
		if !errors.As(err, &ce) || f.changed || try > 0 {
			return fmt.Errorf("write %s: mark the head as written with the write-ahead log: %w", f.prefix, err)
		}
		f.adoptHead(ce.theirsHead(), ce.etag)
		f.w.applied, f.w.seq = ce.walApplied, ce.walApplied
	}
}

// logLocked makes ops durable, with File.mu held (truncate, zero, mtime:
// rare, and they change state that every reader looks at).
func (f *File) logLocked(ctx context.Context, ops ...wal.Op) error {
	if !f.walOn() {
		return nil
	}
	f.mu.Unlock()
	log, err := f.walLog(ctx)
	f.mu.Lock()
	if err != nil {
		return err
	}
	if err := f.writable(); err != nil {
		return err
	}
	seq, err := log.Append(ctx, ops) // one record: replayed whole or not at all
	if err != nil {
		return fmt.Errorf("append to the write-ahead log of %s: %w", f.prefix, err)
	}
	f.w.seq = max(f.w.seq, seq)
	return nil
}

// lockAll takes every block and mu once no WAL publish is in flight (a
// publish takes mu when it lands).
// It takes flushMu shared first: no Flush is between its holds.
func (f *File) lockAll(ctx context.Context) (func(), error) {
	if err := f.flushMu.RLockCtx(ctx); err != nil {
		return nil, fmt.Errorf("waiting for the flush of %s: %w", f.prefix, err)
	}
	for {
		release, err := f.ranges.lockCtx(ctx, allBlocks.lo, allBlocks.hi, true)
		if err != nil {
			f.flushMu.RUnlock()
			return nil, fmt.Errorf("waiting for the blocks of %s: %w", f.prefix, err)
		}
		f.mu.Lock()
		pub := f.w.pub
		if pub == nil || pub.finished {
			return func() { f.mu.Unlock(); release(); f.flushMu.RUnlock() }, nil
		}
		f.mu.Unlock()
		release()
		select {
		case <-pub.done:
		case <-ctx.Done():
			f.flushMu.RUnlock()
			return nil, ctx.Err()
		}
	}
}

// walFlush is Flush with the WAL on. While a publish is in flight it returns
// at once: what was written since is durable in the log, and the next Flush
// (a later fsync, the periodic flush, Sync) publishes it.
func (f *File) walFlush(ctx context.Context) (FlushTiming, error) {
	defer f.ranges.lock(allBlocks.lo, allBlocks.hi, true)()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writable(); err != nil {
		return FlushTiming{}, err
	}
	if pub := f.w.pub; pub != nil && !pub.finished {
		return FlushTiming{Cno: f.head.Cno}, nil
	}
	if f.w.failed != nil {
		return f.recoverLocked(ctx)
	}
	if !f.changed {
		return FlushTiming{Cno: f.head.Cno}, nil
	}
	return f.walPublishLocked(ctx)
}

// Sync publishes everything written so far and returns once the head names
// it. Without the WAL it is Flush; with it, it waits for the publish in
// flight, publishes what came since, and waits for that to land (a publish
// that fails is recovered on the direct path).
func (f *File) Sync(ctx context.Context) error {
	if !f.walOn() {
		_, err := f.Flush(ctx)
		return err
	}
	var last error
	for try := 0; try < publishAttempts; try++ {
		unlock, err := f.lockAll(ctx)
		if err != nil {
			return fmt.Errorf("sync %s: %w", f.prefix, err)
		}
		if err := f.writable(); err != nil {
			unlock()
			return err
		}
		if f.w.failed != nil {
			_, err := f.recoverLocked(ctx)
			unlock()
			if err != nil {
				return fmt.Errorf("sync %s: %w", f.prefix, err)
			}
			continue
		}
		if !f.changed {
			unlock()
			return nil
		}
		if _, err := f.walPublishLocked(ctx); err != nil {
			unlock()
			return fmt.Errorf("sync %s: %w", f.prefix, err)
		}
		pub := f.w.pub
		unlock()
		if pub != nil {
			<-pub.done
		}
		f.mu.RLock()
		last = f.w.failed
		f.mu.RUnlock()
	}
	if last == nil {
		return fmt.Errorf("sync %s: changes kept coming during %d publishes", f.prefix, publishAttempts)
	}
	return fmt.Errorf("sync %s: the checkpoint did not land after %d attempts: %w", f.prefix, publishAttempts, last)
}

// walPublishLocked packs everything dirty into part 0 and hands its upload to
// a goroutine; the caller holds every block and mu.
func (f *File) walPublishLocked(ctx context.Context) (FlushTiming, error) {
	start := time.Now()
	t := FlushTiming{Attempts: 1}
	objs, err := f.packLocked(ctx, f.sortedDirty(), true, true)
	if err != nil {
		return t, fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	if len(objs) > 1 {
		// Larger than one object: refused on this path; the direct path
		// lays it out in parts.
		f.releasePlanned(objs)
		f.log.Debug("checkpoint larger than one object: publishing on the direct path")
		return f.flushLocked(ctx)
	}
	part0 := objs[0]
	cno := part0.name.Cno
	committed, err := f.commitLocked(ctx, objs)
	if err != nil {
		f.releasePlanned(objs)
		return t, fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	ino := f.inodeLocked(cno, committed)
	base := f.head
	// Never a head naming an object that may be gone (writers.go).
	if err := f.verifyWritersLocked(ctx, objs); err != nil {
		f.releasePlanned(objs)
		return t, fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	body, err := f.encode(part0, &base, &ino)
	if err != nil {
		f.releasePlanned(objs)
		return t, fmt.Errorf("flush %s: encode %s: %w", f.prefix, part0.name, err)
	}
	pub := &publish{name: part0.name, ino: ino, etag: f.headETag, applied: f.w.seq,
		body: body, bufs: part0.bufs, held: part0.held, done: make(chan struct{})}
	// The head records the count when the map knows it (a map opened from
	// a head that did not record it is counted by the next direct flush).
	pub.blocks, pub.blocksKnown = committed.Len()
	// An embedded part 0 this checkpoint builds on is stored before its head.
	if f.embed != nil && !f.embed.landed {
		pub.ensure = f.embed
	}
	// The dirty blocks' buffers now belong to the publish (blocks by
	// reference were read into buffers of their own); the budget they hold
	// is returned when it lands.
	pub.owned = make([]bool, len(part0.fbns))
	for s, fbn := range part0.fbns {
		pub.owned[s] = f.dirty[fbn].ref == nil
	}
	part0.held = 0
	f.dirty = make(map[uint64]*dirtyBlock)
	f.dirtyB = 0
	f.dirtyUnmapped = 0
	f.tree = committed
	f.changed = false
	f.resetSince()
	// Changes from now on build the next checkpoint.
	f.pendingCno, f.nextPart = cno+1, 1
	f.w.pub = pub
	f.stats.Flushes++
	t.Cno = cno
	t.Objects = 1
	t.StreamFlushBytes = part0.dataBytes(f.bs)
	t.StreamMetaBytes = body.size - part0.dataBytes(f.bs)
	t.Plan = time.Since(start)
	t.Total = t.Plan
	f.stats.LastFlush = t
	f.pubs.Add(1)
	go f.runPublish(pub)
	return t, nil
}

// publishAttempts bounds how often a WAL publish retries before it leaves the
// file to be recovered by the next Flush.
const publishAttempts = 5

// runPublish uploads a pinned part 0 and then the head. It owns nothing but
// the publish; Close waits for it (lockAll), for closeWait at most, then
// cancels it.
func (f *File) runPublish(pub *publish) {
	defer f.pubs.Done()
	ctx := f.w.pubCtx
	var c flushCounters
	var err error
	backoff := 50 * time.Millisecond
	for try := 1; ; try++ {
		err = f.up.Put(ctx, f.key(pub.name), pub.body, &c.requests)
		if err == nil || errors.Is(err, errNameTaken) || try >= publishAttempts || ctx.Err() != nil {
			break
		}
		time.Sleep(backoff)
		backoff *= 2
	}
	if err == nil && pub.ensure != nil {
		err = f.ensureEmbedded(ctx, pub.ensure, &c)
	}
	var etag string
	if err == nil {
		hd := segment.Head{Inode: pub.ino, BlocksKnown: pub.blocksKnown, Blocks: uint64(max(pub.blocks, 0))}
		backoff = 50 * time.Millisecond
		for try := 1; ; try++ {
			etag, err = f.putHead(ctx, hd, pub.etag, walMark{true, pub.applied}, &c)
			var ce *ConflictError
			if err == nil || errors.As(err, &ce) || try >= publishAttempts || ctx.Err() != nil {
				break
			}
			time.Sleep(backoff)
			backoff *= 2
		}
	}
	// The budget the pinned blocks hold is returned before mu is taken: a
	// writer waiting for room holds mu. Their buffers stay until unpinned (at
	// most one object per file over the budget meanwhile).
	f.releasePinnedBudget(pub)
	f.mu.Lock()
	defer f.mu.Unlock()
	pub.finished = true
	close(pub.done)
	if err != nil {
		f.w.failed = fmt.Errorf("publish checkpoint %d of %s: %w", pub.ino.Cno, f.prefix, err)
		f.log.Warn("publish failed; the next flush replays the write-ahead log", zap.Error(err))
		f.changed = true
		return
	}
	f.stats.ObjectsWritten++
	f.stats.BytesUploaded += pub.body.size
	f.head = pub.ino
	f.headETag = etag
	f.headCount = blockCount{cno: pub.ino.Cno, n: pub.blocks, known: pub.blocksKnown}
	if pub.ensure != nil {
		pub.ensure.landed = true
	}
	if f.embed != nil && f.embed.landed {
		f.setEmbedLocked(nil) // stored: read from the store from now on
	}
	f.w.applied = pub.applied
	f.wm.Release(pub.ino.Cno) // the head names what the marker protected
	f.w.unpinLocked()
	if f.w.log != nil {
		f.w.log.Covered(pub.applied)
	}
}

// releasePinnedBudget returns the budget of a publish's blocks: the dirty
// blocks' share and the copies of blocks read by reference.
func (f *File) releasePinnedBudget(pub *publish) {
	n := pub.held
	for _, owned := range pub.owned {
		if owned {
			n += int64(f.bs)
		}
	}
	f.releaseCopy(n)
}

// unpinLocked drops a finished publish (its budget was returned when it
// finished) and pools its buffers.
func (w *walState) unpinLocked() {

	pub := w.pub
	if pub == nil || !pub.finished {
		return
	}
	w.pub = nil
	for s, b := range pub.bufs {
		if pub.owned[s] {
			putBlockBuf(b)
		}
	}
}

// pinnedBlock returns the bytes of ptr if it is in the part 0 being
// published. The caller holds mu.
func (w *walState) pinnedBlock(p segment.Ptr) []byte {

	pub := w.pub
	if pub == nil || p.Object() != pub.name || int(p.Slot) >= len(pub.bufs) {
		return nil
	}
	return pub.bufs[p.Slot]
}

// discardWALLocked makes the records of changes a rollback dropped never
// replay: the head (unchanged otherwise) is rewritten to say they are held.
func (f *File) discardWALLocked(ctx context.Context) error {
	if !f.w.tracked || f.w.seq <= f.w.applied {
		return nil
	}
	var c flushCounters
	etag, err := f.putHead(ctx, f.rewrittenHeadLocked(), f.headETag, walMark{true, f.w.seq}, &c)
	if err != nil {
		return fmt.Errorf("discard write-ahead log records %d..%d: %w", f.w.applied+1, f.w.seq, err)
	}
	f.headETag = etag
	f.w.applied = f.w.seq
	if f.w.log != nil {
		f.w.log.Covered(f.w.seq)
	}
	return nil
}

// closeWait bounds each of Close's waits on the store: for a WAL publish in
// flight to land, and for the lease to be released. It is the lease's TTL:
// a writer that does not renew its lease loses it in that time anyway, so a
// close waiting longer would hold nothing more.
func (w *walState) closeWait() time.Duration {
	f := w.f

	if f.p.WALLeaseTTL > 0 {
		return f.p.WALLeaseTTL
	}
	return wal.DefaultLeaseTTL
}

// closing tells the log, if this file holds one, that no change comes any
// more (wal.Log.Closing): another mount's writer then waits for the lease
// instead of failing while the last publish lands.
func (w *walState) closing() {
	w.markMu.Lock()
	defer w.markMu.Unlock()
	w.ending = true
	w.logMu.Lock()
	log := w.log
	w.logMu.Unlock()
	if log != nil {
		log.Closing()
	}
}

// stillWriting takes back the closing mark LetGoWAL put on log when it
// keeps the lease after all (a change came, or the publish did not land in
// time): a writer of another mount would otherwise wait for a close that
// is not coming, up to wal_lease, before it fails with EBUSY. A Close
// under way keeps its own mark.
func (w *walState) stillWriting(log *wal.Log) {
	w.markMu.Lock()
	defer w.markMu.Unlock()
	if !w.ending {
		log.NotClosing()
	}
}

// LetGoWAL lets the write-ahead log's lease go while the File stays open,
// when everything this file logged is published: the mount's last writable
// handle of the file closed while others still read it, and a writer of
// another mount must not meet EBUSY for as long as those are held. The log
// is marked closing first (a writer elsewhere waits instead of failing),
// the publish in flight is waited for (within closeWait), and the log is
// detached under every block, so no change is appending to it, then closed
// with nothing held. A change here afterwards takes the lease again (after
// the closing log lets it go). With changes left to publish (a publish that
// failed, a change since), the lease is kept and not marked; a change that
// comes while it waits, or a publish that does not land in time, keeps the
// lease and takes the mark back; a File closed meanwhile does nothing. ctx
// bounds the waits and the close of the log (closeWait at most).
func (f *File) LetGoWAL(ctx context.Context) {
	f.w.logMu.Lock()
	log := f.w.log
	f.w.logMu.Unlock()
	if log == nil {
		return
	}
	f.mu.RLock()
	pub := f.w.pub
	keep := f.changed || f.w.failed != nil
	f.mu.RUnlock()
	if keep {
		return
	}
	log.Closing()
	ctx, cancel := context.WithTimeout(ctx, f.w.closeWait())
	defer cancel()
	if pub != nil {
		select {
		case <-pub.done:
		case <-ctx.Done():
			// The publish did not land in time: the lease is kept, and
			// Close deals with it.
			f.w.stillWriting(log)
			return
		}
	}
	// In the order writes take them: their blocks, logMu, mu.
	release := f.ranges.lock(allBlocks.lo, allBlocks.hi, true)
	f.w.logMu.Lock()
	f.mu.Lock()
	ours := f.w.log == log && !f.closed
	idle := ours && !f.ownUnpublishedLocked()
	if idle {
		f.w.log = nil // mu's Unlock republishes the mark: Refresh lists others' records
	}
	f.mu.Unlock()
	f.w.logMu.Unlock()
	release()
	if !idle {
		if ours {
			f.w.stillWriting(log) // a change came meanwhile
		}
		return
	}
	if err := log.Close(ctx); err != nil {
		f.log.Debug("letting go of the write-ahead log", zap.Error(err))
	}
}

// recoverAtCloseLocked publishes, before the lease goes, what a WAL publish
// that did not land left: its records, replayed onto the head as it is now
// (recoverLocked), within closeWait. A publish that lost its If-Match to
// another writer's checkpoint (a mount without the WAL, say) would
// otherwise leave acknowledged records for the next open to find, with no
// flush of this file to come. Only a holder of the log does it: records
// under a lease another writer took are that writer's to publish. The
// caller holds every block and mu (Close).
func (w *walState) recoverAtCloseLocked() {
	f := w.f
	if w.failed == nil || w.log == nil || !f.walOn() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.closeWait())
	defer cancel()
	if _, err := f.recoverLocked(ctx); err != nil {
		f.log.Warn("close: the write-ahead log's records could not be published; they replay at the next open",
			zap.String("file", f.prefix), zap.Error(err))
	}
}

// close waits for the publish goroutine (cancelled or finished by now:
// Close has taken lockAll) and releases the log, within closeWait.
func (w *walState) close() {
	f := w.f

	w.pubCancel()
	f.pubs.Wait()
	w.logMu.Lock()
	log := w.log
	w.log = nil
	w.logMu.Unlock()
	if log != nil {
		ctx, cancel := context.WithTimeout(context.Background(), w.closeWait())
		defer cancel()
		if err := log.Close(ctx); err != nil {
			f.log.Debug("closing the write-ahead log", zap.Error(err))
		}
	}
}

// walExists is Create's check that no log is left under the prefix.
func walExists(ctx context.Context, st staging.Store, prefix string) error {
	ok, err := wal.Exists(ctx, st, prefix)
	if err != nil {
		return fmt.Errorf("create %s: %w", prefix, err)
	}
	if ok {
		return fmt.Errorf("create %s: objects are left under %s%s: %w", prefix, prefix, wal.Dir, ErrWALNotEmpty)
	}
	return nil
}
