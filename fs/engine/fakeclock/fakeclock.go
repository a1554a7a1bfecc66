// Package fakeclock is a clock for tests of code that takes a writermark.Clock
// (the writer markers and the cleaner): time moves only when the test says,
// so hours of renewals and grace periods pass in a moment and in order.
package fakeclock

import (
	"context"
	"sync"
	"time"
)

// Clock moves only by Advance (and Sleep, which advances it).
type Clock struct {
	mu      sync.Mutex
	now     time.Time // GUARDED_BY(mu)
	waiters []waiter  // GUARDED_BY(mu)
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// New starts a clock at a fixed time.
func New() *Clock { return &Clock{now: time.Unix(1_800_000_000, 0)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Until fires once the clock reaches t.
func (c *Clock) Until(t time.Time) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !t.After(c.now) {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{t, ch})
	return ch
}

// Sleep advances the clock by d: the caller is the only one waiting.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}

// Advance moves the clock by d and fires every wait it reaches.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}
