package nsv2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// The changes of several names (section 3, step 4 of section 10): rename
// (and exchange) and rmdir, each a change of the primitives: lock every name
// it touches, all at once (lockAll; Names.Lock, which locks one after
// another in key order, is for tests), Decide (the commit point: the call
// returns after it), then resolve each lock, after the call, by a tidy the
// Tree owns (tidyLater). A reader meeting a lock resolves it (Resolve), and
// a reader that meets a name of a decided change drops what it cached of
// the change's other names, so that it reads them again and never shows
// one side of it.
//
// A rename's round trips before it returns, when the mount knows both
// names (the kernel looked them up just before: the cache, or a whole
// listing of the target's directory within the TTL that lacks it): the
// locks, with the orphan records beside them, then the decision — two
// (TestRenameCriticalPath). Names it does not know are read first, both at
// once: three. A guess from the cache that is wrong costs a refused lock
// and a read, never a wrong answer. Before, a rename of a directory within
// its parent took seven, one after another (two reads, two locks, the
// decision, two resolutions).
//
// A directory moved across directories (a rename whose directories
// differ, or an exchange across directories where either node is a
// directory) goes through the moves log first (moves.go), which keeps two
// mounts' moves from making a loop (mv a b/ against mv b a/).
//
// A name of a node of several names moves as any name; a rename over one
// also lowers its inode object's count of names, in the change (inode.go).

// readName reads name in dir from the store (Resolve) and caches it. A name
// locked by a change not decided is a *NameError matching ErrLocked.
func (t *Tree) readName(ctx context.Context, dir namespace.Ino, frags uint32, name string) (*entry, error) {
	r, err := t.p.Resolve(ctx, dir, frags, name)
	if err != nil {
		return nil, err
	}
	return t.took(ctx, dir, frags, name, r)
}

// took caches r, name in dir as read (readName), and returns a copy of its
// entry as read: the cache's entry may be made stale by the next read.
func (t *Tree) took(ctx context.Context, dir namespace.Ino, frags uint32, name string, r Resolved) (*entry, error) {
	e := t.learn(dir, frags, name, r)
	if r.Pending {
		return nil, &NameError{Key: r.Key, Err: ErrLocked, Dentry: r.Dentry, ETag: r.ETag}
	}
	if e != nil && e.bound != nil && e.bound.Node == nil {
		if err := t.readInode(ctx, e); err != nil {
			return nil, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return copyEntry(e), nil
}

// heldOf is what a change holds of e (nil: no object at the name).
func heldOf(e *entry) Held {
	if e == nil {
		return Held{}
	}
	return Held{ETag: e.etag, Bound: e.bound}
}

// errNotEmpty is the answer of a removal that found names.
func errNotEmpty(dir namespace.Ino) error {
	return fmt.Errorf("directory %d: %w", dir, namespace.ErrNotEmpty)
}

// runChange makes change tx of ops: Lock (held, parallel to ops; every
// name at once, lockAll), with pre (nil: none) run beside the locks — the
// writes that must land before the decision and are harmless if the change
// aborts (an orphan record, a stale one deleted); then, when sealDir is
// set, the seal of that directory with its leases waited out and its
// emptiness checked (a directory removed by the change), then Decide
// commit. It returns the locks, which the caller resolves after it has
// cached the change (tidyLater): the call returns at the decision, and the
// names read right from it until then (Resolve).
//
// What the caller is told:
//   - the locks and nil: committed.
//   - a *NameError matching ErrStale (a name changed since read) or
//     ErrLocked (a name is locked by another change), or ErrAborted (a
//     reader judged this change's lock dead): nothing changed; read again
//     and try again under a new id (after a wait, for ErrLocked).
//   - ErrNotEmpty: sealDir has names; decided abort, nothing changed.
//   - any other error: not stored, or, when it says "not known", perhaps
//     stored: readers take whichever the decision says.
func (t *Tree) runChange(ctx context.Context, tx string, ops []Op, held []Held, sealDir namespace.Ino, sealFrags uint32,
	pre func(context.Context) error) ([]Locked, error) {
	var preErr error
	var wg sync.WaitGroup
	if pre != nil {
		wg.Add(1)
		go func() { defer wg.Done(); preErr = pre(ctx) }()
	}
	locks, err := t.lockAll(ctx, tx, ops, held)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if preErr != nil {
		return nil, t.unlockAll(ctx, tx, ops, locks, preErr)
	}
	abort := func(cause error) error {
		out, err := t.p.Decide(ctx, &Decision{Tx: tx, Outcome: Abort, Ops: ops})
		if err != nil {
			// Readers abort it after TxGrace; the seal then seals nothing.
			return fmt.Errorf("%w (deciding abort: %v)", cause, err)
		}
		if err := t.p.Finish(ctx, locks, out); err != nil {
			t.log.Debug("namespace v2: locks of an aborted change left to readers", zap.Error(err))
		}
		if sealDir != 0 {
			t.unseal(sealDir)
		}
		return cause
	}
	if sealDir != 0 {
		empty, err := t.sealEmpty(ctx, tx, sealDir, sealFrags, fragsSet(ops, sealDir))
		switch {
		case err != nil:
			return nil, abort(err)
		case !empty:
			return nil, abort(errNotEmpty(sealDir))
		}
	}
	out, err := t.p.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: ops})
	if out == "" {
		// Not known: deciding abort finds a commit that landed, or stands.
		var err2 error
		if out, err2 = t.p.Decide(ctx, &Decision{Tx: tx, Outcome: Abort, Ops: ops}); err2 != nil {
			return nil, fmt.Errorf("change %s: not known whether stored: %w (reading the decision: %v)", tx, err, err2)
		}
		if out == Abort {
			return nil, abort(fmt.Errorf("change %s: not stored: %w", tx, err))
		}
	} else if errors.Is(err, ErrAborted) {
		return nil, abort(err)
	}
	return locks, nil
}

// lockAll locks for change tx the name of every dentry op of ops as
// Names.Lock does (one PUT each, If-Match held[i].ETag, If-None-Match for a
// name with no object), but all at once: the lock step is one round trip
// whatever the number of names. Its answers are Lock's, but that a name
// refused because another change's lock holds it is a *NameError matching
// ErrLocked (the caller waits, then tries again), not ErrStale.
//
// Two changes that lock the same names at once (rename a b against rename
// b a, on two mounts) may each take some and be refused the others. Neither
// waits for a lock while holding one: the one refused undoes every lock it
// took (unlockAll) before it answers, and tries again after a wait that
// grows and is drawn at random (waitLocked), so that the two stop meeting;
// no lock is held across a wait, so no two changes wait for each other.
func (t *Tree) lockAll(ctx context.Context, tx string, ops []Op, held []Held) ([]Locked, error) {
	todo, err := lockTodo(t.root, tx, ops, held)
	if err != nil {
		return nil, err
	}
	mine := func(cur *Dentry) bool { return cur.Change == tx && cur.Lock != nil }
	mineInode := func(cur *Inode) bool { return cur.Change == tx && cur.Lock != nil }
	res := make([]putResult[Dentry], len(todo))
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if in := todo[i].Inode; in != nil {
				r, err := t.p.putInode(ctx, todo[i].Key, in, condFor(todo[i].ETag), mineInode)
				res[i] = putResult[Dentry]{landed: r.landed, unknown: r.unknown, etag: r.etag, curInfo: r.curInfo}
				if r.cur != nil && r.cur.Lock != nil {
					// Another change's lock holds it: as a locked name.
					res[i].cur = &Dentry{Lock: &Lock{}}
				}
				errs[i] = err
				return
			}
			res[i], errs[i] = t.p.putDentry(ctx, todo[i].Key, todo[i].Dentry, condFor(todo[i].ETag), mine)
		}()
	}
	wg.Wait()
	var landed []Locked
	refused, unknown := -1, false
	var first error
	for i := range todo {
		switch {
		case res[i].landed:
			todo[i].ETag = res[i].etag
			landed = append(landed, todo[i])
		case errs[i] != nil:
			unknown = unknown || res[i].unknown
			if first == nil {
				first = errs[i]
			}
		case refused < 0:
			refused = i
		}
	}
	if len(landed) == len(todo) {
		return todo, nil
	}
	// Not all locked: undo what was, and say why.
	cause := first
	if cause == nil {
		r := res[refused]
		ne := &NameError{Key: todo[refused].Key, Err: ErrStale, Dentry: r.cur, ETag: r.curInfo.ETag}
		if r.cur != nil && r.cur.Lock != nil {
			ne.Err = ErrLocked
		}
		if todo[refused].Inode != nil {
			ne.Dentry = nil // not a dentry: the caller reads the object again
		}
		cause = ne
	} else {
		cause = fmt.Errorf("lock %s: %w", tx, first)
	}
	if unknown {
		// A lock may have landed unseen: abort tx, so that readers resolve
		// it now.
		_, _ = t.p.decide(ctx, &Decision{Tx: tx, Outcome: Abort, Ops: ops})
	}
	return nil, t.unlockAll(ctx, tx, ops, landed, cause)
}

// unlockAll undoes the locks of change tx, all at once, and returns cause.
// A lock it cannot undo stays: it writes the decision abort so that readers
// resolve it at once (if that fails too, they do after TxGrace).
func (t *Tree) unlockAll(ctx context.Context, tx string, ops []Op, locks []Locked, cause error) error {
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i := range locks {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = t.p.resolveOne(ctx, locks[i], Abort) }()
	}
	wg.Wait()
	if errors.Join(errs...) != nil {
		_, _ = t.p.decide(ctx, &Decision{Tx: tx, Outcome: Abort, Ops: ops})
	}
	return cause
}

// applyOps caches the names of a committed change: new bindings first (a
// node replaced becomes an orphan here), removals after, so that a node
// that moved keeps its entry. Its locks are not resolved yet: each bound
// name is cached with no ETag (a change of it reads it first), and
// tidyLater gives it the ETag of its resolution once that landed. It
// returns the entries made, by key.
func (t *Tree) applyOps(tx string, ops []Op) map[string]*entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	made := map[string]*entry{}
	for _, pass := range []bool{true, false} {
		for _, o := range ops {
			if o.Ino != 0 || (o.To != nil) != pass {
				continue
			}
			key, _ := DentryKey(t.root, o.Dir, o.Frags, string(o.Name))
			if e := t.learnLocked(o.Dir, o.Frags, string(o.Name), o.To, "", false); e != nil {
				e.change = tx
				made[key] = e
			}
		}
	}
	for _, o := range ops {
		if o.To != nil {
			delete(t.orphans, o.To.Ino) // moved, not gone
		}
	}
	return made
}

// invalidateLocked makes the cached entry of name stale: the next read of
// it goes to the store.
func (t *Tree) invalidateLocked(dir namespace.Ino, name string) {
	if e := t.names[nameKey{dir, name}]; e != nil {
		e.gen, e.etag = t.gen-1, ""
	}
}

// refused makes the paths of dirs stale (invalidatePath) when a change of
// names in them failed with err for a name or a directory not there: the
// cache said it was, and its directory may be gone with it (another
// mount's rm -r), which the mount asks about right after the refusal to
// tell a directory replaced under its name from one removed
// (fs/fusefs/staledir.go), as v1 reads its log to the end on a refusal.
// Adding a name to a removed directory is refused by its seal, in
// leaseFor, which does the same.
func (t *Tree) refused(err error, dirs ...namespace.Ino) {
	if !errors.Is(err, namespace.ErrNotExist) {
		return
	}
	for _, d := range dirs {
		t.invalidatePath(d)
	}
}

// invalidatePath makes the cached names of directory dir and of the
// directories above it stale, up to the root or the first one not cached.
func (t *Tree) invalidatePath(dir namespace.Ino) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Bounded by the entries cached: a cycle (a name read before a move,
	// another after) ends the walk.
	for range len(t.inos) {
		e := t.inos[dir]
		if dir == namespace.RootIno || e == nil {
			return
		}
		t.invalidateLocked(e.dir, e.name)
		dir = e.dir
	}
}

// Rename moves oldName in oldParent to newName in newParent, atomically
// across mounts (one change: both names locked, then decided), replacing a
// file or an empty directory there unless flags say otherwise, with v1's
// answers (fs/namespace, applyRename). It returns the node replaced as it
// is after (Ino 0 when none was; a file with Nlink 0 is an orphan). A
// directory moved across directories is serialised through the moves log
// first (moves.go); one moved into its own subtree is namespace.ErrInvalid.
func (t *Tree) Rename(ctx context.Context, oldParent namespace.Ino, oldName string, newParent namespace.Ino, newName string, flags namespace.RenameFlags) (namespace.Node, error) {
	if err := t.enter(); err != nil {
		return namespace.Node{}, err
	}
	defer t.calls.Done()
	n, err := t.rename(ctx, oldParent, oldName, newParent, newName, flags)
	if err != nil {
		t.refused(err, oldParent, newParent)
		return namespace.Node{}, fmt.Errorf("rename %q in %d to %q in %d: %w", oldName, oldParent, newName, newParent, err)
	}
	return n, nil
}

func (t *Tree) rename(ctx context.Context, oldDir namespace.Ino, oldName string, newDir namespace.Ino, newName string, flags namespace.RenameFlags) (namespace.Node, error) {
	return waitLocked(ctx, t, func() (namespace.Node, error) { return t.renameTry(ctx, oldDir, oldName, newDir, newName, flags) })
}

func (t *Tree) renameTry(ctx context.Context, oldDir namespace.Ino, oldName string, newDir namespace.Ino, newName string, flags namespace.RenameFlags) (namespace.Node, error) {
	if flags&^(namespace.RenameNoReplace|namespace.RenameExchange) != 0 || flags == namespace.RenameNoReplace|namespace.RenameExchange {
		return namespace.Node{}, fmt.Errorf("rename flags %#x: %w", flags, namespace.ErrInvalid)
	}
	if err := CheckName(oldName); err != nil {
		return namespace.Node{}, err
	}
	ofr, err := t.dirFrags(oldDir)
	if err != nil {
		return namespace.Node{}, err
	}
	nfr, err := t.dirFrags(newDir)
	if err != nil {
		return namespace.Node{}, err
	}
	if err := CheckName(newName); err != nil {
		return namespace.Node{}, err
	}
	exchange := flags&namespace.RenameExchange != 0
	same := oldDir == newDir && oldName == newName
	for round := range maxRounds {
		// The first try takes what the cache knows (the kernel looked both
		// names up just before): the locks' conditions check it, and a
		// refusal reads both again.
		src, dst, err := t.readTwo(ctx, round == 0, oldDir, ofr, oldName, newDir, nfr, newName, same)
		if err != nil {
			return namespace.Node{}, err
		}
		if src == nil || src.bound == nil {
			return namespace.Node{}, fmt.Errorf("%q in directory %d: %w", oldName, oldDir, namespace.ErrNotExist)
		}
		if torn(src, dst) {
			continue
		}
		var dstB *Binding
		if dst != nil {
			dstB = dst.bound
		}
		sb := src.bound
		var dirs []MovedDir // directories moved across directories: the moves log's
		if exchange {
			if dstB == nil {
				return namespace.Node{}, fmt.Errorf("exchange with %q: %w", newName, namespace.ErrNotExist)
			}
			if sb.Kind == namespace.KindDir && newDir == sb.Ino || dstB.Kind == namespace.KindDir && oldDir == dstB.Ino {
				return namespace.Node{}, fmt.Errorf("exchange a directory into itself: %w", namespace.ErrInvalid)
			}
			if sb.Ino == dstB.Ino {
				return namespace.Node{}, nil
			}
			if oldDir != newDir && sb.Kind == namespace.KindDir {
				dirs = append(dirs, MovedDir{Ino: sb.Ino, From: oldDir, To: newDir})
			}
			if oldDir != newDir && dstB.Kind == namespace.KindDir {
				dirs = append(dirs, MovedDir{Ino: dstB.Ino, From: newDir, To: oldDir})
			}
		} else {
			if dstB != nil && flags&namespace.RenameNoReplace != 0 {
				return namespace.Node{}, fmt.Errorf("rename onto %q: %w", newName, namespace.ErrExist)
			}
			if sb.Kind == namespace.KindDir && newDir == sb.Ino {
				return namespace.Node{}, fmt.Errorf("move directory %d under itself: %w", sb.Ino, namespace.ErrInvalid)
			}
			if dstB != nil && dstB.Ino == sb.Ino {
				return namespace.Node{}, nil // two names of one node: POSIX says do nothing
			}
			if sb.Kind == namespace.KindDir && oldDir != newDir {
				dirs = append(dirs, MovedDir{Ino: sb.Ino, From: oldDir, To: newDir})
			}
			switch {
			case dstB == nil:
			case sb.Kind == namespace.KindDir && dstB.Kind != namespace.KindDir:
				return namespace.Node{}, fmt.Errorf("rename directory onto %q: %w", newName, namespace.ErrNotDir)
			case sb.Kind != namespace.KindDir && dstB.Kind == namespace.KindDir:
				return namespace.Node{}, fmt.Errorf("rename onto directory %q: %w", newName, namespace.ErrIsDir)
			}
		}
		if oldDir != newDir && !exchange {
			if err := t.leaseFor(ctx, newDir, nfr); err != nil {
				return namespace.Node{}, err
			}
		}
		n, err := t.renameOnce(ctx, oldDir, ofr, oldName, newDir, nfr, newName, src, dst, exchange, dirs)
		var ne *NameError
		if errors.As(err, &ne) && errors.Is(err, ErrStale) || errors.Is(err, ErrAborted) {
			continue // changed under it: read both again
		}
		return n, err
	}
	return namespace.Node{}, ErrContended
}

// readTwo is the entries of a rename's two names (the same entry when
// same): from the cache when cache is set and it knows them (known), else
// read from the store, both at once.
func (t *Tree) readTwo(ctx context.Context, cache bool, oldDir namespace.Ino, ofr uint32, oldName string,
	newDir namespace.Ino, nfr uint32, newName string, same bool) (src, dst *entry, err error) {
	var srcOK, dstOK bool
	if cache {
		if src, srcOK = t.known(oldDir, oldName); src == nil || src.bound == nil {
			src, srcOK = nil, false // a source not bound is read: ENOENT is the store's word
		}
		dst, dstOK = t.known(newDir, newName)
	}
	if same {
		if !srcOK {
			if src, err = t.readName(ctx, oldDir, ofr, oldName); err != nil {
				return nil, nil, err
			}
		}
		return src, src, nil
	}
	// Both read at once, then cached in order.
	var rs [2]Resolved
	var errs [2]error
	var wg sync.WaitGroup
	if !srcOK {
		wg.Add(1)
		go func() { defer wg.Done(); rs[0], errs[0] = t.p.Resolve(ctx, oldDir, ofr, oldName) }()
	}
	if !dstOK {
		rs[1], errs[1] = t.p.Resolve(ctx, newDir, nfr, newName)
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, nil, err
	}
	if !srcOK {
		if src, err = t.took(ctx, oldDir, ofr, oldName, rs[0]); err != nil {
			return nil, nil, err
		}
	}
	if !dstOK {
		if dst, err = t.took(ctx, newDir, nfr, newName, rs[1]); err != nil {
			return nil, nil, err
		}
	}
	return src, dst, nil
}

// copyEntry is a copy of e (nil: nil). mu held.
func copyEntry(e *entry) *entry {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

// torn says whether src and dst, read at different moments, cannot be
// changed as read: both bind one node of one name (a change moved it
// between the two reads: the rename would answer "nothing to do" without
// locking), or one holds a binding with no ETag to lock on (a decided lock
// whose resolution could not be written). Read both again. Any other
// difference of moments is caught by the locks' conditions.
func torn(src, dst *entry) bool {
	for _, e := range []*entry{src, dst} {
		if e != nil && e.bound != nil && e.etag == "" {
			return true
		}
	}
	return src != dst && src != nil && dst != nil && src.bound != nil && dst.bound != nil &&
		src.bound.Ino == dst.bound.Ino && src.bound.Node != nil
}

// known is (a copy of) the cached entry of name in dir, when the cache knows what the
// store holds there well enough to condition a lock on it: an entry fresh
// (freshLocked) with an ETag and its node's attributes, or (a nil entry)
// no key among a whole listing of dir begun less than the TTL ago. ok is
// false otherwise: read the name. A wrong guess costs a refused lock and a
// read, never a wrong answer: the lock's If-Match (If-None-Match) is the
// check.
func (t *Tree) known(dir namespace.Ino, name string) (e *entry, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.names[nameKey{dir, name}]; e != nil {
		if e.etag != "" && t.freshLocked(e) && (e.bound == nil || e.bound.Node != nil) {
			return copyEntry(e), true
		}
		return nil, false
	}
	l := t.lists[dir]
	if t.ttl > 0 && l != nil && l.gen == t.gen && t.clock().Sub(l.began) < t.ttl {
		if _, listed := l.etags[name]; !listed {
			return nil, true
		}
	}
	return nil, false
}

// moved is binding b with its ctime now, as a rename leaves it.
func (t *Tree) moved(b *Binding) *Binding {
	c := *b
	if b.Node == nil {
		return &c // a node of several names: its inode object is not touched
	}
	c.Node = cloneAttrs(b.Node)
	c.Node.Ctime = t.now().UnixNano()
	return &c
}

// renameOnce makes one try of a rename of src to dst (checked by rename):
// the orphan record of a file it replaces first, then the change.
func (t *Tree) renameOnce(ctx context.Context, oldDir namespace.Ino, ofr uint32, oldName string,
	newDir namespace.Ino, nfr uint32, newName string, src, dst *entry, exchange bool, dirs []MovedDir) (namespace.Node, error) {
	tx := newID()
	var seq uint64 // the moves log entry of a directory moved across directories
	if len(dirs) > 0 {
		var err error
		if seq, err = t.moveEnter(ctx, tx, dirs); err != nil {
			t.abandonMove(ctx, tx, 0)
			return namespace.Node{}, err
		}
	}
	sb := src.bound
	var dstB *Binding
	if dst != nil {
		dstB = dst.bound
	}
	srcTo := (*Binding)(nil)
	if exchange {
		srcTo = t.moved(dstB)
	}
	ops := []Op{
		{Dir: oldDir, Frags: ofr, Name: Name(oldName), To: srcTo},
		{Dir: newDir, Frags: nfr, Name: Name(newName), To: t.moved(sb)},
	}
	held := []Held{heldOf(src), heldOf(dst)}
	var sealDir namespace.Ino
	var sealFrags uint32
	var dstIn *Inode // the inode object of a node of several names replaced
	if !exchange && dstB != nil && dstB.Node == nil {
		o, h, err := t.dropNameOp(ctx, tx, dstB, newDir, nfr, newName)
		if err != nil {
			if seq != 0 {
				t.abandonMove(ctx, tx, seq)
			}
			return namespace.Node{}, err
		}
		ops, held, dstIn = append(ops, o), append(held, h), o.Inode
	}
	var orphan *Orphan
	if !exchange && dstB != nil {
		switch {
		case dstB.Kind == namespace.KindDir:
			sealDir, sealFrags = dstB.Ino, dstB.Frags
		case dstB.Kind == namespace.KindFile && dstIn == nil:
			orphan = &Orphan{FileID: dstB.Node.FileID, Ino: dstB.Ino, Dir: newDir, Frags: nfr, Name: Name(newName), Change: tx}
		}
	}
	stale := sb.Kind == namespace.KindFile && sb.Node != nil && !exchange
	// Beside the locks: the orphan record of a file replaced, and a stale
	// record of the file moved deleted. Both must land before the decision;
	// neither changes what a name binds, so an abort leaves them harmless (a
	// record is an orphan's only once its name no longer binds its file).
	var pre func(context.Context) error
	if orphan != nil || stale {
		pre = func(ctx context.Context) error {
			var errs [2]error
			var wg sync.WaitGroup
			if orphan != nil {
				wg.Add(1)
				go func() { defer wg.Done(); errs[0] = t.putOrphan(ctx, orphan) }()
			}
			if stale {
				errs[1] = t.staleRecord(ctx, sb, oldDir, oldName)
			}
			wg.Wait()
			return errors.Join(errs[:]...)
		}
	}
	locks, err := t.runChange(ctx, tx, ops, held, sealDir, sealFrags, pre)
	var ne *NameError
	if errors.As(err, &ne) && ne.Dentry != nil {
		t.mu.Lock()
		_, dn, _ := ParseDentryKey(ne.Key)
		t.invalidateLocked(dn.Dir, dn.Name)
		t.mu.Unlock()
	}
	if err != nil {
		if seq != 0 {
			t.abandonMove(ctx, tx, seq)
		}
		return namespace.Node{}, err
	}
	var after func(context.Context)
	if seq != 0 {
		after = func(ctx context.Context) { t.leaveMove(ctx, seq) }
	}
	t.tidyLater(tx, locks, t.applyOps(tx, ops), after)
	if exchange || dstB == nil {
		return namespace.Node{}, nil
	}
	if dstIn != nil {
		t.noteChanged(dstIn)
		return nodeOf(newDir, dstB, dstIn), nil
	}
	n := nodeOf(newDir, dstB, nil)
	n.Nlink = 0
	return n, nil
}

// staleRecord deletes the orphan record of file b when it names the name
// the file is moved from: a record left by an unlink that did not land (its
// tombstone refused, or its mount died before it), which would read as an
// orphan's once the name no longer binds the file. One GET, usually of no
// object.
func (t *Tree) staleRecord(ctx context.Context, b *Binding, dir namespace.Ino, name string) error {
	key, err := OrphanKey(t.root, b.Node.FileID)
	if err != nil {
		return err
	}
	rec, _, err := read(ctx, t.st, key, kindOrphan, DecodeOrphan)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("orphan record of the file moved: %w", err)
	case rec.Ino != b.Ino || rec.Dir != dir || string(rec.Name) != name:
		return nil
	}
	if err := t.st.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete a stale orphan record %s: %w", staging.TruncKey(key), err)
	}
	return nil
}

// Rmdir removes an empty directory (section 3): its name locked, the
// directory sealed, the create leases on it waited out (up to LeaseTerm
// plus 1 % for a lease whose holder neither renews nor deletes it), then
// listed: empty, the change commits; not, it aborts with ErrNotEmpty and
// the seal goes. A create in it by another mount either landed before the
// listing (ErrNotEmpty here) or fails with ErrNotExist.
func (t *Tree) Rmdir(ctx context.Context, parent namespace.Ino, name string) error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.calls.Done()
	if err := t.rmdir(ctx, parent, name); err != nil {
		t.refused(err, parent)
		return fmt.Errorf("rmdir %q in %d: %w", name, parent, err)
	}
	return nil
}

func (t *Tree) rmdir(ctx context.Context, parent namespace.Ino, name string) error {
	_, err := waitLocked(ctx, t, func() (struct{}, error) { return struct{}{}, t.rmdirTry(ctx, parent, name) })
	return err
}

func (t *Tree) rmdirTry(ctx context.Context, parent namespace.Ino, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	frags, err := t.dirFrags(parent)
	if err != nil {
		return err
	}
	for range maxRounds {
		e, err := t.readName(ctx, parent, frags, name)
		switch {
		case err != nil:
			return err
		case e == nil || e.bound == nil:
			return fmt.Errorf("%q in directory %d: %w", name, parent, namespace.ErrNotExist)
		case e.bound.Kind != namespace.KindDir:
			return fmt.Errorf("%q in directory %d: %w", name, parent, namespace.ErrNotDir)
		}
		d := e.bound
		ops := []Op{{Dir: parent, Frags: frags, Name: Name(name)}}
		if retry, err := t.sealingChange(ctx, ops, e, d.Ino, d.Frags); retry {
			continue
		} else if err != nil {
			return err
		}
		return nil
	}
	return ErrContended
}

// sealingChange makes ops, a change of e's name that seals directory dir
// of frags fragments (rmdir, a change of its fragment count), once: retry
// says the name was stale or the change aborted (the caller reads again
// and tries again). Once decided, the lease this mount held on dir is
// forgotten: a name added there later takes one again, reading the seal.
func (t *Tree) sealingChange(ctx context.Context, ops []Op, e *entry, dir namespace.Ino, frags uint32) (retry bool, err error) {
	tx := newID()
	locks, err := t.runChange(ctx, tx, ops, []Held{heldOf(e)}, dir, frags, nil)
	var ne *NameError
	if errors.As(err, &ne) && errors.Is(err, ErrStale) || errors.Is(err, ErrAborted) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	t.tidyLater(tx, locks, t.applyOps(tx, ops), nil)
	t.leaseMu.Lock()
	delete(t.leases, dir)
	t.leaseMu.Unlock()
	return false, nil
}

// The tidy of a committed change: its locks replaced by their resolutions
// after the call returned (section 3, step 3), by goroutines the Tree owns.
// Until a lock is resolved its readers resolve it from the decision, on
// this mount as on any other (Resolve; the entries applyOps made read the
// name again before a change of it), so a tidy that fails, or never runs
// (the mount killed), leaves nothing wrong: the next reader of the name
// writes the resolution. Close waits for the tidies running, each bounded
// by tidyTimeout.
const (
	// tidyMax bounds the tidies running at once; a change committed past
	// it tidies before it returns, as before the tidy ran after.
	tidyMax = 256
	// tidyTimeout bounds one tidy (its requests are sent at once).
	tidyTimeout = 30 * time.Second
)

// tidier is a Tree's tidies in flight. Its zero value is ready.
type tidier struct {
	mu sync.Mutex
	n  int // GUARDED_BY(mu): tidies running
	wg sync.WaitGroup
}

// tidyKey marks the context of a tidy's requests, so that a store wrapper
// (the tests') can tell them from those of the call.
type tidyKey struct{}

// isTidy says whether ctx is a tidy's.
func isTidy(ctx context.Context) bool { return ctx.Value(tidyKey{}) != nil }

// tidyLater resolves the locks of committed change tx after the call
// returns (inline when tidyMax tidies run already), and gives each entry
// of made (applyOps) whose name it resolved the resolution's ETag, unless
// the entry was replaced or given an ETag since.
func (t *Tree) tidyLater(tx string, locks []Locked, made map[string]*entry, after func(context.Context)) {
	run := func() {
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), tidyKey{}, true), tidyTimeout)
		defer cancel()
		etags := make([]string, len(locks))
		var wg sync.WaitGroup
		for i := range locks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				if etags[i], err = t.p.resolveOne(ctx, locks[i], Commit); err != nil {
					t.log.Debug("namespace v2: a lock of a committed change left to readers",
						zap.String("key", locks[i].Key), zap.Error(err))
				}
			}()
		}
		wg.Wait()
		if after != nil {
			after(ctx)
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		for i, l := range locks {
			if etags[i] == "" || l.Dentry == nil {
				continue // an inode object is read again by each change of it
			}
			k := nameKey{l.Dentry.Dir, string(l.Dentry.Name)}
			cur := t.names[k]
			switch e := made[l.Key]; {
			case e != nil && cur == e && e.etag == "":
				e.etag = etags[i]
			case e == nil && cur == nil && l.Dentry.Lock.To == nil:
				// A name the change removed: its tombstone, for listings.
				if e := t.learnLocked(k.dir, l.Dentry.Frags, k.name, nil, etags[i], false); e != nil {
					e.change = tx
				}
			}
		}
	}
	t.tidy.mu.Lock()
	inline := t.tidy.n >= tidyMax
	if !inline {
		t.tidy.n++
		t.tidy.wg.Add(1)
	}
	t.tidy.mu.Unlock()
	if inline {
		run()
		return
	}
	go func() {
		defer func() {
			t.tidy.mu.Lock()
			t.tidy.n--
			t.tidy.mu.Unlock()
			t.tidy.wg.Done()
		}()
		run()
	}()
}

// tidyWait waits for the tidies running (Close, and tests).
func (t *Tree) tidyWait() { t.tidy.wg.Wait() }
