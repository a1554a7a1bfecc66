package wal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/staging"
)

// Defaults of Options.
const (
	DefaultBatchBytes  = 16 << 20
	DefaultMaxInFlight = 4
	DefaultLeaseTTL    = 30 * time.Second
)

// writeIDMeta is the metadata naming the writer of a record, as on every
// object ckptfs creates with If-None-Match.
const writeIDMeta = "ckptfs-write"

// Options configure a Log.
type Options struct {
	Tag         uint64        // file tag carried by records
	BatchBytes  int           // a record holds ops up to this many encoded bytes (0: 16 MiB, at most MaxRecordSize); a single Append larger goes alone
	MaxInFlight int           // records being PUT at once (0: 4)
	LeaseTTL    time.Duration // (0: 30s) the lease is renewed every TTL/3
	Logger      *zap.Logger   // nil: nop
	// Shared, when set, also counts this log's records.
	Shared *Counters
	// Next is the seq of the first record this log appends (>= 1; 0 is 1).
	// Open sets it past every record found when larger.
	Next uint64
	// Retake, when set, is asked before the log takes back a lease that
	// another writer took while no one appended to the log (see "Lease" in
	// the package doc): through is the highest seq this log has assigned.
	// It says whether the file is still as this log's records leave it (its
	// head unchanged, or a checkpoint of those records only); false keeps
	// the lease lost. An error is transient: asked again at the next try.
	Retake func(ctx context.Context, through uint64) (bool, error)
	// BusyWait, when positive, is how long Open waits for a writer that
	// holds the lease and is closing (Log.Closing) to let it go, trying
	// again with backoff, before it fails with a *BusyError; a holder not
	// closing is tried again for a second (busyGrace), since it may be
	// about to say so. Zero fails at once.
	BusyWait time.Duration
}

// Counters add up what several logs appended (a mount's files): a Log given
// one in Options adds to it as it goes.
type Counters struct {
	Records atomic.Int64 // PUTs of records that succeeded
	Ops     atomic.Int64 // ops in them
	Bytes   atomic.Int64 // their encoded bytes
	Failed  atomic.Int64 // record PUTs that failed
}

// Stats count what a Log appended since Open.
type Stats struct {
	Records int64 // PUTs that succeeded
	Ops     int64 // ops in them
	Bytes   int64 // their encoded bytes
	Failed  int64 // records whose PUT failed (their ops failed)
}

// batch is the ops of one record to be: the ops of one or more Appends.
type batch struct {
	ops  []Op
	size int    // EncodedSize(ops)
	seq  uint64 // set when sent
	done bool
	err  error
	// A record stored too late to be acknowledged at once (Log.late): its
	// encoded size, and when its PUT returned.
	n      int
	stored time.Time
}

// Log is the write-ahead log of one file, held under its lease. Its methods
// are safe for concurrent use.
type Log struct {
	st          staging.Store
	prefix      string
	tag         uint64
	batchBytes  int
	maxInFlight int
	log         *zap.Logger
	lease       *lease // the renewing goroutine's until it stopped, then Close's
	shared      *Counters
	found       []uint64
	retakeOK    func(ctx context.Context, through uint64) (bool, error)

	mu   sync.Mutex
	cond *sync.Cond // on mu; broadcast when a batch finishes or the log stops appending
	// INVARIANT: every batch in pending has an Append waiting on it, and that
	// Append sends it or is woken when a PUT finishes.
	pending   []*batch      // GUARDED_BY(mu); not yet sent, oldest first; the last is being filled
	inflight  int           // GUARDED_BY(mu); PUTs running
	next      uint64        // GUARDED_BY(mu); seq of the next batch sent
	last      uint64        // GUARDED_BY(mu)
	stats     Stats         // GUARDED_BY(mu)
	failed    error         // GUARDED_BY(mu); sticky: a record name was taken
	leaseLost error         // GUARDED_BY(mu); cleared if the lease is taken back, sticky once lostFinal
	lostFinal bool          // GUARDED_BY(mu); another writer appended or changed the file: never taken back
	closed    bool          // GUARDED_BY(mu)
	drained   chan struct{} // GUARDED_BY(mu); made by Close, closed when nothing is pending or in flight
	covered   uint64        // GUARDED_BY(mu)
	toDelete  []uint64      // GUARDED_BY(mu); seqs stored (or maybe stored) and not deleted yet
	// valid: the lease is provably this log's until then (this process's
	// monotonic clock): the send of the last write of the owner object
	// that landed, plus lease.validFor. A record stored by then is
	// acknowledged; one stored later waits in late for a renewal sent
	// after it was stored to land (no taker came between: acknowledged),
	// or for the lease to be found lost (failed, and deleted). A taker
	// lists the records only once the lease is past its expiry, so every
	// record acknowledged is in its listing.
	valid time.Time // GUARDED_BY(mu)
	late  []*batch  // GUARDED_BY(mu); stored, not yet acknowledged; still counted in inflight
	// stopped: the renewing goroutine is gone (Close, Abandon); nothing
	// can prove the lease any more.
	stopped bool // GUARDED_BY(mu)

	kick chan struct{} // capacity 1: the cleaner has work
	poke chan struct{} // capacity 1: renew now (the lease is lost: take it back; or Closing)
	stop context.CancelFunc
	wg   sync.WaitGroup // the renewing and the cleaning goroutines

	closeMu   sync.Mutex
	closeDone bool  // GUARDED_BY(closeMu)
	closeErr  error // GUARDED_BY(closeMu)
}

func (o *Options) withDefaults() (Options, error) {
	r := *o
	var bad []string
	if r.BatchBytes < 0 || r.BatchBytes > MaxRecordSize {
		bad = append(bad, fmt.Sprintf("batch bytes %d not in [0, %d]", r.BatchBytes, MaxRecordSize))
	}
	if r.MaxInFlight < 0 {
		bad = append(bad, fmt.Sprintf("max in flight %d is negative", r.MaxInFlight))
	}
	if r.BusyWait < 0 {
		bad = append(bad, fmt.Sprintf("busy wait %s is negative", r.BusyWait))
	}
	if r.LeaseTTL < 0 || (r.LeaseTTL > 0 && r.LeaseTTL < 3*time.Millisecond) {
		bad = append(bad, fmt.Sprintf("lease TTL %s: zero or at least 3ms", r.LeaseTTL))
	}
	if len(bad) > 0 {
		return r, fmt.Errorf("wal options: %s", strings.Join(bad, "; "))
	}
	if r.BatchBytes == 0 {
		r.BatchBytes = DefaultBatchBytes
	}
	if r.MaxInFlight == 0 {
		r.MaxInFlight = DefaultMaxInFlight
	}
	if r.LeaseTTL == 0 {
		r.LeaseTTL = DefaultLeaseTTL
	}
	if r.Logger == nil {
		r.Logger = zap.NewNop()
	}
	if r.Next == 0 {
		r.Next = 1
	}
	return r, nil
}

// Open takes the lease of the log under prefix and lists its records. It
// fails with a *BusyError (errors.Is(err, ErrBusy)) if a live writer holds the
// lease. The Log's goroutines run until Close.
func Open(ctx context.Context, st staging.Store, prefix string, o Options) (*Log, error) {
	opt, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := staging.ValidatePrefix(prefix + Dir); err != nil {
		return nil, fmt.Errorf("open wal of %s: %w", prefix, err)
	}
	ls := &lease{st: st, key: prefix + Dir + OwnerName, me: thisProcess(), id: newWriterID(), ttl: opt.LeaseTTL, log: opt.Logger}
	if err := ls.takeWaiting(ctx, opt.BusyWait); err != nil {
		return nil, err
	}
	found, err := List(ctx, st, prefix)
	if err != nil {
		if rerr := ls.release(ctx); rerr != nil {
			opt.Logger.Debug("release of the wal lease after a failed open failed; it will expire", zap.Error(rerr))
		}
		return nil, fmt.Errorf("open wal of %s: %w", prefix, err)
	}
	next := opt.Next
	if n := len(found); n > 0 && found[n-1] >= next {
		if found[n-1] == math.MaxUint64 {
			_ = ls.release(ctx)
			return nil, fmt.Errorf("open wal of %s: record %d is the last seq there is", prefix, found[n-1])
		}
		next = found[n-1] + 1
	}
	l := &Log{
		st:          st,
		prefix:      prefix,
		tag:         opt.Tag,
		batchBytes:  opt.BatchBytes,
		maxInFlight: opt.MaxInFlight,
		log:         opt.Logger,
		lease:       ls,
		shared:      opt.Shared,
		found:       found,
		next:        next,
		toDelete:    slices.Clone(found),
		kick:        make(chan struct{}, 1),
		poke:        make(chan struct{}, 1),
		retakeOK:    opt.Retake,
		valid:       ls.sent.Add(ls.validFor()),
	}
	l.cond = sync.NewCond(&l.mu)
	// The goroutines outlive Open's ctx (keeping its values) until Close.
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.stop = stop
	l.wg.Add(2)
	go l.renewLoop(bg)
	go l.cleanLoop(bg)
	return l, nil
}

// Found returns the seqs of the records found at Open, ascending.
func (l *Log) Found() []uint64 { return slices.Clone(l.found) }

// Read reads and decodes record seq (one GET).
func (l *Log) Read(ctx context.Context, seq uint64) (Record, error) {
	return ReadRecord(ctx, l.st, l.prefix, l.tag, seq)
}

// Last returns the seq of the last record appended successfully (0: none
// since Open). Records complete out of order: it is the highest.
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Stats returns the counts since Open.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// refuseLocked is why the log takes no more ops, or nil.
func (l *Log) refuseLocked() error {
	switch {
	case l.closed:
		return fmt.Errorf("append to wal of %s: %w", l.prefix, ErrClosed)
	case l.failed != nil:
		return fmt.Errorf("append to wal of %s: the log failed: %w", l.prefix, l.failed)
	case l.leaseLost != nil:
		if !l.lostFinal {
			l.renewNow()
		}
		return fmt.Errorf("append to wal of %s: %w", l.prefix, l.leaseLost)
	}
	return nil
}

// Append makes ops durable in one record, shared with concurrent Appends
// (group commit), and returns that record's seq once its PUT succeeded. It
// keeps nothing of ops after it returns. ctx is checked before the ops are
// queued; the PUT of a record runs detached from it, so that a cancel does
// not fail the other Appends' ops, and Append waits for it.
//
// A record whose PUT failed fails its ops and its seq is skipped. A record
// name created by another writer fails with a *TakenError (ErrTaken), and so
// does every later Append. After Close Append fails with ErrClosed; after
// the lease was lost, with ErrLeaseLost. An Append of no ops returns 0.
func (l *Log) Append(ctx context.Context, ops []Op) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("append to wal of %s: %w", l.prefix, err)
	}
	if uint64(len(ops)) > math.MaxUint32 {
		return 0, fmt.Errorf("append to wal of %s: %d ops, a record holds at most %d", l.prefix, len(ops), uint32(math.MaxUint32))
	}
	for i, op := range ops {
		if op.Kind == OpWrite && op.Len == 0 {
			op.Len = int64(len(op.Data)) // as Encode does
		}
		if why := checkOp(op, int64(len(op.Data))); why != "" {
			return 0, fmt.Errorf("append to wal of %s: op %d: %s", l.prefix, i, why)
		}
	}
	// A record over MaxRecordSize would be refused by every reader: refuse
	// it here, where the writer can still be told (the engine sends writes
	// of at most 1 MiB).
	if n := EncodedSize(ops); n > MaxRecordSize {
		return 0, fmt.Errorf("append to wal of %s: %d ops make a record of %d bytes, more than %d: %w",
			l.prefix, len(ops), n, MaxRecordSize, ErrRecordTooLarge)
	}
	size := EncodedSize(ops) - emptyRecord

	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.refuseLocked(); err != nil {
		return 0, err
	}
	if len(ops) == 0 {
		return 0, nil
	}
	var b *batch
	if n := len(l.pending); n > 0 && l.pending[n-1].size+size <= l.batchBytes {
		b = l.pending[n-1]
	} else {
		b = &batch{size: emptyRecord}
		l.pending = append(l.pending, b)
	}
	b.ops = append(b.ops, ops...)
	b.size += size
	var unwake func() bool
	defer func() {
		if unwake != nil {
			unwake()
		}
	}()
	for !b.done {
		if l.inflight < l.maxInFlight && len(l.pending) > 0 {
			l.sendLocked(ctx)
			continue
		}
		if !b.stored.IsZero() {
			// Stored past the lease, waiting for a renewal to prove it
			// (late): that wait lasts as long as the store is silent, so
			// the caller's deadline ends it. The record stays, and is
			// acknowledged or deleted as the lease turns out; the write
			// reported failed may so be in the file, as after any failed
			// write(2).
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("append to wal of %s: record %d stored, its lease not proven before the call ended (it may yet be kept): %w", l.prefix, b.seq, err)
			}
			if unwake == nil {
				unwake = context.AfterFunc(ctx, func() {
					l.mu.Lock()
					l.cond.Broadcast()
					l.mu.Unlock()
				})
			}
		}
		l.cond.Wait()
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.seq, nil
}

// sendLocked sends the oldest pending batch and records how it ended. It
// drops mu during the PUT.
func (l *Log) sendLocked(ctx context.Context) {
	b := l.pending[0]
	l.pending[0] = nil
	l.pending = l.pending[1:]
	// A log that failed or lost its lease sends nothing more; batches queued
	// before that fail with it.
	if l.failed != nil || l.leaseLost != nil {
		b.done, b.err = true, l.refuseLocked()
		l.cond.Broadcast()
		l.signalDrainedLocked()
		return
	}
	b.seq = l.next
	l.next++
	l.inflight++
	l.mu.Unlock()
	n, err := l.put(context.WithoutCancel(ctx), b)
	stored := time.Now()
	l.mu.Lock()
	if err == nil {
		switch {
		case l.leaseLost != nil || l.stopped && stored.After(l.valid):
			// Stored after the lease was found lost (or when it can no
			// longer be proven ours): a taker may have listed the log
			// before it landed.
			cause := l.leaseLost
			if cause == nil {
				cause = fmt.Errorf("wal of %s closed: %w", l.prefix, ErrLeaseLost)
			}
			err = l.lateErr(b.seq, cause)
			l.mu.Unlock()
			l.dropFailed(context.WithoutCancel(ctx), RecordKey(l.prefix, b.seq))
			l.mu.Lock()
		case stored.After(l.valid):
			// Stored after the lease is proven ours: acknowledged once a
			// renewal sent from now on lands.
			b.n, b.stored = n, stored
			l.late = append(l.late, b)
			l.renewNow()
			return
		}
	}
	l.finishLocked(b, n, err)
}

// lateErr is the failure of record seq, stored when the lease could no
// longer be proven this log's, and lost since (cause).
func (l *Log) lateErr(seq uint64, cause error) error {
	return fmt.Errorf("append wal record %d of %s: stored after the lease could be proven ours, and the lease was lost meanwhile: %w", seq, l.prefix, cause)
}

// finishLocked records how the PUT of batch b ended (n bytes stored, or
// err) and wakes its Appends.
func (l *Log) finishLocked(b *batch, n int, err error) {
	l.inflight--
	b.done, b.err = true, err
	// A failed PUT may have stored its record (a lost answer): covered, it
	// is deleted like the others.
	l.toDelete = append(l.toDelete, b.seq)
	if sh := l.shared; sh != nil {
		if err != nil {
			sh.Failed.Add(1)
		} else {
			sh.Records.Add(1)
			sh.Ops.Add(int64(len(b.ops)))
			sh.Bytes.Add(int64(n))
		}
	}
	if err != nil {
		l.stats.Failed++
		if errors.Is(err, ErrTaken) && l.failed == nil {
			l.failed = err
		}
	} else {
		l.stats.Records++
		l.stats.Ops += int64(len(b.ops))
		l.stats.Bytes += int64(n)
		l.last = max(l.last, b.seq)
	}
	b.ops = nil
	l.cond.Broadcast()
	l.signalDrainedLocked()
}

// signalDrainedLocked tells a waiting Close that nothing is pending or in
// flight any more.
func (l *Log) signalDrainedLocked() {
	if l.drained != nil && len(l.pending) == 0 && l.inflight == 0 {
		close(l.drained)
		l.drained = nil
	}
}

// put stores batch b as record b.seq and returns its size.
func (l *Log) put(ctx context.Context, b *batch) (int, error) {
	key := RecordKey(l.prefix, b.seq)
	data := Encode(l.tag, Record{Seq: b.seq, Ops: b.ops})
	_, err := l.st.Put(ctx, key, data, staging.PutOptions{
		Conditions: staging.Conditions{IfNoneMatch: true},
		Metadata:   map[string]string{writeIDMeta: l.lease.id},
	})
	if err == nil {
		return len(data), nil
	}
	if !errors.Is(err, staging.ErrPrecondition) {
		l.dropFailed(ctx, key)
		return 0, fmt.Errorf("append wal record %d of %s: %w", b.seq, l.prefix, err)
	}
	// The name exists: ours if an earlier try of this very PUT landed and its
	// answer was lost, another writer's otherwise.
	info, herr := l.st.Head(ctx, key)
	if herr != nil {
		l.dropFailed(ctx, key)
		return 0, fmt.Errorf("append wal record %d of %s: it exists and its writer could not be read: %w", b.seq, l.prefix, herr)
	}
	if w := info.Metadata[writeIDMeta]; w != l.lease.id {
		return 0, &TakenError{Key: key, Writer: w}
	}
	if info.Size != int64(len(data)) {
		// Ours, but torn: an earlier try was cut short and the server kept
		// what it received (versitygw does). Never acknowledged, it must not
		// stay to be found by a replay: it goes, and the record is stored
		// again.
		l.log.Debug("wal record torn by a cut upload; storing it again", zap.String("key", key),
			zap.Int64("stored", info.Size), zap.Int("size", len(data)))
		if err := l.st.Delete(ctx, key); err != nil {
			return 0, fmt.Errorf("append wal record %d of %s: delete a torn copy: %w", b.seq, l.prefix, err)
		}
		if _, err := l.st.Put(ctx, key, data, staging.PutOptions{
			Conditions: staging.Conditions{IfNoneMatch: true},
			Metadata:   map[string]string{writeIDMeta: l.lease.id},
		}); err != nil {
			return 0, fmt.Errorf("append wal record %d of %s: store it again after a torn copy: %w", b.seq, l.prefix, err)
		}
		return len(data), nil
	}
	l.log.Debug("wal record stored with its answer lost", zap.String("key", key))
	return len(data), nil
}

// dropFailed deletes the record of a PUT that failed. It may be stored all
// the same (an answer lost) or in part (an upload cut short, on a server that
// keeps what it received); its ops fail, so it goes: a replay must neither
// apply a write reported failed nor stop at a torn record. A delete that
// fails leaves it to the replay's rules.
func (l *Log) dropFailed(ctx context.Context, key string) {
	if err := l.st.Delete(ctx, key); err != nil {
		l.log.Debug("delete of a failed wal record failed", zap.String("key", key), zap.Error(err))
	}
}

// Covered says records with seq <= n are in a published checkpoint: the
// cleaning goroutine deletes them (those found at Open and those appended),
// off the caller's path.
func (l *Log) Covered(n uint64) {
	l.mu.Lock()
	l.covered = max(l.covered, n)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default: // a pass is already due and will see n
	}
}

func (l *Log) cleanLoop(ctx context.Context) {
	defer l.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		}
		l.deleteCovered(ctx)
	}
}

// deleteCovered deletes the records known and covered. A failed delete is
// kept for the next pass: a record left behind harms nothing.
func (l *Log) deleteCovered(ctx context.Context) {
	l.mu.Lock()
	var now, keep []uint64
	for _, s := range l.toDelete {
		if s <= l.covered {
			now = append(now, s)
		} else {
			keep = append(keep, s)
		}
	}
	l.toDelete = keep
	l.mu.Unlock()
	slices.Sort(now)
	var failed []uint64
	for _, s := range now {
		if err := l.st.Delete(ctx, RecordKey(l.prefix, s)); err != nil {
			l.log.Debug("delete of a covered wal record failed", zap.String("prefix", l.prefix), zap.Uint64("seq", s), zap.Error(err))
			failed = append(failed, s)
		}
	}
	if len(failed) > 0 {
		l.mu.Lock()
		l.toDelete = append(l.toDelete, failed...)
		l.mu.Unlock()
	}
}

func (l *Log) renewLoop(ctx context.Context) {
	defer l.wg.Done()
	every := l.lease.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.poke:
		}
		l.mu.Lock()
		lost := l.leaseLost
		l.mu.Unlock()
		// A renewal that hangs must not outlast the lease it extends.
		rctx, cancel := context.WithTimeout(ctx, every)
		err := lost
		if lost == nil {
			if err = l.lease.renew(rctx); err == nil {
				l.renewed(l.lease.sent)
			}
		}
		if errors.Is(err, ErrLeaseLost) {
			err = l.takeBack(rctx, err)
		}
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrLeaseLost) {
			l.log.Debug("wal lease renewal failed; retrying at the next tick", zap.String("prefix", l.prefix), zap.Error(err))
		}
		l.mu.Lock()
		final := l.lostFinal
		l.mu.Unlock()
		if final {
			return
		}
	}
}

// takeBack follows the loss of the lease (lost says how): it tries to take
// the lease back (retake); appends go on meanwhile (records are kept apart
// by their names, not by the lease). If it cannot, appends fail with
// ErrLeaseLost until a later try succeeds, or for good when another writer
// appended or changed the file.
func (l *Log) takeBack(ctx context.Context, lost error) error {
	final, err := l.retake(ctx)
	l.mu.Lock()
	// Records stored after the lease could be proven ours may have landed
	// after a taker listed the log: whatever happens next, they fail.
	late := l.takeLateLocked()
	switch {
	case err == nil:
		l.log.Info("took the wal lease back: no other writer wrote meanwhile", zap.String("prefix", l.prefix), zap.NamedError("lost", lost))
		l.leaseLost = nil
		l.valid = l.lease.sent.Add(l.lease.validFor())
	case final:
		l.log.Warn("wal lease lost; appends fail from now on", zap.String("prefix", l.prefix), zap.Error(err))
		l.leaseLost, l.lostFinal = err, true
	default:
		if l.leaseLost == nil {
			l.log.Warn("wal lease taken by another writer; appends fail until it is let go", zap.String("prefix", l.prefix), zap.Error(err))
		}
		l.leaseLost = err
	}
	l.cond.Broadcast()
	l.mu.Unlock()
	// Not bounded by the renewal's deadline, which the take-back may have
	// spent: a failed record left is one a replay may apply.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.lease.ttl)
	defer cancel()
	l.failLate(dctx, late, lost)
	return err
}

// renewed follows a renewal sent at sent that landed: the lease is ours
// until sent plus validFor, and the records stored before sent are
// acknowledged (no taker came between their landing and the renewal's).
func (l *Log) renewed(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.valid = sent.Add(l.lease.validFor())
	keep := l.late[:0]
	for _, b := range l.late {
		if b.stored.Before(sent) {
			l.finishLocked(b, b.n, nil)
		} else {
			keep = append(keep, b)
		}
	}
	clear(l.late[len(keep):])
	l.late = keep
	if len(keep) > 0 {
		l.renewNow() // stored while this renewal was on its way
	}
}

// takeLateLocked takes the records waiting in late, to be failed
// (failLate): they stay counted in flight until then.
func (l *Log) takeLateLocked() []*batch {
	late := l.late
	l.late = nil
	return late
}

// failLate deletes the records of late, then fails their Appends (cause
// wraps ErrLeaseLost): a write reported failed is gone from the log by
// then, unless the delete failed too. Called without mu.
func (l *Log) failLate(ctx context.Context, late []*batch, cause error) {
	if len(late) == 0 {
		return
	}
	for _, b := range late {
		l.dropFailed(ctx, RecordKey(l.prefix, b.seq))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range late {
		l.finishLocked(b, 0, l.lateErr(b.seq, cause))
	}
}

// retake takes back the lease if no live writer holds it and no one else
// wrote since this log lost it: no record this log did not number is
// stored, and the Retake option agrees. final says the lease is lost for
// good. Every error is an ErrLeaseLost.
func (l *Log) retake(ctx context.Context) (final bool, err error) {
	ls := l.lease
	lost := func(final bool, format string, a ...any) (bool, error) {
		return final, fmt.Errorf("wal lease %s: %s: %w", ls.key, fmt.Sprintf(format, a...), ErrLeaseLost)
	}
	b, info, err := staging.GetLimited(ctx, ls.st, ls.key, maxOwnerBytes)
	exists := true
	switch {
	case errors.Is(err, staging.ErrNotFound):
		exists = false
	case err != nil:
		// Both wrapped: callers test ErrLeaseLost, and ErrTooLarge tells a
		// bad owner object from an outage.
		return false, fmt.Errorf("wal lease %s: read to take it back: %w: %w", ls.key, err, ErrLeaseLost)
	}
	now := time.Now()
	var o OwnerInfo
	if exists {
		var perr error
		o, perr = parseOwner(b)
		switch {
		case perr == nil && o.Writer == ls.id:
			ls.etag = info.ETag // ours after all (a renewal whose answer was lost)
			return false, nil
		case perr != nil && !now.After(info.LastModified.Add(ls.ttl)):
			return lost(false, "does not parse (%v); waiting for it to age", perr)
		case perr == nil && !ls.me.stale(o, now):
			return lost(false, "held by writer %s (pid %d on host %s) until %s", o.Writer, o.PID, o.Host, o.Expires.Format(time.RFC3339Nano))
		}
	}
	// Not while a record of this log is on its way: a taker that listed
	// the log before it landed numbered its own from the same place, or
	// published a checkpoint covering its number; landing after the lease
	// was taken back, it would be acknowledged and never read. Once its PUT
	// has ended (failed, as the lease is lost meanwhile), the next try
	// decides.
	l.mu.Lock()
	inflight := l.inflight
	l.mu.Unlock()
	if inflight > 0 {
		return lost(false, "%d records of this log on their way; waiting for them to end", inflight)
	}
	seqs, err := List(ctx, ls.st, l.prefix)
	if err != nil {
		return lost(false, "%v", err)
	}
	// Read after the listing: every record of this log that it found had
	// its seq, below next, before it was stored.
	l.mu.Lock()
	through := l.next - 1
	l.mu.Unlock()
	if n := len(seqs); n > 0 && seqs[n-1] > through {
		return lost(true, "taken by another writer, which appended record %d", seqs[n-1])
	}
	if l.retakeOK != nil {
		ok, err := l.retakeOK(ctx, through)
		if err != nil {
			return lost(false, "%v", err)
		}
		if !ok {
			return lost(true, "taken by another writer, and the file changed meanwhile")
		}
	}
	cond := staging.Conditions{IfMatch: info.ETag}
	if !exists {
		cond = staging.Conditions{IfNoneMatch: true}
	}
	put, err := ls.st.Put(ctx, ls.key, ls.body(now), staging.PutOptions{Conditions: cond})
	if err != nil {
		return lost(false, "take it back: %v", err)
	}
	ls.etag, ls.sent = put.ETag, now
	return false, nil
}

// Closing says that the writer expects no more changes and will Close soon:
// the owner object is rewritten at once (by the renewing goroutine) to say
// it is closing, so that a writer of another mount that finds the lease
// held waits for Close to let it go (Options.BusyWait) instead of failing.
// The file calls it when its last handle open for writing closes, before
// it waits for its last publish. Appends still work, and the mark stays
// until NotClosing: it is only a hint, and a writer that waits for it in
// vain fails after BusyWait as it would have at once.
func (l *Log) Closing() {
	if l.lease.closing.Swap(true) {
		return
	}
	l.renewNow()
}

// NotClosing takes Closing back: the writer goes on writing after all (a
// change came while it waited for its last publish). The owner object
// says so at once.
func (l *Log) NotClosing() {
	if !l.lease.closing.Swap(false) {
		return
	}
	l.renewNow()
}

// renewNow wakes the lease's renewer without waiting for it: it takes a
// lost lease back, or writes the owner object's new closing mark, at once.
func (l *Log) renewNow() {
	select {
	case l.poke <- struct{}{}:
	default:
	}
}

// Close waits for the appends in flight, deletes what is covered (best
// effort, bounded by ctx), stops the goroutines and releases the lease if it
// is still ours. If ctx ends before the appends in flight, the lease is left
// to expire (their PUTs still run under it). It is idempotent: later calls
// return the first one's result.
func (l *Log) Close(ctx context.Context) error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closeDone {
		return l.closeErr
	}
	l.closeDone = true

	l.mu.Lock()
	l.closed = true
	var drained chan struct{}
	if len(l.pending) > 0 || l.inflight > 0 {
		l.drained = make(chan struct{})
		drained = l.drained
	}
	l.mu.Unlock()

	var errs []error
	idle := true
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			idle = false
			errs = append(errs, fmt.Errorf("close wal of %s: waiting for appends in flight: %w", l.prefix, ctx.Err()))
		}
	}
	l.stop()
	l.wg.Wait()
	// Records still waiting for a renewal to be acknowledged (the wait for
	// them ended first) cannot be proven held any more.
	l.mu.Lock()
	l.stopped = true
	late := l.takeLateLocked()
	l.mu.Unlock()
	l.failLate(ctx, late, fmt.Errorf("wal of %s closed before a renewal proved its lease: %w", l.prefix, ErrLeaseLost))

	// The lease goes before the covered records: a writer waiting for it
	// numbers its records past them (past the head's), so deleting them
	// after it took over harms nothing.
	l.mu.Lock()
	lost := l.leaseLost
	l.mu.Unlock()
	if idle && lost == nil {
		if err := l.lease.release(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close wal of %s: %w", l.prefix, err))
		}
	}
	l.deleteCovered(ctx)
	l.closeErr = errors.Join(errs...)
	return l.closeErr
}

// SetNext makes the next record appended take a seq of at least n: a writer
// that took the lease learns from the file's head which records a published
// checkpoint already holds, and must not reuse their numbers even when the
// records themselves were deleted.
func (l *Log) SetNext(n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next = max(l.next, n)
}

// Abandon stops the log as a killed process would stop it: later appends
// fail with ErrClosed, the goroutines stop, nothing is deleted and the lease
// is left to expire. Recovery tests use it to leave a log behind.
func (l *Log) Abandon() {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closeDone {
		return
	}
	l.closeDone = true
	l.closeErr = fmt.Errorf("wal of %s: %w", l.prefix, ErrClosed)
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	l.stop()
	l.wg.Wait()
	// A killed writer acknowledges nothing more (and deletes nothing).
	l.mu.Lock()
	l.stopped = true
	cause := fmt.Errorf("wal of %s abandoned: %w", l.prefix, ErrLeaseLost)
	for _, b := range l.takeLateLocked() {
		l.finishLocked(b, 0, l.lateErr(b.seq, cause))
	}
	l.mu.Unlock()
}

// After reports whether a record with a seq above seq is stored (one List):
// whether a file has changes to replay.
func After(ctx context.Context, st staging.Store, prefix string, seq uint64) (bool, error) {
	page, err := st.List(ctx, prefix+Dir, RecordKey(prefix, seq), 1)
	if err != nil {
		return false, fmt.Errorf("look for wal records of %s after %d: %w", prefix, seq, err)
	}
	for _, o := range page.Objects {
		if _, ok := ParseRecordName(strings.TrimPrefix(o.Key, prefix+Dir)); ok {
			return true, nil
		}
	}
	return false, nil
}

// Exists reports whether anything is stored under prefix+Dir (one List).
func Exists(ctx context.Context, st staging.Store, prefix string) (bool, error) {
	page, err := st.List(ctx, prefix+Dir, "", 1)
	if err != nil {
		return false, fmt.Errorf("look for a wal under %s: %w", prefix, err)
	}
	return len(page.Objects) > 0, nil
}

// List returns the seqs of the records under prefix+Dir, ascending. It takes
// no lease: what it returns may change under a live writer.
func List(ctx context.Context, st staging.Store, prefix string) ([]uint64, error) {
	dir := prefix + Dir
	objs, err := staging.ListAll(ctx, st, dir)
	if err != nil {
		return nil, fmt.Errorf("list wal records of %s: %w", prefix, err)
	}
	var seqs []uint64
	for _, o := range objs {
		if seq, ok := ParseRecordName(strings.TrimPrefix(o.Key, dir)); ok {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

// ReadRecord reads and decodes record seq of the file under prefix (no
// lease needed): one GET for a record of up to 64 KiB, two for a larger one.
// An object over MaxRecordSize is refused with a *staging.TooLargeError
// naming its key (errors.Is(err, staging.ErrTooLarge)) before its body is
// read.
func ReadRecord(ctx context.Context, st staging.Store, prefix string, tag, seq uint64) (Record, error) {
	key := RecordKey(prefix, seq)
	b, _, err := staging.GetLimited(ctx, st, key, MaxRecordSize)
	if err != nil {
		return Record{}, fmt.Errorf("read wal record %d of %s: %w", seq, prefix, err)
	}
	return Decode(key, seq, tag, b)
}
