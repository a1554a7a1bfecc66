package engine

import (
	"context"
	"sync"
)

// Budget is one memory budget shared by every file of a mount: dirty blocks
// and copies of blocks in flight draw from it, and a writer that finds it full
// first relieves its own file (a partial segment) and then waits for room
// instead of failing. Safe for concurrent use.
//
// Reads draw from it too, but only what TryAcquireRead gives: the blocks of
// the block caches and the data fetched ahead of sequential readers, together
// at most a quarter of the limit (readShareDiv). Reads never wait for room and
// never take it past the limit, so they cannot starve a writer: writers always
// have three quarters, and the rest whenever readers do not hold it. A read
// that gets no room still reads, with exact ranged GETs of what it asks for
// (nothing fetched ahead, nothing kept), so a writer cannot starve a reader of
// progress either, only of read-ahead.
type Budget struct {
	mu    sync.Mutex
	limit int64
	used  int64         // GUARDED_BY(mu)
	read  int64         // the part of used drawn by reads; GUARDED_BY(mu)
	wake  chan struct{} // closed and replaced when room is released; GUARDED_BY(mu)
}

// readShareDiv: reads hold at most limit/readShareDiv of a budget.
const readShareDiv = 4

// ReadShare is the most reads may hold at once.
func (b *Budget) ReadShare() int64 { return b.limit / readShareDiv }

// ReadUsed is what reads hold now.
func (b *Budget) ReadUsed() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.read
}

// TryAcquireRead draws n bytes for a read if they fit both the limit and the
// read share; it never waits and never goes past either.
func (b *Budget) TryAcquireRead(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit || b.read+n > b.limit/readShareDiv {
		return false
	}
	b.used += n
	b.read += n
	return true
}

// ReleaseRead returns n bytes drawn by TryAcquireRead.
func (b *Budget) ReleaseRead(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.read -= n
	b.mu.Unlock()
	b.Release(n)
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, wake: make(chan struct{})}
}

// Limit is the budget's size.
func (b *Budget) Limit() int64 { return b.limit }

// Used is what is drawn now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// TryAcquire draws n bytes if they fit.
func (b *Budget) TryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit && b.used > 0 {
		return false
	}
	b.used += n
	return true
}

// Acquire draws n bytes, waiting for room. A request larger than the whole
// budget is granted when nothing else is drawn, so it cannot wait forever.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.used+n <= b.limit || b.used == 0 {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Force draws n bytes even past the limit: for the few pieces a flush must
// have in flight to make progress.
func (b *Budget) Force(n int64) {
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

// Release returns n bytes.
func (b *Budget) Release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}
