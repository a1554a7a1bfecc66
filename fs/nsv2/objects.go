package nsv2

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// Bounds of the objects' lists and strings. These are part of the format.
const (
	// MaxOps bounds the op list of a change of several names: a rename that
	// replaces a name of a node of several names touches two dentries and
	// two inode objects.
	MaxOps = 8
	// MaxLinks bounds the names of one node (ext4's bound).
	MaxLinks = 65000
	// MaxDigestNames bounds the names of one digest; a mount that bound more
	// in one directory leaves the rest to be read from their dentries.
	MaxDigestNames = 1 << 16
	// MaxETagLen bounds an ETag in a digest.
	MaxETagLen = 128
)

// Attrs is a node's attributes, as namespace.Node has them; the fields and
// their bounds are v1's snapshot's (fs/namespace/format.go, nodeRec).
//
//	{"m":420,"u":0,"g":0,"at":<ns>,"mt":<ns>,"ct":<ns>,"ms":<ns>,"f":"<32 hex>",
//	 "l":"<symlink target>","ma":1,"mi":3,"x":[{"n":"user.a","v":"<base64>"}]}
//
// f is a file's only (and required); l a symlink's only (1 to 4,095 bytes,
// no NUL); ma and mi a device's only, within Linux's bounds. x is sorted by
// name, each name a "user." attribute of at most 255 bytes, each value at
// most 64 KiB, all names and values together at most 256 KiB.
type Attrs struct {
	Mode     uint32  `json:"m"`
	Uid      uint32  `json:"u"`
	Gid      uint32  `json:"g"`
	Atime    int64   `json:"at"`
	Mtime    int64   `json:"mt"`
	Ctime    int64   `json:"ct"`
	MtimeSet int64   `json:"ms,omitempty"`
	FileID   string  `json:"f,omitempty"`
	Target   Name    `json:"l,omitempty"`
	Major    uint32  `json:"ma,omitempty"`
	Minor    uint32  `json:"mi,omitempty"`
	Xattrs   []Xattr `json:"x,omitempty"`
}

// Xattr is one extended attribute.
type Xattr struct {
	Name  Name   `json:"n"`
	Value []byte `json:"v"`
}

func checkKind(k namespace.Kind) error {
	if k < namespace.KindFile || k > namespace.KindBlockDev {
		return fmt.Errorf("unknown node kind %d", k)
	}
	return nil
}

func (a *Attrs) check(k namespace.Kind) error {
	if a.Mode&^namespace.ModeMask != 0 {
		return fmt.Errorf("mode %o", a.Mode)
	}
	if (k == namespace.KindFile) != (a.FileID != "") || a.FileID != "" && !ValidID(a.FileID) {
		return fmt.Errorf("a %v with file id %q", k, a.FileID)
	}
	t := string(a.Target)
	if (k == namespace.KindSymlink) != (t != "") || len(t) > namespace.MaxTargetLen || strings.IndexByte(t, 0) >= 0 {
		return fmt.Errorf("a %v with a target of %d bytes", k, len(t))
	}
	device := k == namespace.KindCharDev || k == namespace.KindBlockDev
	if !device && (a.Major != 0 || a.Minor != 0) || a.Major > namespace.MaxMajor || a.Minor > namespace.MaxMinor {
		return fmt.Errorf("a %v with device number %d:%d", k, a.Major, a.Minor)
	}
	if a.Xattrs != nil && len(a.Xattrs) == 0 {
		return fmt.Errorf("empty attribute list")
	}
	total := 0
	for i, x := range a.Xattrs {
		n := string(x.Name)
		switch {
		case len(n) > namespace.MaxNameLen || !strings.HasPrefix(n, "user.") || n == "user." || strings.IndexByte(n, 0) >= 0:
			return fmt.Errorf("attribute name %q", n)
		case i > 0 && n <= string(a.Xattrs[i-1].Name):
			return fmt.Errorf("attribute %q out of order", n)
		case len(x.Value) > namespace.MaxXattrValueLen:
			return fmt.Errorf("attribute %q of %d bytes", n, len(x.Value))
		}
		total += len(n) + len(x.Value)
	}
	if total > namespace.MaxXattrsLen {
		return fmt.Errorf("attributes of %d bytes, over %d", total, namespace.MaxXattrsLen)
	}
	return nil
}

// Binding is what a name is bound to: a node's ino and kind, a directory's
// fragment count, and the node's attributes when this is its only name
// (absent when the node is an inode object, ns2/i/, for it has several).
//
//	{"i":<ino>,"k":<kind>,"fr":<fragments, directories only>,"a":{<Attrs>}}
//
// A directory has one name, so its binding always holds its attributes.
type Binding struct {
	Ino   namespace.Ino  `json:"i"`
	Kind  namespace.Kind `json:"k"`
	Frags uint32         `json:"fr,omitempty"`
	Node  *Attrs         `json:"a,omitempty"`
}

func (b *Binding) check() error {
	if b.Ino == 0 {
		return fmt.Errorf("binding to ino 0")
	}
	if err := checkKind(b.Kind); err != nil {
		return err
	}
	if b.Kind == namespace.KindDir {
		if !ValidFrags(b.Frags) || b.Node == nil {
			return fmt.Errorf("directory %d of %d fragments, attributes %v", b.Ino, b.Frags, b.Node != nil)
		}
	} else if b.Frags != 0 {
		return fmt.Errorf("a %v with fragments", b.Kind)
	}
	if b.Node != nil {
		if err := b.Node.check(b.Kind); err != nil {
			return fmt.Errorf("node %d: %v", b.Ino, err)
		}
	}
	return nil
}

// checkBinding checks b, which may be absent.
func checkBinding(b *Binding) error {
	if b == nil {
		return nil
	}
	return b.check()
}

// Inode is the object of a node of several names (hard links), at
// InodeKey(ino); its names' bindings hold its ino and kind only. It is
// written with envelope version 2 (format.go, kindVersion): a build that
// knew no links refuses it as an unknown version rather than read a locked
// one as the node.
//
//	{"i":<ino>,"k":<kind>,"nl":<names>,"c":"<change id>","a":{<Attrs>},
//	 "lk":{<Inode>},"ops":[<Op>,...]}
//
// It is never a directory's. c is the change that wrote it. Its states:
//   - in force: nl names (1 to MaxLinks) bind it, and a holds its
//     attributes; no lk, no ops. An attribute change rewrites it If-Match
//     (section 3, "Single-name changes").
//   - not in force: nl 0, no lk, no ops: no name binds it (its last name
//     went, or it is what a link that did not commit left). The cleaner
//     deletes it with the file; a node with a name and such an object
//     keeps its attributes in its one dentry.
//   - locked by change c, as a dentry is (the Dentry type): nl and a are
//     as before c (nl 0 when c is the node's first link), lk what c makes
//     it (an Inode with c's id and neither lk nor ops of its own), ops c's
//     op list, which holds an op on this ino whose body is lk. A reader
//     takes lk once c is decided commit, the rest otherwise.
type Inode struct {
	Ino    namespace.Ino  `json:"i"`
	Kind   namespace.Kind `json:"k"`
	Nlink  uint32         `json:"nl"`
	Change string         `json:"c"`
	Node   Attrs          `json:"a"`
	Lock   *Inode         `json:"lk,omitempty"`
	Ops    []Op           `json:"ops,omitempty"`
}

func (n *Inode) check() error {
	if n.Ino == 0 {
		return fmt.Errorf("ino 0")
	}
	if err := checkKind(n.Kind); err != nil {
		return err
	}
	if n.Kind == namespace.KindDir {
		return fmt.Errorf("inode object of a directory")
	}
	if n.Nlink > MaxLinks {
		return fmt.Errorf("%d names, want 0 to %d", n.Nlink, MaxLinks)
	}
	if !ValidID(n.Change) {
		return fmt.Errorf("change id %q", n.Change)
	}
	if err := n.Node.check(n.Kind); err != nil {
		return err
	}
	if n.Lock == nil {
		if n.Ops != nil {
			return fmt.Errorf("an op list without a lock")
		}
		return nil
	}
	l := n.Lock
	if l.Ino != n.Ino || l.Kind != n.Kind || l.Change != n.Change || l.Lock != nil || l.Ops != nil {
		return fmt.Errorf("lock: not a body of ino %d by change %s", n.Ino, n.Change)
	}
	if err := l.check(); err != nil {
		return fmt.Errorf("lock: %v", err)
	}
	if err := checkOps(n.Ops, true); err != nil {
		return err
	}
	for i := range n.Ops {
		if o := &n.Ops[i]; o.Ino == n.Ino {
			if !reflect.DeepEqual(o.Inode, l) {
				return fmt.Errorf("op %d on this ino disagrees with the lock", i)
			}
			return nil
		}
	}
	return fmt.Errorf("op list without an op on this ino")
}

// Op is one key's change in a change of several names: a dentry's (Dir,
// Frags, Name: its directory, that directory's fragment count and the name;
// To its new binding, absent for a removal) or an inode object's (Ino;
// Inode its new body, absent when it goes).
//
//	{"p":<dir>,"pf":<fragments>,"n":"<name>","b":{<Binding>}}
//	{"i":<ino>,"in":{<Inode>}}
type Op struct {
	Dir   namespace.Ino `json:"p,omitempty"`
	Frags uint32        `json:"pf,omitempty"`
	Name  Name          `json:"n,omitempty"`
	To    *Binding      `json:"b,omitempty"`
	Ino   namespace.Ino `json:"i,omitempty"`
	Inode *Inode        `json:"in,omitempty"`
}

// target names the key an op changes, to find two ops on one key.
func (o *Op) target() string {
	if o.Ino != 0 {
		return fmt.Sprintf("i/%d", o.Ino)
	}
	return fmt.Sprintf("d/%d/%s", o.Dir, o.Name)
}

func (o *Op) check() error {
	if o.Ino != 0 {
		if o.Dir != 0 || o.Frags != 0 || o.Name != "" || o.To != nil {
			return fmt.Errorf("an op on inode %d with a name's fields", o.Ino)
		}
		if o.Inode == nil {
			return nil
		}
		if o.Inode.Ino != o.Ino || o.Inode.Lock != nil || o.Inode.Ops != nil {
			return fmt.Errorf("an op on inode %d writes inode %d, or a locked one", o.Ino, o.Inode.Ino)
		}
		return o.Inode.check()
	}
	if o.Dir == 0 || !ValidFrags(o.Frags) || o.Inode != nil {
		return fmt.Errorf("an op on directory %d of %d fragments", o.Dir, o.Frags)
	}
	if err := CheckName(string(o.Name)); err != nil {
		return err
	}
	return checkBinding(o.To)
}

func checkOps(ops []Op, required bool) error {
	switch {
	case ops != nil && len(ops) == 0 || required && len(ops) == 0:
		return fmt.Errorf("no ops")
	case len(ops) > MaxOps:
		return fmt.Errorf("%d ops, at most %d", len(ops), MaxOps)
	}
	seen := map[string]bool{}
	for i := range ops {
		if err := ops[i].check(); err != nil {
			return fmt.Errorf("op %d: %v", i, err)
		}
		if seen[ops[i].target()] {
			return fmt.Errorf("op %d: a second op on %q", i, ops[i].target())
		}
		seen[ops[i].target()] = true
	}
	return nil
}

// Dentry is the object of one name, at DentryKey(Dir, Frags, Name).
//
//	{"p":<dir>,"pf":<dir's fragments>,"n":"<name>","c":"<change id>",
//	 "b":{<Binding>},"lk":{"to":{<Binding>}},"ops":[<Op>,...],
//	 "rp":"<reap id>"}
//
// Its states:
//   - bound: b, no lk;
//   - tombstone (the name was removed): neither b nor lk;
//   - reaping tombstone: a tombstone with rp (and no ops), written by the
//     trim (trim.go) If-Match the tombstone it judged, right before it
//     deletes it. Every reader takes it as a tombstone (the name is not
//     bound); no writer writes over it (a create, a lock, a link that
//     meets one waits for it to be deleted, as for a pending lock, then
//     writes If-None-Match), so the trim's unconditional DELETE can only
//     delete what it marked. rp is a fresh id at each marking, so that the
//     ETag changes even where it is the MD5 of the bytes. Builds before it
//     refuse "rp" as an unknown field (the name is EIO for the moment the
//     object lives) and so never write over it either.
//   - locked by change c: lk, with b the current binding (absent: the name
//     is not bound) and lk's "to" the binding c will give it (absent: c
//     removes it). A locked dentry holds c's op list.
//
// c is the change that wrote the object (its lock, for a locked one). ops
// is the op list of a change of several names, kept after it resolved until
// the cleaner drops it; it holds an op on this name, whose binding is lk's
// "to" when locked and b when not.
type Dentry struct {
	Dir    namespace.Ino `json:"p"`
	Frags  uint32        `json:"pf"`
	Name   Name          `json:"n"`
	Change string        `json:"c"`
	Bound  *Binding      `json:"b,omitempty"`
	Lock   *Lock         `json:"lk,omitempty"`
	Ops    []Op          `json:"ops,omitempty"`
	// Reap: a reaping tombstone's id (see above); "" otherwise.
	Reap string `json:"rp,omitempty"`
}

// Reaping says whether d is a reaping tombstone: read as a tombstone, and
// never written over.
func (d *Dentry) Reaping() bool { return d.Reap != "" }

// Lock is the lock of a dentry by the change that wrote it.
type Lock struct {
	To *Binding `json:"to,omitempty"`
}

// Tombstone says whether d is a removed name (and not locked).
func (d *Dentry) Tombstone() bool { return d.Bound == nil && d.Lock == nil }

func (d *Dentry) check() error {
	if d.Dir == 0 || !ValidFrags(d.Frags) {
		return fmt.Errorf("directory %d of %d fragments", d.Dir, d.Frags)
	}
	if err := CheckName(string(d.Name)); err != nil {
		return err
	}
	if !ValidID(d.Change) {
		return fmt.Errorf("change id %q", d.Change)
	}
	if err := checkBinding(d.Bound); err != nil {
		return err
	}
	if d.Lock != nil {
		if err := checkBinding(d.Lock.To); err != nil {
			return fmt.Errorf("lock: %v", err)
		}
	}
	if err := checkOps(d.Ops, d.Lock != nil); err != nil {
		return err
	}
	if d.Reap != "" && (!ValidID(d.Reap) || d.Bound != nil || d.Lock != nil || d.Ops != nil) {
		return fmt.Errorf("reaping mark %q on a dentry that is not a bare tombstone", d.Reap)
	}
	if d.Ops == nil {
		return nil
	}
	want := d.Bound
	if d.Lock != nil {
		want = d.Lock.To
	}
	for i := range d.Ops {
		o := &d.Ops[i]
		if o.Ino == 0 && o.Dir == d.Dir && o.Name == d.Name {
			if o.Frags != d.Frags || !reflect.DeepEqual(o.To, want) {
				return fmt.Errorf("op %d on this name disagrees with the dentry", i)
			}
			return nil
		}
	}
	return fmt.Errorf("op list without an op on this name")
}

// Key is the key d belongs at.
func (d *Dentry) Key(root string) (string, error) {
	return DentryKey(root, d.Dir, d.Frags, string(d.Name))
}

// EncodeDentry is the object of d.
func EncodeDentry(d *Dentry) ([]byte, error) {
	return encode(kindDentry, d, d.check)
}

// atKey checks that the object read from key belongs there: that its own
// key, made under the root the key names, is key.
func atKey(key, root string, own func(root string) (string, error)) error {
	k, err := own(root)
	if err != nil {
		return err
	}
	if k != key {
		return fmt.Errorf("object of key %q", k)
	}
	return nil
}

// object is what decodeAt needs of each kind.
type object interface {
	check() error
	Key(root string) (string, error)
}

// decodeAt decodes the object of kind read from key: its envelope, its body,
// its bounds, and that it belongs at key (rootOf parses key as its kind's).
func decodeAt[T any, P interface {
	*T
	object
}](key string, kind byte, data []byte, rootOf func(key string) (string, error)) (*T, error) {
	root, err := rootOf(key)
	if err != nil {
		return nil, corruptf(key, "%v", err)
	}
	v := P(new(T))
	if err := decode(key, kind, data, v, func() error {
		if err := v.check(); err != nil {
			return err
		}
		return atKey(key, root, v.Key)
	}); err != nil {
		return nil, err
	}
	return (*T)(v), nil
}

// DecodeDentry decodes and checks the dentry read from key.
func DecodeDentry(key string, data []byte) (*Dentry, error) {
	return decodeAt[Dentry](key, kindDentry, data, func(k string) (string, error) {
		root, _, err := ParseDentryKey(k)
		return root, err
	})
}

// Key is the key n belongs at.
func (n *Inode) Key(root string) (string, error) { return InodeKey(root, n.Ino) }

// EncodeInode is the object of n.
func EncodeInode(n *Inode) ([]byte, error) { return encode(kindInode, n, n.check) }

// DecodeInode decodes and checks the inode object read from key.
func DecodeInode(key string, data []byte) (*Inode, error) {
	return decodeAt[Inode](key, kindInode, data, func(k string) (string, error) {
		root, _, err := ParseInodeKey(k)
		return root, err
	})
}

// Outcomes of a decision. These strings are part of the format.
const (
	Commit = "commit"
	Abort  = "abort"
)

// Decision is the outcome of change Tx, at DecisionKey(Tx): Commit with the
// change's op list, or Abort, with the op list when its writer had it (a
// reader that judged a lock dead copies it from the lock).
//
//	{"tx":"<change id>","d":"commit","ops":[<Op>,...]}
//	{"tx":"<change id>","d":"abort"}
type Decision struct {
	Tx      string `json:"tx"`
	Outcome string `json:"d"`
	Ops     []Op   `json:"ops,omitempty"`
}

func (x *Decision) check() error {
	if !ValidID(x.Tx) {
		return fmt.Errorf("change id %q", x.Tx)
	}
	if x.Outcome != Commit && x.Outcome != Abort {
		return fmt.Errorf("outcome %q", x.Outcome)
	}
	return checkOps(x.Ops, x.Outcome == Commit)
}

// Key is the key x belongs at.
func (x *Decision) Key(root string) (string, error) { return DecisionKey(root, x.Tx) }

// EncodeDecision is the object of x.
func EncodeDecision(x *Decision) ([]byte, error) { return encode(kindDecision, x, x.check) }

// DecodeDecision decodes and checks the decision read from key.
func DecodeDecision(key string, data []byte) (*Decision, error) {
	return decodeAt[Decision](key, kindDecision, data, func(k string) (string, error) {
		root, _, err := ParseDecisionKey(k)
		return root, err
	})
}

// Batch is the claim of inode batch N by mount Mount, at BatchKey(N): the
// inos FirstIno(N) to FirstIno(N+1)-1 are Mount's to give (0 and the root's
// 1 excepted).
//
//	{"n":<batch>,"m":"<mount id>"}
type Batch struct {
	N     uint64 `json:"n"`
	Mount string `json:"m"`
}

func (b *Batch) check() error {
	if b.N > maxBatch {
		return fmt.Errorf("batch %d", b.N)
	}
	if !ValidID(b.Mount) {
		return fmt.Errorf("mount id %q", b.Mount)
	}
	return nil
}

// Key is the key b belongs at.
func (b *Batch) Key(root string) (string, error) { return BatchKey(root, b.N) }

// EncodeBatch is the object of b.
func EncodeBatch(b *Batch) ([]byte, error) { return encode(kindBatch, b, b.check) }

// DecodeBatch decodes and checks the batch claim read from key.
func DecodeBatch(key string, data []byte) (*Batch, error) {
	return decodeAt[Batch](key, kindBatch, data, func(k string) (string, error) {
		root, _, err := ParseBatchKey(k)
		return root, err
	})
}

// Lease is mount Mount's create lease on directory Dir, at LeaseKey(Dir,
// Mount). Renewal counts the lease's writes: S3's ETag is a digest of the
// bytes, so each renewal must change them for a remover to see that the
// lease was renewed.
//
//	{"p":<dir>,"m":"<mount id>","r":<renewal>}
type Lease struct {
	Dir     namespace.Ino `json:"p"`
	Mount   string        `json:"m"`
	Renewal uint64        `json:"r"`
}

func (l *Lease) check() error {
	if l.Dir == 0 {
		return fmt.Errorf("directory 0")
	}
	if !ValidID(l.Mount) {
		return fmt.Errorf("mount id %q", l.Mount)
	}
	return nil
}

// Key is the key l belongs at.
func (l *Lease) Key(root string) (string, error) { return LeaseKey(root, l.Dir, l.Mount) }

// EncodeLease is the object of l.
func EncodeLease(l *Lease) ([]byte, error) { return encode(kindLease, l, l.check) }

// DecodeLease decodes and checks the lease read from key.
func DecodeLease(key string, data []byte) (*Lease, error) {
	return decodeAt[Lease](key, kindLease, data, func(k string) (string, error) {
		root, _, _, err := ParseLeaseKey(k)
		return root, err
	})
}

// Seal says that directory Dir is being removed by change Tx (the rmdir),
// or has its fragment count changed by it (user.ckptfs.fragments,
// frags.go), at SealKey(Dir).
//
//	{"p":<dir>,"tx":"<change id>","was":<fragments>,"fr":<fragments>}
//
// fr is the fragment count a change of it sets (absent: a removal); was
// the directory's count under Tx's lock, which stands if Tx is decided
// abort: written by such a change and by every seal written over a seal
// that has it (absent on a directory whose count never changed, so that a
// removal's seal stays what builds before fragment counts read). Each is
// a fragment count (a power of two, 1 to MaxFrags); fr needs was. A build
// before them refuses a seal with either (as damaged): it adds no name to
// such a directory.
type Seal struct {
	Dir   namespace.Ino `json:"p"`
	Tx    string        `json:"tx"`
	Was   uint32        `json:"was,omitempty"`
	Frags uint32        `json:"fr,omitempty"`
}

func (s *Seal) check() error {
	if s.Dir == 0 {
		return fmt.Errorf("directory 0")
	}
	if !ValidID(s.Tx) {
		return fmt.Errorf("change id %q", s.Tx)
	}
	if s.Was != 0 && !ValidFrags(s.Was) || s.Frags != 0 && (!ValidFrags(s.Frags) || s.Was == 0) {
		return fmt.Errorf("fragment counts %d to %d", s.Was, s.Frags)
	}
	return nil
}

// Key is the key s belongs at.
func (s *Seal) Key(root string) (string, error) { return SealKey(root, s.Dir) }

// EncodeSeal is the object of s.
func EncodeSeal(s *Seal) ([]byte, error) { return encode(kindSeal, s, s.check) }

// DecodeSeal decodes and checks the seal read from key.
func DecodeSeal(key string, data []byte) (*Seal, error) {
	return decodeAt[Seal](key, kindSeal, data, func(k string) (string, error) {
		root, _, err := ParseSealKey(k)
		return root, err
	})
}

// Digest is mount Mount's names in directory Dir (of Frags fragments) with
// their bindings and the ETags of their dentries, at DigestKey(Dir, Mount).
// A listing takes a name's binding from a digest when the ETag the listing
// saw is the digest's, and reads the dentry otherwise.
//
//	{"p":<dir>,"pf":<fragments>,"m":"<mount id>",
//	 "e":[{"n":"<name>","b":{<Binding>},"et":"<ETag>"},...]}
//
// e is sorted by name, each name once, at most MaxDigestNames; an ETag is
// 1 to MaxETagLen printable ASCII bytes.
type Digest struct {
	Dir   namespace.Ino `json:"p"`
	Frags uint32        `json:"pf"`
	Mount string        `json:"m"`
	Names []DigestName  `json:"e,omitempty"`
}

// DigestName is one name of a digest.
type DigestName struct {
	Name  Name    `json:"n"`
	Bound Binding `json:"b"`
	ETag  string  `json:"et"`
}

func (g *Digest) check() error {
	if g.Dir == 0 || !ValidFrags(g.Frags) {
		return fmt.Errorf("directory %d of %d fragments", g.Dir, g.Frags)
	}
	if !ValidID(g.Mount) {
		return fmt.Errorf("mount id %q", g.Mount)
	}
	if g.Names != nil && len(g.Names) == 0 || len(g.Names) > MaxDigestNames {
		return fmt.Errorf("%d names, want 1 to %d (or none written)", len(g.Names), MaxDigestNames)
	}
	for i := range g.Names {
		e := &g.Names[i]
		if err := CheckName(string(e.Name)); err != nil {
			return fmt.Errorf("name %d: %v", i, err)
		}
		if i > 0 && e.Name <= g.Names[i-1].Name {
			return fmt.Errorf("name %d out of order", i)
		}
		if err := e.Bound.check(); err != nil {
			return fmt.Errorf("name %d: %v", i, err)
		}
		if len(e.ETag) < 1 || len(e.ETag) > MaxETagLen || strings.IndexFunc(e.ETag, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
			return fmt.Errorf("name %d: ETag %q", i, e.ETag)
		}
	}
	return nil
}

// Key is the key g belongs at.
func (g *Digest) Key(root string) (string, error) { return DigestKey(root, g.Dir, g.Mount) }

// EncodeDigest is the object of g.
func EncodeDigest(g *Digest) ([]byte, error) { return encode(kindDigest, g, g.check) }

// DecodeDigest decodes and checks the digest read from key.
func DecodeDigest(key string, data []byte) (*Digest, error) {
	return decodeAt[Digest](key, kindDigest, data, func(k string) (string, error) {
		root, _, _, err := ParseDigestKey(k)
		return root, err
	})
}

// Orphan records that file FileID (node Ino) lost its last name, Name in
// directory Dir (of Frags fragments), by change Change, at
// OrphanKey(FileID). It is written before the tombstone; the cleaner checks
// that the tombstone of Change landed before it treats the file as removed.
//
//	{"f":"<file id>","i":<ino>,"p":<dir>,"pf":<fragments>,"n":"<name>","c":"<change id>"}
type Orphan struct {
	FileID string        `json:"f"`
	Ino    namespace.Ino `json:"i"`
	Dir    namespace.Ino `json:"p"`
	Frags  uint32        `json:"pf"`
	Name   Name          `json:"n"`
	Change string        `json:"c"`
}

func (o *Orphan) check() error {
	if !ValidID(o.FileID) {
		return fmt.Errorf("file id %q", o.FileID)
	}
	if o.Ino == 0 || o.Dir == 0 || !ValidFrags(o.Frags) {
		return fmt.Errorf("ino %d in directory %d of %d fragments", o.Ino, o.Dir, o.Frags)
	}
	if err := CheckName(string(o.Name)); err != nil {
		return err
	}
	if !ValidID(o.Change) {
		return fmt.Errorf("change id %q", o.Change)
	}
	return nil
}

// Key is the key o belongs at.
func (o *Orphan) Key(root string) (string, error) { return OrphanKey(root, o.FileID) }

// EncodeOrphan is the object of o.
func EncodeOrphan(o *Orphan) ([]byte, error) { return encode(kindOrphan, o, o.check) }

// DecodeOrphan decodes and checks the orphan record read from key.
func DecodeOrphan(key string, data []byte) (*Orphan, error) {
	return decodeAt[Orphan](key, kindOrphan, data, func(k string) (string, error) {
		root, _, err := ParseOrphanKey(k)
		return root, err
	})
}
