// Package nsv2 holds the on-object formats and the key names of namespace v2
// (docs/namespace-v2.md, sections 3 to 7): where each object lives under a
// mount root, and how each is encoded and checked; and the primitives that
// change names in a staging.Store (Names: Bind, Tombstone, Lock, Decide,
// Finish, Resolve, ClaimBatch), each one conditional PUT where the design
// says one, a lost answer resolved by reading back the id it wrote (see
// prim.go; a Tree sends a change's locks at once, treemulti.go's lockAll,
// and Lock, which takes them one after another, is for tests); and Tree (tree.go), namespace.Names over them for the changes
// of one name (docs/namespace-v2.md §10, step 3) and rename, exchange and
// rmdir with the seal and create leases (treemulti.go, lease.go), hard
// links with inode objects (inode.go), and directories moved across
// directories through the moves log (moves.go): step 4, which a mount
// of a volume made with ckptfs format -o namespace=v2 holds
// (fs/volume.OpenNames; experimental), with its names and listings in use
// read again ahead of their TTL (refresh.go) and a walk's subdirectories
// listed ahead (walkahead.go). For the cleaner and fsck (§5, step 5):
// Index judges the orphan records, Trim deletes the history older than
// TrimGrace (not seals nor batch claims: §5 says why), Check reads every
// object under ns2/; a Tree drops its cache after a gap longer than
// TrimGrace (gap.go).
//
// The package is fs/nsv2 rather than fs/namespace/v2: a final path element
// "v2" reads to Go's tools as a module's major version, and goimports would
// take such a package to be named "namespace", the name of v1's package.
//
// # Keys
//
// Every key is <root>/ns2/..., where <root> is the mount root (no leading or
// trailing '/'; empty for the bucket's top). <hh> is two lower-case hex
// digits, the top byte of xxh3 (64-bit, seed 0) of the segment that follows
// it, so that the objects of different directories spread over 256 prefixes
// (S3 partitions by prefix). Inos, batch numbers and fragments are fixed-width
// lower-case hex; change, mount and file ids are 32 lower-case hex digits.
//
//	ns2/d/<hh>/<dir-ino>/<frag>/<name>   dentry: one name of directory dir-ino
//	ns2/i/<hh>/<ino>                     inode object: a node of several names
//	ns2/tx/<hh>/<tx-id>                  decision of a change of several names
//	ns2/ino/<batch>                      claim of inos batch<<20 .. batch<<20 + 2^20 - 1
//	ns2/lease/<dir-ino>/<mount-id>       a mount's create lease on a directory
//	ns2/seal/<dir-ino>                   a directory being removed
//	ns2/digest/<hh>/<dir-ino>/<mount-id> a mount's digest of its names in a directory
//	ns2/orphan/<file-id>                 a file whose last name went
//	ns2/moves/<seq>                      the moves log: a directory moved across directories
//	ns2/root                             the root directory's attributes (root.go)
//
// <ino> and <dir-ino> are 16 hex digits, <batch> 11 (2^44 batches of 2^20),
// <seq> 16 (nonzero), <frag> 2: xxh3 of the name's bytes modulo the
// directory's fragment count F (a power of two from 1 to 256). <name> is the name escaped: '%', '/' and
// every byte outside printable ASCII (0x20 to 0x7e) is %XX with upper-case
// hex digits, every other byte is itself. The escaping is a bijection on
// names: a key whose name segment the escaper would not have written (%41
// for 'A', %2f, a raw byte it escapes) is refused, so that every name has one
// key and the store arbitrates each name on that key alone. A name is at most
// 255 bytes (765 escaped) and a key at most 1,024 bytes, S3's bound.
//
// The Parse functions take a key as listed from the store (untrusted) and
// return the root and the key's parts; they parse from the right, so any
// root is allowed, and refuse what the matching Key function would not
// produce.
//
// # Envelope
//
// Every object is a 16-byte header, little-endian, then a JSON body, as v1's
// objects are (fs/namespace/format.go), with a magic of its own:
//
//	 0        4     5     6          8          12         16
//	+--------+-----+-----+----------+----------+----------+--------------+
//	| "CKN2" | ver | kind| reserved | body len | CRC-32C  | JSON body    |
//	| magic  | u8  | u8  | u16 = 0  | u32      | u32      | (body len B) |
//	+--------+-----+-----+----------+----------+----------+--------------+
//
// ver is 1, but 2 for an inode object (kindVersion: a build before hard
// links refuses it). kind is 1 dentry, 2 inode object, 3 decision, 4 batch claim,
// 5 lease, 6 seal, 7 digest, 8 orphan record, 9 moves log entry, 10 the
// root's attributes. The CRC-32C (Castagnoli)
// covers header bytes 0..11 and the body. Each kind bounds its body length
// (maxBody): a dentry's, a decision's and an inode object's 16 MiB (2 +
// MaxOps nodes, each with up to 256 KiB of extended attributes), a
// digest's 64 MiB, the root's attributes' 2 MiB, the others' 4 KiB. The body is decoded strictly: an unknown field, data after the
// body, an empty list written as [] (the encoder omits it), a value out of
// its bound, or a body that names another key than the one it was read from
// is corruption, reported as a *namespace.CorruptError naming the key
// (errors.Is(err, namespace.ErrCorrupt)). Each object repeats what its key
// says (directory and name, ino, id) so that an object copied to another key
// is refused. Names, symlink targets and attribute names are JSON strings
// when they are UTF-8, else {"b":"<base64>"}, as in v1.
//
// # Objects
//
// The body of each kind is drawn next to its type: Dentry (a name's
// binding, tombstone or lock, with the op list of a change of several
// names), Inode, Decision, Batch, Lease, Seal, Digest, Orphan and
// MoveEntry (moves.go), RootAttrs (root.go); Binding,
// Attrs and Op are their parts. Lists and strings are bounded: MaxOps,
// MaxLinks, MaxDigestNames, MaxETagLen, and v1's bounds on names, targets,
// modes, device numbers and extended attributes (namespace.MaxNameLen and
// the rest).
//
// Each Encode function checks the object as its Decode function does and
// returns an error wrapping namespace.ErrInvalid for one it would refuse, so
// nothing written can fail to read back.
package nsv2
