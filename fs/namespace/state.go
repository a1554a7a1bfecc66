package namespace

import (
	"fmt"
	"sort"
	"strings"
)

// Ino is a node's stable 64-bit inode number: the same in every mount that
// replays the log. The node created by the i-th op of log entry seq has Ino
// seq<<16 | i (so the node of an entry of one op is seq<<16); the root
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
	// KindFIFO and KindSocket are named pipes and Unix socket files: a
	// node with its mode and owner and no data (the kernel holds what
	// passes through them). A volume that holds one is written in envelope
	// version 3 (format.go), so that builds before them refuse it.
	KindFIFO   Kind = 4
	KindSocket Kind = 5
	// KindCharDev and KindBlockDev are character and block device nodes:
	// a node with its mode, owner and device number (Major, Minor) and no
	// data. The number means something only to the kernel of the machine
	// that made the node; every mount is nodev, so that a node read from the
	// bucket never opens a device. A volume that holds one is written in
	// envelope version 4 (format.go).
	KindCharDev  Kind = 6
	KindBlockDev Kind = 7
)

// special says whether k is a FIFO or a socket: a kind that envelope
// version 3 or 4 may hold.
func (k Kind) special() bool { return k == KindFIFO || k == KindSocket }

// device says whether k is a device kind: only envelope version 4 holds
// them.
func (k Kind) device() bool { return k == KindCharDev || k == KindBlockDev }

// Mknodable says whether Mknod makes nodes of kind k.
func (k Kind) Mknodable() bool { return k.special() || k.device() }

func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindDir:
		return "dir"
	case KindSymlink:
		return "symlink"
	case KindFIFO:
		return "fifo"
	case KindSocket:
		return "socket"
	case KindCharDev:
		return "chardev"
	case KindBlockDev:
		return "blockdev"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Limits, as Linux has them.
const (
	MaxNameLen       = 255   // bytes of one name
	MaxTargetLen     = 4095  // bytes of a symlink target
	MaxXattrValueLen = 65536 // bytes of one extended attribute value
	// MaxXattrsLen bounds one node's extended attributes, names and values
	// together: a setxattr that would take them past it is ErrNoSpace
	// (ENOSPC, as ext4 answers when an inode's attribute space is full).
	// Without it a program that adds attributes until it is refused (as
	// stress-ng's xattr stressor does) grows one node, every snapshot and
	// every mount's memory without end.
	MaxXattrsLen = 256 << 10
	// MaxMajor and MaxMinor bound a device number, as Linux's dev_t has
	// them (12 and 20 bits): the numbers mknod(2) can make.
	MaxMajor = 1<<12 - 1
	MaxMinor = 1<<20 - 1
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
	// Major and Minor are a device node's number (KindCharDev,
	// KindBlockDev); 0 for other kinds.
	Major, Minor uint32
}

// Dirent is one directory entry. Cookie is unique in the directory and stays
// valid while other entries come and go: it is the ino base (seq<<16 | i) of
// the op that gave the name its node, so it is never 0, 1 or 2 (free for the
// start, "." and "..").
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
	major    uint32 // devices
	minor    uint32 // devices
	xattrs   map[string][]byte
	parent   Ino               // directories
	children map[string]dirent // directories
}

func (n *node) public() Node {
	return Node{
		Ino: n.ino, Kind: n.kind, Mode: n.mode, Uid: n.uid, Gid: n.gid,
		Nlink: n.nlink, AtimeNs: n.atime, MtimeNs: n.mtime, CtimeNs: n.ctime,
		MtimeSetNs: n.mtimeSet, FileID: n.fileID, Target: n.target, Parent: n.parent,
		Major: n.major, Minor: n.minor,
	}
}

// state is the namespace as of log entry seq. It changes only through apply,
// so that every mount that applies the same entries holds the same state.
type state struct {
	seq    uint64
	nodes  map[Ino]*node
	byFile map[string]Ino // file id -> node, for files with or without names
	// j, while not nil, records how to undo every change made to the state
	// (see journal); nil otherwise, so that plain replay pays nothing.
	j *journal
}

// journal records the undo of every change made to a state, so that ops can
// be tried in order, each against the state the ones before it left, and
// the whole undone: how an entry of several ops is checked, by its writer
// and by every reader.
type journal struct{ undo []func() }

// rollback undoes everything recorded, newest first, and stops recording.
func (st *state) rollback() {
	j := st.j
	st.j = nil
	for i := len(j.undo) - 1; i >= 0; i-- {
		j.undo[i]()
	}
}

// save records n's fields (not the contents of its maps, which the map
// helpers below record key by key) before they change.
func (st *state) save(n *node) {
	if st.j == nil {
		return
	}
	old := *n
	st.j.undo = append(st.j.undo, func() { *n = old })
}

func (st *state) setNode(ino Ino, n *node)                 { journalSet(st.j, st.nodes, ino, n) }
func (st *state) delNode(ino Ino)                          { journalDel(st.j, st.nodes, ino) }
func (st *state) setFile(id string, ino Ino)               { journalSet(st.j, st.byFile, id, ino) }
func (st *state) delFile(id string)                        { journalDel(st.j, st.byFile, id) }
func (st *state) setChild(d *node, name string, de dirent) { journalSet(st.j, d.children, name, de) }
func (st *state) delChild(d *node, name string)            { journalDel(st.j, d.children, name) }

// setXattr and delXattr expect n's xattrs map to exist (save(n) first when
// creating it: the fields' undo drops the map again).
func (st *state) setXattr(n *node, name string, v []byte) { journalSet(st.j, n.xattrs, name, v) }
func (st *state) delXattr(n *node, name string)           { journalDel(st.j, n.xattrs, name) }

// journalSet sets m[k] = v, recording in j (when not nil) how to undo it.
func journalSet[K comparable, V any](j *journal, m map[K]V, k K, v V) {
	remember(j, m, k)
	m[k] = v
}

// journalDel deletes m[k], recording in j (when not nil) how to undo it.
func journalDel[K comparable, V any](j *journal, m map[K]V, k K) {
	remember(j, m, k)
	delete(m, k)
}

// remember records in j (when not nil) how to give key k of m back what it
// holds now.
func remember[K comparable, V any](j *journal, m map[K]V, k K) {
	if j == nil {
		return
	}
	old, had := m[k]
	j.undo = append(j.undo, func() { restore(m, k, old, had) })
}

func restore[K comparable, V any](m map[K]V, k K, v V, had bool) {
	if had {
		m[k] = v
	} else {
		delete(m, k)
	}
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

// maxEntryOps bounds the ops of one log entry: the i-th has ino base
// seq<<16 | i. Part of the format.
const maxEntryOps = 1 << 16

// inoOf is the ino of the node the i-th op of entry seq creates; also the
// cookie of a name it gives. i < maxEntryOps.
func inoOf(seq uint64, i int) Ino { return Ino(seq<<16 | uint64(i)) }

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

// apply applies entry e to st: its ops in order, each against the state
// the ones before it left. It is all or nothing: a failed apply leaves st as
// it was; with dry it only checks (an entry of several ops is applied and
// undone: hold mu for writing for that too). A writer dry-runs its entry against the
// state it will follow; a reader applies entries in seq order; both see the
// same state at every seq.
func (st *state) apply(e *entry, dry bool) error {
	if e.Seq != st.seq+1 {
		return fmt.Errorf("entry %d after state %d: %w", e.Seq, st.seq, ErrInvalid)
	}
	ops := e.ops()
	switch {
	case len(ops) == 0 || len(ops) > maxEntryOps:
		return fmt.Errorf("entry of %d ops: %w", len(ops), ErrInvalid)
	case len(ops) == 1:
		// One op checks everything before it changes anything: no journal.
		if err := st.applyOp(&ops[0], inoOf(e.Seq, 0), e.Time, dry); err != nil {
			return err
		}
	default:
		st.j = &journal{}
		for i := range ops {
			if err := st.applyOp(&ops[i], inoOf(e.Seq, i), e.Time, false); err != nil {
				st.rollback()
				return fmt.Errorf("op %d of %d: %w", i, len(ops), err)
			}
		}
		if dry {
			st.rollback()
		} else {
			st.j = nil
		}
	}
	if !dry {
		st.seq = e.Seq
	}
	return nil
}

// applyOp applies one op whose new node, if any, is ino and whose time is t.
// It checks everything before it changes anything, so a failed op leaves st
// as it was.
func (st *state) applyOp(o *op, ino Ino, t int64, dry bool) error {
	switch o.Kind {
	case opCreate, opMkdir, opSymlink, opMknod:
		return st.applyNew(o, ino, t, dry)
	case opLink:
		return st.applyLink(o, ino, t, dry)
	case opUnlink, opRmdir:
		return st.applyRemove(o, t, dry)
	case opRename:
		return st.applyRename(o, ino, t, dry)
	case opSetAttr:
		return st.applySetAttr(o, t, dry)
	case opSetXattr, opRemoveXattr:
		return st.applyXattr(o, t, dry)
	case opForget:
		return st.applyForget(o, dry)
	}
	return fmt.Errorf("operation %q: %w", o.Kind, ErrInvalid)
}

// applyNew: create (Parent, Name, Mode, Uid, Gid, FileID), mkdir (Parent,
// Name, Mode, Uid, Gid), symlink (Parent, Name, Target, Uid, Gid), mknod
// (Parent, Name, Type: KindFIFO, KindSocket, KindCharDev or KindBlockDev,
// Mode, Uid, Gid; Major and Minor for a device). The new node is ino (inoOf
// of the op's place in its entry).
func (st *state) applyNew(o *op, ino Ino, t int64, dry bool) error {
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
	if _, ok := st.nodes[ino]; ok {
		return fmt.Errorf("node %d: %w", ino, ErrExist)
	}
	n := &node{ino: ino, mode: o.Mode, uid: o.Uid, gid: o.Gid, nlink: 1,
		atime: t, mtime: t, ctime: t}
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
	case opMknod:
		if !o.Type.Mknodable() {
			return fmt.Errorf("mknod of kind %v: %w", o.Type, ErrInvalid)
		}
		if err := checkDevice(o.Type, o.Major, o.Minor); err != nil {
			return err
		}
		n.kind, n.major, n.minor = o.Type, o.Major, o.Minor
	}
	if dry {
		return nil
	}
	st.setNode(ino, n)
	if n.kind == KindFile {
		st.setFile(n.fileID, ino)
	}
	st.save(d)
	if n.kind == KindDir {
		d.nlink++
	}
	st.setChild(d, name, dirent{ino: ino, cookie: uint64(ino)})
	d.mtime, d.ctime = t, t
	return nil
}

// applyLink: link (Ino, Parent, Name): another name for a file or symlink;
// the name's cookie is cookie.
func (st *state) applyLink(o *op, cookie Ino, t int64, dry bool) error {
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
	st.save(n)
	st.save(d)
	n.nlink++
	n.ctime = t
	st.setChild(d, name, dirent{ino: n.ino, cookie: uint64(cookie)})
	d.mtime, d.ctime = t, t
	return nil
}

// applyRemove: unlink and rmdir (Parent, Name).
func (st *state) applyRemove(o *op, t int64, dry bool) error {
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
	st.save(d)
	st.delChild(d, string(o.Name))
	d.mtime, d.ctime = t, t
	st.dropName(d, n, t)
	return nil
}

// dropName accounts for a name of n removed from directory d.
func (st *state) dropName(d, n *node, t int64) {
	st.save(d)
	st.save(n)
	n.ctime = t
	switch n.kind {
	case KindDir:
		d.nlink--
		st.delNode(n.ino)
	case KindSymlink, KindFIFO, KindSocket, KindCharDev, KindBlockDev:
		// No data: the node goes with its last name.
		n.nlink--
		if n.nlink == 0 {
			st.delNode(n.ino)
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

// applyRename: rename (Parent, Name, NewParent, NewName, Flags); a new name
// gets cookie.
func (st *state) applyRename(o *op, cookie Ino, t int64, dry bool) error {
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
		st.save(od)
		st.save(nd)
		st.save(src)
		st.save(dst)
		oc, nc := od.children[string(o.Name)], nd.children[newName]
		st.setChild(od, string(o.Name), dirent{ino: dst.ino, cookie: oc.cookie})
		st.setChild(nd, newName, dirent{ino: src.ino, cookie: nc.cookie})
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
		src.ctime, dst.ctime = t, t
		od.mtime, od.ctime, nd.mtime, nd.ctime = t, t, t, t
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
	st.save(od)
	st.save(nd)
	st.save(src)
	if dst != nil {
		st.dropName(nd, dst, t)
	}
	st.delChild(od, string(o.Name))
	st.setChild(nd, newName, dirent{ino: src.ino, cookie: uint64(cookie)})
	if src.kind == KindDir {
		src.parent = nd.ino
		od.nlink--
		nd.nlink++
	}
	src.ctime = t
	od.mtime, od.ctime, nd.mtime, nd.ctime = t, t, t, t
	return nil
}

// applySetAttr: setattr (Ino, Attr). ctime becomes the change's time unless
// Attr sets it.
func (st *state) applySetAttr(o *op, t int64, dry bool) error {
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
	st.save(n)
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
		n.mtimeSet = t
	}
	n.ctime = t
	if a.Ctime != nil {
		n.ctime = *a.Ctime
	}
	return nil
}

// applyXattr: setxattr (Ino, Name, Value, Flags), removexattr (Ino, Name).
func (st *state) applyXattr(o *op, t int64, dry bool) error {
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
		st.save(n)
		st.delXattr(n, name)
		n.ctime = t
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
	st.save(n)
	if n.xattrs == nil {
		n.xattrs = map[string][]byte{}
	}
	st.setXattr(n, name, append([]byte{}, o.Value...))
	n.ctime = t
	return nil
}

// applyForget: forget (FileID): drop an orphan.
func (st *state) applyForget(o *op, dry bool) error {
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
	st.delNode(ino)
	st.delFile(o.FileID)
	return nil
}

// orphaned reports whether fileID is a file with no name left.
func (st *state) orphaned(fileID string) bool {
	ino, ok := st.byFile[fileID]
	return ok && st.nodes[ino].nlink == 0
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
			FileID: n.fileID, Target: bname(n.target), Major: n.major, Minor: n.minor,
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
		if err := checkDevice(r.Kind, r.Major, r.Minor); err != nil {
			return nil, fmt.Errorf("node %d: %v", r.Ino, err)
		}
		n := &node{ino: r.Ino, kind: r.Kind, mode: r.Mode, uid: r.Uid, gid: r.Gid,
			atime: r.Atime, mtime: r.Mtime, ctime: r.Ctime, mtimeSet: r.MtimeSet,
			major: r.Major, minor: r.Minor}
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
		case KindFIFO, KindSocket, KindCharDev, KindBlockDev:
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
		case n.kind != KindFile && n.nlink == 0:
			return nil, fmt.Errorf("%v %d has no name", n.kind, n.ino)
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

// checkDevice checks the device number of a node of kind k: within Linux's
// bounds for a device, 0 for any other kind.
func checkDevice(k Kind, major, minor uint32) error {
	switch {
	case !k.device() && (major != 0 || minor != 0):
		return fmt.Errorf("a device number on a %v: %w", k, ErrInvalid)
	case major > MaxMajor || minor > MaxMinor:
		return fmt.Errorf("device number %d:%d past %d:%d: %w", major, minor, MaxMajor, MaxMinor, ErrInvalid)
	}
	return nil
}
