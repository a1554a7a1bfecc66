package namespace

import (
	"context"
	"fmt"
	"time"
)

func nodeAt(out *Node, ino Ino) hook {
	return func(st *state, _ Ino) {
		if n := st.nodes[ino]; n != nil {
			*out = n.public()
		}
	}
}

func created(out *Node) hook {
	return func(st *state, ino Ino) { *out = st.nodes[ino].public() }
}

// removed returns hooks that leave in out the node named name in dir before
// a change, as it is after the change (Nlink 0 once its last name is gone,
// even if the node itself is gone).
func removed(out *Node, dir Ino, name string) (before, after hook) {
	var pre *Node
	before = func(st *state, _ Ino) {
		if d := st.nodes[dir]; d != nil && d.kind == KindDir {
			if de, ok := d.children[name]; ok {
				n := st.nodes[de.ino].public()
				pre = &n
			}
		}
	}
	after = func(st *state, _ Ino) {
		switch {
		case pre == nil:
		case st.nodes[pre.Ino] != nil:
			*out = st.nodes[pre.Ino].public()
		default:
			*out = *pre
			out.Nlink = 0
		}
	}
	return before, after
}

// Create makes a regular file named name in directory parent with a new file
// id, and returns it.
func (ns *Namespace) Create(ctx context.Context, parent Ino, name string, mode uint32, owner Owner) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opCreate, Parent: parent, Name: bname(name), Mode: mode,
		Uid: owner.Uid, Gid: owner.Gid, FileID: NewFileID()}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("create %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Mkdir makes a directory.
func (ns *Namespace) Mkdir(ctx context.Context, parent Ino, name string, mode uint32, owner Owner) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opMkdir, Parent: parent, Name: bname(name), Mode: mode,
		Uid: owner.Uid, Gid: owner.Gid}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("mkdir %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Mknod makes a FIFO or a Unix socket file (kind KindFIFO or KindSocket):
// a node with its mode and owner and no data. Any other kind is ErrInvalid
// (a device: MknodDevice). The entry, and every snapshot while the volume
// holds such a node, is written in envelope version 3 (format.go).
func (ns *Namespace) Mknod(ctx context.Context, parent Ino, name string, kind Kind, mode uint32, owner Owner) (Node, error) {
	if !kind.special() {
		return Node{}, fmt.Errorf("mknod %q in %d: kind %v: %w", name, parent, kind, ErrInvalid)
	}
	return ns.mknod(ctx, op{Kind: opMknod, Parent: parent, Name: bname(name), Type: kind, Mode: mode,
		Uid: owner.Uid, Gid: owner.Gid})
}

// MknodDevice makes a character or block device node (kind KindCharDev or
// KindBlockDev) with device number major:minor (at most MaxMajor:MaxMinor):
// a node with its mode, owner and number and no data. Any other kind, or a
// number past the bounds, is ErrInvalid. The entry, and every snapshot
// while the volume holds such a node, is written in envelope version 4
// (format.go), which builds before devices refuse.
func (ns *Namespace) MknodDevice(ctx context.Context, parent Ino, name string, kind Kind, mode, major, minor uint32, owner Owner) (Node, error) {
	if !kind.device() {
		return Node{}, fmt.Errorf("mknod %q in %d: kind %v: %w", name, parent, kind, ErrInvalid)
	}
	if err := checkDevice(kind, major, minor); err != nil {
		return Node{}, fmt.Errorf("mknod %q in %d: %w", name, parent, err)
	}
	return ns.mknod(ctx, op{Kind: opMknod, Parent: parent, Name: bname(name), Type: kind, Mode: mode,
		Uid: owner.Uid, Gid: owner.Gid, Major: major, Minor: minor})
}

func (ns *Namespace) mknod(ctx context.Context, o op) (Node, error) {
	var n Node
	if err := ns.change(ctx, o, created(&n)); err != nil {
		return Node{}, fmt.Errorf("mknod %q in %d: %w", o.Name, o.Parent, err)
	}
	return n, nil
}

// Symlink makes a symbolic link to target.
func (ns *Namespace) Symlink(ctx context.Context, parent Ino, name, target string, owner Owner) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opSymlink, Parent: parent, Name: bname(name), Target: bname(target),
		Uid: owner.Uid, Gid: owner.Gid}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("symlink %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Link gives node ino (a file or symlink) another name and returns the node
// with its new link count.
func (ns *Namespace) Link(ctx context.Context, ino, newParent Ino, newName string) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opLink, Ino: ino, Parent: newParent, Name: bname(newName)}, nodeAt(&n, ino))
	if err != nil {
		return Node{}, fmt.Errorf("link %d as %q in %d: %w", ino, newName, newParent, err)
	}
	return n, nil
}

// Unlink removes a name of a file or symlink and returns the node as it is
// after: Nlink 0 for a file means its id is now an orphan (see Orphans);
// the mount that unlinked it owns deleting its data and calling Forget once
// its last handle is closed.
func (ns *Namespace) Unlink(ctx context.Context, parent Ino, name string) (Node, error) {
	var n Node
	before, after := removed(&n, parent, name)
	err := ns.changeHooked(ctx, op{Kind: opUnlink, Parent: parent, Name: bname(name)}, before, after)
	if err != nil {
		return Node{}, fmt.Errorf("unlink %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Rmdir removes an empty directory.
func (ns *Namespace) Rmdir(ctx context.Context, parent Ino, name string) error {
	if err := ns.change(ctx, op{Kind: opRmdir, Parent: parent, Name: bname(name)}, nil); err != nil {
		return fmt.Errorf("rmdir %q in %d: %w", name, parent, err)
	}
	return nil
}

// Rename moves oldName in oldParent to newName in newParent, atomically,
// replacing a file or empty directory there unless flags say otherwise. It
// returns the node replaced, as it is after (Ino 0 when none was; a file
// with Nlink 0 is now an orphan, as with Unlink).
func (ns *Namespace) Rename(ctx context.Context, oldParent Ino, oldName string, newParent Ino, newName string, flags RenameFlags) (Node, error) {
	var replaced Node
	o := op{Kind: opRename, Parent: oldParent, Name: bname(oldName), NewParent: newParent,
		NewName: bname(newName), Flags: uint32(flags)}
	var before, after hook
	if flags&RenameExchange == 0 {
		before, after = removed(&replaced, newParent, newName)
		b := before
		before = func(st *state, ino Ino) {
			// Renaming a name onto another name of the same node replaces
			// nothing.
			if d := st.nodes[oldParent]; d != nil && d.kind == KindDir {
				if nd := st.nodes[newParent]; nd != nil && nd.kind == KindDir {
					if nd.children[newName].ino == d.children[oldName].ino {
						return
					}
				}
			}
			b(st, ino)
		}
	}
	err := ns.changeHooked(ctx, o, before, after)
	if err != nil {
		return Node{}, fmt.Errorf("rename %q in %d to %q in %d: %w", oldName, oldParent, newName, newParent, err)
	}
	return replaced, nil
}

// attrOf is the record of a change of attributes.
func attrOf(a SetAttr) *attrRec {
	rec := &attrRec{Mode: a.Mode, Uid: a.Uid, Gid: a.Gid}
	ts := func(t *time.Time) *int64 {
		if t == nil {
			return nil
		}
		v := t.UnixNano()
		return &v
	}
	rec.Atime, rec.Mtime, rec.Ctime = ts(a.Atime), ts(a.Mtime), ts(a.Ctime)
	return rec
}

// SetAttr changes attributes of node ino and returns the node after.
func (ns *Namespace) SetAttr(ctx context.Context, ino Ino, a SetAttr) (Node, error) {
	var n Node
	if err := ns.change(ctx, op{Kind: opSetAttr, Ino: ino, Attr: attrOf(a)}, nodeAt(&n, ino)); err != nil {
		return Node{}, fmt.Errorf("setattr %d: %w", ino, err)
	}
	return n, nil
}

// SetXattr sets extended attribute name ("user." only) of node ino.
func (ns *Namespace) SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags XattrFlags) error {
	if err := ns.xattrRoom(ino, name, len(value)); err != nil {
		return fmt.Errorf("setxattr %q of %d: %w", name, ino, err)
	}
	if err := ns.change(ctx, op{Kind: opSetXattr, Ino: ino, Name: bname(name),
		Value: append([]byte{}, value...), Flags: uint32(flags)}, nil); err != nil {
		return fmt.Errorf("setxattr %q of %d: %w", name, ino, err)
	}
	return nil
}

// xattrRoom checks that setting name to a value of n bytes keeps node ino's
// attributes within MaxXattrsLen, in this mount's view. It costs the node's
// attributes, which the bound bounds. Two mounts adding at once can both
// pass it: the bound is what a mount asks for, not a rule of the log, so that
// an entry past it (or a volume written before it) still applies.
func (ns *Namespace) xattrRoom(ino Ino, name string, n int) error {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	nd, err := ns.st.get(ino)
	if err != nil {
		return nil // the change itself reports it
	}
	total := len(name) + n
	for k, v := range nd.xattrs {
		if k != name {
			total += len(k) + len(v)
		}
	}
	if total > MaxXattrsLen {
		return fmt.Errorf("attributes of node %d would take %d bytes, over %d: %w", ino, total, MaxXattrsLen, ErrNoSpace)
	}
	return nil
}

// RemoveXattr removes extended attribute name of node ino.
func (ns *Namespace) RemoveXattr(ctx context.Context, ino Ino, name string) error {
	if err := ns.change(ctx, op{Kind: opRemoveXattr, Ino: ino, Name: bname(name)}, nil); err != nil {
		return fmt.Errorf("removexattr %q of %d: %w", name, ino, err)
	}
	return nil
}

// Forget drops orphan fileID, once its data is deleted.
func (ns *Namespace) Forget(ctx context.Context, fileID string) error {
	if err := ns.change(ctx, op{Kind: opForget, FileID: fileID}, nil); err != nil {
		return fmt.Errorf("forget file %s: %w", fileID, err)
	}
	return nil
}
