package engine

import (
	"context"
	"math"
	"sync"
)

// rangeLock serialises overlapping operations on one file's blocks and lets
// disjoint ones run at once: a write copies its bytes into the dirty tier
// holding only its blocks, not the file. Writes and truncates take their
// blocks exclusively, reads share theirs, and a flush, a rollback or a close
// takes every block. A request that waits stops newer overlapping requests
// it conflicts with from jumping ahead of it (an exclusive one, any; a
// shared one, exclusive ones), so a flush, which shares the blocks it
// publishes, is not starved by a stream of writes, nor a write by a stream
// of reads; but a write that waits for a flush's blocks does not hold back
// reads, which the flush lets go on (they end before it, as a rule).
// Always taken before File.mu, never while holding it.
type rangeLock struct {
	mu      sync.Mutex
	cond    sync.Cond
	held    []blockRange // GUARDED_BY(mu)
	waiting []blockRange // requests waiting; GUARDED_BY(mu)
	nextID  uint64       // orders requests; GUARDED_BY(mu)
}

// blockRange is blocks [lo, hi).
type blockRange struct {
	lo, hi uint64
	excl   bool
	flush  bool // a flush's shared hold (lockFlush)
	id     uint64
}

func (r blockRange) overlaps(o blockRange) bool { return r.lo < o.hi && o.lo < r.hi }

// allBlocks is every block of a file.
var allBlocks = blockRange{lo: 0, hi: math.MaxUint64}

// lock takes blocks [lo, hi) and returns the function that releases them.
func (l *rangeLock) lock(lo, hi uint64, excl bool) func() {
	release, _ := l.take(context.Background(), blockRange{lo: lo, hi: hi, excl: excl})
	return release
}

// lockCtx is lock, or ctx's error if ctx ends while it waits (the kernel's
// interrupt of the caller): then nothing is held.
func (l *rangeLock) lockCtx(ctx context.Context, lo, hi uint64, excl bool) (func(), error) {
	return l.take(ctx, blockRange{lo: lo, hi: hi, excl: excl})
}

// lockFlush takes blocks [lo, hi) shared for a flush: a write waiting for
// them lets reads of them go on.
func (l *rangeLock) lockFlush(lo, hi uint64) func() {
	release, _ := l.take(context.Background(), blockRange{lo: lo, hi: hi, flush: true})
	return release
}

func (l *rangeLock) take(ctx context.Context, me blockRange) (func(), error) {
	if me.hi <= me.lo {
		me.hi = me.lo + 1
	}
	l.mu.Lock()
	l.nextID++
	me.id = l.nextID
	if l.cond.L == nil {
		l.cond.L = &l.mu
	}
	registered := false
	for l.conflicts(me) {
		if !registered {
			l.waiting = append(l.waiting, me)
			registered = true
			if ctx.Done() != nil {
				// Wake the wait when ctx ends: the broadcast takes l.mu,
				// so it cannot come between the check below and Wait.
				stop := context.AfterFunc(ctx, func() {
					l.mu.Lock()
					l.cond.Broadcast()
					l.mu.Unlock()
				})
				defer stop()
			}
		}
		if err := ctx.Err(); err != nil {
			// Leaving the queue may let requests behind this one go.
			l.unwait(me.id)
			l.cond.Broadcast()
			l.mu.Unlock()
			return nil, err
		}
		l.cond.Wait()
	}
	if registered {
		l.unwait(me.id)
	}
	l.held = append(l.held, me)
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		for i, h := range l.held {
			if h.id == me.id {
				l.held = append(l.held[:i], l.held[i+1:]...)
				break
			}
		}
		l.cond.Broadcast()
		l.mu.Unlock()
	}, nil
}

// conflicts: a held range overlaps me and one of us is exclusive, or an
// older request waits for blocks I want and one of us is exclusive (but a
// shared request passes a waiter that a flush's hold keeps waiting).
func (l *rangeLock) conflicts(me blockRange) bool {
	for _, h := range l.held {
		if h.overlaps(me) && (h.excl || me.excl) {
			return true
		}
	}
	for _, w := range l.waiting {
		if w.id < me.id && w.overlaps(me) && (w.excl || me.excl) {
			if !me.excl && l.heldByFlush(w) {
				continue
			}
			return true
		}
	}
	return false
}

// heldByFlush: a flush's shared hold overlaps w.
func (l *rangeLock) heldByFlush(w blockRange) bool {
	for _, h := range l.held {
		if h.flush && h.overlaps(w) {
			return true
		}
	}
	return false
}

func (l *rangeLock) unwait(id uint64) {
	for i, w := range l.waiting {
		if w.id == id {
			l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
			return
		}
	}
}
