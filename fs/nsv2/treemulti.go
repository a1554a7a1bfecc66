package nsv2

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// The changes of several names (section 3, step 4 of section 10): rename
// (and exchange) and rmdir, each a change of the primitives: Lock every name
// it touches, Decide (the commit point: the call returns after it), then
// resolve each lock. A reader meeting a lock resolves it (Resolve), and a
// reader that meets a name of a decided change drops what it cached of the
// change's other names, so that it reads them again and never shows one
// side of it.
//
// What is not here, and what it answers instead:
//
//   - A directory moved across directories (a rename whose directories
//     differ, or an exchange across directories where either node is a
//     directory) needs the moves log of section 3 to keep two mounts'
//     moves from making a loop (mv a b/ against mv b a/): ErrDirMove, which
//     wraps namespace.ErrNotSupported (ENOTSUP: mv fails and changes
//     nothing). Files move across directories; directories are renamed
//     within theirs.
//
// A name of a node of several names moves as any name; a rename over one
// also lowers its inode object's count of names, in the change (inode.go).

// ErrDirMove: a directory moved into another directory, which needs the
// moves log (section 3, "Directory moves across directories"), not in this
// version. It wraps namespace.ErrNotSupported.
var ErrDirMove = fmt.Errorf("a directory moved across directories, not in this version of namespace v2: %w", namespace.ErrNotSupported)

// readName reads name in dir from the store (Resolve) and caches it. A name
// locked by a change not decided is a *NameError matching ErrLocked.
func (t *Tree) readName(ctx context.Context, dir namespace.Ino, frags uint32, name string) (*entry, error) {
	r, err := t.p.Resolve(ctx, dir, frags, name)
	if err != nil {
		return nil, err
	}
	e := t.learn(dir, frags, name, r)
	if r.Pending {
		return nil, &NameError{Key: r.Key, Err: ErrLocked, Dentry: r.Dentry, ETag: r.ETag}
	}
	if e != nil && e.bound != nil && e.bound.Node == nil {
		if err := t.readInode(ctx, e); err != nil {
			return nil, err
		}
	}
	return e, nil
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

// runChange makes change tx of ops: Lock (held, parallel to ops), then,
// when sealDir is set, the seal of that directory with its leases waited
// out and its emptiness checked (a directory removed by the change), then
// Decide commit and the locks resolved. It returns the ETag of each name's
// resolved dentry by key ("" when the resolution was not written: its
// readers resolve it from the decision).
//
// What the caller is told:
//   - nil: committed.
//   - a *NameError matching ErrStale (a name changed since read, or is
//     locked), or ErrAborted (a reader judged this change's lock dead):
//     nothing changed; read again and try again under a new id.
//   - ErrNotEmpty: sealDir has names; decided abort, nothing changed.
//   - any other error: not stored, or, when it says "not known", perhaps
//     stored: readers take whichever the decision says.
func (t *Tree) runChange(ctx context.Context, tx string, ops []Op, held []Held, sealDir namespace.Ino, sealFrags uint32) (map[string]string, error) {
	locks, err := t.p.Lock(ctx, tx, ops, held)
	if err != nil {
		return nil, err
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
			t.unseal(ctx, sealDir)
		}
		return cause
	}
	if sealDir != 0 {
		empty, err := t.sealEmpty(ctx, tx, sealDir, sealFrags)
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
	etags := map[string]string{}
	for _, l := range locks {
		etag, err := t.p.resolveOne(ctx, l, Commit)
		if err != nil {
			t.log.Debug("namespace v2: a lock of a committed change left to readers", zap.String("key", l.Key), zap.Error(err))
		}
		etags[l.Key] = etag
	}
	return etags, nil
}

// applyOps caches the names of a committed change: new bindings first (a
// node replaced becomes an orphan here), removals after, so that a node
// that moved keeps its entry.
func (t *Tree) applyOps(tx string, ops []Op, etags map[string]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, pass := range []bool{true, false} {
		for _, o := range ops {
			if o.Ino != 0 || (o.To != nil) != pass {
				continue
			}
			key, _ := DentryKey(t.root, o.Dir, o.Frags, string(o.Name))
			if e := t.learnLocked(o.Dir, o.Frags, string(o.Name), o.To, etags[key], false); e != nil {
				e.change = tx
			}
		}
	}
	for _, o := range ops {
		if o.To != nil {
			delete(t.orphans, o.To.Ino) // moved, not gone
		}
	}
}

// invalidateLocked makes the cached entry of name stale: the next read of
// it goes to the store.
func (t *Tree) invalidateLocked(dir namespace.Ino, name string) {
	if e := t.names[nameKey{dir, name}]; e != nil {
		e.gen, e.etag = t.gen-1, ""
	}
}

// Rename moves oldName in oldParent to newName in newParent, atomically
// across mounts (one change: both names locked, then decided), replacing a
// file or an empty directory there unless flags say otherwise, with v1's
// answers (fs/namespace, applyRename). It returns the node replaced as it
// is after (Ino 0 when none was; a file with Nlink 0 is an orphan). A
// directory moved across directories is ErrDirMove (see above).
func (t *Tree) Rename(ctx context.Context, oldParent namespace.Ino, oldName string, newParent namespace.Ino, newName string, flags namespace.RenameFlags) (namespace.Node, error) {
	if err := t.enter(); err != nil {
		return namespace.Node{}, err
	}
	defer t.calls.Done()
	n, err := t.rename(ctx, oldParent, oldName, newParent, newName, flags)
	if err != nil {
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
	for range maxRounds {
		src, err := t.readName(ctx, oldDir, ofr, oldName)
		if err != nil {
			return namespace.Node{}, err
		}
		if src == nil || src.bound == nil {
			return namespace.Node{}, fmt.Errorf("%q in directory %d: %w", oldName, oldDir, namespace.ErrNotExist)
		}
		dst := src
		if !same {
			if dst, err = t.readName(ctx, newDir, nfr, newName); err != nil {
				return namespace.Node{}, err
			}
			if src.etag == "" && src.bound != nil {
				// Reading dst made src stale: dst's dentry is of an
				// earlier change that named src's name, which src's
				// entry, newer, does not show. Read src again.
				if src, err = t.readName(ctx, oldDir, ofr, oldName); err != nil {
					return namespace.Node{}, err
				}
				if src == nil || src.bound == nil {
					return namespace.Node{}, fmt.Errorf("%q in directory %d: %w", oldName, oldDir, namespace.ErrNotExist)
				}
			}
		}
		var dstB *Binding
		if dst != nil {
			dstB = dst.bound
		}
		sb := src.bound
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
			if oldDir != newDir && (sb.Kind == namespace.KindDir || dstB.Kind == namespace.KindDir) {
				return namespace.Node{}, ErrDirMove
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
				return namespace.Node{}, ErrDirMove
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
			if err := t.leaseFor(ctx, newDir); err != nil {
				return namespace.Node{}, err
			}
		}
		n, err := t.renameOnce(ctx, oldDir, ofr, oldName, newDir, nfr, newName, src, dst, exchange)
		var ne *NameError
		if errors.As(err, &ne) && errors.Is(err, ErrStale) || errors.Is(err, ErrAborted) {
			continue // changed under it: read both again
		}
		return n, err
	}
	return namespace.Node{}, ErrContended
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
	newDir namespace.Ino, nfr uint32, newName string, src, dst *entry, exchange bool) (namespace.Node, error) {
	tx := newID()
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
			return namespace.Node{}, err
		}
		ops, held, dstIn = append(ops, o), append(held, h), o.Inode
	}
	if !exchange && dstB != nil {
		switch {
		case dstB.Kind == namespace.KindDir:
			sealDir, sealFrags = dstB.Ino, dstB.Frags
		case dstB.Kind == namespace.KindFile && dstIn == nil:
			if err := t.putOrphan(ctx, &Orphan{FileID: dstB.Node.FileID, Ino: dstB.Ino, Dir: newDir, Frags: nfr,
				Name: Name(newName), Change: tx}); err != nil {
				return namespace.Node{}, err
			}
		}
	}
	if sb.Kind == namespace.KindFile && sb.Node != nil && !exchange {
		if err := t.staleRecord(ctx, sb, oldDir, oldName); err != nil {
			return namespace.Node{}, err
		}
	}
	etags, err := t.runChange(ctx, tx, ops, held, sealDir, sealFrags)
	var ne *NameError
	if errors.As(err, &ne) && ne.Dentry != nil {
		t.mu.Lock()
		_, dn, _ := ParseDentryKey(ne.Key)
		t.invalidateLocked(dn.Dir, dn.Name)
		t.mu.Unlock()
	}
	if err != nil {
		return namespace.Node{}, err
	}
	t.applyOps(tx, ops, etags)
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
		tx := newID()
		ops := []Op{{Dir: parent, Frags: frags, Name: Name(name)}}
		etags, err := t.runChange(ctx, tx, ops, []Held{heldOf(e)}, d.Ino, d.Frags)
		var ne *NameError
		if errors.As(err, &ne) && errors.Is(err, ErrStale) || errors.Is(err, ErrAborted) {
			continue
		}
		if err != nil {
			return err
		}
		t.applyOps(tx, ops, etags)
		t.leaseMu.Lock()
		delete(t.leases, d.Ino)
		t.leaseMu.Unlock()
		return nil
	}
	return ErrContended
}
