package engine

// Writer markers: how a live writer shows the cleaner (package cleaner, `ckptfs
// gc`) the objects it may still publish.
//
// Objects sent ahead and partial segments are stored long before the head
// names them, and a writer whose flush lost a race to another mount rebases
// and publishes objects that are by then below the other writer's head. Age
// cannot tell such objects from a dead writer's leftovers, so a writer that
// holds objects no published head names keeps a marker under the file's
// prefix:
//
//	<prefix>writers/<writer-id>     one per open writer (File) of the file
//
// The marker is a small JSON object (at most MaxWriterMarkerBytes):
//
//	{"v":1,"lo":<cno>,"ttl_ms":<ms>,"host":"<name>","pid":<n>}
//
//	v       format version, 1
//	lo      the lowest checkpoint number of the objects the writer may still
//	        name in a head it publishes (>= 1); it names none below
//	ttl_ms  how long the marker lives unrenewed, 1 s .. MaxWriterTTL
//	host    host name of the writer (informative, at most 255 bytes)
//	pid     process id of the writer (informative)
//
// A marker is live while the store's LastModified of it is within its TTL (the
// store's clock, never a time the writer wrote). The cleaner deletes no object
// with a checkpoint number at or above lo of a live marker of its file, reads
// a file's markers again right before deleting that file's objects and at
// least every WriterRecheck while it deletes, and removes a marker that is
// dead by more than its grace period. A writer never stores a marker again
// under a key that may have died (it takes a new writer id), so that removal
// never hits a marker renewed meanwhile.
//
// The writer stores its marker before the first object it will not name in
// the very next head (objects sent ahead, partial segments, the data parts of
// a flush), renews it every TTL/3 while it holds such objects (a goroutine the
// File owns; no request per write), lets it go when a published head names
// them all or they are given up (deleted TTL/3 later unless needed again, so a
// file flushed often keeps one marker), and deletes it on Close.
//
// The writer counts its marker as live only for TTL - TTL/3 after the start
// of the PUT that stored it (the rest covers a cleaner whose clock is ahead
// of the store's). If it ran out while the writer held objects, a cleaner may
// have deleted some: before its next head, the writer stores the marker
// again, waits out any cleaner still acting on what it read before
// (2 x WriterRecheck), and checks (HEAD) every object of its own the head
// would name. A missing one fails the flush with a *LostObjectError and no
// head names it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// WritersDir is where a file's writer markers live, under its prefix.
const WritersDir = "writers/"

const (
	// DefaultWriterTTL is how long a writer marker lives unrenewed.
	DefaultWriterTTL = 3 * time.Minute
	// MaxWriterTTL bounds the TTL a marker may claim.
	MaxWriterTTL = 24 * time.Hour
	// WriterRecheck is how long the cleaner acts on markers it read before
	// it reads them again.
	WriterRecheck = 10 * time.Second
	// MaxWriterMarkerBytes bounds a marker read from the store.
	MaxWriterMarkerBytes = 1024

	writerMarkerVersion = 1
	maxWriterHostBytes  = 255
)

// ErrBadWriterMarker: a writer marker that does not decode.
var ErrBadWriterMarker = errors.New("bad writer marker")

// ErrLostObject: an object the next checkpoint would name is gone (its
// writer's marker lapsed and a cleaner deleted it).
var ErrLostObject = errors.New("object of an unpublished checkpoint is gone")

// LostObjectError names the missing object. Nothing was published.
type LostObjectError struct {
	Prefix string
	Key    string
}

func (e *LostObjectError) Error() string {
	return fmt.Sprintf("%s: %s is gone while this writer's marker had lapsed; the checkpoint that would name it is not published",
		e.Prefix, e.Key)
}

func (e *LostObjectError) Unwrap() error { return ErrLostObject }

// WriterMarker is the body of a writer marker.
type WriterMarker struct {
	Lo   uint64
	TTL  time.Duration
	Host string
	PID  int
}

type writerMarkerJSON struct {
	V     int    `json:"v"`
	Lo    uint64 `json:"lo"`
	TTLms int64  `json:"ttl_ms"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// EncodeWriterMarker encodes m (see the layout above).
func EncodeWriterMarker(m WriterMarker) []byte {
	b, _ := json.Marshal(writerMarkerJSON{V: writerMarkerVersion, Lo: m.Lo, TTLms: m.TTL.Milliseconds(),
		Host: m.Host, PID: m.PID})
	return b
}

// DecodeWriterMarker decodes and checks a marker read from the store.
func DecodeWriterMarker(b []byte) (WriterMarker, error) {
	if len(b) > MaxWriterMarkerBytes {
		return WriterMarker{}, fmt.Errorf("%w: %d bytes, over %d", ErrBadWriterMarker, len(b), MaxWriterMarkerBytes)
	}
	var j writerMarkerJSON
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&j); err != nil {
		return WriterMarker{}, fmt.Errorf("%w: %v", ErrBadWriterMarker, err)
	}
	if d.More() {
		return WriterMarker{}, fmt.Errorf("%w: data after the object", ErrBadWriterMarker)
	}
	switch {
	case j.V != writerMarkerVersion:
		return WriterMarker{}, fmt.Errorf("%w: version %d, want %d", ErrBadWriterMarker, j.V, writerMarkerVersion)
	case j.Lo == 0:
		return WriterMarker{}, fmt.Errorf("%w: lo 0", ErrBadWriterMarker)
	case j.TTLms < 1000 || j.TTLms > MaxWriterTTL.Milliseconds():
		return WriterMarker{}, fmt.Errorf("%w: ttl %d ms, want 1000..%d", ErrBadWriterMarker, j.TTLms, MaxWriterTTL.Milliseconds())
	case len(j.Host) > maxWriterHostBytes:
		return WriterMarker{}, fmt.Errorf("%w: host name of %d bytes", ErrBadWriterMarker, len(j.Host))
	}
	return WriterMarker{Lo: j.Lo, TTL: time.Duration(j.TTLms) * time.Millisecond, Host: j.Host, PID: j.PID}, nil
}

// Writer is a writer marker as found in the store.
type Writer struct {
	Key string
	// Modified is the store's LastModified of the marker.
	Modified time.Time
	Size     int64
	Marker   WriterMarker
	// Err says why the body did not decode; such a marker is taken to
	// protect every object of its file for MaxWriterTTL.
	Err error
}

// Live says whether the marker is within its TTL at now.
func (w Writer) Live(now time.Time) bool {
	ttl := w.Marker.TTL
	if w.Err != nil {
		ttl = MaxWriterTTL
	}
	return now.Sub(w.Modified) <= ttl
}

// Covers says whether a live marker protects objects of checkpoint cno.
func (w Writer) Covers(cno uint64) bool { return w.Err != nil || cno >= w.Marker.Lo }

// ReadWriters lists and reads the writer markers of the file at prefix.
func ReadWriters(ctx context.Context, st staging.Store, prefix string) ([]Writer, error) {
	objs, err := staging.ListAll(ctx, st, prefix+WritersDir)
	if err != nil {
		return nil, fmt.Errorf("list writer markers of %s: %w", prefix, err)
	}
	out := make([]Writer, 0, len(objs))
	for _, o := range objs {
		w, err := ReadWriter(ctx, st, o.Key)
		if errors.Is(err, staging.ErrNotFound) {
			continue // let go since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// ReadWriter reads one writer marker (at most MaxWriterMarkerBytes of it). A
// body that does not decode is reported in Writer.Err, not as an error.
func ReadWriter(ctx context.Context, st staging.Store, key string) (Writer, error) {
	b, info, err := st.Get(ctx, key, staging.Bytes(0, MaxWriterMarkerBytes+1))
	if errors.Is(err, staging.ErrInvalidRange) {
		b = nil // an empty object: its info from HEAD
		info, err = st.Head(ctx, key)
	}
	if err != nil {
		return Writer{}, fmt.Errorf("read writer marker %s: %w", key, err)
	}
	w := Writer{Key: key, Modified: info.LastModified, Size: info.Size}
	if info.Size > MaxWriterMarkerBytes {
		w.Err = fmt.Errorf("%w: %d bytes, over %d", ErrBadWriterMarker, info.Size, MaxWriterMarkerBytes)
		return w, nil
	}
	w.Marker, w.Err = DecodeWriterMarker(b)
	return w, nil
}

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

// writerMark keeps one File's marker.
type writerMark struct {
	st     staging.Store
	prefix string
	key    string // GUARDED_BY(mu)
	ttl    time.Duration
	clock  Clock
	log    *zap.Logger
	host   string

	// mu is held across the marker's own PUT and DELETE: that orders them.
	// Never take File.mu inside it.
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

	// requests counts the marker's requests with the sender's, for
	// FlushTiming.Requests.
	requests *atomic.Int64

	ctx     context.Context // requests of the renewal goroutine
	cancel  context.CancelFunc
	wake    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
	running bool
}

func newWriterMark(st staging.Store, prefix string, clock Clock, log *zap.Logger, requests *atomic.Int64) *writerMark {
	if clock == nil {
		clock = sysClock{}
	}
	host, _ := os.Hostname()
	if len(host) > maxWriterHostBytes {
		host = host[:maxWriterHostBytes]
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &writerMark{st: st, prefix: prefix, key: prefix + WritersDir + newWriteID(), ttl: DefaultWriterTTL, clock: clock,
		log: log, host: host, requests: requests, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// validFor is how long after the start of a PUT the writer counts on it.
func (m *writerMark) validFor() time.Duration { return m.ttl - m.ttl/3 }

func (m *writerMark) validLocked(now time.Time) bool {
	return m.stored != 0 && now.Before(m.okAt.Add(m.validFor()))
}

// putLocked stores the marker naming lo. held says whether objects were held
// before: if so and the marker ran out, that is a lapse.
func (m *writerMark) putLocked(ctx context.Context, held bool) error {
	start := m.clock.Now()
	ending := !m.validLocked(start)
	if held && ending {
		m.gap = true
		m.lapses++
	}
	if ending && m.stored != 0 {
		// A cleaner may be deleting the dead marker: never store under
		// its key again.
		m.key = m.prefix + WritersDir + newWriteID()
	}
	body := EncodeWriterMarker(WriterMarker{Lo: m.lo, TTL: m.ttl, Host: m.host, PID: os.Getpid()})
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

// hold makes sure a live marker covers objects of checkpoint cno before one
// is stored: no request when it does already.
func (m *writerMark) hold(ctx context.Context, cno uint64) error {
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

// release lets go of the objects of checkpoints up to upTo: a published head
// names them, or they were given up.
func (m *writerMark) release(upTo uint64) {
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

func (m *writerMark) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// check makes the marker live now if objects are held. It reports whether
// objects stored before a lapse must be checked, with the lapse count to
// pass to checked afterwards.
func (m *writerMark) check(ctx context.Context) (bool, uint64, error) {
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
	// most WriterRecheck more: wait that out (twice, for a delete in
	// flight) before looking.
	if wait := back.Add(2 * WriterRecheck).Sub(m.clock.Now()); wait > 0 {
		if err := m.clock.Sleep(ctx, wait); err != nil {
			return false, 0, err
		}
	}
	return true, n, nil
}

// checked clears the gap found by check, unless the marker lapsed again.
func (m *writerMark) checked(lapses uint64) {
	m.mu.Lock()
	if m.lapses == lapses {
		m.gap = false
	}
	m.mu.Unlock()
}

// run renews the marker every TTL/3 while objects are held and deletes it
// TTL/3 after the last was let go. It is owned by the writerMark: close
// stops it and waits for it.
func (m *writerMark) run() {
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

func (m *writerMark) tick() {
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

// close stops the renewal and deletes the marker: what it protected was
// published or is given up now.
func (m *writerMark) close() {
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

// holdWritersLocked makes the marker cover the objects about to be stored
// under the pending checkpoint number. The caller holds mu.
func (f *File) holdWritersLocked(ctx context.Context) error {
	cno := f.pendingCno
	if cno == 0 {
		cno = f.head.Cno + 1
	}
	if err := f.wm.hold(ctx, cno); err != nil {
		return fmt.Errorf("writer marker of %s: %w", f.prefix, err)
	}
	return nil
}

// verifyWritersLocked runs right before a head naming objs (the last is part
// 0) and the objects this writer stored since its head is published: the
// marker must be live, and if it lapsed meanwhile every such object must
// still exist. The caller holds mu.
func (f *File) verifyWritersLocked(ctx context.Context, objs []*plannedObject) error {
	for {
		must, lapses, err := f.wm.check(ctx)
		if err != nil {
			return fmt.Errorf("writer marker of %s: %w", f.prefix, err)
		}
		if !must {
			return nil
		}
		names := make(map[segment.ObjectName]struct{})
		for _, v := range f.written {
			names[v.Ptr.Object()] = struct{}{}
		}
		for _, p := range f.leafImages {
			names[p.Object()] = struct{}{}
		}
		for _, o := range objs {
			names[o.name] = struct{}{}
		}
		keys := make([]string, 0, len(names))
		for n := range names {
			keys = append(keys, f.key(n))
		}
		slices.Sort(keys)
		f.log.Warn("the writer marker lapsed; checking the objects the checkpoint names", zap.Int("objects", len(keys)))
		for _, k := range keys {
			f.s.requests.Add(1)
			if _, err := f.st.Head(ctx, k); err != nil {
				if errors.Is(err, staging.ErrNotFound) {
					return &LostObjectError{Prefix: f.prefix, Key: k}
				}
				return fmt.Errorf("check %s: %w", k, err)
			}
		}
		f.wm.checked(lapses)
	}
}
