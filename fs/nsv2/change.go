package nsv2

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// A change of several names (rename, link, an unlink of one of several
// names, rmdir, an exchange) goes in three steps (section 3): Lock each
// name, Decide (the commit point), then Finish each name; a reader that
// meets a lock uses Resolve. An inode-object op locks the node's inode
// object the same way (inode.go): the change's op list and the body it
// will have, If-Match the object held (If-None-Match when there is none),
// and a reader of it resolves it from the decision (ResolveInode).

// Held is what the caller read of a name before changing it: the ETag of
// its dentry ("" when no object has the key) and its binding then (nil:
// not bound, a tombstone or no object).
type Held struct {
	ETag  string
	Bound *Binding
	// Inode, for an inode-object op: the node as it is (its inode object
	// in force, or, for a node of one name, its attributes with Nlink 0),
	// which the lock keeps for readers until the change is decided.
	Inode *Inode
}

// Locked is one name locked by a change: its key, and the lock as stored.
type Locked struct {
	Key    string
	ETag   string
	Dentry *Dentry
	Inode  *Inode // instead of Dentry, for an inode object
}

// Lock locks for change tx (a fresh id) the name of every dentry op of ops,
// in key order: one PUT each, If-Match held[i].ETag (If-None-Match for a
// name with no object), of the dentry with its current binding held[i].Bound,
// the binding op i gives it, and the whole op list; and the inode object
// of every inode-object op, the same way (Held.Inode its body now). held is
// parallel to ops.
//
// What the caller is told:
//   - the locks, in key order, and nil: every name is locked by tx. Decide
//     next.
//   - a *NameError matching ErrStale: a name changed since it was read (or
//     is locked by another change: Dentry says so); the locks taken were
//     undone. Read again, check again, try again after a backoff.
//   - any other error: not locked. A lock whose write failed without a
//     definite answer, or whose undo failed, may be left on its name: then
//     the decision abort is written for tx so that readers resolve it at
//     once (if that fails too, they resolve it after TxGrace). Either way
//     no reader ever sees a part of the change; try again under a new id.
func (n *Names) Lock(ctx context.Context, tx string, ops []Op, held []Held) ([]Locked, error) {
	todo, err := lockTodo(n.root, tx, ops, held)
	if err != nil {
		return nil, err
	}
	mine := func(cur *Dentry) bool { return cur.Change == tx && cur.Lock != nil }
	for i := range todo {
		l := &todo[i]
		if l.Inode != nil {
			r, err := n.putInode(ctx, l.Key, l.Inode, condFor(l.ETag), func(cur *Inode) bool { return cur.Change == tx && cur.Lock != nil })
			if r.landed {
				l.ETag = r.etag
				continue
			}
			if r.unknown || n.undo(ctx, todo[:i]) != nil {
				_, _ = n.decide(ctx, &Decision{Tx: tx, Outcome: Abort, Ops: ops})
			}
			if err != nil {
				return nil, fmt.Errorf("lock %s: %w", tx, err)
			}
			return nil, &NameError{Key: l.Key, Err: ErrStale, ETag: r.curInfo.ETag}
		}
		r, err := n.putDentry(ctx, l.Key, l.Dentry, condFor(l.ETag), mine)
		if r.landed {
			l.ETag = r.etag
			continue
		}
		// Not locked: undo what was, and say why.
		left := r.unknown || n.undo(ctx, todo[:i]) != nil
		if left {
			// Locks may remain: abort tx, so that readers resolve them now.
			_, _ = n.decide(ctx, &Decision{Tx: tx, Outcome: Abort, Ops: ops})
		}
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", tx, err)
		}
		return nil, &NameError{Key: l.Key, Err: ErrStale, Dentry: r.cur, ETag: r.curInfo.ETag}
	}
	return todo, nil
}

// undo puts back the names of locks, in reverse, as an abort resolves them;
// it returns the first error (the lock then stays, for readers to resolve).
func (n *Names) undo(ctx context.Context, locks []Locked) error {
	var first error
	for i := len(locks) - 1; i >= 0; i-- {
		if _, err := n.resolveOne(ctx, locks[i], Abort); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Decide writes the decision x of change x.Tx: one PUT If-None-Match of
// ns2/tx/<tx>. It is the commit point of a change: the store keeps the first
// of commit and abort, and every party reads that one.
//
// What the caller is told:
//   - the outcome that stands and nil: x.Outcome is decided (also when an
//     answer was lost and the read-back found it), or x was an abort and
//     a commit stands (the caller applies the commit).
//   - Abort and an error matching ErrAborted: x was a commit and abort
//     stands (a reader judged a lock of tx dead). Finish with Abort, and
//     try the change again under a new id.
//   - "" and an error: not known. Decide again with the same x: the
//     answer is then the outcome that stands. Until then the change is
//     undecided, and readers take its names' old bindings.
func (n *Names) Decide(ctx context.Context, x *Decision) (string, error) {
	got, err := n.decide(ctx, x)
	if err != nil {
		return "", err
	}
	if x.Outcome == Commit && got.Outcome == Abort {
		return Abort, fmt.Errorf("decide %s: %w", x.Tx, ErrAborted)
	}
	return got.Outcome, nil
}

// decide writes x If-None-Match and returns the decision that stands.
func (n *Names) decide(ctx context.Context, x *Decision) (*Decision, error) {
	key, err := x.Key(n.root)
	if err != nil {
		return nil, fmt.Errorf("decide: %w: %w", namespace.ErrInvalid, err)
	}
	body, err := EncodeDecision(x)
	if err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	// Either outcome found is an answer: one is what was sent, and the
	// other stands instead of it.
	r, err := put(ctx, n.st, key, body, staging.Conditions{IfNoneMatch: true}, kindDecision, DecodeDecision,
		func(cur *Decision) bool { return cur.Outcome == x.Outcome })
	switch {
	case err != nil:
		return nil, fmt.Errorf("decide %s: %w", x.Tx, err)
	case r.landed:
		return x, nil
	case r.cur == nil:
		// Refused, then gone: the cleaner dropped it (after TrimGrace).
		return nil, fmt.Errorf("decide %s: refused, and no decision is stored", x.Tx)
	}
	return r.cur, nil // the other outcome stands
}

// resolved is the dentry of l once its change is decided outcome: the new
// binding with the op list (kept until the cleaner drops it) for a commit,
// the old binding for an abort; Change stays the change's id.
func resolved(d *Dentry, outcome string) *Dentry {
	out := &Dentry{Dir: d.Dir, Frags: d.Frags, Name: d.Name, Change: d.Change, Bound: d.Bound}
	if outcome == Commit {
		out.Bound, out.Ops = d.Lock.To, d.Ops
	}
	return out
}

// resolveOne replaces the lock l with its name as outcome leaves it: one
// PUT If-Match l.ETag. It returns the resolved dentry's ETag; "" with a nil
// error when the lock was already replaced (a reader or the coordinator
// resolved it first).
func (n *Names) resolveOne(ctx context.Context, l Locked, outcome string) (string, error) {
	if l.Inode != nil {
		return n.resolveInodeLock(ctx, l, outcome)
	}
	d := resolved(l.Dentry, outcome)
	r, err := n.putDentry(ctx, l.Key, d, staging.Conditions{IfMatch: l.ETag}, func(cur *Dentry) bool {
		return cur.Change == d.Change && cur.Lock == nil
	})
	switch {
	case err != nil:
		return "", err
	case r.landed:
		return r.etag, nil
	}
	return "", nil
}

// Finish resolves the names change tx locked (Lock's answer) as outcome,
// the decision that stands (Decide's answer): one PUT If-Match each (step 3
// of section 3). It runs after the call returned; its errors never change
// the outcome, which is stored: a lock it leaves is resolved by its next
// reader from the decision. It returns the first error.
func (n *Names) Finish(ctx context.Context, locks []Locked, outcome string) error {
	if outcome != Commit && outcome != Abort {
		return fmt.Errorf("finish: outcome %q: %w", outcome, namespace.ErrInvalid)
	}
	var first error
	for _, l := range locks {
		if _, err := n.resolveOne(ctx, l, outcome); err != nil && first == nil {
			first = fmt.Errorf("finish %s: %w", staging.TruncKey(l.Key), err)
		}
	}
	return first
}

// Resolved is a name as a reader takes it.
type Resolved struct {
	Key string
	// Dentry and ETag: the object at the name as last read or written (nil
	// and "": no object). When the name was locked and its resolution
	// could not be written, they are the lock's.
	Dentry *Dentry
	ETag   string
	// Bound is the name's binding for every reader now (nil: not bound).
	Bound *Binding
	// Decision is the decision applied, when the name was locked by a
	// decided change: the caller applies its other ops too (section 3,
	// "Atomic to every reader").
	Decision *Decision
	// Pending: the name is locked by a change not decided, younger than
	// TxGrace, or is a reaping tombstone (Bound nil) the trim is deleting.
	// Bound is the old binding; no writer may replace it yet.
	Pending bool
}

// Resolve reads name in directory dir (of frags fragments) as a reader
// takes it (section 3): one GET of its dentry; a locked one is resolved by
// reading the decision of its change: commit gives the new binding, abort
// the old one, and none the old one, unless the lock is older than TxGrace
// by the store's clock (the dentry's LastModified against Names' storeNow):
// then it writes abort (If-None-Match) and takes whichever decision stands.
// A decided lock is then replaced by its resolution (one PUT If-Match the
// lock's ETag), a tidying that readers do not need: if it fails, the name
// is still read right, from the decision.
//
// What the caller is told: the name (see Resolved) and nil; or an error
// when its binding cannot be known: the dentry or the decision could not
// be read (an error matching namespace.ErrCorrupt when one is damaged), or
// an abort was written without a definite answer and the decision could
// not be read back.
func (n *Names) Resolve(ctx context.Context, dir namespace.Ino, frags uint32, name string) (Resolved, error) {
	key, err := n.dentryKey(dir, frags, name)
	if err != nil {
		return Resolved{}, fmt.Errorf("resolve: %w", err)
	}
	for range maxRounds {
		d, info, err := read(ctx, n.st, key, kindDentry, DecodeDentry)
		if errors.Is(err, staging.ErrNotFound) {
			return Resolved{Key: key}, nil
		}
		if err != nil {
			return Resolved{}, fmt.Errorf("resolve: %w", err)
		}
		if d.Lock == nil {
			// A reaping tombstone is a tombstone no writer may replace
			// (trim.go): Pending, as a lock not decided is.
			return Resolved{Key: key, Dentry: d, ETag: info.ETag, Bound: d.Bound, Pending: d.Reaping()}, nil
		}
		res, err := n.resolveLocked(ctx, key, d, info)
		if err != nil {
			return Resolved{}, fmt.Errorf("resolve: %w", err)
		}
		if res.Dentry != nil {
			return res, nil
		}
		// Replaced since it was read: read it again.
	}
	return Resolved{}, fmt.Errorf("resolve %s: %w", staging.TruncKey(key), ErrContended)
}

// resolveLocked resolves d, the locked dentry read from key with info. A
// Resolved with a nil Dentry says the lock was replaced meanwhile by
// another writer than a resolver: read the name again.
func (n *Names) resolveLocked(ctx context.Context, key string, d *Dentry, info staging.ObjectInfo) (Resolved, error) {
	xkey, err := DecisionKey(n.root, d.Change)
	if err != nil {
		return Resolved{}, err // a decoded dentry has a valid change id
	}
	x, _, err := read(ctx, n.st, xkey, kindDecision, DecodeDecision)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		if n.now().Sub(info.LastModified) <= n.txGrace {
			return Resolved{Key: key, Dentry: d, ETag: info.ETag, Bound: d.Bound, Pending: true}, nil
		}
		if x, err = n.decide(ctx, &Decision{Tx: d.Change, Outcome: Abort, Ops: d.Ops}); err != nil {
			return Resolved{}, err
		}
	case err != nil:
		return Resolved{}, err
	}
	l := Locked{Key: key, ETag: info.ETag, Dentry: d}
	out := resolved(d, x.Outcome)
	res := Resolved{Key: key, Dentry: d, ETag: info.ETag, Bound: out.Bound, Decision: x}
	etag, err := n.resolveOne(ctx, l, x.Outcome)
	switch {
	case err != nil:
		// Not tidied: the lock stays, read right from the decision.
	case etag != "":
		res.Dentry, res.ETag = out, etag
	default:
		// Already replaced: by a resolver (then it reads as out) or by a
		// writer after one.
		res.Dentry = nil
	}
	return res, nil
}

// lockTodo checks the ops and held of change tx and makes the lock of each
// (Names.Lock, Tree.lockAll): a locked dentry for a name, the locked inode
// object for an op of a node of several names (inode.go); in key order.
func lockTodo(root, tx string, ops []Op, held []Held) ([]Locked, error) {
	if !ValidID(tx) {
		return nil, fmt.Errorf("lock: change id %q: %w", tx, namespace.ErrInvalid)
	}
	if err := checkOps(ops, true); err != nil {
		return nil, fmt.Errorf("lock %s: %v: %w", tx, err, namespace.ErrInvalid)
	}
	if len(held) != len(ops) {
		return nil, fmt.Errorf("lock %s: %d held for %d ops: %w", tx, len(held), len(ops), namespace.ErrInvalid)
	}
	var todo []Locked
	for i := range ops {
		o := &ops[i]
		h := held[i]
		if o.Ino != 0 {
			if o.Inode == nil || h.Inode == nil || h.Inode.Ino != o.Ino {
				return nil, fmt.Errorf("lock %s: op %d: an inode object without its body: %w", tx, i, namespace.ErrInvalid)
			}
			in := lockedInode(tx, o.Inode, h.Inode, ops)
			key, err := in.Key(root)
			if err != nil {
				return nil, fmt.Errorf("lock %s: %w: %w", tx, namespace.ErrInvalid, err)
			}
			todo = append(todo, Locked{Key: key, ETag: h.ETag, Inode: in})
			continue
		}
		if h.ETag == "" && h.Bound != nil {
			return nil, fmt.Errorf("lock %s: op %d: a binding held without an ETag: %w", tx, i, namespace.ErrInvalid)
		}
		d := &Dentry{Dir: o.Dir, Frags: o.Frags, Name: o.Name, Change: tx, Bound: h.Bound, Lock: &Lock{To: o.To}, Ops: ops}
		key, err := d.Key(root)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w: %w", tx, namespace.ErrInvalid, err)
		}
		todo = append(todo, Locked{Key: key, ETag: h.ETag, Dentry: d}) // ETag: held until locked
	}
	slices.SortFunc(todo, func(a, b Locked) int { return cmp.Compare(a.Key, b.Key) })
	return todo, nil
}
