package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
)

// rootFrags is the fragment count of the root, as volume.OpenNames opens a
// v2 Tree (nsv2.Config.RootFrags 0, which is 1), and of every directory the
// upgrade writes: one fragment, as a v2 mkdir makes them.
const rootFrags = 1

// v2FirstBatch is the lowest inode batch a v2 mount claims
// (nsv2.Config.FirstBatch: a random one in [2^40, 2^43)): v1's inos must
// be below its first ino, 2^60, so that no v2 ino ever equals one. A v1
// ino is seq<<16|i: below 2^60 while the log has had fewer than 2^44
// entries.
const v2FirstBatch = 1 << 40

// maxListed bounds the paths a refusal lists of one kind.
const maxListed = 20

// item is one name to write: name in directory dir (path, for messages)
// bound to b.
type item struct {
	dir  namespace.Ino
	name string
	path string
	b    *nsv2.Binding
}

// linked is the inode object to write for a node of several names (hard
// links), as nsv2's Link leaves one: its attributes and its count of names,
// which each name's binding then holds without attributes (inode.go). paths
// are its names, for messages.
type linked struct {
	in    *nsv2.Inode
	paths []string
}

// plan is the v1 state as v2 dentries and inode objects, or why it cannot
// be.
type plan struct {
	names  []item
	inodes []linked
	// root is the root's attributes, as v2 keeps them (ns2/root), its
	// change id left to the writer.
	root    *nsv2.RootAttrs
	refused *RefusedError
}

// RefusedError says what of the v1 state namespace v2 cannot hold yet;
// errors.Is(err, ErrRefused). Nothing of v2 was written.
type RefusedError struct {
	// Orphans: file ids of files with no name left.
	Orphans []string
	// Other: names or nodes v2 refuses (a key too long, an ino out of
	// range, more names than nsv2.MaxLinks), each with its reason.
	Other []string
	// Unfenced: the log had been fenced; the fence is removed.
	Unfenced bool
}

func (e *RefusedError) Error() string {
	var parts []string
	if n := len(e.Orphans); n > 0 {
		more := ""
		if n > maxListed {
			more = fmt.Sprintf(" and %d more", n-maxListed)
		}
		parts = append(parts, fmt.Sprintf("%d files without a name left (removed while open), whose data only the v1 cleaner deletes: %s%s; "+
			"once no mount holds them open, run \"ckptfs gc\" until it reports them deleted, and upgrade again",
			n, strings.Join(e.Orphans[:min(n, maxListed)], ", "), more))
	}
	parts = append(parts, e.Other...)
	msg := "namespace v2 cannot hold this volume's names yet: " + strings.Join(parts, "; ")
	if e.Unfenced {
		return msg + "; the fence is removed, nothing else changed"
	}
	return msg + "; nothing changed"
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// makePlan walks the state of ns from the root (from memory: v1's reads
// never wait for the store) into the names to write, or the refusal.
func makePlan(ctx context.Context, ns namespace.Names, root string) (*plan, error) {
	p := &plan{}
	ref := &RefusedError{}
	rootNode, err := ns.GetNode(ctx, namespace.RootIno)
	if err != nil {
		return nil, fmt.Errorf("upgrade: read the root: %w", err)
	}
	if p.root, err = rootAttrs(ctx, ns, rootNode); err != nil {
		return nil, err
	}
	if _, err := nsv2.EncodeRoot(&nsv2.RootAttrs{Change: rootChangeID(""), Node: p.root.Node}); err != nil {
		ref.Other = append(ref.Other, fmt.Sprintf("the root: %v", err))
	}
	orphans, err := ns.Orphans(ctx)
	if err != nil {
		return nil, fmt.Errorf("upgrade: read the orphans: %w", err)
	}
	for _, o := range orphans {
		ref.Orphans = append(ref.Orphans, o.FileID)
	}
	sort.Strings(ref.Orphans)
	several := map[namespace.Ino]*linked{} // nodes of several names
	type dir struct {
		ino  namespace.Ino
		path string
	}
	queue := []dir{{namespace.RootIno, ""}}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		ents, err := ns.ReadDir(ctx, d.ino)
		if err != nil {
			return nil, fmt.Errorf("upgrade: list %s/: %w", d.path, err)
		}
		for _, de := range ents {
			path := d.path + "/" + de.Name
			n, err := ns.GetNode(ctx, de.Ino)
			if err != nil {
				return nil, fmt.Errorf("upgrade: read %s: %w", path, err)
			}
			var b *nsv2.Binding
			if n.Kind != namespace.KindDir && n.Nlink > 1 {
				// A name of a node of several names binds its ino and kind
				// only; its attributes go to the inode object, once.
				l := several[n.Ino]
				if l == nil {
					nb, err := binding(ctx, ns, n)
					if err != nil {
						return nil, fmt.Errorf("upgrade: read %s: %w", path, err)
					}
					l = &linked{in: &nsv2.Inode{Ino: n.Ino, Kind: n.Kind, Node: *nb.Node}}
					several[n.Ino] = l
				}
				l.paths = append(l.paths, path)
				b = &nsv2.Binding{Ino: n.Ino, Kind: n.Kind}
			} else if b, err = binding(ctx, ns, n); err != nil {
				return nil, fmt.Errorf("upgrade: read %s: %w", path, err)
			}
			if why := check(root, d.ino, de.Name, b); why != "" {
				ref.Other = append(ref.Other, fmt.Sprintf("%s: %s", path, why))
				continue
			}
			p.names = append(p.names, item{dir: d.ino, name: de.Name, path: path, b: b})
			if n.Kind == namespace.KindDir {
				queue = append(queue, dir{n.Ino, path})
			}
		}
	}
	for _, l := range several {
		// Its count of names is the names found: v1 counts them so too.
		l.in.Nlink = uint32(min(len(l.paths), math.MaxUint32))
		if why := checkInode(root, l.in); why != "" {
			ref.Other = append(ref.Other, fmt.Sprintf("%s: %s", strings.Join(l.paths, " = "), why))
			continue
		}
		p.inodes = append(p.inodes, *l)
	}
	sort.Slice(p.inodes, func(i, j int) bool { return p.inodes[i].paths[0] < p.inodes[j].paths[0] })
	if len(ref.Orphans)+len(ref.Other) > 0 {
		p.refused = ref
	}
	return p, nil
}

// checkInode says why the inode object in cannot be written, "" when it
// can.
func checkInode(root string, in *nsv2.Inode) string {
	if in.Nlink > nsv2.MaxLinks {
		return fmt.Sprintf("%d names, more than namespace v2's %d", in.Nlink, nsv2.MaxLinks)
	}
	if in.Ino >= nsv2.FirstIno(v2FirstBatch) {
		return fmt.Sprintf("ino %d is not below %d, where namespace v2 mounts number nodes", in.Ino, nsv2.FirstIno(v2FirstBatch))
	}
	if _, err := nsv2.InodeKey(root, in.Ino); err != nil {
		return err.Error()
	}
	c := *in
	c.Change = inodeChangeID("", in.Ino)
	if _, err := nsv2.EncodeInode(&c); err != nil {
		return err.Error()
	}
	return ""
}

// check says why name in dir bound to b cannot be written, "" when it can.
func check(root string, dir namespace.Ino, name string, b *nsv2.Binding) string {
	if b.Ino >= nsv2.FirstIno(v2FirstBatch) {
		return fmt.Sprintf("ino %d is not below %d, where namespace v2 mounts number nodes", b.Ino, nsv2.FirstIno(v2FirstBatch))
	}
	if _, err := nsv2.DentryKey(root, dir, rootFrags, name); err != nil {
		return err.Error()
	}
	if _, err := nsv2.EncodeDentry(&nsv2.Dentry{Dir: dir, Frags: rootFrags, Name: nsv2.Name(name), Change: changeID("", dir, name), Bound: b}); err != nil {
		return err.Error()
	}
	return ""
}

// binding is v1's node n as a v2 binding of its one name: ino, kind, and
// every attribute v1 holds.
func binding(ctx context.Context, ns namespace.Names, n namespace.Node) (*nsv2.Binding, error) {
	a := &nsv2.Attrs{Mode: n.Mode, Uid: n.Uid, Gid: n.Gid, Atime: n.AtimeNs, Mtime: n.MtimeNs, Ctime: n.CtimeNs,
		MtimeSet: n.MtimeSetNs, FileID: n.FileID, Target: nsv2.Name(n.Target), Major: n.Major, Minor: n.Minor}
	xs, err := xattrs(ctx, ns, n.Ino)
	if err != nil {
		return nil, err
	}
	a.Xattrs = xs
	b := &nsv2.Binding{Ino: n.Ino, Kind: n.Kind, Node: a}
	if n.Kind == namespace.KindDir {
		b.Frags = rootFrags
	}
	return b, nil
}

// xattrs is node ino's extended attributes sorted by name, nil for none.
func xattrs(ctx context.Context, ns namespace.Names, ino namespace.Ino) ([]nsv2.Xattr, error) {
	names, err := ns.ListXattr(ctx, ino)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []nsv2.Xattr
	for _, name := range names {
		v, err := ns.GetXattr(ctx, ino, name)
		if err != nil {
			return nil, err
		}
		if v == nil {
			v = []byte{}
		}
		out = append(out, nsv2.Xattr{Name: nsv2.Name(name), Value: v})
	}
	return out, nil
}

// rootAttrs is v1's root r, with its extended attributes, as v2's root
// object holds it: every attribute v1 keeps of the root.
func rootAttrs(ctx context.Context, ns namespace.Names, r namespace.Node) (*nsv2.RootAttrs, error) {
	xs, err := xattrs(ctx, ns, namespace.RootIno)
	if err != nil {
		return nil, fmt.Errorf("upgrade: read the root's attributes: %w", err)
	}
	return &nsv2.RootAttrs{Node: nsv2.Attrs{Mode: r.Mode, Uid: r.Uid, Gid: r.Gid, Atime: r.AtimeNs, Mtime: r.MtimeNs,
		Ctime: r.CtimeNs, MtimeSet: r.MtimeSetNs, Xattrs: xs}}, nil
}

// sameBinding says whether a and b bind the same node with the same
// attributes (as encoded: an empty value and none are one).
func sameBinding(a, b *nsv2.Binding) bool {
	if a == nil || b == nil {
		return a == b
	}
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// sameInode says whether a and b hold the same node, count of names and
// attributes (as encoded), neither locked; their change ids may differ.
func sameInode(a, b *nsv2.Inode) bool {
	if a.Lock != nil || b.Lock != nil || len(a.Ops) > 0 || len(b.Ops) > 0 {
		return false
	}
	ca, cb := *a, *b
	ca.Change, cb.Change = "", ""
	ja, err1 := json.Marshal(&ca)
	jb, err2 := json.Marshal(&cb)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
