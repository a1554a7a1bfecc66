package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// Replaying the write-ahead log (wal.go): at an open, after a failed
// publish, and read-only over a live writer's records (the overlay).

// recoverLocked follows a failed publish: the head is read again and the WAL
// records after it are replayed and published on the direct path.
func (f *File) recoverLocked(ctx context.Context) (FlushTiming, error) {
	cause := f.w.failed
	if err := f.reloadLocked(ctx); err != nil {
		return FlushTiming{}, fmt.Errorf("flush %s: recover from %v: %w", f.prefix, cause, err)
	}
	if f.w.log != nil {
		// The head may hold records of ours another writer published
		// (a mount without the WAL publishes them under its changes).
		f.w.log.Covered(f.w.applied)
	}
	seqs, err := wal.List(ctx, f.st, f.prefix)
	if err != nil {
		return FlushTiming{}, fmt.Errorf("flush %s: recover: %w", f.prefix, err)
	}
	t, err := f.replayLocked(ctx, seqs)
	if err != nil {
		return t, fmt.Errorf("flush %s: recover from %v: %w", f.prefix, cause, err)
	}
	return t, nil
}

// reloadLocked drops the in-memory state for the head as stored.
func (f *File) reloadLocked(ctx context.Context) error {
	hd, info, err := segment.ReadHead(ctx, f.st, volume.HeadKey(f.prefix), f.tag)
	if err != nil {
		return fmt.Errorf("read head: %w", err)
	}
	applied, tracked, err := wal.HeadApplied(info.Metadata)
	if err != nil {
		return err
	}
	f.adoptHead(hd, info.ETag)
	f.w.applied, f.w.tracked = applied, tracked || f.w.tracked
	f.w.seq = max(f.w.seq, applied)
	return nil
}

// replayLocked applies the records in seqs after the head's, in order, and
// publishes them on the direct path. The caller holds every block and mu (or
// owns the file alone).
func (f *File) replayLocked(ctx context.Context, seqs []uint64) (FlushTiming, error) {
	from := f.w.applied
	last, err := f.applyRecordsLocked(ctx, after(seqs, from))
	if err != nil {
		return FlushTiming{}, err
	}
	if last == 0 {
		return FlushTiming{Cno: f.head.Cno}, nil
	}
	f.w.seq = max(f.w.seq, last)
	f.w.tracked = true
	f.changed = true
	t, err := f.flushLocked(ctx)
	if err != nil {
		return t, err
	}
	f.log.Info("replayed the write-ahead log", zap.Uint64("from", from+1), zap.Uint64("through", last),
		zap.Uint64("cno", t.Cno))
	if f.w.log == nil {
		f.w.deleteCovered(ctx, seqs, f.w.applied)
	}
	return t, nil
}

// gapAfter says whether the first of seqs (ascending) above from is not
// from+1: the records in between were deleted, which their writer does once
// a checkpoint holds them, so the head that says from may be an old one.
func gapAfter(seqs []uint64, from uint64) bool {
	for _, seq := range seqs {
		if seq > from {
			return seq != from+1
		}
	}
	return false
}

// after returns the seqs above from (seqs ascending).
func after(seqs []uint64, from uint64) []uint64 {
	var todo []uint64
	for _, seq := range seqs {
		if seq > from {
			todo = append(todo, seq)
		}
	}
	return todo
}

// applyRecordsLocked reads the records todo (ascending) and applies them in
// memory, in order, without publishing; it returns the last one applied or
// skipped as torn (0: todo is empty). The caller holds every block and mu, or
// owns the file alone, or is the first change under a lease just taken (see
// walLog).
func (f *File) applyRecordsLocked(ctx context.Context, todo []uint64) (uint64, error) {
	if len(todo) == 0 {
		return 0, nil
	}
	// Records are read ahead of the one being applied, up to Concurrency
	// at once and in memory (a GET is a round trip: a long log then replays
	// at the link's pace, not its latency's), and applied strictly in order.
	// Reads are started in order, so the next record to apply is never
	// waiting for a slot that later ones hold.
	rctx, cancel := context.WithCancel(ctx)
	type fetched struct {
		rec wal.Record
		err error
	}
	ahead := make([]chan fetched, len(todo))
	for i := range ahead {
		ahead[i] = make(chan fetched, 1)
	}
	slots := make(chan struct{}, f.p.Concurrency)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, seq := range todo {
			select {
			case slots <- struct{}{}:
			case <-rctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, err := wal.ReadRecord(rctx, f.st, f.prefix, f.tag, seq)
				ahead[i] <- fetched{rec, err}
			}()
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	var last uint64
	for i, seq := range todo {
		r := <-ahead[i]
		<-slots
		if r.err != nil && f.w.torn(seq, todo[len(todo)-1], r.err) {
			last = seq
			continue
		}
		if r.err != nil {
			return last, fmt.Errorf("replay: %w", r.err)
		}
		for j, op := range r.rec.Ops {
			if err := f.applyLocked(ctx, op); err != nil {
				return last, fmt.Errorf("replay record %d op %d: %w", seq, j, err)
			}
		}
		last = seq
	}
	return last, nil
}

// torn says whether the record seq that failed to decode with err is
// one a crash tore: a store that keeps what it received of an upload cut
// short (versitygw does; S3 does not) leaves a record whose PUT never
// returned, so none of its changes was acknowledged. Such a record is cut
// short (wal.ErrTruncated), and is among the last ones, those the log may
// have had in flight (its MaxInFlight): it is skipped, and covered by the
// replay's checkpoint like the rest. Any other record that does not decode
// is corruption, and the replay stops.
func (w *walState) torn(seq, lastListed uint64, err error) bool {
	f := w.f

	inFlight := uint64(f.p.WALMaxInFlight)
	if inFlight == 0 {
		inFlight = wal.DefaultMaxInFlight
	}
	if !errors.Is(err, wal.ErrTruncated) || seq+inFlight <= lastListed {
		return false
	}
	f.log.Warn("skipping a torn write-ahead log record: its upload was cut short by a crash, so its writes were never acknowledged",
		zap.Uint64("seq", seq), zap.Error(err))
	return true
}

// deleteCovered removes records a published checkpoint holds, for a replay
// made without holding a log (a mount without the WAL). Failures are harmless.
func (w *walState) deleteCovered(ctx context.Context, seqs []uint64, applied uint64) {
	f := w.f

	for _, s := range seqs {
		if s > applied {
			break
		}
		if err := f.st.Delete(ctx, wal.RecordKey(f.prefix, s)); err != nil {
			f.log.Debug("delete of a published WAL record failed; harmless", zap.Uint64("seq", s), zap.Error(err))
		}
	}
}

// applyLocked applies one replayed change (not logged again).
func (f *File) applyLocked(ctx context.Context, op wal.Op) error {
	if f.w.overlay {
		// Read-only: blocks cannot be relieved into partial segments, so the
		// overlay must fit the memory budget by itself.
		if b := f.budget; b != nil && op.Kind == wal.OpWrite && f.dirtyB+int64(len(op.Data))+2*int64(f.bs) > b.Limit() {
			return fmt.Errorf("the records of another writer hold more data than the memory limit (%d bytes) allows to read without publishing them: %w",
				b.Limit(), ErrOverlayTooLarge)
		}
	}
	switch op.Kind {
	case wal.OpWrite:
		if err := f.writeLocked(ctx, op.Data, op.Off); err != nil {
			return err
		}
	case wal.OpTruncate:
		if err := f.truncateLocked(ctx, op.Off, nil); err != nil {
			return err
		}
	case wal.OpZero:
		if err := f.zeroLocked(ctx, op.Off, op.Len, nil); err != nil {
			return err
		}
	case wal.OpMtime:
	default:
		return fmt.Errorf("unknown op kind %d", op.Kind)
	}
	f.mtime = time.Unix(0, op.MtimeNs)
	f.changed = true
	if f.dirtyB > f.p.DirtyLimit && !f.w.overlay {
		// As in a write: a failed partial segment leaves the data dirty for
		// the flush (a name the crashed writer used moves to a fresh one).
		if err := f.writePartialLocked(ctx); err != nil {
			f.log.Debug("partial segment during replay failed; data stays dirty", zap.Error(err))
		}
	}
	return nil
}

// writeLocked writes p at off with mu held (a replay: no one else is here).
func (f *File) writeLocked(ctx context.Context, p []byte, off int64) error {
	segs, err := f.prepareLocked(ctx, p, off, nil)
	for _, sg := range segs {
		copy(sg.d.buf[sg.in:sg.in+sg.n], p[sg.src:sg.src+sg.n])
		sg.d.busy--
	}
	if err != nil {
		return err
	}
	f.size = max(f.size, off+int64(len(p)))
	return nil
}

// openReplay runs at Open: records after the head's are replayed (the lease
// taken for it, and let go once they are published) unless a live writer
// holds the lease, in which case they are its own to publish and the file
// shows them read-only (overlayLocked). A read-only open shows them the same
// way, whoever wrote them, and publishes none: a crashed writer's are
// replayed by the next writable open.
func (f *File) openReplay(ctx context.Context) error {
	if !f.w.tracked {
		return nil
	}
	seqs, err := wal.List(ctx, f.st, f.prefix)
	if err != nil {
		return fmt.Errorf("open %s: %w", f.prefix, err)
	}
	// No record past the head may also be a writer that published, and
	// deleted its records, after the head was read: then the head has
	// moved, and is read again. So may a first record past the head's next
	// one: the writer published, deleted, and wrote again.
	for try := 1; (len(seqs) == 0 || seqs[len(seqs)-1] <= f.w.applied || gapAfter(seqs, f.w.applied)) && try < overlayAttempts; try++ {
		moved, err := f.headMoved(ctx, f.headETag)
		if err != nil {
			return fmt.Errorf("open %s: %w", f.prefix, err)
		}
		if !moved {
			break
		}
		if err := f.reloadLocked(ctx); err != nil {
			return fmt.Errorf("open %s: %w", f.prefix, err)
		}
		if seqs, err = wal.List(ctx, f.st, f.prefix); err != nil {
			return fmt.Errorf("open %s: %w", f.prefix, err)
		}
	}
	if len(seqs) == 0 || seqs[len(seqs)-1] <= f.w.applied {
		if len(seqs) > 0 && f.walOn() {
			// Published already; deleting them is the log's job once it
			// exists, and harmless to leave otherwise.
			f.w.deleteCovered(ctx, seqs, f.w.applied)
		}
		return nil
	}
	if f.readOnly {
		if err := f.overlayLocked(ctx, seqs); err != nil {
			return fmt.Errorf("open %s: %w", f.prefix, err)
		}
		return nil
	}
	o := f.w.options()
	o.Next = f.w.applied + 1
	log, err := wal.Open(ctx, f.st, f.prefix, o)
	if errors.Is(err, wal.ErrBusy) {
		f.log.Debug("the write-ahead log has a live writer; reading its records without publishing them", zap.Error(err))
		if err := f.overlayLocked(ctx, seqs); err != nil {
			return fmt.Errorf("open %s: %w", f.prefix, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", f.prefix, err)
	}
	// The lease may be free because its writer published and let it go
	// after the head was read: its records are gone (deleted once the lease
	// went, or being deleted) and its checkpoint is the head now. With the
	// lease ours the head can no longer move: read again, it says which
	// records are still to replay, those the log listed after the take.
	moved, err := f.headMoved(ctx, f.headETag)
	if err == nil && moved {
		if err = f.reloadLocked(ctx); err == nil {
			log.SetNext(f.w.applied + 1) // numbers the checkpoint holds are used
		}
	}
	if err != nil {
		if cerr := log.Close(ctx); cerr != nil {
			f.log.Debug("closing the write-ahead log after a failed open", zap.Error(cerr))
		}
		return fmt.Errorf("open %s: %w", f.prefix, err)
	}
	f.w.log = log
	_, err = f.replayLocked(ctx, log.Found())
	// The lease is let go once the records are published, writer or not: an
	// open for reading must not keep it from a writer that may still run (a
	// store outage let its lease expire) and that takes it back when no one
	// else wrote (wal.Options.Retake). A first change takes it again.
	f.w.log = nil
	if cerr := log.Close(ctx); cerr != nil && err == nil {
		f.log.Debug("closing the write-ahead log after replay", zap.Error(cerr))
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", f.prefix, err)
	}
	return nil
}

// ErrOverlayTooLarge: the records of a live writer hold more than a reader
// may keep in memory.
var ErrOverlayTooLarge = errors.New("write-ahead log too large to read without its lease")

// overlayAttempts bounds how often overlayLocked starts again because the
// live writer published (and deleted records) while they were read.
const overlayAttempts = 5

// overlayLocked applies, in memory and read-only, the records after the head
// that a live writer holds: seqs as listed at Open. A reader never presents
// the file without writes durable in its log, and never publishes them on
// the writer's behalf (the writer does, and may go on writing). What it
// shows is the head and the records stored when it looked: a snapshot,
// refreshed by opening the file again, or by Refresh (refresh.go). A record
// gone by the time it is read was published and deleted by its writer: the
// head is read again and the overlay starts over from it. The caller owns
// the file alone (Open) or holds every block and mu (Refresh).
func (f *File) overlayLocked(ctx context.Context, seqs []uint64) error {
	for try := 1; ; try++ {
		f.w.overlay = true
		last, err := f.applyRecordsLocked(ctx, after(seqs, f.w.applied))
		if err == nil {
			f.w.seq = max(f.w.seq, last)
			f.changed = false // the writer's changes, not ours to publish
			f.overlayIsBaseLocked()
			return nil
		}
		if !errors.Is(err, staging.ErrNotFound) || try >= overlayAttempts {
			f.dropOverlayLocked()
			return fmt.Errorf("read the write-ahead log of a live writer: %w", err)
		}
		f.log.Debug("a record of the live writer is gone (published); reading its log again", zap.Error(err))
		if err := f.reloadLocked(ctx); err != nil {
			f.dropOverlayLocked()
			return fmt.Errorf("read the write-ahead log of a live writer: %w", err)
		}
		f.w.seq = f.w.applied
		if seqs, err = wal.List(ctx, f.st, f.prefix); err != nil {
			f.dropOverlayLocked()
			return fmt.Errorf("read the write-ahead log of a live writer: %w", err)
		}
	}
}

// dropOverlayLocked frees an overlay that failed half way: the file is its
// head again.
func (f *File) dropOverlayLocked() {
	f.adopt(f.head, f.headETag)
	f.w.overlay = false
	f.w.seq = f.w.applied
}

// WALView is what a file shows with the records of its WAL after the head
// applied: its head, its size and mtime after them, and the last record
// read.
type WALView struct {
	Inode segment.Inode
	Size  int64
	Mtime time.Time
	Last  uint64
}

// ViewWAL computes a file's size and mtime with the records after its head,
// without taking the WAL's lease, publishing or keeping data: the attributes
// a reader reports while a live writer holds the log (see overlayLocked for
// the data). Each record is read whole (its CRC covers it whole) and
// dropped. A record gone by the time it is read was published: the head is
// read again and the view starts over. A record cut short among the last
// ones is skipped, as a replay skips it.
func ViewWAL(ctx context.Context, st staging.Store, prefix string, o Options) (WALView, error) {
	f, err := newFile(st, prefix, o)
	if err != nil {
		return WALView{}, err
	}
	for try := 1; ; try++ {
		v, err := f.viewWAL(ctx)
		if err == nil || !errors.Is(err, staging.ErrNotFound) || try >= overlayAttempts {
			return v, err
		}
	}
}

func (f *File) viewWAL(ctx context.Context) (WALView, error) {
	hd, info, err := f.readHead(ctx)
	if err != nil {
		return WALView{}, err
	}
	ino := hd.Inode
	applied, _, err := wal.HeadApplied(info.Metadata)
	if err != nil {
		return WALView{}, fmt.Errorf("view %s: %w", f.prefix, err)
	}
	v := WALView{Inode: ino, Size: int64(ino.Size), Mtime: time.Unix(0, ino.MtimeNs), Last: applied}
	seqs, err := wal.List(ctx, f.st, f.prefix)
	if err != nil {
		return v, fmt.Errorf("view %s: %w", f.prefix, err)
	}
	todo := after(seqs, applied)
	if len(todo) == 0 || gapAfter(seqs, applied) {
		// As openReplay: a writer may have published, and deleted its
		// records, after the head was read (and written again: the
		// first record left is past the head's next); the view starts
		// over.
		moved, err := f.headMoved(ctx, info.ETag)
		if err != nil {
			return v, fmt.Errorf("view %s: %w", f.prefix, err)
		}
		if moved {
			return v, fmt.Errorf("view %s: the head moved while the log was listed: %w", f.prefix, staging.ErrNotFound)
		}
	}
	for _, seq := range todo {
		rec, err := wal.ReadRecord(ctx, f.st, f.prefix, f.tag, seq)
		if err != nil && f.w.torn(seq, todo[len(todo)-1], err) {
			continue
		}
		if err != nil {
			return v, fmt.Errorf("view %s: %w", f.prefix, err)
		}
		for _, op := range rec.Ops {
			// As applyLocked changes size and mtime.
			switch op.Kind {
			case wal.OpWrite:
				v.Size = max(v.Size, op.Off+int64(len(op.Data)))
			case wal.OpTruncate:
				v.Size = op.Off
			}
			v.Mtime = time.Unix(0, op.MtimeNs)
		}
		v.Last = seq
	}
	return v, nil
}

// headMoved reports whether the head stored is no longer the one of etag.
func (f *File) headMoved(ctx context.Context, etag string) (bool, error) {
	info, err := f.st.Head(ctx, volume.HeadKey(f.prefix))
	if err != nil {
		return false, fmt.Errorf("read head: %w", err)
	}
	return info.ETag != etag, nil
}
