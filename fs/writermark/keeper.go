package writermark

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// ErrClosed: Hold after Close.
var ErrClosed = errors.New("writer marker is closed")

// Clock is the time a writer's marker keeps; tests drive a fake one.
type Clock interface {
	Now() time.Time
	// Until fires once the clock reaches t. (An absolute time, not a
	// duration: a duration computed from an earlier Now would be late by
	// whatever the clock moved in between.)
	Until(t time.Time) <-chan time.Time
	// Sleep waits d or until ctx ends.
	Sleep(ctx context.Context, d time.Duration) error
}

type sysClock struct{}

func (sysClock) Now() time.Time                     { return time.Now() }
func (sysClock) Until(t time.Time) <-chan time.Time { return time.After(time.Until(t)) }
func (sysClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Keeper keeps one writer's marker (the writer's side in the package doc).
// Its methods are safe for concurrent use.
type Keeper struct {
	st     staging.Store
	prefix string
	key    string // GUARDED_BY(mu)
	ttl    time.Duration
	clock  Clock
	log    *zap.Logger
	host   string

	// mu is held across the marker's own PUT and DELETE: that orders them.
	// A caller never holds a lock of its own that the Keeper's goroutine
	// waits for.
	mu      sync.Mutex
	lo, hi  uint64    // checkpoint numbers of objects held; lo 0: none held
	stored  uint64    // lo of the marker in the store; 0: none stored
	okAt    time.Time // start of the PUT that last stored it
	retryAt time.Time // after a failed renewal: when to try again
	idleAt  time.Time // when the last held object was let go
	gap     bool      // it may have looked dead while objects were held
	backAt  time.Time // when it was stored again after the last lapse
	lapses  uint64    // lapses found: a check clears only the gap it checked
	closed  bool

	// requests counts the marker's requests with the caller's.
	requests *atomic.Int64

	ctx     context.Context // requests of the renewal goroutine
	cancel  context.CancelFunc
	wake    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
	running bool
}

// NewKeeper is the keeper of a new writer's marker of the file at prefix,
// with DefaultTTL. clock nil is the system clock; every request it sends
// adds one to requests. It stores nothing until Hold.
func NewKeeper(st staging.Store, prefix string, clock Clock, log *zap.Logger, requests *atomic.Int64) *Keeper {
	if clock == nil {
		clock = sysClock{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	if requests == nil {
		requests = new(atomic.Int64)
	}
	host, _ := os.Hostname()
	if len(host) > maxHostBytes {
		host = host[:maxHostBytes]
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Keeper{st: st, prefix: prefix, key: volume.WriterKey(prefix, newWriterID()), ttl: DefaultTTL, clock: clock,
		log: log, host: host, requests: requests, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// newWriterID is a writer id, random: no two writers, and no two lives of
// one writer's marker (a lapse takes a new one), share a key.
func newWriterID() string {
	return fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
}

// validFor is how long after the start of a PUT the writer counts on it.
func (m *Keeper) validFor() time.Duration { return m.ttl - m.ttl/3 }

func (m *Keeper) validLocked(now time.Time) bool {
	return m.stored != 0 && now.Before(m.okAt.Add(m.validFor()))
}

// putLocked stores the marker naming lo. held says whether objects were held
// before: if so and the marker ran out, that is a lapse.
func (m *Keeper) putLocked(ctx context.Context, held bool) error {
	start := m.clock.Now()
	ending := !m.validLocked(start)
	if held && ending {
		m.gap = true
		m.lapses++
	}
	if ending && m.stored != 0 {
		// A cleaner may be deleting the dead marker: never store under
		// its key again.
		m.key = volume.WriterKey(m.prefix, newWriterID())
	}
	body := Encode(Marker{Lo: m.lo, TTL: m.ttl, Host: m.host, PID: os.Getpid()})
	m.requests.Add(1)
	if _, err := m.st.Put(ctx, m.key, body, staging.PutOptions{}); err != nil {
		return fmt.Errorf("store writer marker %s: %w", m.key, err)
	}
	m.stored, m.okAt, m.retryAt = m.lo, start, time.Time{}
	if ending && m.gap {
		m.backAt = m.clock.Now()
	}
	return nil
}

// Hold makes sure a live marker covers objects of checkpoint cno before one
// is stored: no request when it does already.
func (m *Keeper) Hold(ctx context.Context, cno uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	held := m.lo != 0
	prevLo, prevHi := m.lo, m.hi
	if !held || cno < m.lo {
		m.lo = cno
	}
	m.hi = max(m.hi, cno)
	if m.stored != 0 && m.stored <= m.lo && m.validLocked(m.clock.Now()) {
		return nil
	}
	if err := m.putLocked(ctx, held); err != nil {
		m.lo, m.hi = prevLo, prevHi // nothing is stored under it
		return err
	}
	if !m.running {
		m.running = true
		m.wg.Add(1)
		go m.run()
	}
	m.poke()
	return nil
}

// Release lets go of the objects of checkpoints up to upTo: a published head
// names them, or they were given up.
func (m *Keeper) Release(upTo uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lo == 0 {
		return
	}
	if m.hi > upTo {
		m.lo = max(m.lo, upTo+1)
		return
	}
	m.lo, m.hi, m.gap = 0, 0, false
	m.idleAt = m.clock.Now()
	m.poke()
}

func (m *Keeper) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Check makes the marker live now if objects are held. It reports whether
// objects stored before a lapse must be checked, with the lapse count to
// pass to Checked afterwards.
func (m *Keeper) Check(ctx context.Context) (bool, uint64, error) {
	m.mu.Lock()
	if m.lo == 0 {
		m.mu.Unlock()
		return false, 0, nil
	}
	if !m.validLocked(m.clock.Now()) {
		if err := m.putLocked(ctx, true); err != nil {
			m.mu.Unlock()
			return false, 0, err
		}
	}
	gap, back, n := m.gap, m.backAt, m.lapses
	m.mu.Unlock()
	if !gap {
		return false, 0, nil
	}
	// A cleaner that read the marker while it looked dead deletes for at
	// most Recheck more: wait that out (twice, for a delete in flight)
	// before looking.
	if wait := back.Add(2 * Recheck).Sub(m.clock.Now()); wait > 0 {
		if err := m.clock.Sleep(ctx, wait); err != nil {
			return false, 0, err
		}
	}
	return true, n, nil
}

// Checked clears the gap found by Check, unless the marker lapsed again.
func (m *Keeper) Checked(lapses uint64) {
	m.mu.Lock()
	if m.lapses == lapses {
		m.gap = false
	}
	m.mu.Unlock()
}

// run renews the marker every TTL/3 while objects are held and deletes it
// TTL/3 after the last was let go. It is owned by the Keeper: Close stops
// it and waits for it.
func (m *Keeper) run() {
	defer m.wg.Done()
	for {
		m.mu.Lock()
		var due time.Time
		switch {
		case m.lo != 0:
			due = m.okAt.Add(m.ttl / 3)
			if m.retryAt.After(due) {
				due = m.retryAt
			}
		case m.stored != 0:
			due = m.idleAt.Add(m.ttl / 3)
		}
		m.mu.Unlock()
		var tick <-chan time.Time
		if !due.IsZero() {
			tick = m.clock.Until(due)
		}
		select {
		case <-m.stop:
			return
		case <-m.wake:
			continue
		case <-tick:
		}
		m.tick()
	}
}

func (m *Keeper) tick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	now := m.clock.Now()
	ctx, cancel := context.WithTimeout(m.ctx, m.ttl/3)
	defer cancel()
	switch {
	case m.lo != 0 && !now.Before(m.okAt.Add(m.ttl/3)) && !now.Before(m.retryAt):
		if err := m.putLocked(ctx, true); err != nil {
			m.retryAt = now.Add(m.ttl / 15)
			m.log.Warn("renewing the writer marker failed; retrying", zap.String("key", m.key), zap.Error(err))
		}
	case m.lo == 0 && m.stored != 0 && !now.Before(m.idleAt.Add(m.ttl/3)):
		m.requests.Add(1)
		if err := m.st.Delete(ctx, m.key); err != nil {
			m.idleAt = now // try again later; the cleaner removes it once dead
			m.log.Debug("deleting the writer marker failed", zap.String("key", m.key), zap.Error(err))
			return
		}
		m.stored = 0
	}
}

// Close stops the renewal and deletes the marker: what it protected was
// published or is given up now.
func (m *Keeper) Close() {
	m.cancel() // a renewal in flight gives up
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	running := m.running
	m.mu.Unlock()
	if running {
		close(m.stop)
		m.wg.Wait()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stored == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
	defer cancel()
	if err := m.st.Delete(ctx, m.key); err != nil {
		m.log.Warn("deleting the writer marker failed; the cleaner removes it once dead",
			zap.String("key", m.key), zap.Error(err))
		return
	}
	m.stored = 0
}
