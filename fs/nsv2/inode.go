package nsv2

import (
	"context"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// Hard links (section 3, step 4 of section 10): a node of several names
// keeps its attributes and its count of names in its inode object
// (ns2/i/<hh>/<ino>, the Inode type), and each of its names' dentries binds
// its ino and kind only.
//
//   - link: a change of several names (Lock, Decide, resolve: change.go)
//     of the new name (If-None-Match, or If-Match its tombstone: O_EXCL as
//     a create's) and the inode object (Nlink + 1). A node's first link
//     also locks its one name, whose binding gives up its attributes to the
//     inode object in the same change: no reader sees the node's
//     attributes in two places, nor in none.
//   - unlink of a name of such a node, or a rename over one: the name and
//     the inode object (Nlink - 1) in one change. When that leaves no name
//     (Nlink 0: the object is then out of force, kept for the cleaner), the
//     orphan record is stored first, as for a node of one name.
//   - chmod, chown, utimens, truncate's times, xattrs: one PUT of the inode
//     object If-Match the ETag read; refused, it is read again and the
//     change applied again, so that two mounts changing one linked file
//     through two names both land.
//   - a rename or an exchange of a name of such a node changes its names
//     only; the inode object is untouched (its Nlink stays).
//
// Every change of a node's names after its first link locks its inode
// object, so the object's Nlink is the count of its names at every
// decision: a link racing the unlink of the last other name meets it there
// (one of them is refused, reads again and tries again). An orphan record
// is an orphan's only while the node has no inode object in force
// (orphanState): a record left by an unlink that did not land can no
// longer make a named node of several names read as an orphan.
//
// Requests, sequential (counted by the fault tests): a first link 3 GETs
// (the name, the new name, the inode object's absence) and 7 PUTs (3 locks,
// the decision, 3 resolutions); a later link 4 GETs and 5 PUTs; an unlink
// of one of several names 3 GETs and 5 PUTs; an attribute change a GET and
// a PUT of the inode object; a lookup of such a name not cached 2 GETs.
//
// Not here: a link of a node whose only name this mount read was since
// renamed by another mount finds no name of it (ErrNotExist), until step
// 5's index by file id; a rename leaves a linked node's ctime as it was.
//
// The cache: several entries may bind one ino, each with the inode object
// as last read or written by this mount (noteInodeLocked sets it in every
// one), and inos holds one of them; GetNode of a node of several names with
// no name cached reads its inode object.

// lockedInode is the inode object locked by change tx: cur (the node before
// tx), to (its body after) and tx's op list.
func lockedInode(tx string, to, cur *Inode, ops []Op) *Inode {
	return &Inode{Ino: cur.Ino, Kind: cur.Kind, Nlink: cur.Nlink, Change: tx, Node: cur.Node, Lock: to, Ops: ops}
}

// resolvedInode is the locked inode object in once its change is decided
// outcome: the lock's body for a commit, the old one for an abort; Change
// stays the change's id, and the op list goes.
func resolvedInode(in *Inode, outcome string) *Inode {
	if outcome == Commit {
		c := *in.Lock
		c.Change = in.Change
		return &c
	}
	return &Inode{Ino: in.Ino, Kind: in.Kind, Nlink: in.Nlink, Change: in.Change, Node: in.Node}
}

func (n *Names) putInode(ctx context.Context, key string, in *Inode, cond staging.Conditions, mine func(*Inode) bool) (putResult[Inode], error) {
	body, err := EncodeInode(in)
	if err != nil {
		return putResult[Inode]{}, err
	}
	return put(ctx, n.st, key, body, cond, kindInode, DecodeInode, mine)
}

// resolveInodeLock replaces the inode object's lock l with its body as
// outcome leaves it: one PUT If-Match l.ETag; "" and nil when the lock was
// already replaced.
func (n *Names) resolveInodeLock(ctx context.Context, l Locked, outcome string) (string, error) {
	in := resolvedInode(l.Inode, outcome)
	r, err := n.putInode(ctx, l.Key, in, staging.Conditions{IfMatch: l.ETag}, func(cur *Inode) bool {
		return cur.Change == in.Change && cur.Lock == nil
	})
	switch {
	case err != nil:
		return "", err
	case r.landed:
		return r.etag, nil
	}
	return "", nil
}

// InodeRead is an inode object as a reader takes it.
type InodeRead struct {
	Key string
	// Inode is the node as every reader takes it now (nil: no object).
	Inode *Inode
	// ETag is the object's as stored ("" when none); a write may be
	// conditioned on it unless Locked.
	ETag string
	// Locked: the object stored is a lock, of a change not decided
	// (Pending: Inode is its old body) or decided and not yet replaced by
	// its resolution (Inode is the decided body).
	Locked, Pending bool
}

// ResolveInode reads the inode object of ino as a reader takes it, as
// Resolve reads a name: one GET; a locked one is resolved from its change's
// decision (commit: the lock's body; abort: the old one; none: the old one,
// and abort decided when the lock is older than TxGrace), and the lock
// replaced by its resolution when decided.
func (n *Names) ResolveInode(ctx context.Context, ino namespace.Ino) (InodeRead, error) {
	key, err := InodeKey(n.root, ino)
	if err != nil {
		return InodeRead{}, fmt.Errorf("resolve inode: %w: %w", namespace.ErrInvalid, err)
	}
	for range maxRounds {
		in, info, err := read(ctx, n.st, key, kindInode, DecodeInode)
		switch {
		case errors.Is(err, staging.ErrNotFound):
			return InodeRead{Key: key}, nil
		case err != nil:
			return InodeRead{}, fmt.Errorf("resolve inode: %w", err)
		case in.Lock == nil:
			return InodeRead{Key: key, Inode: in, ETag: info.ETag}, nil
		}
		xkey, err := DecisionKey(n.root, in.Change)
		if err != nil {
			return InodeRead{}, err
		}
		x, _, err := read(ctx, n.st, xkey, kindDecision, DecodeDecision)
		switch {
		case errors.Is(err, staging.ErrNotFound):
			if n.now().Sub(info.LastModified) <= n.txGrace {
				return InodeRead{Key: key, Inode: resolvedInode(in, Abort), ETag: info.ETag, Locked: true, Pending: true}, nil
			}
			if x, err = n.decide(ctx, &Decision{Tx: in.Change, Outcome: Abort, Ops: in.Ops}); err != nil {
				return InodeRead{}, fmt.Errorf("resolve inode: %w", err)
			}
		case err != nil:
			return InodeRead{}, fmt.Errorf("resolve inode: %w", err)
		}
		out := resolvedInode(in, x.Outcome)
		etag, err := n.resolveInodeLock(ctx, Locked{Key: key, ETag: info.ETag, Inode: in}, x.Outcome)
		switch {
		case err != nil:
			return InodeRead{Key: key, Inode: out, ETag: info.ETag, Locked: true}, nil
		case etag != "":
			return InodeRead{Key: key, Inode: out, ETag: etag}, nil
		}
		// Replaced since it was read: read it again.
	}
	return InodeRead{}, fmt.Errorf("resolve inode %s: %w", staging.TruncKey(key), ErrContended)
}

// inodeFor reads node ino's inode object for a change of it: the object
// (nil: none) and its ETag; locked, a *NameError matching ErrLocked (the
// change waits, waitLocked).
func (t *Tree) inodeFor(ctx context.Context, ino namespace.Ino) (*Inode, string, error) {
	r, err := t.p.ResolveInode(ctx, ino)
	if err != nil {
		return nil, "", err
	}
	if r.Locked {
		return nil, "", lockedErr(r.Key)
	}
	if r.Inode != nil && r.Inode.Nlink > 0 {
		t.mu.Lock()
		t.noteInodeLocked(r.Inode)
		t.mu.Unlock()
	}
	return r.Inode, r.ETag, nil
}

// readLinked reads the inode object of e's node, a node of several names,
// as readers take it, and caches it.
func (t *Tree) readLinked(ctx context.Context, e *entry) error {
	r, err := t.p.ResolveInode(ctx, e.bound.Ino)
	if err != nil {
		return fmt.Errorf("node %d of several names: %w", e.bound.Ino, err)
	}
	if r.Inode == nil {
		return &namespace.CorruptError{Key: r.Key, Reason: fmt.Sprintf("a name binds node %d of several names, which has no inode object", e.bound.Ino)}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Nlink 0: its last name went after e was read; e shows that.
	e.node = r.Inode
	if r.Inode.Nlink > 0 {
		t.noteInodeLocked(r.Inode)
	}
	return nil
}

// noteInodeLocked caches in, node in.Ino's inode object in force, in every
// entry of one of its names, and keeps inos pointing at one of them. mu
// held. It walks the cache: a node of several names is rare, and this runs
// once per read or change of one.
func (t *Tree) noteInodeLocked(in *Inode) {
	first := (*entry)(nil)
	for _, e := range t.names {
		if e.bound != nil && e.bound.Ino == in.Ino && e.bound.Node == nil {
			e.node = in
			if first == nil {
				first = e
			}
		}
	}
	if cur := t.inos[in.Ino]; first != nil && (cur == nil || cur.bound == nil || cur.bound.Ino != in.Ino) {
		t.inos[in.Ino] = first
	}
	if in.Node.FileID != "" {
		t.byFile[in.Node.FileID] = in.Ino
	}
}

// nodeOfEntry is the node of e's name, read under mu: e.node is set again
// in every entry of a node whenever its inode object is read or written.
func (t *Tree) nodeOfEntry(e *entry) namespace.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return nodeOf(e.dir, e.bound, e.node)
}

// noteChanged caches in, written by a change of node in.Ino's names that
// this mount made: in force, or (Nlink 0) the node is an orphan here.
func (t *Tree) noteChanged(in *Inode) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if in.Nlink > 0 {
		t.noteInodeLocked(in)
		return
	}
	if e := t.inos[in.Ino]; e != nil && e.bound != nil && e.bound.Ino == in.Ino {
		return // named after all: not this mount's to say
	}
	n := nodeOf(0, &Binding{Ino: in.Ino, Kind: in.Kind}, in)
	n.Nlink = 0
	a := in.Node
	if in.Kind == namespace.KindFile {
		t.orphans[in.Ino] = orphanNode{node: n, attrs: &a}
		t.byFile[a.FileID] = in.Ino
	}
}

// linkedNode is node ino read from its inode object, for a node whose
// names this mount has not cached: ok false when it has none in force.
func (t *Tree) linkedNode(ctx context.Context, ino namespace.Ino) (namespace.Node, *Attrs, bool) {
	r, err := t.p.ResolveInode(ctx, ino)
	if err != nil || r.Inode == nil || r.Inode.Nlink == 0 {
		return namespace.Node{}, nil, false
	}
	t.mu.Lock()
	t.noteInodeLocked(r.Inode)
	t.mu.Unlock()
	a := r.Inode.Node
	return nodeOf(0, &Binding{Ino: ino, Kind: r.Inode.Kind}, r.Inode), &a, true
}

// Link adds name newName in directory newParent to node ino, a file,
// symlink, FIFO, socket or device (a directory is ErrNotPermitted, as in
// Linux): one change of several names (see above), O_EXCL on the new name
// as a create's. It returns the node after, Nlink counted.
func (t *Tree) Link(ctx context.Context, ino, newParent namespace.Ino, newName string) (namespace.Node, error) {
	if err := t.enter(); err != nil {
		return namespace.Node{}, err
	}
	defer t.calls.Done()
	n, err := waitLocked(ctx, t, func() (namespace.Node, error) { return t.linkTry(ctx, ino, newParent, newName) })
	if err != nil {
		return namespace.Node{}, fmt.Errorf("link %d as %q in %d: %w", ino, newName, newParent, err)
	}
	return n, nil
}

func (t *Tree) linkTry(ctx context.Context, ino, newParent namespace.Ino, newName string) (namespace.Node, error) {
	if err := CheckName(newName); err != nil {
		return namespace.Node{}, err
	}
	if ino == namespace.RootIno {
		return namespace.Node{}, fmt.Errorf("hard link to the root: %w", namespace.ErrNotPermitted)
	}
	nfr, err := t.dirFrags(newParent)
	if err != nil {
		return namespace.Node{}, err
	}
	for range maxRounds {
		n, err := t.linkOnce(ctx, ino, newParent, nfr, newName)
		var ne *NameError
		if errors.As(err, &ne) && errors.Is(err, ErrStale) || errors.Is(err, ErrAborted) {
			continue // changed under it: read again
		}
		return n, err
	}
	return namespace.Node{}, ErrContended
}

// linkOnce reads the node (its name this mount knows, read again, or its
// inode object) and the new name, and makes the change once.
func (t *Tree) linkOnce(ctx context.Context, ino, dir namespace.Ino, frags uint32, name string) (namespace.Node, error) {
	t.mu.Lock()
	e := t.inos[ino]
	_, orphan := t.orphans[ino]
	t.mu.Unlock()
	var src *entry
	if e != nil && e.bound != nil {
		if e.bound.Kind == namespace.KindDir {
			return namespace.Node{}, fmt.Errorf("hard link to directory %d: %w", ino, namespace.ErrNotPermitted)
		}
		var err error
		if src, err = t.readName(ctx, e.dir, e.frags, e.name); err != nil {
			return namespace.Node{}, err
		}
		if src == nil || src.bound == nil || src.bound.Ino != ino {
			src = nil
		}
	}
	if src == nil && e == nil && !orphan {
		// Never seen here: a node of several names is found by its ino.
		if _, _, ok := t.linkedNode(ctx, ino); !ok {
			return namespace.Node{}, fmt.Errorf("node %d: not seen by this mount: %w", ino, namespace.ErrNotExist)
		}
	}
	dst, err := t.readName(ctx, dir, frags, name)
	if err != nil {
		return namespace.Node{}, err
	}
	if dst != nil && dst.bound != nil {
		return namespace.Node{}, fmt.Errorf("%q in directory %d: %w", name, dir, namespace.ErrExist)
	}
	if err := t.leaseFor(ctx, dir, frags); err != nil {
		return namespace.Node{}, err
	}
	tx := newID()
	now := t.now().UnixNano()
	var ops []Op
	var held []Held
	var to *Inode
	if src != nil && src.bound.Node != nil {
		// The node's first link: its one name gives up its attributes to
		// the inode object, in the change. An object there not in force
		// (Nlink 0: a first link that did not commit) is replaced.
		if src.etag == "" {
			key, _ := DentryKey(t.root, src.dir, src.frags, src.name)
			return namespace.Node{}, lockedErr(key)
		}
		old, etag, err := t.inodeFor(ctx, ino)
		if err != nil {
			return namespace.Node{}, err
		}
		if old != nil && old.Nlink > 0 {
			// In force while a name holds the attributes: read between
			// two changes; read again.
			key, _ := InodeKey(t.root, ino)
			return namespace.Node{}, &NameError{Key: key, Err: ErrStale}
		}
		sb := src.bound
		a := *cloneAttrs(sb.Node)
		a.Ctime = now
		to = &Inode{Ino: ino, Kind: sb.Kind, Nlink: 2, Change: tx, Node: a}
		cur := &Inode{Ino: ino, Kind: sb.Kind, Change: tx, Node: *sb.Node}
		strip := &Binding{Ino: ino, Kind: sb.Kind}
		ops = []Op{
			{Dir: src.dir, Frags: src.frags, Name: Name(src.name), To: strip},
			{Dir: dir, Frags: frags, Name: Name(name), To: strip},
			{Ino: ino, Inode: to},
		}
		held = []Held{heldOf(src), heldOf(dst), {ETag: etag, Inode: cur}}
	} else {
		in, etag, err := t.inodeFor(ctx, ino)
		switch {
		case err != nil:
			return namespace.Node{}, err
		case in == nil || in.Nlink == 0:
			// Its last name went: Linux refuses a link to an open file with
			// no name too.
			return namespace.Node{}, fmt.Errorf("node %d has no names: %w", ino, namespace.ErrNotExist)
		case in.Nlink >= MaxLinks:
			return namespace.Node{}, fmt.Errorf("node %d has %d names: %w", ino, in.Nlink, namespace.ErrNotPermitted)
		}
		a := *cloneAttrs(&in.Node)
		a.Ctime = now
		to = &Inode{Ino: ino, Kind: in.Kind, Nlink: in.Nlink + 1, Change: tx, Node: a}
		ops = []Op{
			{Dir: dir, Frags: frags, Name: Name(name), To: &Binding{Ino: ino, Kind: in.Kind}},
			{Ino: ino, Inode: to},
		}
		held = []Held{heldOf(dst), {ETag: etag, Inode: in}}
	}
	locks, err := t.runChange(ctx, tx, ops, held, 0, 0, nil)
	if err != nil {
		return namespace.Node{}, err
	}
	t.tidyLater(tx, locks, t.applyOps(tx, ops), nil)
	t.noteChanged(to)
	return nodeOf(dir, &Binding{Ino: ino, Kind: to.Kind}, to), nil
}

// dropNameOp is the inode-object op of change tx removing name (in dir of
// frags fragments), one of the names of node b, whose binding has no
// attributes: its Nlink one less. When that leaves none, the orphan record
// of a file is stored first (section 5). A *NameError matching ErrStale:
// the inode object has no name in force, read between two changes; read
// again.
func (t *Tree) dropNameOp(ctx context.Context, tx string, b *Binding, dir namespace.Ino, frags uint32, name string) (Op, Held, error) {
	in, etag, err := t.inodeFor(ctx, b.Ino)
	if err != nil {
		return Op{}, Held{}, err
	}
	if in == nil || in.Nlink == 0 {
		key, _ := InodeKey(t.root, b.Ino)
		return Op{}, Held{}, &NameError{Key: key, Err: ErrStale}
	}
	a := *cloneAttrs(&in.Node)
	a.Ctime = t.now().UnixNano()
	to := &Inode{Ino: b.Ino, Kind: in.Kind, Nlink: in.Nlink - 1, Change: tx, Node: a}
	if to.Nlink == 0 && in.Kind == namespace.KindFile {
		if err := t.putOrphan(ctx, &Orphan{FileID: a.FileID, Ino: b.Ino, Dir: dir, Frags: frags,
			Name: Name(name), Change: tx}); err != nil {
			return Op{}, Held{}, err
		}
	}
	return Op{Ino: b.Ino, Inode: to}, Held{ETag: etag, Inode: in}, nil
}

// unlinkLinked removes name, held as e, one of the names of a node of
// several names: the name and its inode object in one change. A *NameError
// matching ErrStale, or ErrAborted: changed under it, nothing stored; the
// caller reads the name again.
func (t *Tree) unlinkLinked(ctx context.Context, parent namespace.Ino, frags uint32, name string, e *entry) (namespace.Node, error) {
	b := &Binding{Ino: e.bound.Ino, Kind: e.bound.Kind}
	tx := newID()
	op, h, err := t.dropNameOp(ctx, tx, b, parent, frags, name)
	if err != nil {
		return namespace.Node{}, err
	}
	ops := []Op{{Dir: parent, Frags: frags, Name: Name(name)}, op}
	locks, err := t.runChange(ctx, tx, ops, []Held{heldOf(e), h}, 0, 0, nil)
	if err != nil {
		var ne *NameError
		if op.Inode.Nlink == 0 && op.Inode.Kind == namespace.KindFile && (errors.As(err, &ne) && errors.Is(err, ErrStale) || errors.Is(err, ErrAborted)) {
			t.dropRecord(ctx, op.Inode.Node.FileID, tx) // this change did not land
		}
		return namespace.Node{}, err
	}
	t.tidyLater(tx, locks, t.applyOps(tx, ops), nil)
	t.noteChanged(op.Inode)
	return nodeOf(parent, b, op.Inode), nil
}

// rewriteLinked applies change to the attributes of node ino, a node of
// several names: one PUT of its inode object If-Match the ETag read;
// refused, read again and applied again.
func (t *Tree) rewriteLinked(ctx context.Context, ino namespace.Ino, change func(a *Attrs) error) (namespace.Node, error) {
	key, err := InodeKey(t.root, ino)
	if err != nil {
		return namespace.Node{}, err
	}
	for range maxRounds {
		in, etag, err := t.inodeFor(ctx, ino)
		if err != nil {
			return namespace.Node{}, err
		}
		if in == nil || in.Nlink == 0 {
			return t.rewriteOrphan(ino, change)
		}
		a := cloneAttrs(&in.Node)
		if err := change(a); err != nil {
			return namespace.Node{}, err
		}
		nw := &Inode{Ino: ino, Kind: in.Kind, Nlink: in.Nlink, Change: newID(), Node: *a}
		r, err := t.p.putInode(ctx, key, nw, staging.Conditions{IfMatch: etag}, func(cur *Inode) bool {
			return cur.Change == nw.Change && cur.Lock == nil
		})
		if err != nil {
			return namespace.Node{}, err
		}
		if r.landed {
			t.noteChanged(nw)
			return nodeOf(0, &Binding{Ino: ino, Kind: nw.Kind}, nw), nil
		}
	}
	return namespace.Node{}, ErrContended
}

// rewriteGone applies change to node ino when this mount holds no name of
// it: an orphan here, else a node of several names read by its ino.
func (t *Tree) rewriteGone(ctx context.Context, ino namespace.Ino, change func(a *Attrs) error) (namespace.Node, error) {
	t.mu.Lock()
	_, orphan := t.orphans[ino]
	t.mu.Unlock()
	if orphan {
		return t.rewriteOrphan(ino, change)
	}
	return t.rewriteLinked(ctx, ino, change)
}

// inForce says whether node ino has an inode object in force (names by its
// count), for the orphan checks.
func (t *Tree) inForce(ctx context.Context, ino namespace.Ino) (bool, error) {
	r, err := t.p.ResolveInode(ctx, ino)
	if err != nil {
		return false, err
	}
	return r.Inode != nil && r.Inode.Nlink > 0, nil
}

// dropInode deletes node ino's inode object, out of force, for Forget
// before the orphan record goes; none is nil. Locked by a change, or in
// force (named since the record was judged), it is kept and the record
// too: a *NameError matching ErrLocked, or ErrInvalid.
func (t *Tree) dropInode(ctx context.Context, ino namespace.Ino) error {
	r, err := t.p.ResolveInode(ctx, ino)
	switch {
	case err != nil:
		return err
	case r.Inode == nil:
		return nil
	case r.Locked:
		return lockedErr(r.Key)
	case r.Inode.Nlink > 0:
		return fmt.Errorf("node %d's inode object counts %d names: %w", ino, r.Inode.Nlink, namespace.ErrInvalid)
	}
	if err := t.st.Delete(ctx, r.Key); err != nil {
		return fmt.Errorf("delete %s: %w", staging.TruncKey(r.Key), err)
	}
	return nil
}

// cookieOf is the listing cookie of name, bound to b: its node's ino, unique
// in a directory while the node has one name; for a name of a node of
// several names, two of which may be in one directory, 2^62 plus 62 bits of
// xxh3 of the name: under 2^63, as the kernel's directory offsets are
// signed, and apart from each other cookie of the directory but once in
// 2^62. A name's cookie changes at its node's first link, which a listing
// in progress may then show twice or not at all, as POSIX allows for a name
// changed during one.
func cookieOf(name string, b *Binding) uint64 {
	if b.Node != nil {
		return uint64(b.Ino)
	}
	return 1<<62 | xxh3.HashString(name)>>2
}
