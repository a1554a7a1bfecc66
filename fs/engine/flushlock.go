package engine

import (
	"context"
	"fmt"
	"math"
	"sync"

	"golang.org/x/sync/semaphore"
)

// flushLock is File.flushMu: a readers-writer lock whose shared holders
// can stop waiting when their context ends. A change that waits for a
// Flush (a truncate behind an fsync of a GiB file on a slow link) is an
// operation the kernel may interrupt; sync.RWMutex cannot be left.
//
// It is x/sync's weighted semaphore, rather than a lock written here: a
// Flush takes all of it, a shared holder one unit. The semaphore serves
// waiters in order, so a Flush waiting holds back later shared holders, as
// sync.RWMutex holds back readers behind a waiting writer.
type flushLock struct {
	once sync.Once
	sem  *semaphore.Weighted
}

// flushLockAll is what a Flush takes: more than shared holders ever hold.
const flushLockAll = math.MaxInt32

func (l *flushLock) s() *semaphore.Weighted {
	l.once.Do(func() { l.sem = semaphore.NewWeighted(flushLockAll) })
	return l.sem
}

// Lock is a Flush's hold, for its whole length.
func (l *flushLock) Lock() { _ = l.s().Acquire(context.Background(), flushLockAll) }

// Unlock ends a Flush's hold.
func (l *flushLock) Unlock() { l.s().Release(flushLockAll) }

// RLock is a shared hold that waits as long as it must (a Close that must
// end; a Refresh the mount itself asked for).
func (l *flushLock) RLock() { _ = l.s().Acquire(context.Background(), 1) }

// RLockCtx is a shared hold, or ctx's error if ctx ends first (then nothing
// is held).
func (l *flushLock) RLockCtx(ctx context.Context) error {
	if err := l.s().Acquire(ctx, 1); err != nil {
		return err
	}
	return nil
}

// RUnlock ends a shared hold.
func (l *flushLock) RUnlock() { l.s().Release(1) }

// changeHold is what a change other than a write by value holds: flushMu
// shared (it waits for a Flush) and blocks [lo, hi) exclusively; or ctx's
// error if ctx ends while it waits, holding nothing.
func (f *File) changeHold(ctx context.Context, lo, hi uint64) (func(), error) {
	if err := f.flushMu.RLockCtx(ctx); err != nil {
		return nil, fmt.Errorf("waiting for its flush: %w", err)
	}
	release, err := f.ranges.lockCtx(ctx, lo, hi, true)
	if err != nil {
		f.flushMu.RUnlock()
		return nil, fmt.Errorf("waiting for the blocks: %w", err)
	}
	return func() { release(); f.flushMu.RUnlock() }, nil
}
