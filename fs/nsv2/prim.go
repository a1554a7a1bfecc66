package nsv2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// The primitives of namespace v2 (docs/namespace-v2.md, sections 3 and 7):
// each is one conditional PUT where the design says one, and each resolves a
// lost answer the same way, by reading the key back and looking for the id
// it wrote in the body (a change id, or a mount id for a batch claim). None
// guesses: a write whose fate the read-back cannot tell is reported as an
// error that says so, and calling the primitive again with the same id
// finishes it or finds it done.
//
// None retries a failed request. The S3 store already retries what is
// transient (5xx, 503 SlowDown, timeouts) up to its own bounds
// (staging/s3, s3.Timeouts.RetryMax); the memory and directory stores have
// no transient failures. A failure that reaches these functions is final for
// this call: 403, a full store (507, QuotaExceeded) and the rest fail the
// call with the store's error wrapped (errors.Is and errors.As reach it, so
// the mount can name it), after the read-back has shown that nothing of this
// call is left half-made.

// TxGrace is how old, by the store's clock, a lock of a change with no
// decision must be before a reader decides that change aborted.
const TxGrace = 30 * time.Second

// maxRounds bounds how often Bind and Resolve start over when the name
// changes between their read and their write.
const maxRounds = 8

// maxClaims bounds the batches ClaimBatch tries in one call.
const maxClaims = 1024

// Errors a caller decides on (errors.Is). Each comes in a typed error
// naming the key, and for a name, what the store holds there now.
var (
	// ErrStale: the object changed since the ETag the caller held (an
	// If-Match refused), or the key holds no object. The caller reads it
	// again, checks again and tries again.
	ErrStale = errors.New("changed since it was read")
	// ErrLocked: the name is locked by a change of several names that is
	// not decided yet and whose lock is younger than TxGrace; no writer may
	// replace it meanwhile. The caller waits and tries again.
	ErrLocked = errors.New("locked by a change in progress")
	// ErrAborted: a commit was refused because the change was decided
	// aborted (a reader judged its lock dead). The caller tries its change
	// again, under a new change id.
	ErrAborted = errors.New("change aborted")
	// ErrContended: the name changed under every one of maxRounds attempts.
	ErrContended = errors.New("changed under every attempt")
	// ErrNoBatch: every batch ClaimBatch tried was taken.
	ErrNoBatch = errors.New("no free inode batch")
)

// NameError is the error of a write to a name refused by what the name
// holds: Err is namespace.ErrExist, ErrStale or ErrLocked. Dentry and ETag
// are what the key holds now (Dentry nil: no object), for the caller's
// cache and its next try.
type NameError struct {
	Key    string
	Err    error
	Dentry *Dentry
	ETag   string
}

func (e *NameError) Error() string {
	if e.Dentry != nil && e.Dentry.Lock != nil {
		return fmt.Sprintf("%s: %v (change %s)", staging.TruncKey(e.Key), e.Err, e.Dentry.Change)
	}
	return fmt.Sprintf("%s: %v", staging.TruncKey(e.Key), e.Err)
}

func (e *NameError) Unwrap() error { return e.Err }

// Names does the namespace's requests to one store, under one mount root.
// It holds no state of its own: every call is one change or one read, and
// Names is safe for concurrent use.
type Names struct {
	st   staging.Store
	root string
	// now is the store's clock as the mount knows it: the LastModified of
	// its own latest write, advanced by its monotonic clock since. It only
	// decides when a reader may abort a change that left a lock (TxGrace);
	// safety never depends on it.
	now     func() time.Time
	txGrace time.Duration
}

// New returns the primitives on st under root. storeNow is the store's
// clock as the caller knows it (see Names.now); nil is the local clock.
func New(st staging.Store, root string, storeNow func() time.Time) *Names {
	if storeNow == nil {
		storeNow = time.Now
	}
	return &Names{st: st, root: root, now: storeNow, txGrace: TxGrace}
}

// putResult is the outcome of a conditional write and its read-back.
type putResult[T any] struct {
	// landed: the write is stored; etag is its ETag.
	landed bool
	etag   string
	// refused: the condition did not hold, and cur is what the key holds
	// (nil: no object); curETag and curInfo are its.
	refused bool
	cur     *T
	curInfo staging.ObjectInfo
	// unknown: the write failed and the read-back could not tell whether
	// it landed (the read failed too).
	unknown bool
	// With an error that is not unknown, cur and curInfo are what the key
	// holds (nil: no object, or a damaged one).
}

// read is a Get of one object of kind, bounded by its kind's largest body,
// decoded and checked by dec. An object too large is corrupt.
func read[T any](ctx context.Context, st staging.Store, key string, kind byte, dec func(string, []byte) (*T, error)) (*T, staging.ObjectInfo, error) {
	data, info, err := staging.GetLimited(ctx, st, key, int64(envHeaderLen+maxBody[kind]))
	if errors.Is(err, staging.ErrTooLarge) {
		return nil, staging.ObjectInfo{}, &namespace.CorruptError{Key: key, Reason: err.Error()}
	}
	if err != nil {
		return nil, staging.ObjectInfo{}, fmt.Errorf("read %s %s: %w", kindNames[kind], staging.TruncKey(key), err)
	}
	v, err := dec(key, data)
	if err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	return v, info, nil
}

// put writes body at key under cond, once. When the PUT fails it reads key
// back: if the object there is this call's own (mine, by the id in its
// body), the write landed and its answer was lost (or a resend of it by the
// store's client was refused by the write itself). Otherwise, if the
// condition was refused, or does not hold for what the key holds now, the
// write is refused, with what the key holds (whether it failed before or
// after being applied and replaced, the caller acts on what is there). Any
// other failure is the error, the write not stored as far as the store
// shows; and a read-back that fails leaves the write's fate unknown (err
// says both). A damaged object at key (corrupt) is never this call's: it
// makes a refusal an error matching namespace.ErrCorrupt.
func put[T any](ctx context.Context, st staging.Store, key string, body []byte, cond staging.Conditions,
	kind byte, dec func(string, []byte) (*T, error), mine func(*T) bool) (putResult[T], error) {
	info, err := st.Put(ctx, key, body, staging.PutOptions{Conditions: cond})
	if err == nil {
		return putResult[T]{landed: true, etag: info.ETag}, nil
	}
	what := fmt.Sprintf("write %s %s", kindNames[kind], staging.TruncKey(key))
	cur, curInfo, rerr := read(ctx, st, key, kind, dec)
	exists := true
	switch {
	case rerr == nil && mine(cur):
		return putResult[T]{landed: true, etag: curInfo.ETag}, nil
	case errors.Is(rerr, staging.ErrNotFound):
		cur, rerr, exists = nil, nil, false
	}
	corrupt := errors.Is(rerr, namespace.ErrCorrupt)
	if rerr != nil && !corrupt {
		return putResult[T]{unknown: true}, fmt.Errorf("%s: %w (not known whether stored: reading it back: %v)", what, err, rerr)
	}
	holds := !(cond.IfNoneMatch && exists) && (cond.IfMatch == "" || exists && !corrupt && curInfo.ETag == cond.IfMatch)
	switch {
	case (errors.Is(err, staging.ErrPrecondition) || !holds) && corrupt:
		return putResult[T]{}, fmt.Errorf("%s: refused by a damaged object: %w", what, rerr)
	case errors.Is(err, staging.ErrPrecondition) || !holds:
		return putResult[T]{refused: true, cur: cur, curInfo: curInfo}, nil
	}
	return putResult[T]{cur: cur, curInfo: curInfo}, fmt.Errorf("%s: %w (not stored)", what, err)
}

// dentryKey is the key of name, or ErrInvalid-wrapped error.
func (n *Names) dentryKey(dir namespace.Ino, frags uint32, name string) (string, error) {
	key, err := DentryKey(n.root, dir, frags, name)
	if err != nil {
		return "", fmt.Errorf("%w: %w", namespace.ErrInvalid, err)
	}
	return key, nil
}

func (n *Names) putDentry(ctx context.Context, key string, d *Dentry, cond staging.Conditions, mine func(*Dentry) bool) (putResult[Dentry], error) {
	body, err := EncodeDentry(d)
	if err != nil {
		return putResult[Dentry]{}, err
	}
	return put(ctx, n.st, key, body, cond, kindDentry, DecodeDentry, mine)
}

// condFor is If-Match etag, or If-None-Match when etag is "" (no object).
func condFor(etag string) staging.Conditions {
	if etag == "" {
		return staging.Conditions{IfNoneMatch: true}
	}
	return staging.Conditions{IfMatch: etag}
}

// Bind binds name in directory dir (of frags fragments) to b, by change
// change (a fresh id, 32 hex digits): a create, mkdir, symlink or mknod of a
// new name (section 3). It is one PUT If-None-Match; refused, it reads the
// name: a tombstone is replaced with one PUT If-Match its ETag; a lock is
// resolved first (Resolve). It returns the ETag of the dentry it stored.
//
// What the caller is told:
//   - nil: the name is bound by this change (also when an answer was lost
//     and the read-back found this change's dentry).
//   - a *NameError matching namespace.ErrExist: the name is bound, by
//     another change; nothing was written. Dentry and ETag are the
//     binding found.
//   - a *NameError matching ErrLocked: a change of several names holds the
//     name and is not decided yet, or the trim is deleting its tombstone
//     (a reaping tombstone); nothing was written. Try again later.
//   - ErrContended: the name changed under each of maxRounds tries.
//   - an error matching namespace.ErrCorrupt: the dentry at the name is
//     damaged (the name is EIO); nothing was written.
//   - namespace.ErrInvalid: the arguments make no dentry.
//   - any other error (the store's, wrapped): not bound, as far as the
//     store shows; or, when it says "not known whether stored", perhaps
//     bound. Calling Bind again with the same change and binding finishes
//     it or finds it done.
func (n *Names) Bind(ctx context.Context, dir namespace.Ino, frags uint32, name, change string, b *Binding) (string, error) {
	key, err := n.dentryKey(dir, frags, name)
	if err != nil {
		return "", fmt.Errorf("bind: %w", err)
	}
	if b == nil {
		return "", fmt.Errorf("bind %s: no binding: %w", staging.TruncKey(key), namespace.ErrInvalid)
	}
	d := &Dentry{Dir: dir, Frags: frags, Name: Name(name), Change: change, Bound: b}
	mine := func(cur *Dentry) bool { return cur.Change == change && cur.Lock == nil && cur.Bound != nil }
	etag := "" // what the name holds as far as this call knows: "" none
	for range maxRounds {
		r, err := n.putDentry(ctx, key, d, condFor(etag), mine)
		if err != nil {
			return "", fmt.Errorf("bind: %w", err)
		}
		if r.landed {
			return r.etag, nil
		}
		if r.cur == nil {
			etag = "" // gone since it was read
			continue
		}
		cur, curETag := r.cur, r.curInfo.ETag
		if cur.Reaping() {
			// The trim is deleting it: nothing may land on it (trim.go).
			// Bound by no one; try again once it is gone.
			return "", &NameError{Key: key, Err: ErrLocked, Dentry: cur, ETag: curETag}
		}
		bound := cur.Bound
		if cur.Lock != nil {
			res, err := n.resolveLocked(ctx, key, cur, r.curInfo)
			if err != nil {
				return "", fmt.Errorf("bind: %w", err)
			}
			if res.Pending {
				return "", &NameError{Key: key, Err: ErrLocked, Dentry: res.Dentry, ETag: res.ETag}
			}
			if res.Dentry == nil {
				// Replaced since: the If-Match of the lock's ETag is
				// refused, and reads what is there now.
				etag = r.curInfo.ETag
				continue
			}
			cur, curETag, bound = res.Dentry, res.ETag, res.Bound
		}
		if bound != nil {
			return "", &NameError{Key: key, Err: namespace.ErrExist, Dentry: cur, ETag: curETag}
		}
		etag = curETag // a tombstone, or a lock resolved to none: replace it
	}
	return "", fmt.Errorf("bind %s: %w", staging.TruncKey(key), ErrContended)
}

// Tombstone removes name from directory dir (of frags fragments) by change
// change: one PUT If-Match etag, the ETag of the dentry the caller read and
// checked (section 3: unlink of a name that is its node's only one; the
// caller stores the orphan record first).
//
// What the caller is told:
//   - nil and the tombstone's ETag: the name is removed by this change
//     (also when an answer was lost and the read-back found this
//     change's tombstone).
//   - a *NameError matching ErrStale: the dentry is no longer the one of
//     etag (or there is none); nothing was written. Dentry and ETag are
//     what it holds now, to check again.
//   - an error matching namespace.ErrCorrupt: the dentry is damaged.
//   - any other error: not removed, as far as the store shows, or (when it
//     says "not known whether stored") perhaps removed. Calling Tombstone
//     again with the same change and etag finishes it or finds it done.
func (n *Names) Tombstone(ctx context.Context, dir namespace.Ino, frags uint32, name, change, etag string) (string, error) {
	key, err := n.dentryKey(dir, frags, name)
	if err != nil {
		return "", fmt.Errorf("tombstone: %w", err)
	}
	if etag == "" {
		return "", fmt.Errorf("tombstone %s: no ETag: %w", staging.TruncKey(key), namespace.ErrInvalid)
	}
	d := &Dentry{Dir: dir, Frags: frags, Name: Name(name), Change: change}
	r, err := n.putDentry(ctx, key, d, staging.Conditions{IfMatch: etag}, func(cur *Dentry) bool {
		return cur.Change == change && cur.Tombstone()
	})
	if err != nil {
		return "", fmt.Errorf("tombstone: %w", err)
	}
	if r.landed {
		return r.etag, nil
	}
	return "", &NameError{Key: key, Err: ErrStale, Dentry: r.cur, ETag: r.curInfo.ETag}
}

// ClaimBatch claims an inode batch for mount (its id, fresh for this life of
// the mount): one PUT If-None-Match of ns2/ino/<from>; refused, the next
// batch, up to maxClaims of them (section 3, "Inode numbers: batches").
//
// What the caller is told:
//   - the batch and nil: the batch is this mount's. A batch this mount id
//     claimed before counts as its own (that is how a lost answer is
//     found), so a mount asks from past the batches it has used.
//   - ErrNoBatch: the maxClaims batches from from on are all taken (or
//     from is past the last batch).
//   - any other error: no batch claimed, as far as the store shows, or
//     (when it says "not known whether stored") perhaps batch from+k of
//     the error's key. Calling ClaimBatch again from the same batch
//     finishes it or finds it done.
//
// A damaged claim is someone's: it is skipped, never used.
func (n *Names) ClaimBatch(ctx context.Context, mount string, from uint64) (uint64, error) {
	if !ValidID(mount) {
		return 0, fmt.Errorf("claim inode batch: mount id %q: %w", mount, namespace.ErrInvalid)
	}
	for batch := from; batch <= maxBatch && batch-from < maxClaims; batch++ {
		key, err := BatchKey(n.root, batch)
		if err != nil {
			return 0, fmt.Errorf("claim inode batch: %w", err)
		}
		body, err := EncodeBatch(&Batch{N: batch, Mount: mount})
		if err != nil {
			return 0, fmt.Errorf("claim inode batch: %w", err)
		}
		r, err := put(ctx, n.st, key, body, staging.Conditions{IfNoneMatch: true}, kindBatch, DecodeBatch,
			func(cur *Batch) bool { return cur.Mount == mount })
		// Refused, or taken by a damaged claim: the next one.
		switch {
		case errors.Is(err, namespace.ErrCorrupt):
			continue
		case err != nil:
			return 0, fmt.Errorf("claim inode batch: %w", err)
		case r.landed:
			return batch, nil
		}
	}
	return 0, fmt.Errorf("claim inode batch from %d: %d tried: %w", from, maxClaims, ErrNoBatch)
}
