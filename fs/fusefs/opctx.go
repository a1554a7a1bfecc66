package fusefs

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/staging"
)

// The deadline of one filesystem call (op_timeout).
//
// A call that waits for the store (open, create, fsync, a rename, a read of
// data not in memory, a write waiting for room in the dirty tier) ends with
// ETIMEDOUT once the store has answered nothing, to this mount, for
// op_timeout since the call began: one bound over all its requests and their
// retries, each request's own timeouts cut to what is left of it (the store's
// requests take the call's context). A call that keeps getting answers goes
// on however long it takes — an fsync of GiBs over a slow link is progress,
// not an outage — so the deadline measures the store's silence, not the
// call's length, as s3_stall_timeout does for one body.
//
// A namespace change whose entry was sent when the deadline passed may still
// land; the call says so in the log (fs/namespace: changeHooked) and answers
// ETIMEDOUT, and every mount shows the change whole if it lands.

// opContext is the context of one call: its parent's (go-fuse's, whose Done
// is the interrupt guard's channel), ended early by the store's silence.
type opContext struct {
	context.Context // the parent: Value, Deadline
	done            chan struct{}
	once            sync.Once
	mu              sync.Mutex
	err             error
}

func (c *opContext) Done() <-chan struct{} { return c.done }

func (c *opContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *opContext) end(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
	})
}

// opGuardDelay: a call answered sooner (most reads and writes) costs two
// stopped timers; only a slower one gets a watcher of its parent, which then
// sees a parent that ended in the meantime at once.
const opGuardDelay = 20 * time.Millisecond

// opCtx returns the context of one filesystem call and the function to call
// when it returns.
func (fsys *FS) opCtx(parent context.Context) (context.Context, func()) {
	limit := fsys.cfg.OpTimeout
	if limit <= 0 || fsys.metrics == nil || fsys.metrics.inflight == nil {
		return parent, func() {}
	}
	c := &opContext{Context: parent, done: make(chan struct{})}
	start := time.Now()
	var (
		mu       sync.Mutex
		finished bool
		stopWait func() bool
		silence  *time.Timer
	)
	var check func()
	check = func() {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		last := max(start.UnixNano(), fsys.metrics.inflight.answered.Load())
		idle := time.Duration(time.Now().UnixNano() - last)
		if idle >= limit {
			c.end(context.DeadlineExceeded)
			return
		}
		silence.Reset(limit - idle)
	}
	mu.Lock()
	silence = time.AfterFunc(limit, check)
	guard := time.AfterFunc(opGuardDelay, func() {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		stopWait = context.AfterFunc(parent, func() { c.end(parent.Err()) })
	})
	mu.Unlock()
	if err := parent.Err(); err != nil {
		c.end(err)
	}
	return c, func() {
		mu.Lock()
		finished = true
		silence.Stop()
		guard.Stop()
		if stopWait != nil {
			stopWait()
		}
		mu.Unlock()
	}
}

// storeAnswered says whether err is an answer of the store (success, or a
// refusal it made: not found, a failed condition, ...), as against no
// answer (a timeout, a connection refused or cut, the caller's own end).
func storeAnswered(err error) bool {
	if err == nil {
		return true
	}
	for _, e := range []error{staging.ErrNotFound, staging.ErrPrecondition, staging.ErrInvalidRange, staging.ErrPartTooSmall, staging.ErrInvalidKey} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// unanswered says whether err is the store not answering: a timeout (the
// request's own, or statWait's), or a connection refused or cut.
func unanswered(err error) bool {
	var ne *net.OpError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, staging.ErrTimeout) || errors.As(err, &ne)
}

// statWait is how long a stat of a closed file waits for the store before
// it answers with the attributes the mount last saw, once it saw some: an
// `ls -l` during an outage answers from memory instead of one op_timeout a
// file. While requests are in flight and the store has answered none of them
// for statWait, a stat does not wait at all.
const statWait = 3 * time.Second

// storeSilent says whether the store seems down: requests are in flight and
// none was answered for statWait.
func (fsys *FS) storeSilent() bool {
	if fsys.metrics == nil || fsys.metrics.inflight == nil {
		return false
	}
	in := fsys.metrics.inflight
	if in.inFlight() == 0 {
		return false
	}
	return time.Since(time.Unix(0, in.answered.Load())) >= statWait
}

// staleStat notes, once per outage (until the store answers again), that
// stats answer from what the mount last saw.
func (fsys *FS) staleStat(id string, seen time.Time, err error) {
	if fsys.metrics == nil || fsys.metrics.inflight == nil {
		return
	}
	if fsys.metrics.inflight.staleSaid.CompareAndSwap(false, true) {
		fsys.log.Warn("the store is not answering: stat answers with the attributes the mount last saw, until it answers again",
			zap.String("file", id), zap.Duration("age", time.Since(seen).Round(time.Millisecond)), zap.Error(err))
	}
}
