package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/staging"
)

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
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The call's deadline (the mount's op_timeout) passed with the
		// entry sent: its outcome is not known yet, and it may land. The
		// caller is told so, and the change finishes without it, as for a
		// caller that is gone.
		select {
		case err := <-p.res:
			return err
		default:
		}
		p.hookMu.Lock()
		p.left = true
		p.hookMu.Unlock()
		ns.log.Warn("a change was sent and not answered within the call's deadline: the call fails, and the change may yet land (every mount then shows it whole)",
			zap.String("op", o.Kind), zap.String("name", string(o.Name)))
		return fmt.Errorf("%s %q: sent, not answered within the call's deadline; it may yet land: %w", o.Kind, string(o.Name), context.DeadlineExceeded)
	}
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
	if f := ns.fencedLocked(); f != nil {
		// The log ends in a fence: no change lands any more.
		ns.qmu.Lock()
		for _, p := range batch {
			if !p.dropped {
				p.finish(f)
			}
		}
		ns.qmu.Unlock()
		return nil
	}
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
