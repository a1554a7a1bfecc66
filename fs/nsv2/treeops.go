package nsv2

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// The changes of one name (section 3, "Single-name changes"), and the
// orphan records of section 5. Each change is stored before it returns.

// allocIno is a fresh ino from this mount's batch, claiming one (one PUT
// If-None-Match of ns2/ino/<batch>) when none is held or it is used up.
func (t *Tree) allocIno(ctx context.Context) (namespace.Ino, error) {
	t.inoMu.Lock()
	defer t.inoMu.Unlock()
	if t.nextIno == 0 || t.nextIno >= t.endIno {
		b, err := t.p.ClaimBatch(ctx, t.mount, t.nextBatch)
		if err != nil {
			return 0, err
		}
		t.batch, t.nextBatch = b, b+1
		t.nextIno, t.endIno = FirstIno(b), FirstIno(b)+1<<BatchShift
		if b == maxBatch {
			t.endIno = ^namespace.Ino(0)
		}
		// Never 0, 1 (the root) or 2: an ino is also a listing's cookie,
		// and cookies 0 to 2 stand for the start, "." and "..".
		t.nextIno = max(t.nextIno, 3)
		t.log.Debug("namespace v2: inode batch claimed", zap.Uint64("batch", b))
	}
	ino := t.nextIno
	t.nextIno++
	return ino, nil
}

// newNode is what a create, mkdir, symlink or mknod binds.
type newNode struct {
	kind         namespace.Kind
	mode         uint32
	owner        namespace.Owner
	target       string
	major, minor uint32
}

// bindNew binds name in parent to a new node of nn: one PUT If-None-Match
// (Bind), after the ino's batch claim when one is due. O_EXCL across mounts
// is that PUT's.
func (t *Tree) bindNew(ctx context.Context, parent namespace.Ino, name string, nn newNode) (namespace.Node, error) {
	return waitLocked(ctx, t, func() (namespace.Node, error) { return t.bindNewTry(ctx, parent, name, nn) })
}

func (t *Tree) bindNewTry(ctx context.Context, parent namespace.Ino, name string, nn newNode) (namespace.Node, error) {
	if err := t.enter(); err != nil {
		return namespace.Node{}, err
	}
	defer t.calls.Done()
	if err := CheckName(name); err != nil {
		return namespace.Node{}, err
	}
	if nn.mode&^namespace.ModeMask != 0 {
		return namespace.Node{}, fmt.Errorf("mode %o: %w", nn.mode, namespace.ErrInvalid)
	}
	frags, err := t.dirFrags(parent)
	if err != nil {
		return namespace.Node{}, err
	}
	if err := t.leaseFor(ctx, parent, frags); err != nil {
		return namespace.Node{}, err
	}
	ino, err := t.allocIno(ctx)
	if err != nil {
		return namespace.Node{}, err
	}
	now := t.now().UnixNano()
	a := &Attrs{Mode: nn.mode, Uid: nn.owner.Uid, Gid: nn.owner.Gid, Atime: now, Mtime: now, Ctime: now,
		Target: Name(nn.target), Major: nn.major, Minor: nn.minor}
	b := &Binding{Ino: ino, Kind: nn.kind, Node: a}
	switch nn.kind {
	case namespace.KindFile:
		a.FileID = newID()
	case namespace.KindDir:
		b.Frags = frags // inherited from the parent (section 3)
	}
	etag, err := t.p.Bind(ctx, parent, frags, name, newID(), b)
	var ne *NameError
	if errors.As(err, &ne) && errors.Is(err, namespace.ErrExist) && ne.Dentry != nil {
		t.mu.Lock()
		t.learnLocked(parent, frags, name, ne.Dentry.Bound, ne.ETag, unwritable(ne.Dentry))
		t.mu.Unlock()
	}
	if err != nil {
		return namespace.Node{}, err
	}
	t.mu.Lock()
	t.learnLocked(parent, frags, name, b, etag, false)
	t.mu.Unlock()
	return nodeOf(parent, b, nil), nil
}

// Create makes a regular file named name in directory parent with a new
// file id.
func (t *Tree) Create(ctx context.Context, parent namespace.Ino, name string, mode uint32, owner namespace.Owner) (namespace.Node, error) {
	n, err := t.bindNew(ctx, parent, name, newNode{kind: namespace.KindFile, mode: mode, owner: owner})
	if err != nil {
		return namespace.Node{}, fmt.Errorf("create %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Mkdir makes a directory, of its parent's fragment count.
func (t *Tree) Mkdir(ctx context.Context, parent namespace.Ino, name string, mode uint32, owner namespace.Owner) (namespace.Node, error) {
	n, err := t.bindNew(ctx, parent, name, newNode{kind: namespace.KindDir, mode: mode, owner: owner})
	if err != nil {
		return namespace.Node{}, fmt.Errorf("mkdir %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Mknod makes a FIFO or a Unix socket file; any other kind is ErrInvalid.
func (t *Tree) Mknod(ctx context.Context, parent namespace.Ino, name string, kind namespace.Kind, mode uint32, owner namespace.Owner) (namespace.Node, error) {
	if kind != namespace.KindFIFO && kind != namespace.KindSocket {
		return namespace.Node{}, fmt.Errorf("mknod %q in %d: kind %v: %w", name, parent, kind, namespace.ErrInvalid)
	}
	n, err := t.bindNew(ctx, parent, name, newNode{kind: kind, mode: mode, owner: owner})
	if err != nil {
		return namespace.Node{}, fmt.Errorf("mknod %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// MknodDevice makes a character or block device node of number
// major:minor; any other kind, or a number past Linux's bounds, is
// ErrInvalid.
func (t *Tree) MknodDevice(ctx context.Context, parent namespace.Ino, name string, kind namespace.Kind, mode, major, minor uint32, owner namespace.Owner) (namespace.Node, error) {
	if kind != namespace.KindCharDev && kind != namespace.KindBlockDev {
		return namespace.Node{}, fmt.Errorf("mknod %q in %d: kind %v: %w", name, parent, kind, namespace.ErrInvalid)
	}
	if major > namespace.MaxMajor || minor > namespace.MaxMinor {
		return namespace.Node{}, fmt.Errorf("mknod %q in %d: device %d:%d: %w", name, parent, major, minor, namespace.ErrInvalid)
	}
	n, err := t.bindNew(ctx, parent, name, newNode{kind: kind, mode: mode, owner: owner, major: major, minor: minor})
	if err != nil {
		return namespace.Node{}, fmt.Errorf("mknod %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Symlink makes a symbolic link to target.
func (t *Tree) Symlink(ctx context.Context, parent namespace.Ino, name, target string, owner namespace.Owner) (namespace.Node, error) {
	switch {
	case target == "" || strings.IndexByte(target, 0) >= 0:
		return namespace.Node{}, fmt.Errorf("symlink %q in %d: target %q: %w", name, parent, target, namespace.ErrInvalid)
	case len(target) > namespace.MaxTargetLen:
		return namespace.Node{}, fmt.Errorf("symlink %q in %d: target of %d bytes: %w", name, parent, len(target), namespace.ErrNameTooLong)
	}
	n, err := t.bindNew(ctx, parent, name, newNode{kind: namespace.KindSymlink, mode: 0o777, owner: owner, target: target})
	if err != nil {
		return namespace.Node{}, fmt.Errorf("symlink %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// held is the entry of name in dir to change: the cached one when it has
// an ETag a write may be conditioned on (a write against a stale one is
// refused and reads it again), else read from the store.
func (t *Tree) held(ctx context.Context, dir namespace.Ino, frags uint32, name string) (*entry, error) {
	t.mu.Lock()
	// A copy: a rename's tidy (tidyLater) sets the cached entry's ETag
	// under mu while the caller reads it.
	e := copyEntry(t.names[nameKey{dir, name}])
	t.mu.Unlock()
	if e != nil && e.etag != "" && (e.bound == nil || e.bound.Node != nil) {
		return e, nil
	}
	return t.resolve(ctx, dir, frags, name)
}

// unwritable says whether no write may be conditioned on d's ETag: a lock
// (its change writes it), or a reaping tombstone (the trim deletes it).
func unwritable(d *Dentry) bool { return d.Lock != nil || d.Reaping() }

// lockedErr is the error of a name held by a change of several names not
// decided yet.
func lockedErr(key string) error {
	return &NameError{Key: key, Err: ErrLocked}
}

// Unlink removes a name of a file, symlink, FIFO, socket or device and
// returns the node as it is after (Nlink 0). For a file it first stores the
// orphan record (section 5), then the tombstone (one PUT If-Match the
// dentry's ETag): a crash between leaves a record whose name still binds
// the file, which Orphans and Named read as not an orphan.
func (t *Tree) Unlink(ctx context.Context, parent namespace.Ino, name string) (namespace.Node, error) {
	if err := t.enter(); err != nil {
		return namespace.Node{}, err
	}
	defer t.calls.Done()
	n, err := t.unlink(ctx, parent, name)
	if err != nil {
		t.refused(err, parent)
		return namespace.Node{}, fmt.Errorf("unlink %q in %d: %w", name, parent, err)
	}
	return n, nil
}

func (t *Tree) unlink(ctx context.Context, parent namespace.Ino, name string) (namespace.Node, error) {
	return waitLocked(ctx, t, func() (namespace.Node, error) { return t.unlinkTry(ctx, parent, name) })
}

func (t *Tree) unlinkTry(ctx context.Context, parent namespace.Ino, name string) (namespace.Node, error) {
	if err := CheckName(name); err != nil {
		return namespace.Node{}, err
	}
	frags, err := t.dirFrags(parent)
	if err != nil {
		return namespace.Node{}, err
	}
	e, err := t.held(ctx, parent, frags, name)
	if err != nil {
		return namespace.Node{}, err
	}
	for range maxRounds {
		switch {
		case e == nil || e.bound == nil:
			return namespace.Node{}, fmt.Errorf("%q in directory %d: %w", name, parent, namespace.ErrNotExist)
		case e.etag == "":
			key, _ := DentryKey(t.root, parent, frags, name)
			return namespace.Node{}, lockedErr(key)
		case e.bound.Kind == namespace.KindDir:
			return namespace.Node{}, fmt.Errorf("%q in directory %d: %w", name, parent, namespace.ErrIsDir)
		case e.bound.Node == nil:
			// A name of a node of several names (inode.go).
			n, err := t.unlinkLinked(ctx, parent, frags, name, e)
			var ne *NameError
			if errors.As(err, &ne) && errors.Is(err, ErrStale) || errors.Is(err, ErrAborted) {
				if e, err = t.readName(ctx, parent, frags, name); err != nil {
					return namespace.Node{}, err
				}
				continue
			}
			return n, err
		}
		change := newID()
		b := e.bound
		if b.Kind == namespace.KindFile {
			if err := t.putOrphan(ctx, &Orphan{FileID: b.Node.FileID, Ino: b.Ino, Dir: parent, Frags: frags,
				Name: Name(name), Change: change}); err != nil {
				return namespace.Node{}, err
			}
		}
		etag, err := t.p.Tombstone(ctx, parent, frags, name, change, e.etag)
		var ne *NameError
		switch {
		case err == nil:
			t.mu.Lock()
			t.learnLocked(parent, frags, name, nil, etag, false) // makes a file an orphan here
			t.mu.Unlock()
			n := nodeOf(parent, b, nil)
			n.Nlink = 0
			return n, nil
		case errors.As(err, &ne) && errors.Is(err, ErrStale):
			// Changed since read: check again what it holds now. A record
			// written for it stays, stale: its name still binds its file,
			// or another unlink of the file made it an orphan anyway.
			t.mu.Lock()
			locked := ne.Dentry != nil && unwritable(ne.Dentry)
			var bound *Binding
			if ne.Dentry != nil {
				bound = ne.Dentry.Bound
			}
			e = t.learnLocked(parent, frags, name, bound, ne.ETag, locked)
			t.mu.Unlock()
			if e != nil && e.bound != nil && e.bound.Node == nil {
				if e, err = t.resolve(ctx, parent, frags, name); err != nil {
					return namespace.Node{}, err
				}
			}
			if b.Kind == namespace.KindFile && (e == nil || e.bound == nil || e.bound.Ino != b.Ino) {
				// The file left the name another way (a rename moved it, or
				// another mount's unlink): this record is of a change that
				// did not land, and would read as an orphan's wherever the
				// file now is.
				t.dropRecord(ctx, b.Node.FileID, change)
			}
			continue
		default:
			return namespace.Node{}, err
		}
	}
	return namespace.Node{}, ErrContended
}

// dropRecord deletes file fileID's orphan record if it is change's. Best
// effort: a record left is read as an orphan's only while its name does not
// bind the file.
func (t *Tree) dropRecord(ctx context.Context, fileID, change string) {
	key, err := OrphanKey(t.root, fileID)
	if err != nil {
		return
	}
	rec, _, err := read(ctx, t.st, key, kindOrphan, DecodeOrphan)
	if err != nil || rec.Change != change {
		return
	}
	if err := t.st.Delete(ctx, key); err != nil {
		t.log.Warn("namespace v2: the orphan record of an unlink that did not land is left", zap.String("key", key), zap.Error(err))
	}
}

// putOrphan stores the orphan record o: an unconditional PUT (a file loses
// its one name once; two mounts unlinking it at once both write a record,
// and the last stands, which is right for either: see Orphans).
func (t *Tree) putOrphan(ctx context.Context, o *Orphan) error {
	key, err := o.Key(t.root)
	if err != nil {
		return err
	}
	body, err := EncodeOrphan(o)
	if err != nil {
		return err
	}
	_, err = put(ctx, t.st, key, body, staging.Conditions{}, kindOrphan, DecodeOrphan,
		func(cur *Orphan) bool { return cur.Change == o.Change })
	if err != nil {
		return fmt.Errorf("orphan record: %w", err)
	}
	return nil
}

// rewrite changes the binding of node ino's name with change: one PUT
// If-Match the ETag held; refused (another mount changed it), it reads the
// name and applies change again to what it holds, while it still binds
// ino. An orphan's attributes change here only (no object holds them); a
// node of several names's in its inode object (rewriteLinked).
func (t *Tree) rewrite(ctx context.Context, ino namespace.Ino, change func(a *Attrs) error) (namespace.Node, error) {
	return waitLocked(ctx, t, func() (namespace.Node, error) { return t.rewriteTry(ctx, ino, change) })
}

func (t *Tree) rewriteTry(ctx context.Context, ino namespace.Ino, change func(a *Attrs) error) (namespace.Node, error) {
	if ino == namespace.RootIno {
		return t.rewriteRoot(ctx, change) // root.go
	}
	e, err := t.current(ctx, ino)
	if err != nil {
		return namespace.Node{}, err
	}
	for range maxRounds {
		if e == nil {
			return t.rewriteGone(ctx, ino, change)
		}
		if e.etag == "" || e.bound.Node == nil {
			if e, err = t.resolve(ctx, e.dir, e.frags, e.name); err != nil {
				return namespace.Node{}, err
			}
			switch {
			case e == nil || e.bound == nil || e.bound.Ino != ino:
				e = nil
				continue
			case e.etag == "":
				key, _ := DentryKey(t.root, e.dir, e.frags, e.name)
				return namespace.Node{}, lockedErr(key)
			case e.bound.Node == nil:
				return t.rewriteLinked(ctx, ino, change)
			}
		}
		a := cloneAttrs(e.bound.Node)
		if err := change(a); err != nil {
			return namespace.Node{}, err
		}
		b := *e.bound
		b.Node = a
		d := &Dentry{Dir: e.dir, Frags: e.frags, Name: Name(e.name), Change: newID(), Bound: &b}
		key, err := d.Key(t.root)
		if err != nil {
			return namespace.Node{}, err
		}
		r, err := t.p.putDentry(ctx, key, d, staging.Conditions{IfMatch: e.etag}, func(cur *Dentry) bool {
			return cur.Change == d.Change && cur.Lock == nil
		})
		if err != nil {
			return namespace.Node{}, err
		}
		t.mu.Lock()
		if r.landed {
			t.learnLocked(e.dir, e.frags, e.name, &b, r.etag, false)
			t.mu.Unlock()
			return nodeOf(e.dir, &b, nil), nil
		}
		var bound *Binding
		if r.cur != nil {
			bound = r.cur.Bound
		}
		dir, frags, name := e.dir, e.frags, e.name
		e = t.learnLocked(dir, frags, name, bound, r.curInfo.ETag, r.cur != nil && unwritable(r.cur))
		t.mu.Unlock()
		if e != nil && (e.bound == nil || e.bound.Ino != ino) {
			e = nil
		}
		if e == nil && r.cur != nil && r.cur.Lock != nil {
			return namespace.Node{}, lockedErr(key)
		}
	}
	return namespace.Node{}, ErrContended
}

// rewriteOrphan applies change to the orphan ino, in memory.
func (t *Tree) rewriteOrphan(ino namespace.Ino, change func(a *Attrs) error) (namespace.Node, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.orphans[ino]
	if !ok {
		return namespace.Node{}, fmt.Errorf("node %d: %w", ino, namespace.ErrNotExist)
	}
	a := cloneAttrs(o.attrs)
	if err := change(a); err != nil {
		return namespace.Node{}, err
	}
	n := nodeOf(0, &Binding{Ino: ino, Kind: o.node.Kind, Node: a}, nil)
	n.Nlink = 0
	t.orphans[ino] = orphanNode{node: n, attrs: a}
	return n, nil
}

func cloneAttrs(a *Attrs) *Attrs {
	c := *a
	c.Xattrs = slices.Clone(a.Xattrs)
	return &c
}

// SetAttr changes attributes of node ino and returns the node after: a
// conditional rewrite of its dentry (If-Match).
func (t *Tree) SetAttr(ctx context.Context, ino namespace.Ino, sa namespace.SetAttr) (namespace.Node, error) {
	if err := t.enter(); err != nil {
		return namespace.Node{}, err
	}
	defer t.calls.Done()
	if sa.Mode != nil && *sa.Mode&^namespace.ModeMask != 0 {
		return namespace.Node{}, fmt.Errorf("setattr %d: mode %o: %w", ino, *sa.Mode, namespace.ErrInvalid)
	}
	now := t.now().UnixNano()
	n, err := t.rewrite(ctx, ino, func(a *Attrs) error {
		if sa.Mode != nil && a.Target == "" {
			a.Mode = *sa.Mode // a symlink's mode stays 0777, as in v1
		}
		if sa.Uid != nil {
			a.Uid = *sa.Uid
		}
		if sa.Gid != nil {
			a.Gid = *sa.Gid
		}
		if sa.Atime != nil {
			a.Atime = sa.Atime.UnixNano()
		}
		if sa.Mtime != nil {
			a.Mtime, a.MtimeSet = sa.Mtime.UnixNano(), now
		}
		a.Ctime = now
		if sa.Ctime != nil {
			a.Ctime = sa.Ctime.UnixNano()
		}
		return nil
	})
	if err != nil {
		return namespace.Node{}, fmt.Errorf("setattr %d: %w", ino, err)
	}
	return n, nil
}

// SetXattr sets extended attribute name ("user." only) of node ino: a
// conditional rewrite of its dentry.
func (t *Tree) SetXattr(ctx context.Context, ino namespace.Ino, name string, value []byte, flags namespace.XattrFlags) error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.calls.Done()
	if err := t.setXattr(ctx, ino, name, value, flags); err != nil {
		return fmt.Errorf("setxattr %q of %d: %w", name, ino, err)
	}
	return nil
}

func (t *Tree) setXattr(ctx context.Context, ino namespace.Ino, name string, value []byte, flags namespace.XattrFlags) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	switch {
	case name == FragmentsXattr:
		return t.setFrags(ctx, ino, value) // frags.go; flags do not apply: it always exists
	case flags&^(namespace.XattrCreate|namespace.XattrReplace) != 0 || flags == namespace.XattrCreate|namespace.XattrReplace:
		return fmt.Errorf("xattr flags %#x: %w", flags, namespace.ErrInvalid)
	case len(value) > namespace.MaxXattrValueLen:
		return fmt.Errorf("attribute value of %d bytes: %w", len(value), namespace.ErrTooBig)
	}
	now := t.now().UnixNano()
	_, err := t.rewrite(ctx, ino, func(a *Attrs) error {
		i, found := slices.BinarySearchFunc(a.Xattrs, name, func(x Xattr, n string) int { return strings.Compare(string(x.Name), n) })
		switch {
		case flags == namespace.XattrCreate && found:
			return fmt.Errorf("attribute %q of node %d: %w", name, ino, namespace.ErrExist)
		case flags == namespace.XattrReplace && !found:
			return fmt.Errorf("attribute %q of node %d: %w", name, ino, namespace.ErrNoAttr)
		}
		total := len(name) + len(value)
		for _, x := range a.Xattrs {
			if string(x.Name) != name {
				total += len(x.Name) + len(x.Value)
			}
		}
		if total > namespace.MaxXattrsLen {
			return fmt.Errorf("attributes of node %d would take %d bytes, over %d: %w", ino, total, namespace.MaxXattrsLen, namespace.ErrNoSpace)
		}
		x := Xattr{Name: Name(name), Value: slices.Clone(value)}
		if x.Value == nil {
			x.Value = []byte{}
		}
		if found {
			a.Xattrs[i] = x
		} else {
			a.Xattrs = slices.Insert(a.Xattrs, i, x)
		}
		a.Ctime = now
		return nil
	})
	return err
}

// RemoveXattr removes extended attribute name of node ino.
func (t *Tree) RemoveXattr(ctx context.Context, ino namespace.Ino, name string) error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.calls.Done()
	if err := checkXattrName(name); err != nil {
		return fmt.Errorf("removexattr %q of %d: %w", name, ino, err)
	}
	if name == FragmentsXattr {
		return fmt.Errorf("removexattr %q of %d: a fragment count is set, not removed: %w", name, ino, namespace.ErrNotPermitted)
	}
	now := t.now().UnixNano()
	_, err := t.rewrite(ctx, ino, func(a *Attrs) error {
		i, found := slices.BinarySearchFunc(a.Xattrs, name, func(x Xattr, n string) int { return strings.Compare(string(x.Name), n) })
		if !found {
			return fmt.Errorf("attribute %q of node %d: %w", name, ino, namespace.ErrNoAttr)
		}
		a.Xattrs = slices.Delete(a.Xattrs, i, i+1)
		if len(a.Xattrs) == 0 {
			a.Xattrs = nil // the format writes no empty list
		}
		a.Ctime = now
		return nil
	})
	if err != nil {
		return fmt.Errorf("removexattr %q of %d: %w", name, ino, err)
	}
	return nil
}

// orphanState is what the store says of file fileID's orphan record: rec
// nil when there is none; orphan when its name no longer binds its node.
func (t *Tree) orphanState(ctx context.Context, fileID string) (rec *Orphan, orphan bool, err error) {
	key, err := OrphanKey(t.root, fileID)
	if err != nil {
		return nil, false, fmt.Errorf("file %q: %w", fileID, namespace.ErrInvalid)
	}
	rec, _, err = read(ctx, t.st, key, kindOrphan, DecodeOrphan)
	if errors.Is(err, staging.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	r, err := t.p.Resolve(ctx, rec.Dir, rec.Frags, string(rec.Name))
	if err != nil {
		return nil, false, err
	}
	// A name locked by a change not decided keeps its old binding: that is
	// what every reader takes now.
	if r.Bound != nil && r.Bound.Ino == rec.Ino {
		return rec, false, nil
	}
	// The name went; a node of several names may have others, which its
	// inode object in force counts (inode.go): one GET more.
	named, err := t.inForce(ctx, rec.Ino)
	if err != nil {
		return nil, false, err
	}
	return rec, !named, nil
}

// Orphaned reports whether fileID is an orphan: its orphan record is stored
// (Forget deletes it) and the name it names no longer binds it. Two GETs.
func (t *Tree) Orphaned(ctx context.Context, fileID string) (bool, error) {
	if err := t.enter(); err != nil {
		return false, err
	}
	defer t.calls.Done()
	_, orphan, err := t.orphanState(ctx, fileID)
	if err != nil {
		return false, fmt.Errorf("is file %s an orphan: %w", fileID, err)
	}
	return orphan, nil
}

// errUnknownFile: Named of a file this Tree has seen no name or orphan
// record of: answering needs an index by file id (step 5).
var errUnknownFile = errors.New("a file this mount has seen no name of: not known whether named")

// Named reports whether fileID is a file with a name left. It answers for a
// file whose name this Tree has seen (read again: one GET) and for one
// with an orphan record; of any other it returns an error: it cannot tell
// without an index by file id (step 5's), and a false answer would let a
// caller take a named file's data for reaped.
func (t *Tree) Named(ctx context.Context, fileID string) (bool, error) {
	if err := t.enter(); err != nil {
		return false, err
	}
	defer t.calls.Done()
	t.mu.Lock()
	ino, known := t.byFile[fileID]
	e := t.inos[ino]
	t.mu.Unlock()
	if known && e != nil {
		// Read it now: the caller asks what the store holds.
		e, err := t.resolve(ctx, e.dir, e.frags, e.name)
		if err != nil {
			return false, fmt.Errorf("is file %s named: %w", fileID, err)
		}
		if e != nil && e.bound != nil && e.bound.Ino == ino {
			return true, nil
		}
	}
	rec, orphan, err := t.orphanState(ctx, fileID)
	switch {
	case err != nil:
		return false, fmt.Errorf("is file %s named: %w", fileID, err)
	case rec != nil:
		return !orphan, nil
	}
	if known {
		// A node of several names whose name this mount saw went: its
		// inode object counts the others.
		named, err := t.inForce(ctx, ino)
		if err != nil {
			return false, fmt.Errorf("is file %s named: %w", fileID, err)
		}
		if named {
			return true, nil
		}
	}
	switch {
	case known:
		// Its name went and its record is gone: forgotten.
		return false, nil
	}
	return false, fmt.Errorf("is file %s named: %w", fileID, errUnknownFile)
}

// Orphans lists the files with no name left, by ino: the orphan records
// whose name no longer binds their node (a LIST of ns2/orphan/, then two
// GETs a record). A damaged record is left out, logged.
func (t *Tree) Orphans(ctx context.Context) ([]namespace.Orphan, error) {
	if err := t.enter(); err != nil {
		return nil, err
	}
	defer t.calls.Done()
	objs, err := staging.ListAll(ctx, t.st, rootPrefix(t.root)+dirPrefix+"orphan/")
	if err != nil {
		return nil, fmt.Errorf("list orphan records: %w", err)
	}
	var out []namespace.Orphan
	for _, o := range objs {
		_, id, err := ParseOrphanKey(o.Key)
		if err != nil {
			t.log.Warn("namespace v2: not an orphan record's key", zap.String("key", o.Key), zap.Error(err))
			continue
		}
		rec, orphan, err := t.orphanState(ctx, id)
		switch {
		case errors.Is(err, namespace.ErrCorrupt):
			t.log.Warn("namespace v2: a damaged orphan record or name", zap.String("file", id), zap.Error(err))
		case err != nil:
			return nil, fmt.Errorf("orphan %s: %w", id, err)
		case rec != nil && orphan:
			out = append(out, namespace.Orphan{Ino: rec.Ino, FileID: rec.FileID})
		}
	}
	slices.SortFunc(out, func(a, b namespace.Orphan) int { return cmp.Compare(a.Ino, b.Ino) })
	return out, nil
}

// Forget drops orphan fileID once its data is deleted: it deletes the
// inode object of its node, when it had several names, then its orphan
// record. In that order, as Index.Forget: a crash between leaves the
// record, which the next Forget (or the cleaner's) finds and finishes;
// the other order left an inode object no record pointed to. A file with a
// name left is ErrInvalid, one with no record ErrNotExist, as in v1.
func (t *Tree) Forget(ctx context.Context, fileID string) error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.calls.Done()
	rec, orphan, err := t.orphanState(ctx, fileID)
	switch {
	case err != nil:
		return fmt.Errorf("forget file %s: %w", fileID, err)
	case rec == nil:
		return fmt.Errorf("forget file %s: %w", fileID, namespace.ErrNotExist)
	case !orphan:
		return fmt.Errorf("forget file %s with a name: %w", fileID, namespace.ErrInvalid)
	}
	if err := t.dropInode(ctx, rec.Ino); err != nil {
		return fmt.Errorf("forget file %s: %w", fileID, err)
	}
	key, _ := OrphanKey(t.root, fileID)
	if err := t.st.Delete(ctx, key); err != nil {
		return fmt.Errorf("forget file %s: delete %s: %w", fileID, staging.TruncKey(key), err)
	}
	// byFile keeps it: Named then knows it forgotten.
	t.mu.Lock()
	delete(t.orphans, rec.Ino)
	t.mu.Unlock()
	return nil
}

// String names the Tree in logs.
func (t *Tree) String() string {
	return "namespace v2 of mount " + t.mount + " under " + strconv.Quote(t.root)
}
