package fusefs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// POSIX ACLs (the package doc, "POSIX ACLs"). The mount negotiates the
// kernel's FUSE_POSIX_ACL: the kernel then reads a node's access ACL with
// getxattr(system.posix_acl_access), caches it and enforces it, and asks
// this side to keep the mode and the ACL in line and to apply a directory's
// default ACL to what is created in it.
//
// An ACL is stored with the node's other extended attributes in the
// namespace, under a name of ckptfs's own (aclStored): the namespace keeps
// user.* names only, and a mount that knows nothing of ACLs must still load
// the log. Those names are neither listed nor readable nor writable as
// themselves; they are shown as system.posix_acl_access and
// system.posix_acl_default.
//
// The mode is the record of the entries it mirrors: USER_OBJ is the owner
// bits, MASK (GROUP_OBJ when there is no mask) the group bits, OTHER the
// other bits. An ACL read back has those three entries set from the mode as
// stat shows it now (acl.withMode), so a chmod changes the ACL's mask as on
// ext4 with nothing more to write, and setting an ACL sets the mode from
// it. An access ACL that says no more than a mode (the three entries alone)
// is not stored: the mode is set and the stored ACL removed.

// The names the kernel and programs use.
const (
	xattrACLAccess  = "system.posix_acl_access"
	xattrACLDefault = "system.posix_acl_default"
)

// aclStored maps an ACL's name to the name it is stored under.
var aclStored = map[string]string{
	xattrACLAccess:  "user.ckptfs.acl_access",
	xattrACLDefault: "user.ckptfs.acl_default",
}

// aclName is the system name an ACL stored under stored is shown as.
func aclName(stored string) (string, bool) {
	for name, s := range aclStored {
		if s == stored {
			return name, true
		}
	}
	return "", false
}

// The value of an ACL attribute, Linux's posix_acl_xattr format,
// little-endian:
//
//	+---------+---------+---------+---------+
//	| version (u32) = 2                     |   header, 4 bytes
//	+---------+---------+---------+---------+
//	| tag (u16)         | perm (u16)        |   entry, 8 bytes, repeated
//	+---------+---------+---------+---------+
//	| id (u32): uid or gid, or 0xffffffff   |
//	+---------+---------+---------+---------+
//
// tag is one of the acl* values below; perm holds r (4), w (2), x (1); id
// names the user or group of an aclUser or aclGroup entry (the uid or gid
// as this mount sees it) and is 0xffffffff otherwise. Entries come in the
// kernel's order: USER_OBJ, USERs, GROUP_OBJ, GROUPs, MASK, OTHER, with a
// MASK exactly when there are named entries (parseACL, as the kernel's
// posix_acl_valid).
const (
	aclVersion    = 2
	aclHeaderSize = 4
	aclEntrySize  = 8
	// aclMaxEntries bounds an ACL to what one attribute value may hold.
	aclMaxEntries = (namespace.MaxXattrValueLen - aclHeaderSize) / aclEntrySize
	aclNoID       = 0xffffffff

	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20

	aclPerms = 0o7
)

// errBadACL: an ACL value that is not well formed.
var errBadACL = errors.New("malformed POSIX ACL")

// aclEntry is one entry of an ACL.
type aclEntry struct {
	tag  uint16
	perm uint16
	id   uint32
}

// acl is a parsed, valid ACL: entries in order, one each of USER_OBJ,
// GROUP_OBJ and OTHER, a MASK exactly when there are named entries.
type acl []aclEntry

// parseACL parses and checks an ACL value: what the kernel sends, or what is
// read back from the namespace in the bucket (untrusted: anything is
// refused that the kernel would refuse, before anything is allocated for
// it beyond its bound).
func parseACL(b []byte) (acl, error) {
	if len(b) < aclHeaderSize || (len(b)-aclHeaderSize)%aclEntrySize != 0 {
		return nil, fmt.Errorf("%d bytes: %w", len(b), errBadACL)
	}
	if v := binary.LittleEndian.Uint32(b); v != aclVersion {
		return nil, fmt.Errorf("version %d: %w", v, errBadACL)
	}
	n := (len(b) - aclHeaderSize) / aclEntrySize
	if n > aclMaxEntries {
		return nil, fmt.Errorf("%d entries, at most %d: %w", n, aclMaxEntries, errBadACL)
	}
	a := make(acl, n)
	// The kernel's order as a state machine: 1 USER_OBJ, 2 USERs,
	// 3 GROUP_OBJ then GROUPs, 4 after MASK, 0 after OTHER.
	const (
		wantUserObj = iota + 1
		inUsers
		inGroups
		afterMask
		done
	)
	state, named := wantUserObj, false
	for i := range a {
		e := b[aclHeaderSize+i*aclEntrySize:]
		a[i] = aclEntry{tag: binary.LittleEndian.Uint16(e), perm: binary.LittleEndian.Uint16(e[2:]), id: binary.LittleEndian.Uint32(e[4:])}
		ent := a[i]
		if ent.perm&^aclPerms != 0 {
			return nil, fmt.Errorf("entry %d: permissions %#x: %w", i, ent.perm, errBadACL)
		}
		ok := false
		switch ent.tag {
		case aclUserObj:
			ok, state = state == wantUserObj, inUsers
		case aclUser:
			ok, named = state == inUsers && ent.id != aclNoID, true
		case aclGroupObj:
			ok, state = state == inUsers, inGroups
		case aclGroup:
			ok, named = state == inGroups && ent.id != aclNoID, true
		case aclMask:
			ok, state = state == inGroups, afterMask
		case aclOther:
			ok = state == afterMask || (state == inGroups && !named)
			state = done
		}
		if !ok {
			return nil, fmt.Errorf("entry %d: tag %#x out of place: %w", i, ent.tag, errBadACL)
		}
		if ent.tag != aclUser && ent.tag != aclGroup {
			a[i].id = aclNoID // the kernel sends it so; keep it canonical
		}
	}
	if state != done {
		return nil, fmt.Errorf("no OTHER entry: %w", errBadACL)
	}
	return a, nil
}

// encode is the value of a.
func (a acl) encode() []byte {
	b := make([]byte, aclHeaderSize+len(a)*aclEntrySize)
	binary.LittleEndian.PutUint32(b, aclVersion)
	for i, e := range a {
		p := b[aclHeaderSize+i*aclEntrySize:]
		binary.LittleEndian.PutUint16(p, e.tag)
		binary.LittleEndian.PutUint16(p[2:], e.perm)
		binary.LittleEndian.PutUint32(p[4:], e.id)
	}
	return b
}

// hasMask says whether a has a MASK entry (it then has named entries).
func (a acl) hasMask() bool {
	for _, e := range a {
		if e.tag == aclMask {
			return true
		}
	}
	return false
}

// minimal says whether a says no more than a mode does: the three entries
// the mode mirrors and nothing else.
func (a acl) minimal() bool { return len(a) == 3 }

// mode is the permission bits a mirrors, as the kernel's posix_acl_equiv_mode
// computes them: owner from USER_OBJ, group from MASK (else GROUP_OBJ), other
// from OTHER.
func (a acl) mode() uint32 {
	var m uint32
	mask := a.hasMask()
	for _, e := range a {
		p := uint32(e.perm)
		switch {
		case e.tag == aclUserObj:
			m |= p << 6
		case e.tag == aclMask, e.tag == aclGroupObj && !mask:
			m |= p << 3
		case e.tag == aclOther:
			m |= p
		}
	}
	return m
}

// withMode is a copy of a with the entries the mode mirrors set from mode's
// permission bits (the kernel's posix_acl_chmod): what a chmod does to an
// ACL.
func (a acl) withMode(mode uint32) acl {
	out := append(acl(nil), a...)
	mask := a.hasMask()
	for i, e := range out {
		switch {
		case e.tag == aclUserObj:
			out[i].perm = uint16(mode>>6) & aclPerms
		case e.tag == aclMask, e.tag == aclGroupObj && !mask:
			out[i].perm = uint16(mode>>3) & aclPerms
		case e.tag == aclOther:
			out[i].perm = uint16(mode) & aclPerms
		}
	}
	return out
}

// mapPerms is a copy of a with every entry's permissions passed through f.
func (a acl) mapPerms(f func(uint16) uint16) acl {
	out := append(acl(nil), a...)
	for i := range out {
		out[i].perm = f(out[i].perm)
	}
	return out
}

// createMasq is the access ACL and permission bits of a node created with
// mode (permission bits) in a directory whose default ACL is a (the
// kernel's posix_acl_create_masq): each entry the mode mirrors keeps only
// what mode grants, and the mode then mirrors the result.
func (a acl) createMasq(mode uint32) (acl, uint32) {
	out := append(acl(nil), a...)
	mask := a.hasMask()
	for i, e := range out {
		switch {
		case e.tag == aclUserObj:
			out[i].perm &= uint16(mode>>6) & aclPerms
		case e.tag == aclMask, e.tag == aclGroupObj && !mask:
			out[i].perm &= uint16(mode>>3) & aclPerms
		case e.tag == aclOther:
			out[i].perm &= uint16(mode) & aclPerms
		}
	}
	return out, out.mode()
}

// storedACL reads the ACL stored for node ino under name (a system name):
// nil when there is none. A stored value that does not parse is refused
// (errBadACL: EIO, logged): it came from the bucket, or from an older mount
// that let it be set as a user attribute.
func (fsys *FS) storedACL(ctx context.Context, ino namespace.Ino, name string) (acl, error) {
	v, err := fsys.ns.GetXattr(ctx, ino, aclStored[name])
	if errors.Is(err, namespace.ErrNoAttr) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a, err := parseACL(v)
	if err != nil {
		return nil, fmt.Errorf("stored %s of node %d: %w", name, ino, err) // EIO, logged by errnoOf
	}
	return a, nil
}

// getACL is the value of ACL name of node nn (as shown): the access ACL
// with the entries the mode mirrors set from its mode, the default ACL as
// stored (directories only). ENODATA when there is none.
func (fsys *FS) getACL(ctx context.Context, nn namespace.Node, name string) ([]byte, error) {
	if name == xattrACLDefault && nn.Kind != namespace.KindDir {
		return nil, namespace.ErrNoAttr
	}
	if nn.Kind == namespace.KindSymlink {
		return nil, namespace.ErrNoAttr
	}
	a, err := fsys.storedACL(ctx, nn.Ino, name)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, namespace.ErrNoAttr
	}
	if name == xattrACLAccess {
		a = a.withMode(fsys.shown(nn).Mode)
	}
	return a.encode(), nil
}

// setACL sets ACL name of node nn from value (as the kernel sends it, after
// its own checks and its own permission check: only the owner or a
// privileged caller gets here). Setting the access ACL sets the mode's
// permission bits from it (and clears setgid when flags hold aclKillSgid);
// one the mode says all of is not stored.
func (fsys *FS) setACL(ctx context.Context, nn namespace.Node, name string, value []byte, flags uint32) error {
	killSgid := flags&aclKillSgid != 0
	flags &^= aclKillSgid
	a, err := parseACL(value)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", name, err, namespace.ErrInvalid)
	}
	stored := aclStored[name]
	switch {
	case nn.Kind == namespace.KindSymlink:
		return fmt.Errorf("%s of a symlink: %w", name, namespace.ErrNotSupported)
	case name == xattrACLDefault && nn.Kind != namespace.KindDir:
		return fmt.Errorf("%s of a file: %w", name, namespace.ErrInvalid)
	case name == xattrACLDefault:
		return fsys.ns.SetXattr(ctx, nn.Ino, stored, a.encode(), namespace.XattrFlags(flags))
	}
	if a.minimal() {
		if err := fsys.ns.RemoveXattr(ctx, nn.Ino, stored); err != nil && !errors.Is(err, namespace.ErrNoAttr) {
			return err
		}
	} else if err := fsys.ns.SetXattr(ctx, nn.Ino, stored, a.encode(), namespace.XattrFlags(flags)); err != nil {
		return err
	}
	m := nn.Mode&^0o777 | a.mode()
	if killSgid {
		m &^= syscall.S_ISGID
	}
	if m != nn.Mode {
		if _, err := fsys.ns.SetAttr(ctx, nn.Ino, namespace.SetAttr{Mode: &m}); err != nil {
			return err
		}
	}
	return nil
}

// inherited is what a node created in a directory with a default ACL
// takes from it: its access ACL (nil when the mode says all of it) and, for
// a directory, the default ACL itself.
type inherited struct {
	access, dflt acl
}

// inherit computes the mode and ACLs of a node created in directory dir
// with mode as the kernel sent it through umaskFS (permission bits, and the
// caller's umask at umaskShift); kind says what is created. Without a default
// ACL on dir the umask narrows the mode and nothing is inherited; with one
// the umask is ignored and the default ACL narrowed by the mode decides.
func (fsys *FS) inherit(ctx context.Context, dir namespace.Ino, kind namespace.Kind, mode uint32) (uint32, inherited, error) {
	umask := mode >> umaskShift & 0o777
	mode &= namespace.ModeMask
	d, err := fsys.storedACL(ctx, dir, xattrACLDefault)
	if err != nil || d == nil {
		return mode &^ umask, inherited{}, err
	}
	access, perm := d.createMasq(mode)
	in := inherited{}
	if !access.minimal() {
		in.access = access
	}
	if kind == namespace.KindDir {
		in.dflt = d
	}
	return mode&^0o777 | perm, in, nil
}

// applyInherited stores the ACLs a new node took from its directory.
func (fsys *FS) applyInherited(ctx context.Context, ino namespace.Ino, in inherited) error {
	if in.access != nil {
		if err := fsys.ns.SetXattr(ctx, ino, aclStored[xattrACLAccess], in.access.encode(), 0); err != nil {
			return err
		}
	}
	if in.dflt != nil {
		if err := fsys.ns.SetXattr(ctx, ino, aclStored[xattrACLDefault], in.dflt.encode(), 0); err != nil {
			return err
		}
	}
	return nil
}

// ckptACL is the access ACL of a node of .checkpoints that mirrors nn (as
// shown) with permission bits perm: the original's, with its entries
// narrowed by keep (what the mirror grants: read and search, never write)
// and the entries the mode mirrors set from perm. Nil when nn has none.
func (fsys *FS) ckptACL(ctx context.Context, nn namespace.Node, perm uint32, keep func(uint16) uint16) ([]byte, error) {
	a, err := fsys.storedACL(ctx, nn.Ino, xattrACLAccess)
	if err != nil || a == nil {
		return nil, err
	}
	return a.mapPerms(keep).withMode(perm).encode(), nil
}

// Narrowings of an entry's permissions for the mirrors of .checkpoints, as
// ckptDirMode, ckptListMode and ckptFileMode narrow the mode.
func keepRX(p uint16) uint16     { return p & 0o5 }
func readToRX(p uint16) uint16   { r := p & 0o4; return r | r>>2 }
func keepR(p uint16) uint16      { return p & 0o4 }
func isACLName(name string) bool { _, ok := aclStored[name]; return ok }

// isStoredACLName says whether name is one ACLs are stored under: not to be
// read, set or listed as itself.
func isStoredACLName(name string) bool { _, ok := aclName(name); return ok }

// xattrReply copies v to dest, or says how large dest must be.
func xattrReply(v []byte, dest []byte) (uint32, syscall.Errno) {
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// getACLXattr answers getxattr of an ACL name; the names ACLs are stored
// under read as absent.
func (n *node) getACLXattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if !isACLName(attr) {
		return 0, syscall.ENODATA
	}
	nn, errno := n.get(ctx)
	if errno != 0 {
		return 0, errno
	}
	v, err := n.fsys.getACL(ctx, nn, attr)
	if err != nil {
		return 0, n.fsys.errnoOf("getxattr "+attr+" "+n.where(""), err)
	}
	return xattrReply(v, dest)
}

// setACLXattr answers setxattr of an ACL name.
func (n *node) setACLXattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	nn, errno := n.get(ctx)
	if errno != 0 {
		return errno
	}
	if err := n.fsys.setACL(changeCtx(ctx), nn, attr, data, flags); err != nil {
		return n.fsys.errnoOf("setxattr "+attr+" "+n.where(""), err)
	}
	return 0
}

// ckptGetxattr answers getxattr on a node of .checkpoints mirroring node ino
// with the mode perm(nn) and the narrowing keep: the access ACL only (the
// kernel checks it), no other attribute.
func (fsys *FS) ckptGetxattr(ctx context.Context, ino namespace.Ino, attr string, dest []byte, perm func(namespace.Node) uint32, keep func(uint16) uint16) (uint32, syscall.Errno) {
	if attr != xattrACLAccess {
		return 0, syscall.ENODATA
	}
	nn, err := fsys.ns.GetNode(ctx, ino)
	if err != nil {
		return 0, fsys.errnoOf("getxattr checkpoints", err)
	}
	nn = fsys.shown(nn)
	v, err := fsys.ckptACL(ctx, nn, perm(nn), keep)
	if err != nil {
		return 0, fsys.errnoOf("getxattr checkpoints", err)
	}
	if v == nil {
		return 0, syscall.ENODATA
	}
	return xattrReply(v, dest)
}

func (d *ckptDir) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return d.fsys.ckptGetxattr(ctx, d.ino, attr, dest, ckptDirMode, keepRX)
}

func (l *ckptList) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return l.fsys.ckptGetxattr(ctx, l.ino, attr, dest, ckptListMode, readToRX)
}

func (c *ckptFile) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return c.fsys.ckptGetxattr(ctx, c.ino, attr, dest, ckptFileMode, keepR)
}

// The umask of a create. The mount negotiates FUSE_DONT_MASK, so that the
// kernel sends the mode a program asked for, unmasked, with its umask beside
// it: the umask applies only where the directory has no default ACL (POSIX;
// ext4 does the same). go-fuse's node API passes the mode alone, so
// umaskFS, around the node tree, carries the umask to Create, Mkdir and
// Mknod in bits of the mode that no mode uses (above S_IFMT), and inherit
// takes it from there. A kernel that does not offer FUSE_DONT_MASK has masked the
// mode already: masking again changes nothing.
const umaskShift = 16

// umaskFS passes the umask of Create, Mkdir and Mknod on in the mode
// (umaskShift).
type umaskFS struct {
	fuse.RawFileSystem
}

func (u *umaskFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	in.Mode = in.Mode&0o177777 | (in.Umask&0o777)<<umaskShift
	return u.RawFileSystem.Create(c, in, name, out)
}

// aclKillSgid, in the flags of a setxattr (above XATTR_CREATE and
// XATTR_REPLACE), is the kernel's SETXATTR_ACL_KILL_SGID passed on by
// umaskFS: the caller setting an access ACL is not in the file's group (nor
// privileged), so the setgid bit goes, as on ext4.
const aclKillSgid = 1 << 16

// SetXAttr passes the kernel's SETXATTR_ACL_KILL_SGID on in the flags
// (aclKillSgid); go-fuse's node API drops it.
func (u *umaskFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	in.Flags &^= aclKillSgid
	if in.SetXAttrFlags&fuse.SETXATTR_ACL_KILL_SGID != 0 {
		in.Flags |= aclKillSgid
	}
	return u.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (u *umaskFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	in.Mode = in.Mode&0o177777 | (in.Umask&0o777)<<umaskShift
	return u.RawFileSystem.Mknod(c, in, name, out)
}

func (u *umaskFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	in.Mode = in.Mode&0o177777 | (in.Umask&0o777)<<umaskShift
	return u.RawFileSystem.Mkdir(c, in, name, out)
}
