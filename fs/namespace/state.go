package namespace

import (
	"fmt"
	"sort"
	"strings"
)

// Ino is a node's stable 64-bit inode number: the same in every mount that
// replays the log. The node created by log entry seq has Ino seq<<16 (the low
// 16 bits are room for entries that would create several nodes); the root
// directory is RootIno.
type Ino uint64

// RootIno is the root directory.
const RootIno Ino = 1

// Kind is the type of a node. These values are part of the format.
type Kind uint8

const (
	KindFile    Kind = 1
	KindDir     Kind = 2
	KindSymlink Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindDir:
		return "dir"
	case KindSymlink:
		return "symlink"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Limits, as Linux has them.
const (
	MaxNameLen       = 255   // bytes of one name
	MaxTargetLen     = 4095  // bytes of a symlink target
	MaxXattrValueLen = 65536 // bytes of one extended attribute value
	// ModeMask is the bits Mode may hold: permissions, setuid, setgid,
	// sticky. The type is Kind.
	ModeMask = 0o7777
)

// RenameFlags modify Rename. The values are Linux's renameat2 flags.
type RenameFlags uint32

const (
	// RenameNoReplace fails with ErrExist when the new name exists.
	RenameNoReplace RenameFlags = 1
	// RenameExchange swaps the two names atomically; both must exist.
	RenameExchange RenameFlags = 2
)

// XattrFlags modify SetXattr. The values are Linux's setxattr flags.
type XattrFlags uint32

const (
	// XattrCreate fails with ErrExist when the attribute exists.
	XattrCreate XattrFlags = 1
	// XattrReplace fails with ErrNoAttr when the attribute does not exist.
	XattrReplace XattrFlags = 2
)

// Node is a copy of one node's attributes.
type Node struct {
	Ino   Ino
	Kind  Kind
	Mode  uint32 // permission bits and setuid/setgid/sticky (ModeMask)
	Uid   uint32
	Gid   uint32
	Nlink uint32 // names of a file or symlink; 2 + subdirectories of a dir
	// Times in Unix nanoseconds. Mtime of a file is the namespace's: the
	// file's own head has the mtime of its last checkpoint; use that one
	// unless MtimeSetNs is later than it.
	AtimeNs int64
	MtimeNs int64
	CtimeNs int64
	// MtimeSetNs is the time of the change that last set Mtime explicitly
	// (utimens); 0 if none did.
	MtimeSetNs int64
	FileID     string // files: the data prefix f/<FileID>/
	Target     string // symlinks
	Parent     Ino    // directories: the parent (the root's is itself)
}

// Dirent is one directory entry. Cookie is unique in the directory and stays
// valid while other entries come and go: it is the seq of the entry that gave
// the name its node, shifted left by 16, so it is never 0, 1 or 2 (free for
// the start, "." and "..").
type Dirent struct {
	Name   string
	Ino    Ino
	Kind   Kind
	Cookie uint64
}

// Orphan is a file whose last name is gone: its data must stay readable until
// the last handle closes; then the data is deleted and Forget drops it.
type Orphan struct {
	Ino    Ino
	FileID string
}

type dirent struct {
	ino    Ino
	cookie uint64
}

type node struct {
	ino      Ino
	kind     Kind
	mode     uint32
	uid, gid uint32
	nlink    uint32
	atime    int64
	mtime    int64
	ctime    int64
	mtimeSet int64
	fileID   string
	target   string
	xattrs   map[string][]byte
	parent   Ino               // directories
	children map[string]dirent // directories
}

func (n *node) public() Node {
	return Node{
		Ino: n.ino, Kind: n.kind, Mode: n.mode, Uid: n.uid, Gid: n.gid,
		Nlink: n.nlink, AtimeNs: n.atime, MtimeNs: n.mtime, CtimeNs: n.ctime,
		MtimeSetNs: n.mtimeSet, FileID: n.fileID, Target: n.target, Parent: n.parent,
	}
}

// state is the namespace as of log entry seq. It changes only through apply,
// so that every mount that applies the same entries holds the same state.
type state struct {
	seq    uint64
	nodes  map[Ino]*node
	byFile map[string]Ino // file id -> node, for files with or without names
}

func newState() *state {
	root := &node{
		ino: RootIno, kind: KindDir, mode: 0o755, nlink: 2, parent: RootIno,
		children: map[string]dirent{},
	}
	return &state{
		nodes:  map[Ino]*node{RootIno: root},
		byFile: map[string]Ino{},
	}
}

// inoOf is the ino of the node entry seq creates; also the cookie of a name
// it gives.
func inoOf(seq uint64) Ino { return Ino(seq << 16) }

func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("name %q: %w", name, ErrInvalid)
	case len(name) > MaxNameLen:
		return fmt.Errorf("name of %d bytes: %w", len(name), ErrNameTooLong)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("name %q: %w", name, ErrInvalid)
	}
	return nil
}

func checkXattrName(name string) error {
	if len(name) > MaxNameLen {
		return fmt.Errorf("attribute name of %d bytes: %w", len(name), ErrNameTooLong)
	}
	if !strings.HasPrefix(name, "user.") || len(name) == len("user.") {
		return fmt.Errorf("attribute %q: only user.* attributes: %w", name, ErrNotSupported)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("attribute %q: %w", name, ErrInvalid)
	}
	return nil
}

func (st *state) get(ino Ino) (*node, error) {
	n := st.nodes[ino]
	if n == nil {
		return nil, fmt.Errorf("node %d: %w", ino, ErrNotExist)
	}
	return n, nil
}

func (st *state) dir(ino Ino) (*node, error) {
	n, err := st.get(ino)
	if err != nil {
		return nil, err
	}
	if n.kind != KindDir {
		return nil, fmt.Errorf("node %d: %w", ino, ErrNotDir)
	}
	return n, nil
}

func (st *state) lookup(dir Ino, name string) (*node, *node, error) {
	d, err := st.dir(dir)
	if err != nil {
		return nil, nil, err
	}
	if err := checkName(name); err != nil {
		return nil, nil, err
	}
	de, ok := d.children[name]
	if !ok {
		return d, nil, fmt.Errorf("%q in directory %d: %w", name, dir, ErrNotExist)
	}
	return d, st.nodes[de.ino], nil
}

// apply applies e to st. It checks everything before it changes anything, so
// a failed apply leaves st as it was; with dry it only checks. A writer
// dry-runs its change against the state its entry will follow; a reader
// applies entries in seq order; both see the same state at every seq.
func (st *state) apply(e *entry, dry bool) error {
	if e.Seq != st.seq+1 {
		return fmt.Errorf("entry %d after state %d: %w", e.Seq, st.seq, ErrInvalid)
	}
	var err error
	o := &e.Op
	switch o.Kind {
	case opCreate, opMkdir, opSymlink:
		err = st.applyNew(e, dry)
	case opLink:
		err = st.applyLink(e, dry)
	case opUnlink, opRmdir:
		err = st.applyRemove(e, dry)
	case opRename:
		err = st.applyRename(e, dry)
	case opSetAttr:
		err = st.applySetAttr(e, dry)
	case opSetXattr, opRemoveXattr:
		err = st.applyXattr(e, dry)
	case opForget:
		err = st.applyForget(e, dry)
	default:
		err = fmt.Errorf("operation %q: %w", o.Kind, ErrInvalid)
	}
	if err == nil && !dry {
		st.seq = e.Seq
	}
	return err
}

// applyNew: create (Parent, Name, Mode, Uid, Gid, FileID), mkdir (Parent,
// Name, Mode, Uid, Gid), symlink (Parent, Name, Target, Uid, Gid). The new
// node is inoOf(seq).
func (st *state) applyNew(e *entry, dry bool) error {
	o := &e.Op
	d, err := st.dir(o.Parent)
	if err != nil {
		return err
	}
	name := string(o.Name)
	if err := checkName(name); err != nil {
		return err
	}
	if _, ok := d.children[name]; ok {
		return fmt.Errorf("%q in directory %d: %w", name, o.Parent, ErrExist)
	}
	if o.Mode&^ModeMask != 0 {
		return fmt.Errorf("mode %o: %w", o.Mode, ErrInvalid)
	}
	ino := inoOf(e.Seq)
	if _, ok := st.nodes[ino]; ok {
		return fmt.Errorf("node %d: %w", ino, ErrExist)
	}
	n := &node{ino: ino, mode: o.Mode, uid: o.Uid, gid: o.Gid, nlink: 1,
		atime: e.Time, mtime: e.Time, ctime: e.Time}
	switch o.Kind {
	case opCreate:
		if !validID(o.FileID) {
			return fmt.Errorf("file id %q: %w", o.FileID, ErrInvalid)
		}
		if _, ok := st.byFile[o.FileID]; ok {
			return fmt.Errorf("file id %s: %w", o.FileID, ErrExist)
		}
		n.kind, n.fileID = KindFile, o.FileID
	case opMkdir:
		n.kind, n.nlink, n.parent, n.children = KindDir, 2, d.ino, map[string]dirent{}
	case opSymlink:
		t := string(o.Target)
		if t == "" || strings.IndexByte(t, 0) >= 0 {
			return fmt.Errorf("symlink target %q: %w", t, ErrInvalid)
		}
		if len(t) > MaxTargetLen {
			return fmt.Errorf("symlink target of %d bytes: %w", len(t), ErrNameTooLong)
		}
		n.kind, n.mode, n.target = KindSymlink, 0o777, t
	}
	if dry {
		return nil
	}
	st.nodes[ino] = n
	if n.kind == KindFile {
		st.byFile[n.fileID] = ino
	}
	if n.kind == KindDir {
		d.nlink++
	}
	d.children[name] = dirent{ino: ino, cookie: uint64(inoOf(e.Seq))}
	d.mtime, d.ctime = e.Time, e.Time
	return nil
}

// applyLink: link (Ino, Parent, Name): another name for a file or symlink.
func (st *state) applyLink(e *entry, dry bool) error {
	o := &e.Op
	n, err := st.get(o.Ino)
	if err != nil {
		return err
	}
	if n.kind == KindDir {
		return fmt.Errorf("hard link to directory %d: %w", o.Ino, ErrNotPermitted)
	}
	if n.nlink == 0 {
		// An open file whose names are gone; Linux refuses too.
		return fmt.Errorf("node %d has no names: %w", o.Ino, ErrNotExist)
	}
	d, err := st.dir(o.Parent)
	if err != nil {
		return err
	}
	name := string(o.Name)
	if err := checkName(name); err != nil {
		return err
	}
	if _, ok := d.children[name]; ok {
		return fmt.Errorf("%q in directory %d: %w", name, o.Parent, ErrExist)
	}
	if dry {
		return nil
	}
	n.nlink++
	n.ctime = e.Time
	d.children[name] = dirent{ino: n.ino, cookie: uint64(inoOf(e.Seq))}
	d.mtime, d.ctime = e.Time, e.Time
	return nil
}

// applyRemove: unlink and rmdir (Parent, Name).
func (st *state) applyRemove(e *entry, dry bool) error {
	o := &e.Op
	d, n, err := st.lookup(o.Parent, string(o.Name))
	if err != nil {
		return err
	}
	if o.Kind == opUnlink && n.kind == KindDir {
		return fmt.Errorf("unlink %q: %w", o.Name, ErrIsDir)
	}
	if o.Kind == opRmdir {
		if n.kind != KindDir {
			return fmt.Errorf("rmdir %q: %w", o.Name, ErrNotDir)
		}
		if len(n.children) > 0 {
			return fmt.Errorf("rmdir %q: %w", o.Name, ErrNotEmpty)
		}
	}
	if dry {
		return nil
	}
	delete(d.children, string(o.Name))
	d.mtime, d.ctime = e.Time, e.Time
	st.dropName(d, n, e.Time)
	return nil
}

// dropName accounts for a name of n removed from directory d.
func (st *state) dropName(d, n *node, t int64) {
	n.ctime = t
	switch n.kind {
	case KindDir:
		d.nlink--
		delete(st.nodes, n.ino)
	case KindSymlink:
		n.nlink--
		if n.nlink == 0 {
			delete(st.nodes, n.ino)
		}
	case KindFile:
		// At 0 the node stays, an orphan, until Forget.
		n.nlink--
	}
}

// isUnder reports whether node ino is dir or inside it.
func (st *state) isUnder(ino, dir Ino) bool {
	for {
		if ino == dir {
			return true
		}
		if ino == RootIno {
			return false
		}
		n := st.nodes[ino]
		if n == nil {
			return false
		}
		ino = n.parent
	}
}

// applyRename: rename (Parent, Name, NewParent, NewName, Flags).
func (st *state) applyRename(e *entry, dry bool) error {
	o := &e.Op
	flags := RenameFlags(o.Flags)
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return fmt.Errorf("rename flags %#x: %w", flags, ErrInvalid)
	}
	od, src, err := st.lookup(o.Parent, string(o.Name))
	if err != nil {
		return err
	}
	nd, err := st.dir(o.NewParent)
	if err != nil {
		return err
	}
	newName := string(o.NewName)
	if err := checkName(newName); err != nil {
		return err
	}
	var dst *node
	if de, ok := nd.children[newName]; ok {
		dst = st.nodes[de.ino]
	}
	if flags&RenameExchange != 0 {
		if dst == nil {
			return fmt.Errorf("exchange with %q: %w", newName, ErrNotExist)
		}
		if src.kind == KindDir && st.isUnder(nd.ino, src.ino) ||
			dst.kind == KindDir && st.isUnder(od.ino, dst.ino) {
			return fmt.Errorf("exchange a directory into itself: %w", ErrInvalid)
		}
		if dry || src == dst {
			return nil
		}
		oc, nc := od.children[string(o.Name)], nd.children[newName]
		od.children[string(o.Name)] = dirent{ino: dst.ino, cookie: oc.cookie}
		nd.children[newName] = dirent{ino: src.ino, cookie: nc.cookie}
		if src.kind == KindDir {
			src.parent = nd.ino
			nd.nlink++
			od.nlink--
		}
		if dst.kind == KindDir {
			dst.parent = od.ino
			od.nlink++
			nd.nlink--
		}
		src.ctime, dst.ctime = e.Time, e.Time
		od.mtime, od.ctime, nd.mtime, nd.ctime = e.Time, e.Time, e.Time, e.Time
		return nil
	}
	if dst != nil && flags&RenameNoReplace != 0 {
		return fmt.Errorf("rename onto %q: %w", newName, ErrExist)
	}
	if src.kind == KindDir && st.isUnder(nd.ino, src.ino) {
		return fmt.Errorf("move directory %d under itself: %w", src.ino, ErrInvalid)
	}
	if dst == src {
		// Two names of one node: POSIX says do nothing.
		return nil
	}
	if dst != nil {
		switch {
		case src.kind == KindDir && dst.kind != KindDir:
			return fmt.Errorf("rename directory onto %q: %w", newName, ErrNotDir)
		case src.kind != KindDir && dst.kind == KindDir:
			return fmt.Errorf("rename onto directory %q: %w", newName, ErrIsDir)
		case dst.kind == KindDir && len(dst.children) > 0:
			return fmt.Errorf("rename onto %q: %w", newName, ErrNotEmpty)
		}
	}
	if dry {
		return nil
	}
	if dst != nil {
		st.dropName(nd, dst, e.Time)
	}
	delete(od.children, string(o.Name))
	nd.children[newName] = dirent{ino: src.ino, cookie: uint64(inoOf(e.Seq))}
	if src.kind == KindDir {
		src.parent = nd.ino
		od.nlink--
		nd.nlink++
	}
	src.ctime = e.Time
	od.mtime, od.ctime, nd.mtime, nd.ctime = e.Time, e.Time, e.Time, e.Time
	return nil
}

// applySetAttr: setattr (Ino, Attr). ctime becomes the change's time unless
// Attr sets it.
func (st *state) applySetAttr(e *entry, dry bool) error {
	o := &e.Op
	n, err := st.get(o.Ino)
	if err != nil {
		return err
	}
	a := o.Attr
	if a == nil {
		return fmt.Errorf("setattr without attributes: %w", ErrInvalid)
	}
	if a.Mode != nil && *a.Mode&^ModeMask != 0 {
		return fmt.Errorf("mode %o: %w", *a.Mode, ErrInvalid)
	}
	if dry {
		return nil
	}
	if a.Mode != nil && n.kind != KindSymlink {
		n.mode = *a.Mode
	}
	if a.Uid != nil {
		n.uid = *a.Uid
	}
	if a.Gid != nil {
		n.gid = *a.Gid
	}
	if a.Atime != nil {
		n.atime = *a.Atime
	}
	if a.Mtime != nil {
		n.mtime = *a.Mtime
		n.mtimeSet = e.Time
	}
	n.ctime = e.Time
	if a.Ctime != nil {
		n.ctime = *a.Ctime
	}
	return nil
}

// applyXattr: setxattr (Ino, Name, Value, Flags), removexattr (Ino, Name).
func (st *state) applyXattr(e *entry, dry bool) error {
	o := &e.Op
	n, err := st.get(o.Ino)
	if err != nil {
		return err
	}
	name := string(o.Name)
	if err := checkXattrName(name); err != nil {
		return err
	}
	_, exists := n.xattrs[name]
	if o.Kind == opRemoveXattr {
		if !exists {
			return fmt.Errorf("attribute %q of node %d: %w", name, o.Ino, ErrNoAttr)
		}
		if dry {
			return nil
		}
		delete(n.xattrs, name)
		n.ctime = e.Time
		return nil
	}
	flags := XattrFlags(o.Flags)
	switch {
	case flags&^(XattrCreate|XattrReplace) != 0 || flags == XattrCreate|XattrReplace:
		return fmt.Errorf("xattr flags %#x: %w", flags, ErrInvalid)
	case len(o.Value) > MaxXattrValueLen:
		return fmt.Errorf("attribute value of %d bytes: %w", len(o.Value), ErrTooBig)
	case flags == XattrCreate && exists:
		return fmt.Errorf("attribute %q of node %d: %w", name, o.Ino, ErrExist)
	case flags == XattrReplace && !exists:
		return fmt.Errorf("attribute %q of node %d: %w", name, o.Ino, ErrNoAttr)
	}
	if dry {
		return nil
	}
	if n.xattrs == nil {
		n.xattrs = map[string][]byte{}
	}
	n.xattrs[name] = append([]byte{}, o.Value...)
	n.ctime = e.Time
	return nil
}

// applyForget: forget (FileID): drop an orphan.
func (st *state) applyForget(e *entry, dry bool) error {
	o := &e.Op
	ino, ok := st.byFile[o.FileID]
	if !ok {
		return fmt.Errorf("file %q: %w", o.FileID, ErrNotExist)
	}
	if n := st.nodes[ino]; n.nlink != 0 {
		return fmt.Errorf("forget file %s with %d names: %w", o.FileID, n.nlink, ErrInvalid)
	}
	if dry {
		return nil
	}
	delete(st.nodes, ino)
	delete(st.byFile, o.FileID)
	return nil
}

func (st *state) orphans() []Orphan {
	var out []Orphan
	for id, ino := range st.byFile {
		if st.nodes[ino].nlink == 0 {
			out = append(out, Orphan{Ino: ino, FileID: id})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ino < out[j].Ino })
	return out
}

// record is the snapshot form of st; deterministic for one state.
func (st *state) record() *snapRec {
	rec := &snapRec{Seq: st.seq, Nodes: make([]nodeRec, 0, len(st.nodes))}
	for _, n := range st.nodes {
		r := nodeRec{
			Ino: n.ino, Kind: n.kind, Mode: n.mode, Uid: n.uid, Gid: n.gid,
			Atime: n.atime, Mtime: n.mtime, Ctime: n.ctime, MtimeSet: n.mtimeSet,
			FileID: n.fileID, Target: bname(n.target),
		}
		for name, v := range n.xattrs {
			r.Xattrs = append(r.Xattrs, xattrRec{Name: bname(name), Value: v})
		}
		sort.Slice(r.Xattrs, func(i, j int) bool { return r.Xattrs[i].Name < r.Xattrs[j].Name })
		for name, de := range n.children {
			r.Children = append(r.Children, direntRec{Name: bname(name), Ino: de.ino, Cookie: de.cookie})
		}
		sort.Slice(r.Children, func(i, j int) bool { return r.Children[i].Name < r.Children[j].Name })
		rec.Nodes = append(rec.Nodes, r)
	}
	sort.Slice(rec.Nodes, func(i, j int) bool { return rec.Nodes[i].Ino < rec.Nodes[j].Ino })
	return rec
}

// stateFromRecord rebuilds a state and checks every invariant apply keeps:
// a tree of directories under the root, names valid and unique, cookies
// unique per directory, file ids unique, link counts derived.
func stateFromRecord(rec *snapRec) (*state, error) {
	st := &state{seq: rec.Seq, nodes: map[Ino]*node{}, byFile: map[string]Ino{}}
	for i := range rec.Nodes {
		r := &rec.Nodes[i]
		if r.Ino == 0 {
			return nil, fmt.Errorf("node with ino 0")
		}
		if _, dup := st.nodes[r.Ino]; dup {
			return nil, fmt.Errorf("node %d twice", r.Ino)
		}
		if r.Mode&^ModeMask != 0 {
			return nil, fmt.Errorf("node %d: mode %o", r.Ino, r.Mode)
		}
		n := &node{ino: r.Ino, kind: r.Kind, mode: r.Mode, uid: r.Uid, gid: r.Gid,
			atime: r.Atime, mtime: r.Mtime, ctime: r.Ctime, mtimeSet: r.MtimeSet}
		switch r.Kind {
		case KindFile:
			if !validID(r.FileID) {
				return nil, fmt.Errorf("file %d: file id %q", r.Ino, r.FileID)
			}
			if _, dup := st.byFile[r.FileID]; dup {
				return nil, fmt.Errorf("file id %s twice", r.FileID)
			}
			st.byFile[r.FileID] = r.Ino
			n.fileID = r.FileID
		case KindDir:
			n.children = map[string]dirent{}
			n.nlink = 2
		case KindSymlink:
			t := string(r.Target)
			if t == "" || len(t) > MaxTargetLen || strings.IndexByte(t, 0) >= 0 {
				return nil, fmt.Errorf("symlink %d: bad target", r.Ino)
			}
			n.target = t
		default:
			return nil, fmt.Errorf("node %d: kind %d", r.Ino, r.Kind)
		}
		if r.Kind != KindFile && r.FileID != "" || r.Kind != KindSymlink && r.Target != "" {
			return nil, fmt.Errorf("node %d: fields of another kind", r.Ino)
		}
		if r.Kind != KindDir && len(r.Children) > 0 {
			return nil, fmt.Errorf("node %d: entries in a %v", r.Ino, r.Kind)
		}
		for _, x := range r.Xattrs {
			if err := checkXattrName(string(x.Name)); err != nil {
				return nil, fmt.Errorf("node %d: %v", r.Ino, err)
			}
			if len(x.Value) > MaxXattrValueLen {
				return nil, fmt.Errorf("node %d: attribute of %d bytes", r.Ino, len(x.Value))
			}
			if n.xattrs == nil {
				n.xattrs = map[string][]byte{}
			}
			if _, dup := n.xattrs[string(x.Name)]; dup {
				return nil, fmt.Errorf("node %d: attribute %q twice", r.Ino, x.Name)
			}
			n.xattrs[string(x.Name)] = append([]byte{}, x.Value...)
		}
		st.nodes[r.Ino] = n
	}
	root := st.nodes[RootIno]
	if root == nil || root.kind != KindDir {
		return nil, fmt.Errorf("no root directory")
	}
	root.parent = RootIno
	for i := range rec.Nodes {
		r := &rec.Nodes[i]
		d := st.nodes[r.Ino]
		cookies := map[uint64]bool{}
		for _, c := range r.Children {
			if err := checkName(string(c.Name)); err != nil {
				return nil, fmt.Errorf("directory %d: %v", r.Ino, err)
			}
			if _, dup := d.children[string(c.Name)]; dup {
				return nil, fmt.Errorf("directory %d: %q twice", r.Ino, c.Name)
			}
			if c.Cookie <= 2 || cookies[c.Cookie] {
				return nil, fmt.Errorf("directory %d: bad or repeated cookie %d", r.Ino, c.Cookie)
			}
			cookies[c.Cookie] = true
			n := st.nodes[c.Ino]
			if n == nil || c.Ino == RootIno {
				return nil, fmt.Errorf("directory %d: %q names node %d", r.Ino, c.Name, c.Ino)
			}
			if n.kind == KindDir {
				if n.parent != 0 {
					return nil, fmt.Errorf("directory %d has two names", c.Ino)
				}
				n.parent = d.ino
				d.nlink++
			} else {
				n.nlink++
			}
			d.children[string(c.Name)] = dirent{ino: c.Ino, cookie: c.Cookie}
		}
	}
	dirs := 0
	for _, n := range st.nodes {
		switch {
		case n.kind == KindDir:
			dirs++
			if n.parent == 0 {
				return nil, fmt.Errorf("directory %d has no name", n.ino)
			}
		case n.kind == KindSymlink && n.nlink == 0:
			return nil, fmt.Errorf("symlink %d has no name", n.ino)
		}
	}
	// Every directory has one parent; the tree is whole if all are reachable
	// from the root (a cycle would be unreachable).
	seen, stack := 0, []*node{root}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		seen++
		if seen > dirs {
			return nil, fmt.Errorf("directory cycle")
		}
		for _, de := range d.children {
			if c := st.nodes[de.ino]; c.kind == KindDir {
				stack = append(stack, c)
			}
		}
	}
	if seen != dirs {
		return nil, fmt.Errorf("%d directories not reachable from the root", dirs-seen)
	}
	return st, nil
}
