package cleaner

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// BackgroundOptions are those of a mount's background cleaner.
type BackgroundOptions struct {
	// Options are the cleaner's rules (Keep, KeepFor, Grace, MinAge,
	// NSLag); After, MaxFiles and Fence are the background's own.
	Options
	// Interval is the time between two passes (and between two tries to
	// take the lease).
	Interval time.Duration
	// MaxFiles bounds the files of one pass.
	MaxFiles int
	// LeaseTTL is how long the lease lasts unrenewed; zero: two intervals
	// and DefaultLeaseTTL, at most an hour.
	LeaseTTL time.Duration
	// Release bounds the letting go of the lease at Stop.
	Release time.Duration
	// VolumePolicy: the volume's retention policy (volume.ReadPolicy),
	// when it stores one, overrides Keep and KeepFor; it is read at each
	// pass, and a pass is not made while it cannot be read.
	VolumePolicy bool
	// OnPass, when set, is told of each pass's report and error.
	OnPass func(rep *Report, err error)
}

// LeaseTTLFor is the TTL of the lease of a cleaner that tries to take or
// renew it every interval: two intervals and DefaultLeaseTTL, at most an
// hour.
func LeaseTTLFor(interval time.Duration) time.Duration {
	return min(2*interval+DefaultLeaseTTL, maxLeaseTTL)
}

// DefaultPassFiles is the default of BackgroundOptions.MaxFiles.
const DefaultPassFiles = 1000

// Background runs the cleaner of one volume in a mount, in passes, while
// its lease is this mount's (lease.go): one pass every Interval over at most
// MaxFiles files, resuming where the last pass ended (the cursor is kept in
// the lease, so a mount that takes the lease over goes on from there).
type Background struct {
	st    staging.Store
	root  string
	o     BackgroundOptions
	lease *Lease

	cancel context.CancelFunc
	done   chan struct{}
	inPass atomic.Bool // a pass is under way: the lease is renewed

	mu sync.Mutex
	// files are what each file held as this cleaner's last pass over it
	// counted (Report.StoredFiles), and sum their total: once a sweep of
	// this cleaner's has covered the volume (covered), what df shows,
	// at most one pass old. GUARDED_BY(mu)
	files   map[string]Held
	sum     Held
	covered bool
	whole   bool       // the sweep under way began at the first file, by this cleaner; GUARDED_BY(mu)
	next    string     // where this cleaner's sweep goes on; GUARDED_BY(mu)
	stored  LeaseState // what df shows: sum once covered, else the lease's, read; GUARDED_BY(mu)
	hasTot  bool       // GUARDED_BY(mu)
	passes  int        // GUARDED_BY(mu)
	lastErr error      // GUARDED_BY(mu)
}

// StartBackground starts the background cleaner of the volume at root in
// st. Stop ends it.
func StartBackground(st staging.Store, root string, o BackgroundOptions) *Background {
	if o.LeaseTTL <= 0 {
		// The holder writes the lease at each pass, once an interval: a
		// TTL of two intervals (and a minute for a slow pass's start)
		// keeps a contender from taking it from a live holder whose
		// writes fell just outside its looks.
		o.LeaseTTL = LeaseTTLFor(o.Interval)
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultPassFiles
	}
	if o.Release <= 0 {
		o.Release = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Background{st: st, root: root, o: o, lease: NewLease(st, root, o.LeaseTTL, nil),
		cancel: cancel, done: make(chan struct{}), files: map[string]Held{}}
	go b.run(ctx)
	return b
}

// Stop ends the cleaner, waits for its pass to stop and lets its lease go.
func (b *Background) Stop() {
	b.cancel()
	<-b.done
}

// Stored says what the volume's files hold in the bucket: each file as of
// this cleaner's last pass over it, once a sweep of its own has covered the
// volume, or, before that, as the lease records it (whichever mount cleaned
// last); ok is false when neither is known yet.
func (b *Background) Stored() (objects, bytes int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stored.StoredObjects, b.stored.StoredBytes, b.hasTot
}

// Passes is how many passes this cleaner has made.
func (b *Background) Passes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.passes
}

func (b *Background) run(ctx context.Context) {
	defer close(b.done)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), b.o.Release)
		defer cancel()
		b.lease.Release(rctx)
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		b.renew(ctx)
	}()
	t := time.NewTimer(b.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.tick(ctx)
		t.Reset(b.o.Interval)
	}
}

// renew renews the lease every third of its TTL while a pass is under way.
// Between passes the pass's own writes renew it, once an interval: an idle
// mount costs one GET and one PUT of it per interval, and if it dies
// another mount takes over within an interval and the TTL.
func (b *Background) renew(ctx context.Context) {
	t := time.NewTicker(b.o.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.lease.mu.Lock()
		held := b.lease.etag != ""
		b.lease.mu.Unlock()
		// Between passes too when the TTL is shorter than two
		// intervals (an interval past half an hour).
		if held && (b.inPass.Load() || b.o.LeaseTTL < 2*b.o.Interval) {
			b.lease.Renew(ctx) // a lease lost shows in the fence
		}
	}
}

// tick takes (or renews) the lease and, if it is held, makes one pass.
func (b *Background) tick(ctx context.Context) {
	held, err := b.lease.Acquire(ctx)
	if ctx.Err() != nil {
		return // stopping
	}
	if !held {
		if err == nil {
			b.adopt()
		}
		b.report(nil, err)
		return
	}
	b.adopt()
	st := b.lease.State()
	o := b.o.Options
	o.After, o.MaxFiles, o.Fence = st.Cursor, b.o.MaxFiles, b.lease.Check
	if b.o.VolumePolicy {
		p, _, stored, err := volume.ReadPolicy(ctx, b.st, b.root)
		if err != nil {
			if ctx.Err() == nil {
				b.report(nil, err)
			}
			return
		}
		if stored {
			o.Keep, o.KeepFor = p.Keep, p.KeepFor
		}
	}
	b.inPass.Store(true)
	rep, err := CleanVolume(ctx, b.st, b.root, o)
	b.inPass.Store(false)
	if ctx.Err() != nil {
		return // stopping: the pass was cut short, and goes on from its cursor next time
	}
	if errors.Is(err, ErrFenced) {
		b.report(rep, err)
		return
	}
	b.mu.Lock()
	if st.Cursor == "" || st.Cursor != b.next {
		// A sweep begins, or goes on from another cleaner's pass: only
		// a sweep of this cleaner's from the first file covers the
		// volume.
		b.whole = st.Cursor == ""
	}
	if rep != nil {
		if rep.Listed {
			// The files of the pass replace what was counted of them.
			rng := idRange{after: st.Cursor, end: rep.Next}
			for id, h := range b.files {
				if rng.holds(id) {
					b.sum.Objects -= h.Objects
					b.sum.Bytes -= h.Bytes
					delete(b.files, id)
				}
			}
			for id, h := range rep.StoredFiles {
				b.files[id] = h
				b.sum.Objects += h.Objects
				b.sum.Bytes += h.Bytes
			}
		} else {
			// A pass that failed before its listing says nothing of
			// the volume: the sweep starts again.
			b.whole = false
		}
		// A pass that fails goes on from where it planned to end all the
		// same: its files are tried again next sweep, and one file that
		// always fails does not hold the rest back.
		st.Cursor, b.next = rep.Next, rep.Next
		if rep.Next == "" && b.whole {
			b.covered = true
		}
		if b.covered {
			b.stored = LeaseState{StoredObjects: b.sum.Objects, StoredBytes: b.sum.Bytes, StoredAt: time.Now().UTC()}
			b.hasTot = true
		}
	}
	st.StoredObjects, st.StoredBytes, st.StoredAt = b.stored.StoredObjects, b.stored.StoredBytes, b.stored.StoredAt
	b.mu.Unlock()
	b.lease.SetState(st)
	b.lease.Renew(ctx) // the cursor and totals, stored now
	b.report(rep, err)
}

// adopt takes the totals the lease records while this cleaner has made no
// whole sweep of its own.
func (b *Background) adopt() {
	st := b.lease.State()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !st.StoredAt.IsZero() && (!b.hasTot || st.StoredAt.After(b.stored.StoredAt)) {
		b.stored.StoredObjects, b.stored.StoredBytes, b.stored.StoredAt = st.StoredObjects, st.StoredBytes, st.StoredAt
		b.hasTot = true
	}
}

func (b *Background) report(rep *Report, err error) {
	b.mu.Lock()
	if rep != nil {
		b.passes++
	}
	b.lastErr = err
	b.mu.Unlock()
	if b.o.OnPass != nil {
		b.o.OnPass(rep, err)
	}
}
