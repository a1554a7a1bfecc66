package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ckptfs/ckptfs/staging"
)

// Options tune a Namespace. The zero value is the default.
type Options struct {
	// CompactEvery: a mount writes a snapshot once the ops it applied since
	// the newest snapshot it knows reach max(CompactEvery, nodes/4), so that
	// the cost of snapshots per op does not grow with the namespace. 0 means
	// 1000.
	CompactEvery uint64
	// PutAttempts bounds the sends of one entry whose outcome is unknown (a
	// network error, not a refusal). 0 means 3.
	PutAttempts int
	// Now is the clock of change times. nil means time.Now.
	Now func() time.Time
	// Logger receives what does not fail an operation (a snapshot that
	// could not be written). nil means no logging.
	Logger *zap.Logger
	// FinishTimeout bounds a change once its first log entry send has begun.
	// From then on the change no longer follows the caller's cancellation
	// (an interrupted caller must not be told a change failed that may have
	// landed): it lands, is known not to have, or fails after this long.
	// It also bounds each request of the background work (trimming).
	// 0 means 3 minutes.
	FinishTimeout time.Duration
	// TailTrust: for this long after the mount last confirmed that its state
	// is the end of the log, a change appends at the next seq without
	// reading the log first, and Refresh reads one entry instead of listing
	// (see the package doc). It must be at most TrimGrace/4. 0 means 1
	// minute.
	TailTrust time.Duration
	// TrimGrace: log entries a snapshot covers, and snapshots older than the
	// newest, are deleted once the store's LastModified of them is older than
	// this. 0 means 10 minutes.
	TrimGrace time.Duration
	// Clock is the clock of TailTrust and TrimGrace (compared with the
	// store's LastModified). nil means time.Now.
	Clock func() time.Time
}

// Owner is the owner of a new node.
type Owner struct {
	Uid uint32
	Gid uint32
}

// SetAttr is a change of attributes; nil fields are left alone. Size is not
// here: it is the file's own (its head object).
type SetAttr struct {
	Mode  *uint32
	Uid   *uint32
	Gid   *uint32
	Atime *time.Time
	Mtime *time.Time
	// Ctime: nil sets it to the time of the change, as POSIX does for any
	// attribute change.
	Ctime *time.Time
}

// Namespace is the namespace of one mount root, kept in step with the log.
// It is safe for concurrent use.
//
// Locking: appendMu serialises everything that applies the log (the
// committer, the apply step of Refresh) and is held by the committer across
// the store calls of the append protocol; mu guards the state and is held
// only in memory, so reads (Lookup, GetNode, ReadDir, ...) never wait for the
// network. Order: appendMu before mu before qmu. The state changes only with
// both held, so a holder of appendMu may read it without mu. qmu guards the
// queue of changes waiting for the committer, trimMu the trimming requests.
type Namespace struct {
	store staging.Store
	root  string
	opts  Options
	log   *zap.Logger

	appendMu sync.Mutex
	mu       sync.RWMutex
	st       *state // GUARDED_BY(mu); written only with appendMu held too
	// shown holds the changes made with SetAttrLater that have not landed
	// yet, by node, in the order they were made; GUARDED_BY(mu).
	shown map[Ino][]*pending
	// tailAt is when this mount last confirmed that st.seq is the last
	// entry of the log (zero: never); GUARDED_BY(mu), written only with
	// appendMu held too.
	tailAt time.Time
	// sinceSnap counts the ops applied since the newest snapshot this mount
	// knows; GUARDED_BY(appendMu).
	sinceSnap uint64

	qmu        sync.Mutex
	queue      []*pending // GUARDED_BY(qmu): changes not taken by the committer
	committing bool       // GUARDED_BY(qmu): the committer runs
	// laterTimer starts the committer for changes made with SetAttrLater
	// that nothing else sent (see later.go); GUARDED_BY(qmu).
	laterTimer *time.Timer

	trimMu   sync.Mutex
	trimAt   uint64 // GUARDED_BY(trimMu): the snapshot of a trim pass asked for
	trimming bool   // GUARDED_BY(trimMu): the trimmer runs

	// bg tracks the committer and the trimmer; ctx ends the trimmer (Close).
	bg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// Open loads the namespace under root: the newest snapshot, then the log
// entries after it. An empty root is an empty namespace (the root directory
// only, mode 0755, owned by 0:0; set its attributes with SetAttr).
func Open(ctx context.Context, store staging.Store, root string, opts Options) (*Namespace, error) {
	if opts.CompactEvery == 0 {
		opts.CompactEvery = 1000
	}
	if opts.PutAttempts <= 0 {
		opts.PutAttempts = 3
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.FinishTimeout <= 0 {
		opts.FinishTimeout = 3 * time.Minute
	}
	if opts.TailTrust <= 0 {
		opts.TailTrust = time.Minute
	}
	if opts.TrimGrace <= 0 {
		opts.TrimGrace = 10 * time.Minute
	}
	if opts.TailTrust > opts.TrimGrace/4 {
		return nil, fmt.Errorf("namespace options: TailTrust %v is over a quarter of TrimGrace %v: an append could land at a seq that was used and trimmed", opts.TailTrust, opts.TrimGrace)
	}
	ns := &Namespace{store: store, root: strings.Trim(root, "/"), opts: opts, log: opts.Logger}
	if ns.log == nil {
		ns.log = zap.NewNop()
	}
	st, err := ns.loadSnapshot(ctx, 0)
	if err != nil {
		return nil, err
	}
	ns.st = st
	ns.appendMu.Lock()
	defer ns.appendMu.Unlock()
	if err := ns.refreshLocked(ctx); err != nil {
		return nil, err
	}
	// Nothing runs in the background yet: no goroutine to stop here.
	ns.ctx, ns.cancel = context.WithCancel(context.Background())
	return ns, nil
}

func (ns *Namespace) logPrefix() string  { return prefix(ns.root) + logDir }
func (ns *Namespace) snapPrefix() string { return prefix(ns.root) + snapDir }

// newestSnapshot returns the seq of the newest snapshot, 0 if none. There
// are few: the older ones are trimmed.
func (ns *Namespace) newestSnapshot(ctx context.Context) (uint64, error) {
	objs, err := staging.ListAll(ctx, ns.store, ns.snapPrefix())
	if err != nil {
		return 0, fmt.Errorf("list namespace snapshots: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		seq, ok := parseSeq(o.Key, ns.snapPrefix())
		if !ok {
			return 0, corruptf(o.Key, "not a snapshot name")
		}
		newest = max(newest, seq)
	}
	return newest, nil
}

// snapshotAttempts bounds the reads of a newest snapshot that is trimmed
// between listing and reading it (a newer one was written meanwhile).
const snapshotAttempts = 3

// loadSnapshot reads the newest snapshot; with none, or none newer than
// after, it returns a fresh state (after == 0) or nil.
func (ns *Namespace) loadSnapshot(ctx context.Context, after uint64) (*state, error) {
	for attempt := 1; ; attempt++ {
		seq, err := ns.newestSnapshot(ctx)
		if err != nil {
			return nil, err
		}
		if seq == 0 || seq <= after {
			if after == 0 {
				return newState(), nil
			}
			return nil, nil
		}
		key := SnapKey(ns.root, seq)
		data, _, err := staging.GetLimited(ctx, ns.store, key, envHeaderLen+maxObjectBody)
		if errors.Is(err, staging.ErrNotFound) && attempt < snapshotAttempts {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read namespace snapshot %s: %w", key, err)
		}
		return decodeSnapshot(key, seq, data)
	}
}

// trustedLocked reports whether the tail confirmation is young enough, at
// clock reading now, to append or refresh without listing. mu or appendMu
// held.
func (ns *Namespace) trustedLocked(now time.Time) bool {
	return !ns.tailAt.IsZero() && now.Sub(ns.tailAt) < ns.opts.TailTrust
}

// confirmLocked records that st.seq was the last entry of the log as of
// clock reading at. appendMu held.
func (ns *Namespace) confirmLocked(at time.Time) {
	ns.mu.Lock()
	if at.After(ns.tailAt) {
		ns.tailAt = at
	}
	ns.mu.Unlock()
}

// Refresh applies the log entries written since the last refresh or change.
//
// With a trusted tail (see Options.TailTrust) it reads entry seq+1: when
// nothing changed that one GET is all it costs, and it confirms the tail.
// Otherwise, or once it found an entry, it lists the log after the state
// (which also sees a gap left by trimming and loads the snapshot then).
// Seq tells whether anything changed.
//
// It holds no lock across its store calls: it reads the entries after the
// state it saw, then applies them under appendMu if no change moved the
// state meanwhile (a change reads what it missed itself). A refresh stuck on
// the store thus delays no change of this mount, and no read.
func (ns *Namespace) Refresh(ctx context.Context) error {
	ns.mu.RLock()
	applied := ns.st.seq
	trusted := ns.trustedLocked(ns.opts.Clock())
	ns.mu.RUnlock()
	if !trusted {
		return ns.refreshList(ctx)
	}
	sent := ns.opts.Clock()
	e, err := ns.readEntry(ctx, applied+1)
	if errors.Is(err, staging.ErrNotFound) {
		// Not there while the confirmation before was still trusted: an
		// entry written since that confirmation cannot have been trimmed yet
		// (see the package doc), so seq+1 is free, as of sent.
		ns.appendMu.Lock()
		if ns.st.seq == applied && ns.trustedLocked(sent) {
			ns.confirmLocked(sent)
		}
		ns.appendMu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	ns.appendMu.Lock()
	moved := ns.st.seq != applied
	if !moved {
		err = ns.applyEntry(e)
	}
	ns.appendMu.Unlock()
	if err != nil || moved {
		return err
	}
	// Another mount is writing: list the rest at once rather than GET one
	// entry per round trip; the listing also confirms the tail.
	return ns.refreshList(ctx)
}

// refreshList is Refresh the listing way, which sees gaps and confirms the
// tail whatever the age of the last confirmation.
func (ns *Namespace) refreshList(ctx context.Context) error {
	for {
		ns.mu.RLock()
		applied := ns.st.seq
		ns.mu.RUnlock()
		sent := ns.opts.Clock()
		page, seqs, err := ns.listAfter(ctx, applied)
		if err != nil {
			return err
		}
		if len(page.Objects) > 0 && len(seqs) == 0 {
			// A gap: entries a snapshot covers were trimmed; the locked
			// path loads the snapshot.
			ns.appendMu.Lock()
			err := ns.refreshLocked(ctx)
			ns.appendMu.Unlock()
			return err
		}
		entries, err := ns.readEntries(ctx, seqs)
		if err != nil {
			return err
		}
		last := !page.Truncated && len(seqs) == len(page.Objects)
		ns.appendMu.Lock()
		moved := ns.st.seq != applied
		if !moved {
			for _, e := range entries {
				if err := ns.applyEntry(e); err != nil {
					ns.appendMu.Unlock()
					return err
				}
			}
			if last {
				ns.confirmLocked(sent)
			}
		}
		ns.appendMu.Unlock()
		if moved || last {
			return nil
		}
	}
}

// listAfter lists a page of the log after entry applied and the sequence
// numbers in it that follow applied without a gap.
func (ns *Namespace) listAfter(ctx context.Context, applied uint64) (staging.ListPage, []uint64, error) {
	page, err := ns.store.List(ctx, ns.logPrefix(), LogKey(ns.root, applied), 1000)
	if err != nil {
		return page, nil, fmt.Errorf("list namespace log after %d: %w", applied, err)
	}
	seqs, err := ns.contiguous(page, applied)
	return page, seqs, err
}

// contiguous returns the sequence numbers of page that follow applied
// without a gap.
func (ns *Namespace) contiguous(page staging.ListPage, applied uint64) ([]uint64, error) {
	seqs := make([]uint64, 0, len(page.Objects))
	for _, o := range page.Objects {
		seq, ok := parseSeq(o.Key, ns.logPrefix())
		if !ok {
			return nil, corruptf(o.Key, "not a log entry name")
		}
		if seq != applied+uint64(len(seqs))+1 {
			break // a gap: dealt with when it is first
		}
		seqs = append(seqs, seq)
	}
	return seqs, nil
}

// refreshLocked reads and applies every entry after st.seq, and confirms the
// tail. Entries are contiguous; a gap is only legitimate when entries that a
// snapshot covers were trimmed, and then the snapshot replaces the state.
func (ns *Namespace) refreshLocked(ctx context.Context) error {
	for {
		applied := ns.st.seq
		sent := ns.opts.Clock()
		page, seqs, err := ns.listAfter(ctx, applied)
		if err != nil {
			return err
		}
		if len(page.Objects) == 0 {
			ns.confirmLocked(sent)
			return nil
		}
		if len(seqs) == 0 {
			first, _ := parseSeq(page.Objects[0].Key, ns.logPrefix())
			if err := ns.skipGap(ctx, first); err != nil {
				return err
			}
			continue
		}
		entries, err := ns.readEntries(ctx, seqs)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := ns.applyEntry(e); err != nil {
				return err
			}
		}
		if !page.Truncated && len(seqs) == len(page.Objects) {
			ns.confirmLocked(sent)
			return nil
		}
	}
}

// readEntries reads the entries seqs, several at once: a mount far behind
// waits for the link's latency once per batch, not once per entry.
func (ns *Namespace) readEntries(ctx context.Context, seqs []uint64) ([]*entry, error) {
	out := make([]*entry, len(seqs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readParallelism)
	for i, seq := range seqs {
		g.Go(func() error {
			e, err := ns.readEntry(gctx, seq)
			out[i] = e
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// readParallelism bounds the entries read at once by a refresh.
const readParallelism = 16

// skipGap handles a listing that resumes at seq past st.seq+1. appendMu
// held. A listing is no proof that entries are missing: one taken while
// entries are created may show a later entry without an earlier one (the
// dir store's folder read, an S3 listing under way). So entry st.seq+1 is
// read by name first: there, it is applied and the caller lists again.
// Missing, it was trimmed, and a snapshot covers it: the newest replaces
// the state if it is newer. With none newer, the log is listed and the
// entry read by name once more before the gap is believed: the log is
// corrupt (entries missing, no snapshot covering them).
func (ns *Namespace) skipGap(ctx context.Context, seq uint64) error {
	for try := 0; ; try++ {
		next := ns.st.seq + 1
		e, err := ns.readEntry(ctx, next)
		if err == nil {
			return ns.applyEntry(e)
		}
		if !errors.Is(err, staging.ErrNotFound) {
			return err
		}
		st, err := ns.loadSnapshot(ctx, ns.st.seq)
		if err != nil {
			return err
		}
		if st != nil {
			ns.mu.Lock()
			ns.st = st
			ns.mu.Unlock()
			ns.sinceSnap = 0
			return nil
		}
		if try > 0 {
			return corruptf(LogKey(ns.root, next), "log entries %d..%d missing and no snapshot covers them", next, seq-1)
		}
		page, seqs, err := ns.listAfter(ctx, ns.st.seq)
		if err != nil {
			return err
		}
		if len(seqs) > 0 || len(page.Objects) == 0 {
			return nil // no gap any more: the caller lists again
		}
		seq, _ = parseSeq(page.Objects[0].Key, ns.logPrefix())
	}
}

func (ns *Namespace) readEntry(ctx context.Context, seq uint64) (*entry, error) {
	key := LogKey(ns.root, seq)
	data, _, err := staging.GetLimited(ctx, ns.store, key, envHeaderLen+maxObjectBody)
	if err != nil {
		return nil, fmt.Errorf("read namespace entry %s: %w", key, err)
	}
	return decodeEntry(key, seq, data)
}

// applyEntry applies an entry read from the log. One that does not apply is
// corruption: its writer checked it against this very state. appendMu held.
func (ns *Namespace) applyEntry(e *entry) error {
	if e.Op != nil {
		// One op is checked outside mu, so that reads wait only for the
		// change itself.
		if err := ns.st.apply(e, true); err != nil {
			return corruptf(LogKey(ns.root, e.Seq), "does not apply: %v", err)
		}
	}
	ns.mu.Lock()
	err := ns.st.apply(e, false) // all or nothing
	ns.mu.Unlock()
	if err != nil {
		return corruptf(LogKey(ns.root, e.Seq), "does not apply: %v", err)
	}
	ns.sinceSnap += uint64(len(e.ops()))
	return nil
}

// hook runs with the state just before (before) or after (done) a change's
// op is applied, under mu; ino is the op's ino base (the node it creates).
type hook func(st *state, ino Ino)

// pending is a change waiting for, or in, a log entry.
type pending struct {
	o      op
	size   int // bytes of o encoded
	before hook
	done   hook
	ctx    context.Context
	res    chan error // the outcome; buffered, written once

	// GUARDED_BY(Namespace.qmu)
	sent    bool // in an entry being sent: the caller waits for the outcome
	dropped bool // the caller left before it was sent: it never will be

	hookMu sync.Mutex
	left   bool // GUARDED_BY(hookMu): the caller left; its hooks write nowhere

	// A change made with SetAttrLater: shown before it lands (see
	// later.go); fin is closed once it has landed or failed, with err.
	later *laterAttr
	fin   chan struct{}
	err   error // written before fin is closed
}

// finish answers the change: once, whatever the outcome.
func (p *pending) finish(err error) {
	p.res <- err
	if p.fin != nil {
		p.err = err
		close(p.fin)
	}
}

func (p *pending) run(h hook, st *state, ino Ino) {
	if h == nil {
		return
	}
	p.hookMu.Lock()
	defer p.hookMu.Unlock()
	if !p.left {
		h(st, ino)
	}
}

// Group commit bounds: the ops, and their encoded bytes, of one entry.
const (
	maxBatchOps   = 1024
	maxBatchBytes = 1 << 20
)

// change appends o to the log and applies it; done, if not nil, runs with
// the state just after the change, under mu.
func (ns *Namespace) change(ctx context.Context, o op, done hook) error {
	return ns.changeHooked(ctx, o, nil, done)
}

// changeHooked is change with before, if not nil, run under mu with the
// state just before the change is applied.
//
// The change is queued for the committer (see commit), a goroutine owned by
// the namespace (Wait waits for it), so that changes made meanwhile share
// one log entry. A caller whose context ends while its change is only
// queued gets the context's error and the change is dropped: nothing
// changed. Once the change is in an entry being sent the caller waits for
// the real outcome, unless it is gone (see WithGone: a process being
// killed): then it returns at once while the change finishes, landed or
// not, as it would have with the caller waiting.
func (ns *Namespace) changeHooked(ctx context.Context, o op, before, done hook) error {
	if err := ctx.Err(); err != nil {
		return err // nothing sent
	}
	p := &pending{o: o, size: opSize(&o), before: before, done: done, ctx: ctx, res: make(chan error, 1)}
	ns.enqueue(p)
	select {
	case err := <-p.res:
		return err
	case <-ctx.Done():
	}
	ns.qmu.Lock()
	if !p.sent {
		p.dropped = true
		if i := indexOf(ns.queue, p); i >= 0 {
			ns.queue = append(ns.queue[:i], ns.queue[i+1:]...)
		}
		ns.qmu.Unlock()
		return ctx.Err()
	}
	ns.qmu.Unlock()
	gone, _ := ctx.Value(goneKey{}).(func() bool)
	if gone == nil {
		return <-p.res
	}
	for {
		select {
		case err := <-p.res:
			return err
		case <-time.After(goneCheck):
		}
		if gone() {
			p.hookMu.Lock()
			p.left = true
			p.hookMu.Unlock()
			ns.log.Info("caller gone; its change finishes without it", zap.String("op", o.Kind))
			return fmt.Errorf("%s: %w", o.Kind, context.Canceled)
		}
	}
}

// enqueue queues p for the committer, starting it if it is not running.
func (ns *Namespace) enqueue(p *pending) {
	ns.qmu.Lock()
	ns.queue = append(ns.queue, p)
	if !ns.committing {
		ns.committing = true
		ns.bg.Add(1)
		go ns.commitLoop()
	}
	ns.qmu.Unlock()
}

func indexOf(q []*pending, p *pending) int {
	for i, x := range q {
		if x == p {
			return i
		}
	}
	return -1
}

func opSize(o *op) int {
	b, err := json.Marshal(o)
	if err != nil {
		// Every field has a total encoding; failing here is a bug.
		panic(fmt.Sprintf("namespace: encode op: %v", err))
	}
	return len(b)
}

// goneCheck is how often a change whose caller was interrupted asks whether
// the caller is gone.
const goneCheck = 10 * time.Millisecond

type goneKey struct{}

// WithGone returns ctx carrying gone, which says whether the caller has left
// for good (a process with a fatal signal pending): once ctx ends and gone
// says so, a change returns at once and finishes without its caller.
func WithGone(ctx context.Context, gone func() bool) context.Context {
	return context.WithValue(ctx, goneKey{}, gone)
}

// Wait waits for the changes queued or in flight (those whose callers left
// too, see WithGone; each is bounded by Options.FinishTimeout) and for a
// trimming pass under way.
func (ns *Namespace) Wait() { ns.bg.Wait() }

// Close stops trimming and waits as Wait does. The namespace stays readable;
// changes still work but no longer trim the log.
func (ns *Namespace) Close() error {
	ns.cancel()
	ns.Kick() // changes made with SetAttrLater and not sent yet
	ns.bg.Wait()
	return nil
}

// commitLoop is the committer: while changes are queued it takes them, at
// most maxBatchOps or maxBatchBytes at once, and commits them in one entry.
func (ns *Namespace) commitLoop() {
	defer ns.bg.Done()
	for {
		ns.qmu.Lock()
		n, bytes := 0, 0
		for n < len(ns.queue) && n < maxBatchOps && (n == 0 || bytes+ns.queue[n].size <= maxBatchBytes) {
			bytes += ns.queue[n].size
			n++
		}
		if n == 0 {
			ns.committing = false
			ns.qmu.Unlock()
			return
		}
		batch := append([]*pending(nil), ns.queue[:n]...)
		ns.queue = append(ns.queue[:0], ns.queue[n:]...)
		ns.qmu.Unlock()
		ns.commit(batch)
	}
}

func answer(ps []*pending, err error) {
	for _, p := range ps {
		p.finish(err)
	}
}

// commit appends one entry holding the changes of batch that apply, and
// applies it.
func (ns *Namespace) commit(batch []*pending) {
	ns.appendMu.Lock()
	snap := ns.commitLocked(batch)
	ns.appendMu.Unlock()
	if snap != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ns.opts.FinishTimeout)
		ns.writeSnapshot(ctx, snap.seq, snap.data)
		cancel()
	}
}

// maxConflicts bounds the sends of one entry refused by a write of the same
// key that is not visible yet.
const maxConflicts = 8

// backoff waits before the attempt-th resend: 10 ms, doubling, at most
// 640 ms. appendMu stays held: the next entry of this mount could only
// wait for this one anyway (its changes queue meanwhile).
func backoff(ctx context.Context, attempt int) error {
	d := 10 * time.Millisecond << min(attempt-1, 6)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type pendingSnapshot struct {
	seq  uint64
	data []byte
}

// seal takes the changes of batch whose callers are still there into the
// entry about to be sent: from now on they wait for its outcome. A change
// whose caller's context ended is dropped and answered with its error.
func (ns *Namespace) seal(batch []*pending) []*pending {
	ns.qmu.Lock()
	defer ns.qmu.Unlock()
	live := batch[:0:0]
	for _, p := range batch {
		switch {
		case p.dropped:
		case p.ctx.Err() != nil:
			p.dropped = true
			p.finish(p.ctx.Err())
		default:
			p.sent = true
			live = append(live, p)
		}
	}
	return live
}

// trial checks the changes of sealed in order, each against the state the
// ones before it leave, as the entry at st.seq+1 (the state is changed under
// mu and undone). It returns the changes that apply, in order, with their
// ops, and the error of each that does not (errs[i] for sealed[i]).
func (ns *Namespace) trial(sealed []*pending, t int64) (ok []*pending, ops []op, errs []error) {
	seq := ns.st.seq + 1
	errs = make([]error, len(sealed))
	ns.mu.Lock()
	ns.st.j = &journal{}
	for i, p := range sealed {
		if errs[i] = ns.st.applyOp(&p.o, inoOf(seq, len(ops)), t, false); errs[i] != nil {
			continue
		}
		ok = append(ok, p)
		ops = append(ops, p.o)
	}
	ns.st.rollback()
	ns.mu.Unlock()
	return ok, ops, errs
}

// answerFailed answers the changes of sealed that did not apply with their
// errors.
func answerFailed(sealed []*pending, errs []error) {
	for i, p := range sealed {
		if errs[i] != nil {
			p.finish(errs[i])
		}
	}
}

// verifyTailLocked makes sure the state is the end of the log, so that a
// change refused by its check is refused by the log's state and not by a
// stale one: with a trusted tail one GET of st.seq+1, otherwise a listing.
// It reports whether the state moved (then check again).
func (ns *Namespace) verifyTailLocked(ctx context.Context) (moved bool, err error) {
	applied := ns.st.seq
	if sent := ns.opts.Clock(); ns.trustedLocked(sent) {
		e, err := ns.readEntry(ctx, applied+1)
		if errors.Is(err, staging.ErrNotFound) {
			ns.confirmLocked(sent)
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if err := ns.applyEntry(e); err != nil {
			return false, err
		}
	}
	if err := ns.refreshLocked(ctx); err != nil {
		return false, err
	}
	return ns.st.seq != applied, nil
}

// commitLocked is the append protocol, with appendMu held throughout:
// unless the tail is trusted (Options.TailTrust), read the entries this mount
// missed; check the changes against the state (trial); create entry seq =
// state+1 with If-None-Match. On ErrPrecondition another writer has seq: read
// it — if it carries our entry id, an earlier send of ours landed and we are
// done — else apply it, read on, and try again at the next seq (the changes
// are checked again, so a name taken meanwhile gives ErrExist). A send that
// fails otherwise has an unknown outcome; it is resent at the same seq
// (never at another, which could apply the changes twice).
//
// A change refused by its check is answered only once the state it was
// checked against is known to be the end of the log: the entry after it
// landed, or (when no change of the batch applies) verifyTailLocked said so.
func (ns *Namespace) commitLocked(batch []*pending) *pendingSnapshot {
	if !ns.trustedLocked(ns.opts.Clock()) {
		rctx, cancel := context.WithTimeout(context.Background(), ns.opts.FinishTimeout)
		err := ns.refreshLocked(rctx)
		cancel()
		if err != nil {
			ns.qmu.Lock()
			for _, p := range batch {
				if !p.dropped {
					p.finish(err)
				}
			}
			ns.qmu.Unlock()
			return nil
		}
	}
	// Nothing is sent yet: a caller that left up to here changed nothing.
	sealed := ns.seal(batch)
	if len(sealed) == 0 {
		return nil
	}
	// From the first send on, the entry may land whatever the callers do,
	// so it is finished (landed, refused, or failed after FinishTimeout)
	// rather than abandoned: an interrupted caller is never told that a
	// change failed that is in the log.
	ctx, cancel := context.WithTimeout(context.Background(), ns.opts.FinishTimeout)
	defer cancel()
	id, t := randomID(), ns.opts.Now().UnixNano()
	var (
		e         *entry
		data      []byte
		firstSend time.Time
		basis     time.Time // the tail confirmation e.Seq was chosen on
		live      []*pending
		ops       []op
		errs      []error
	)
	attempts, conflicts := 0, 0
	// resendable says whether e may still be sent at its seq: only within
	// TrimGrace/2 of the confirmation it was chosen on, however long
	// FinishTimeout, so that its seq cannot have been used by another
	// writer and trimmed meanwhile (see the package doc).
	resendable := func() bool { return ns.opts.Clock().Sub(basis) < ns.opts.TrimGrace/2 }
	for {
		if e == nil {
			if !ns.trustedLocked(ns.opts.Clock()) {
				// The tail aged while this entry was refused and rebuilt.
				if err := ns.refreshLocked(ctx); err != nil {
					answer(sealed, err)
					return nil
				}
			}
			basis = ns.tailAt
			live, ops, errs = ns.trial(sealed, t)
			if len(live) == 0 {
				moved, err := ns.verifyTailLocked(ctx)
				if err != nil {
					answer(sealed, err)
					return nil
				}
				if !moved {
					answerFailed(sealed, errs)
					return nil
				}
				continue
			}
			e = newEntry(ns.st.seq+1, id, t, ops)
			data = encodeEntry(e)
			firstSend = ns.opts.Clock()
		}
		key := LogKey(ns.root, e.Seq)
		_, err := ns.store.Put(ctx, key, data, staging.PutOptions{
			Conditions: staging.Conditions{IfNoneMatch: true},
			Metadata:   map[string]string{writerMeta: e.ID},
		})
		if err != nil && !errors.Is(err, staging.ErrPrecondition) {
			attempts++
			if attempts < ns.opts.PutAttempts && resendable() {
				if berr := backoff(ctx, attempts); berr != nil {
					err = berr
				} else {
					continue // same seq
				}
			}
			answer(sealed, fmt.Errorf("append namespace entry %s (%s; it may yet appear): %w", key, kinds(ops), err))
			return nil
		}
		if err != nil {
			other, rerr := ns.readEntry(ctx, e.Seq)
			if errors.Is(rerr, staging.ErrNotFound) {
				// Refused, yet not there: a conditional write of the same
				// key still in flight (S3's 409). It lands or fails soon.
				conflicts++
				if conflicts >= maxConflicts || !resendable() {
					answer(sealed, fmt.Errorf("append namespace entry %s (%s): refused, yet absent after %d tries: %w", key, kinds(ops), conflicts, err))
					return nil
				}
				if err := backoff(ctx, conflicts); err != nil {
					answer(sealed, fmt.Errorf("append namespace entry %s (%s): %w", key, kinds(ops), err))
					return nil
				}
				continue
			}
			if rerr != nil {
				answer(sealed, rerr)
				return nil
			}
			if other.ID != e.ID {
				if err := ns.applyEntry(other); err != nil {
					answer(sealed, err)
					return nil
				}
				if err := ns.refreshLocked(ctx); err != nil {
					answer(sealed, err)
					return nil
				}
				attempts, conflicts, e = 0, 0, nil
				continue // checked again, at the next seq
			}
			// Ours: an earlier send landed.
		}
		snap := ns.landed(e, live, firstSend)
		answerFailed(sealed, errs) // after the state shows what refused them
		return snap
	}
}

// landed applies entry e, just appended by this mount with the changes of
// live, runs their hooks and answers their callers. firstSend is when it was
// first sent at its seq: the log ended at e.Seq then, or after (a later
// entry follows ours). It returns the snapshot to write, if one is due.
func (ns *Namespace) landed(e *entry, live []*pending, firstSend time.Time) *pendingSnapshot {
	ops := e.ops()
	ns.mu.Lock()
	ns.st.j = &journal{}
	var err error
	for i, p := range live {
		ino := inoOf(e.Seq, i)
		p.run(p.before, ns.st, ino)
		if err = ns.st.applyOp(&ops[i], ino, e.Time, false); err != nil {
			// The trial passed on this very state; a bug.
			ns.st.rollback()
			err = corruptf(LogKey(ns.root, e.Seq), "does not apply: op %d: %v", i, err)
			break
		}
		p.run(p.done, ns.st, ino)
	}
	if err == nil {
		ns.st.j = nil
		ns.st.seq = e.Seq
		ns.unshowLocked(live)
		if firstSend.After(ns.tailAt) {
			ns.tailAt = firstSend
		}
	}
	ns.mu.Unlock()
	answer(live, err)
	if err != nil {
		return nil
	}
	ns.sinceSnap += uint64(len(ops))
	if ns.sinceSnap < max(ns.opts.CompactEvery, uint64(len(ns.st.nodes))/4) {
		return nil
	}
	ns.sinceSnap = 0
	// appendMu is held, so the state cannot change: it is read without mu,
	// and reads do not wait for the encoding.
	return &pendingSnapshot{seq: e.Seq, data: encodeSnapshot(ns.st)}
}

func kinds(ops []op) string {
	if len(ops) == 1 {
		return ops[0].Kind
	}
	return fmt.Sprintf("%d ops", len(ops))
}

// writeSnapshot stores the snapshot as of seq, then trims in the background
// what it covers. Another writer may have stored it already; failing is
// harmless (the log still has everything), so it is only logged.
func (ns *Namespace) writeSnapshot(ctx context.Context, seq uint64, data []byte) {
	if err := ns.putSnapshot(ctx, seq, data); err != nil {
		ns.log.Warn("write namespace snapshot", zap.Error(err))
		return
	}
	ns.requestTrim(seq)
}

func (ns *Namespace) putSnapshot(ctx context.Context, seq uint64, data []byte) error {
	key := SnapKey(ns.root, seq)
	_, err := ns.store.Put(ctx, key, data, staging.PutOptions{
		Conditions: staging.Conditions{IfNoneMatch: true},
	})
	if err != nil && !errors.Is(err, staging.ErrPrecondition) {
		return fmt.Errorf("write namespace snapshot %s: %w", key, err)
	}
	return nil
}

// Compact writes a snapshot of the state as of the newest entry now (if no
// snapshot of that seq exists), and trims in the background what it covers.
func (ns *Namespace) Compact(ctx context.Context) error {
	ns.appendMu.Lock()
	err := ns.refreshLocked(ctx)
	seq, data := ns.st.seq, []byte(nil)
	if err == nil && seq > 0 {
		data = encodeSnapshot(ns.st)
		ns.sinceSnap = 0
	}
	ns.appendMu.Unlock()
	if err != nil || data == nil {
		return err
	}
	if err := ns.putSnapshot(ctx, seq, data); err != nil {
		return err
	}
	ns.requestTrim(seq)
	return nil
}

// Trimming bounds: deletes in flight, deletes per pass (a pass that
// reaches it is followed by another), and the page of a listing.
const (
	trimParallelism = 8
	maxTrimPerPass  = 10000
	trimPage        = 1000
)

// requestTrim asks the trimmer, a goroutine owned by the namespace (Wait
// waits for it, Close stops it), to trim what the snapshot at seq covers.
func (ns *Namespace) requestTrim(seq uint64) {
	ns.trimMu.Lock()
	defer ns.trimMu.Unlock()
	ns.trimAt = max(ns.trimAt, seq)
	if ns.trimming || ns.ctx.Err() != nil {
		return
	}
	ns.trimming = true
	ns.bg.Add(1)
	go func() {
		defer ns.bg.Done()
		for {
			ns.trimMu.Lock()
			seq := ns.trimAt
			ns.trimAt = 0
			if seq == 0 || ns.ctx.Err() != nil {
				ns.trimming = false
				ns.trimMu.Unlock()
				return
			}
			ns.trimMu.Unlock()
			if more := ns.trim(ns.ctx, seq); more {
				ns.trimMu.Lock()
				ns.trimAt = max(ns.trimAt, seq)
				ns.trimMu.Unlock()
			}
		}
	}()
}

// trim deletes the log entries below snap (the rule of Compactable: entry
// snap itself stays, so that a lagging mount finds an entry past the gap)
// and the snapshots below snap, but only those the store last modified more
// than TrimGrace ago: the safety of appends without reading the log first
// rests on it (see the package doc). Errors end the pass and are logged; the
// next snapshot's pass tries again. It reports whether the pass stopped at
// its bound with more to delete.
func (ns *Namespace) trim(ctx context.Context, snap uint64) (more bool) {
	now := ns.opts.Clock()
	n, more, err := ns.trimDir(ctx, ns.logPrefix(), snap, now)
	if err == nil && !more {
		var m int
		m, more, err = ns.trimDir(ctx, ns.snapPrefix(), snap, now)
		n += m
	}
	if err != nil {
		if ctx.Err() == nil {
			ns.log.Warn("trim namespace log", zap.Uint64("snapshot", snap), zap.Int("deleted", n), zap.Error(err))
		}
		return false
	}
	return more
}

// trimDir deletes the objects of dir (log or snapshots) below seq snap and
// older than TrimGrace at clock reading now, page by page. It stops at the
// first too young: objects are written in seq order, so the rest are
// younger still.
func (ns *Namespace) trimDir(ctx context.Context, dir string, snap uint64, now time.Time) (deleted int, more bool, err error) {
	after := ""
	for {
		lctx, cancel := context.WithTimeout(ctx, ns.opts.FinishTimeout)
		page, err := ns.store.List(lctx, dir, after, trimPage)
		cancel()
		if err != nil {
			return deleted, false, fmt.Errorf("list %s after %q: %w", dir, after, err)
		}
		var keys []string
		done := !page.Truncated
		for _, o := range page.Objects {
			seq, ok := parseSeq(o.Key, dir)
			if !ok {
				continue // not ours to delete
			}
			if seq >= snap || o.LastModified.IsZero() || now.Sub(o.LastModified) <= ns.opts.TrimGrace {
				done = true
				break
			}
			if deleted+len(keys) >= maxTrimPerPass {
				done, more = true, true
				break
			}
			keys = append(keys, o.Key)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(trimParallelism)
		for _, k := range keys {
			g.Go(func() error {
				dctx, cancel := context.WithTimeout(gctx, ns.opts.FinishTimeout)
				defer cancel()
				if err := ns.store.Delete(dctx, k); err != nil && !errors.Is(err, staging.ErrNotFound) {
					return fmt.Errorf("delete %s: %w", k, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return deleted, false, err
		}
		deleted += len(keys)
		if done || len(page.Objects) == 0 {
			return deleted, more, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// Compactable returns the seq up to which log entries may be deleted: the
// newest snapshot covers them. It is one below that snapshot's seq: the
// entry the snapshot is at stays, so that a mount lagging behind always
// finds an entry past the gap (and reloads the snapshot) rather than an
// empty log it would append to at a seq already used. Snapshots older than
// the newest may go too. Mounts trim this themselves; anyone else deleting
// must also spare what the store modified less than Options.TrimGrace ago
// (the safety of appends without reading the log rests on it). 0 means
// nothing is compactable.
func (ns *Namespace) Compactable(ctx context.Context) (upTo uint64, err error) {
	seq, err := ns.newestSnapshot(ctx)
	if seq == 0 || err != nil {
		return 0, err
	}
	return seq - 1, nil
}

// Seq is the seq of the last entry applied.
func (ns *Namespace) Seq() uint64 {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.st.seq
}

// Lookup returns the node named name in directory dir.
func (ns *Namespace) Lookup(dir Ino, name string) (Node, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	_, n, err := ns.st.lookup(dir, name)
	if err != nil {
		return Node{}, err
	}
	return ns.viewLocked(n), nil
}

// GetNode returns node ino (also an orphan's).
func (ns *Namespace) GetNode(ino Ino) (Node, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	n, err := ns.st.get(ino)
	if err != nil {
		return Node{}, err
	}
	return ns.viewLocked(n), nil
}

// ReadDir lists directory dir sorted by name.
func (ns *Namespace) ReadDir(dir Ino) ([]Dirent, error) {
	out, err := ns.list(dir, 0)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// ReadDirAfter lists the entries of directory dir whose cookie is above
// cookie, in cookie order: a listing resumed at the cookie of the last entry
// returned (a readdir offset) neither repeats nor skips entries that stayed,
// whatever was removed meanwhile. Cookie 0 lists everything.
func (ns *Namespace) ReadDirAfter(dir Ino, cookie uint64) ([]Dirent, error) {
	out, err := ns.list(dir, cookie)
	sort.Slice(out, func(i, j int) bool { return out[i].Cookie < out[j].Cookie })
	return out, err
}

func (ns *Namespace) list(dir Ino, after uint64) ([]Dirent, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	d, err := ns.st.dir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Dirent, 0, len(d.children))
	for name, de := range d.children {
		if de.cookie > after {
			out = append(out, Dirent{Name: name, Ino: de.ino, Kind: ns.st.nodes[de.ino].kind, Cookie: de.cookie})
		}
	}
	return out, nil
}

// GetXattr returns the value of extended attribute name of node ino.
func (ns *Namespace) GetXattr(ino Ino, name string) ([]byte, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	n, err := ns.st.get(ino)
	if err != nil {
		return nil, err
	}
	v, ok := n.xattrs[name]
	if !ok {
		return nil, fmt.Errorf("attribute %q of node %d: %w", name, ino, ErrNoAttr)
	}
	return append([]byte{}, v...), nil
}

// ListXattr returns the names of node ino's extended attributes, sorted.
func (ns *Namespace) ListXattr(ino Ino) ([]string, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	n, err := ns.st.get(ino)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(n.xattrs))
	for name := range n.xattrs {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// Orphans lists the files with no name left, by ino.
func (ns *Namespace) Orphans() []Orphan {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.st.orphans()
}

// Orphaned reports whether fileID is an orphan: a file with no name left.
// It costs O(1), whatever the namespace.
func (ns *Namespace) Orphaned(fileID string) bool {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.st.orphaned(fileID)
}

// Named reports whether fileID is a file with a name left: neither an
// orphan, nor forgotten (a cleaner deleted it), nor unknown. It costs O(1).
func (ns *Namespace) Named(fileID string) bool {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	ino, ok := ns.st.byFile[fileID]
	return ok && ns.st.nodes[ino].nlink > 0
}

func nodeAt(out *Node, ino Ino) hook {
	return func(st *state, _ Ino) {
		if n := st.nodes[ino]; n != nil {
			*out = n.public()
		}
	}
}

func created(out *Node) hook {
	return func(st *state, ino Ino) { *out = st.nodes[ino].public() }
}

// removed returns hooks that leave in out the node named name in dir before
// a change, as it is after the change (Nlink 0 once its last name is gone,
// even if the node itself is gone).
func removed(out *Node, dir Ino, name string) (before, after hook) {
	var pre *Node
	before = func(st *state, _ Ino) {
		if d := st.nodes[dir]; d != nil && d.kind == KindDir {
			if de, ok := d.children[name]; ok {
				n := st.nodes[de.ino].public()
				pre = &n
			}
		}
	}
	after = func(st *state, _ Ino) {
		switch {
		case pre == nil:
		case st.nodes[pre.Ino] != nil:
			*out = st.nodes[pre.Ino].public()
		default:
			*out = *pre
			out.Nlink = 0
		}
	}
	return before, after
}

// Create makes a regular file named name in directory parent with a new file
// id, and returns it.
func (ns *Namespace) Create(ctx context.Context, parent Ino, name string, mode uint32, owner Owner) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opCreate, Parent: parent, Name: bname(name), Mode: mode,
		Uid: owner.Uid, Gid: owner.Gid, FileID: NewFileID()}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("create %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Mkdir makes a directory.
func (ns *Namespace) Mkdir(ctx context.Context, parent Ino, name string, mode uint32, owner Owner) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opMkdir, Parent: parent, Name: bname(name), Mode: mode,
		Uid: owner.Uid, Gid: owner.Gid}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("mkdir %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Mknod makes a FIFO or a Unix socket file (kind KindFIFO or KindSocket):
// a node with its mode and owner and no data. Any other kind is ErrInvalid.
// The entry, and every snapshot while the volume holds such a node, is
// written in envelope version 3 (format.go).
func (ns *Namespace) Mknod(ctx context.Context, parent Ino, name string, kind Kind, mode uint32, owner Owner) (Node, error) {
	if !kind.special() {
		return Node{}, fmt.Errorf("mknod %q in %d: kind %v: %w", name, parent, kind, ErrInvalid)
	}
	var n Node
	err := ns.change(ctx, op{Kind: opMknod, Parent: parent, Name: bname(name), Type: kind, Mode: mode,
		Uid: owner.Uid, Gid: owner.Gid}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("mknod %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Symlink makes a symbolic link to target.
func (ns *Namespace) Symlink(ctx context.Context, parent Ino, name, target string, owner Owner) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opSymlink, Parent: parent, Name: bname(name), Target: bname(target),
		Uid: owner.Uid, Gid: owner.Gid}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("symlink %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Link gives node ino (a file or symlink) another name and returns the node
// with its new link count.
func (ns *Namespace) Link(ctx context.Context, ino, newParent Ino, newName string) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opLink, Ino: ino, Parent: newParent, Name: bname(newName)}, nodeAt(&n, ino))
	if err != nil {
		return Node{}, fmt.Errorf("link %d as %q in %d: %w", ino, newName, newParent, err)
	}
	return n, nil
}

// Unlink removes a name of a file or symlink and returns the node as it is
// after: Nlink 0 for a file means its id is now an orphan (see Orphans);
// the mount that unlinked it owns deleting its data and calling Forget once
// its last handle is closed.
func (ns *Namespace) Unlink(ctx context.Context, parent Ino, name string) (Node, error) {
	var n Node
	before, after := removed(&n, parent, name)
	err := ns.changeHooked(ctx, op{Kind: opUnlink, Parent: parent, Name: bname(name)}, before, after)
	if err != nil {
		return Node{}, fmt.Errorf("unlink %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Rmdir removes an empty directory.
func (ns *Namespace) Rmdir(ctx context.Context, parent Ino, name string) error {
	if err := ns.change(ctx, op{Kind: opRmdir, Parent: parent, Name: bname(name)}, nil); err != nil {
		return fmt.Errorf("rmdir %q in %d: %w", name, parent, err)
	}
	return nil
}

// Rename moves oldName in oldParent to newName in newParent, atomically,
// replacing a file or empty directory there unless flags say otherwise. It
// returns the node replaced, as it is after (Ino 0 when none was; a file
// with Nlink 0 is now an orphan, as with Unlink).
func (ns *Namespace) Rename(ctx context.Context, oldParent Ino, oldName string, newParent Ino, newName string, flags RenameFlags) (Node, error) {
	var replaced Node
	o := op{Kind: opRename, Parent: oldParent, Name: bname(oldName), NewParent: newParent,
		NewName: bname(newName), Flags: uint32(flags)}
	var before, after hook
	if flags&RenameExchange == 0 {
		before, after = removed(&replaced, newParent, newName)
		b := before
		before = func(st *state, ino Ino) {
			// Renaming a name onto another name of the same node replaces
			// nothing.
			if d := st.nodes[oldParent]; d != nil && d.kind == KindDir {
				if nd := st.nodes[newParent]; nd != nil && nd.kind == KindDir {
					if nd.children[newName].ino == d.children[oldName].ino {
						return
					}
				}
			}
			b(st, ino)
		}
	}
	err := ns.changeHooked(ctx, o, before, after)
	if err != nil {
		return Node{}, fmt.Errorf("rename %q in %d to %q in %d: %w", oldName, oldParent, newName, newParent, err)
	}
	return replaced, nil
}

// attrOf is the record of a change of attributes.
func attrOf(a SetAttr) *attrRec {
	rec := &attrRec{Mode: a.Mode, Uid: a.Uid, Gid: a.Gid}
	ts := func(t *time.Time) *int64 {
		if t == nil {
			return nil
		}
		v := t.UnixNano()
		return &v
	}
	rec.Atime, rec.Mtime, rec.Ctime = ts(a.Atime), ts(a.Mtime), ts(a.Ctime)
	return rec
}

// SetAttr changes attributes of node ino and returns the node after.
func (ns *Namespace) SetAttr(ctx context.Context, ino Ino, a SetAttr) (Node, error) {
	var n Node
	if err := ns.change(ctx, op{Kind: opSetAttr, Ino: ino, Attr: attrOf(a)}, nodeAt(&n, ino)); err != nil {
		return Node{}, fmt.Errorf("setattr %d: %w", ino, err)
	}
	return n, nil
}

// SetXattr sets extended attribute name ("user." only) of node ino.
func (ns *Namespace) SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags XattrFlags) error {
	if err := ns.xattrRoom(ino, name, len(value)); err != nil {
		return fmt.Errorf("setxattr %q of %d: %w", name, ino, err)
	}
	if err := ns.change(ctx, op{Kind: opSetXattr, Ino: ino, Name: bname(name),
		Value: append([]byte{}, value...), Flags: uint32(flags)}, nil); err != nil {
		return fmt.Errorf("setxattr %q of %d: %w", name, ino, err)
	}
	return nil
}

// xattrRoom checks that setting name to a value of n bytes keeps node ino's
// attributes within MaxXattrsLen, in this mount's view. It costs the node's
// attributes, which the bound bounds. Two mounts adding at once can both
// pass it: the bound is what a mount asks for, not a rule of the log, so that
// an entry past it (or a volume written before it) still applies.
func (ns *Namespace) xattrRoom(ino Ino, name string, n int) error {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	nd, err := ns.st.get(ino)
	if err != nil {
		return nil // the change itself reports it
	}
	total := len(name) + n
	for k, v := range nd.xattrs {
		if k != name {
			total += len(k) + len(v)
		}
	}
	if total > MaxXattrsLen {
		return fmt.Errorf("attributes of node %d would take %d bytes, over %d: %w", ino, total, MaxXattrsLen, ErrNoSpace)
	}
	return nil
}

// RemoveXattr removes extended attribute name of node ino.
func (ns *Namespace) RemoveXattr(ctx context.Context, ino Ino, name string) error {
	if err := ns.change(ctx, op{Kind: opRemoveXattr, Ino: ino, Name: bname(name)}, nil); err != nil {
		return fmt.Errorf("removexattr %q of %d: %w", name, ino, err)
	}
	return nil
}

// Forget drops orphan fileID, once its data is deleted.
func (ns *Namespace) Forget(ctx context.Context, fileID string) error {
	if err := ns.change(ctx, op{Kind: opForget, FileID: fileID}, nil); err != nil {
		return fmt.Errorf("forget file %s: %w", fileID, err)
	}
	return nil
}
