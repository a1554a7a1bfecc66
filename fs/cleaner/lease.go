package cleaner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// The lease of the background cleaner: one object, <root>gc/lease
// (volume.GCLeaseKey), says which mount cleans the volume. It is JSON:
//
//	{
//	  "version": 1,
//	  "holder": "<32 hex digits>",  // "" when let go: free to take at once
//	  "ttl_ms": 60000,              // how long it lasts unrenewed
//	  "cursor": "<file id>",        // where the next pass starts ("" the first file)
//	  "stored_objects": 123,        // the files' objects as of the last whole sweep
//	  "stored_bytes": 456789,
//	  "stored_at": "2026-...Z",     // when that sweep ended (zero: none yet)
//	  "nonce": "<16 hex digits>"    // new at every write
//	}
//
// The nonce makes every write's bytes new: on S3 an ETag is the MD5 of the
// bytes, so a renewal of an unchanged state would keep the ETag, and a
// contender waiting for it to stay unchanged for the TTL would take a live
// holder's lease (TestLeaseRenewedSameStateOnS3). A lease without one
// (written by an earlier build) decodes as before.
//
// It is taken with If-None-Match when absent, and otherwise only with
// If-Match on the ETag seen: a lease let go at once, another holder's once
// its ETag has not changed for its TTL on the taker's own clock (no clock is
// compared with the store's or another machine's). The holder renews it
// every third of the TTL with If-Match on its own last ETag; a renewal that
// fails its condition means the lease was taken.
//
// Two cleaners may still run at once: a holder paused longer than its TTL
// (a slow machine, a stopped process) finds out only when it looks. So the
// holder's execution is fenced (Options.Fence = Lease.Check): before each
// batch of writes it checks that its last renewal is younger than the TTL
// and that the object's ETag is still the one it wrote, and stops otherwise.
// What is left to a slow holder is the one batch it had begun, whose
// deletions the cleaner's rules decided from the bucket as it is, as they
// would for any run.

// leaseVersion is the version of the lease's JSON this build writes.
const leaseVersion = 1

// maxLeaseBytes bounds the read of a lease (one is ~250 bytes).
const maxLeaseBytes = 16 << 10

// Bounds of a lease's TTL as read from the bucket: a lease whose TTL is
// outside them is waited out for the nearest bound.
const (
	minLeaseTTL = time.Second
	maxLeaseTTL = time.Hour
)

// DefaultLeaseTTL is what the background cleaner's lease lasts unrenewed
// beyond two intervals: how long a mount that died keeps the others from
// cleaning.
const DefaultLeaseTTL = time.Minute

// ErrLeaseLost: the lease is not this cleaner's (any more).
var ErrLeaseLost = errors.New("the cleaner's lease is not held")

// ErrBadLease: a lease object that does not decode.
var ErrBadLease = errors.New("malformed cleaner lease")

// LeaseState is what a lease records besides its holder: where the sweep
// is and what the volume's files held at the end of the last whole sweep.
type LeaseState struct {
	Cursor        string    `json:"cursor"`
	StoredObjects int64     `json:"stored_objects"`
	StoredBytes   int64     `json:"stored_bytes"`
	StoredAt      time.Time `json:"stored_at"`
}

type leaseBody struct {
	Version int    `json:"version"`
	Holder  string `json:"holder"`
	TTLms   int64  `json:"ttl_ms"`
	LeaseState
	Nonce string `json:"nonce,omitempty"`
}

// leaseNonce is a fresh value for leaseBody.Nonce.
func leaseNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DecodeLease decodes and checks a lease object.
func DecodeLease(b []byte) (holder string, ttl time.Duration, s LeaseState, err error) {
	var v leaseBody
	if err := json.Unmarshal(b, &v); err != nil {
		return "", 0, s, fmt.Errorf("%w: %v", ErrBadLease, err)
	}
	if v.Version < 1 {
		return "", 0, s, fmt.Errorf("%w: version %d", ErrBadLease, v.Version)
	}
	if v.StoredObjects < 0 || v.StoredBytes < 0 {
		return "", 0, s, fmt.Errorf("%w: negative totals", ErrBadLease)
	}
	if len(v.Holder) > 64 || len(v.Cursor) > 1024 || len(v.Nonce) > 64 {
		return "", 0, s, fmt.Errorf("%w: holder or cursor too long", ErrBadLease)
	}
	ttl = time.Duration(v.TTLms) * time.Millisecond
	if v.TTLms > int64(maxLeaseTTL/time.Millisecond) {
		ttl = maxLeaseTTL
	}
	ttl = max(ttl, minLeaseTTL)
	return v.Holder, ttl, v.LeaseState, nil
}

// Lease is one contender for the cleaner's lease of a volume. Safe for
// concurrent use: the renewal and the fence run beside the pass.
type Lease struct {
	st  staging.Store
	key string
	id  string
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	etag    string    // of the lease this contender wrote last; "" when not held; GUARDED_BY(mu)
	renewed time.Time // when the write of etag began; GUARDED_BY(mu)
	state   LeaseState
	seenTag string    // another's lease, as first seen; GUARDED_BY(mu)
	seenAt  time.Time // GUARDED_BY(mu)
	seenTTL time.Duration
}

// NewLease is a contender for the lease of the volume at root, lasting ttl
// unrenewed; now is its clock (time.Now when nil: monotonic).
func NewLease(st staging.Store, root string, ttl time.Duration, now func() time.Time) *Lease {
	if now == nil {
		now = time.Now
	}
	var b [16]byte
	rand.Read(b[:])
	return &Lease{st: st, key: volume.GCLeaseKey(root), id: hex.EncodeToString(b[:]), ttl: ttl, now: now}
}

// Held says whether this contender holds the lease, as far as it knows.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.etag != "" && l.now().Sub(l.renewed) < l.ttl
}

// State is the state last read or written.
func (l *Lease) State() LeaseState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// SetState sets what the next renewal writes.
func (l *Lease) SetState(s LeaseState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = s
}

// Acquire renews the lease if held, and otherwise takes it if it is free:
// absent, let go, or another's whose ETag has not changed for its TTL since
// this contender first saw it. It says whether the lease is held now.
func (l *Lease) Acquire(ctx context.Context) (bool, error) {
	l.mu.Lock()
	held := l.etag != ""
	l.mu.Unlock()
	if held {
		err := l.Renew(ctx)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ErrLeaseLost) {
			return false, err
		}
	}
	b, info, err := staging.GetLimited(ctx, l.st, l.key, maxLeaseBytes)
	if errors.Is(err, staging.ErrNotFound) {
		return l.write(ctx, staging.Conditions{IfNoneMatch: true})
	}
	if err != nil {
		return false, fmt.Errorf("read the cleaner's lease %s: %w", l.key, err)
	}
	holder, ttl, st, derr := DecodeLease(b)
	if derr != nil {
		// Taken for a holder's: waited out for this contender's TTL.
		holder, ttl = "?", l.ttl
	}
	l.mu.Lock()
	if derr == nil {
		l.state = st
	}
	take := holder == "" || holder == l.id
	if !take {
		if l.seenTag != info.ETag {
			l.seenTag, l.seenAt, l.seenTTL = info.ETag, l.now(), ttl
		}
		take = l.now().Sub(l.seenAt) >= l.seenTTL
	}
	l.mu.Unlock()
	if !take {
		return false, nil
	}
	return l.write(ctx, staging.Conditions{IfMatch: info.ETag})
}

// Renew writes the lease again on the ETag this contender wrote last; the
// error is ErrLeaseLost when that is not the lease's any more.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	etag := l.etag
	l.mu.Unlock()
	if etag == "" {
		return ErrLeaseLost
	}
	ok, err := l.write(ctx, staging.Conditions{IfMatch: etag})
	if err != nil {
		return err
	}
	if !ok {
		return ErrLeaseLost
	}
	return nil
}

// write stores the lease, held by this contender, under cond. A failed
// condition is not an error: the lease is another's (ok false).
func (l *Lease) write(ctx context.Context, cond staging.Conditions) (bool, error) {
	l.mu.Lock()
	body := leaseBody{Version: leaseVersion, Holder: l.id, TTLms: l.ttl.Milliseconds(), LeaseState: l.state, Nonce: leaseNonce()}
	l.mu.Unlock()
	b, err := json.Marshal(body)
	if err != nil {
		return false, err
	}
	at := l.now()
	info, err := l.st.Put(ctx, l.key, append(b, '\n'), staging.PutOptions{Conditions: cond})
	l.mu.Lock()
	defer l.mu.Unlock()
	if errors.Is(err, staging.ErrPrecondition) || errors.Is(err, staging.ErrNotFound) && cond.IfMatch != "" {
		if cond.IfMatch != "" && cond.IfMatch == l.etag {
			l.etag = ""
		}
		return false, nil
	}
	if err != nil {
		// Whether it landed is unknown: the lease stays held as far as
		// the last renewal that landed goes (Held, Check), and the next
		// renewal on the old ETag tells.
		return false, fmt.Errorf("write the cleaner's lease %s: %w", l.key, err)
	}
	l.etag, l.renewed = info.ETag, at
	return true, nil
}

// Check is the fence of a holder's execution: nil only while the last
// renewal is younger than the TTL and the lease object is still the one
// this contender wrote (one HEAD).
func (l *Lease) Check(ctx context.Context) error {
	l.mu.Lock()
	etag, fresh := l.etag, l.now().Sub(l.renewed) < l.ttl
	l.mu.Unlock()
	if etag == "" || !fresh {
		return ErrLeaseLost
	}
	info, err := l.st.Head(ctx, l.key)
	if errors.Is(err, staging.ErrNotFound) {
		return ErrLeaseLost
	}
	if err != nil {
		return fmt.Errorf("check the cleaner's lease %s: %w", l.key, err)
	}
	l.mu.Lock()
	now := l.etag // a renewal may have landed meanwhile
	l.mu.Unlock()
	if info.ETag != etag && info.ETag != now {
		return ErrLeaseLost
	}
	return nil
}

// Release lets the lease go, if held: written with no holder (If-Match),
// so another mount takes it at once, its cursor and totals kept.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	etag := l.etag
	body := leaseBody{Version: leaseVersion, TTLms: l.ttl.Milliseconds(), LeaseState: l.state, Nonce: leaseNonce()}
	l.etag = ""
	l.mu.Unlock()
	if etag == "" {
		return nil
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	_, err = l.st.Put(ctx, l.key, append(b, '\n'), staging.PutOptions{Conditions: staging.Conditions{IfMatch: etag}})
	if errors.Is(err, staging.ErrPrecondition) {
		return nil // taken meanwhile
	}
	if err != nil {
		return fmt.Errorf("let go of the cleaner's lease %s: %w", l.key, err)
	}
	return nil
}
