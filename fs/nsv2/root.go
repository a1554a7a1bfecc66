package nsv2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// The root's attributes (docs/namespace-v2.md §3, "The root"). The root
// has no name, so no dentry holds its mode, owner, times and extended
// attributes: they are an object of their own, ns2/root, changed as a
// name's attributes are (rewrite: one PUT If-Match the ETag held; refused,
// the object read again and the change applied again to it), and read as
// a name is (served for Config.TTL, read again ahead of it by the
// refresher while in use). No object (a volume made by ckptfs format, whose
// root was never changed) is Config's root: RootMode, RootOwner, and the
// times of the Tree's opening; the first change writes it If-None-Match.
//
// Not the volume's descriptor (ckptfs.json): that is the one object every
// mount and tool must read first, created once and replaced only by ckptfs
// upgrade, last, If-Match; a chmod of the root rewriting it would put the
// volume's identity on the path of a routine change (and up to 256 KiB of
// extended attributes in front of every mount), where a damaged root
// object costs the root's attributes only (fsck names it; deleting it gives
// the root Config's attributes back).

// RootAttrs is the object of the root directory's attributes, at
// RootKey(root) (<root>/ns2/root), in the envelope of the package doc with
// kind 10, version 1, a body of at most 2 MiB:
//
//	{"c":"<change id>","a":{<Attrs>}}
//
// a is a directory's Attrs (no file id, target or device number; extended
// attributes "user." only, within v1's bounds), c the change that wrote
// it: a fresh id at each write, so that a write whose answer was lost is
// found by reading it back, and the ETag changes where it is the MD5 of
// the bytes. It is never locked: no change of several names touches the
// root's attributes.
type RootAttrs struct {
	Change string `json:"c"`
	Node   Attrs  `json:"a"`
}

func (r *RootAttrs) check() error {
	if !ValidID(r.Change) {
		return fmt.Errorf("change id %q", r.Change)
	}
	return r.Node.check(namespace.KindDir)
}

// RootKey is the key of the root's attributes under root.
func RootKey(root string) string { return rootPrefix(root) + dirPrefix + "root" }

// ParseRootKey parses the key of the root's attributes.
func ParseRootKey(key string) (root string, err error) {
	root, _, err = split(key, "root", 0)
	return root, err
}

// Key is the key r belongs at.
func (r *RootAttrs) Key(root string) (string, error) { return finish(RootKey(root)) }

// EncodeRoot is the object of r.
func EncodeRoot(r *RootAttrs) ([]byte, error) { return encode(kindRoot, r, r.check) }

// DecodeRoot decodes and checks the root's attributes read from key.
func DecodeRoot(key string, data []byte) (*RootAttrs, error) {
	return decodeAt[RootAttrs](key, kindRoot, data, ParseRootKey)
}

// ReadRoot reads the root's attributes under root: nil when none are
// stored (the root is then Config's).
func ReadRoot(ctx context.Context, st staging.Store, root string) (*RootAttrs, staging.ObjectInfo, error) {
	r, info, err := read(ctx, st, RootKey(root), kindRoot, DecodeRoot)
	if errors.Is(err, staging.ErrNotFound) {
		return nil, staging.ObjectInfo{}, nil
	}
	return r, info, err
}

// rootState is the root's attributes as this Tree last read or wrote them.
type rootState struct {
	read    bool   // read or written at least once
	attrs   *Attrs // the root's; Config's when no object is stored
	etag    string // "": no object stored
	gen     uint64
	learned time.Time // Config.Clock
	use     useSpan   // for the refresher
}

// learnRootLocked caches the root's attributes a (nil: no object, the
// defaults) with etag, read or written now. mu held.
func (t *Tree) learnRootLocked(a *Attrs, etag string) {
	if a == nil {
		a = t.rootDef
	}
	t.rootSt.read, t.rootSt.attrs, t.rootSt.etag = true, a, etag
	t.rootSt.gen, t.rootSt.learned = t.gen, t.clock()
}

// readRoot reads the root's attributes from the store and caches them.
func (t *Tree) readRoot(ctx context.Context) (*Attrs, string, error) {
	r, info, err := ReadRoot(ctx, t.st, t.root)
	if err != nil {
		return nil, "", fmt.Errorf("the root's attributes: %w", err)
	}
	var a *Attrs
	if r != nil {
		a = &r.Node
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.learnRootLocked(a, info.ETag)
	return t.rootSt.attrs, t.rootSt.etag, nil
}

// rootAttrs is the root's attributes: cached when read or written since
// the last Refresh and less than the TTL ago, as a name's (freshLocked),
// else read (one GET). A use marks them in use for the refresher.
func (t *Tree) rootAttrs(ctx context.Context) (*Attrs, error) {
	t.mu.Lock()
	rs := &t.rootSt
	if t.ttl > 0 {
		rs.use = rs.use.used(t.clock(), t.ttl)
	}
	fresh := rs.read && rs.gen == t.gen && (t.ttl <= 0 || t.clock().Sub(rs.learned) < t.ttl)
	a := rs.attrs
	t.mu.Unlock()
	if fresh {
		return a, nil
	}
	a, _, err := t.readRoot(ctx)
	return a, err
}

// rootNodeOf is the root's node of attributes a.
func rootNodeOf(a *Attrs) namespace.Node {
	return nodeOf(namespace.RootIno, &Binding{Ino: namespace.RootIno, Kind: namespace.KindDir, Node: a}, nil)
}

// rewriteRoot applies change to the root's attributes: one PUT of
// ns2/root If-Match the ETag held (If-None-Match when none is stored);
// refused, the change is applied again to what the store holds, as
// rewriteTry does for a name. The attributes held are the cached ones,
// stale or not (a write against stale ones is refused and reads them).
func (t *Tree) rewriteRoot(ctx context.Context, change func(a *Attrs) error) (namespace.Node, error) {
	key := RootKey(t.root)
	t.mu.Lock()
	a, etag, known := t.rootSt.attrs, t.rootSt.etag, t.rootSt.read
	t.mu.Unlock()
	if !known {
		var err error
		if a, etag, err = t.readRoot(ctx); err != nil {
			return namespace.Node{}, err
		}
	}
	for range maxRounds {
		na := cloneAttrs(a)
		if err := change(na); err != nil {
			return namespace.Node{}, err
		}
		r := &RootAttrs{Change: newID(), Node: *na}
		body, err := EncodeRoot(r)
		if err != nil {
			return namespace.Node{}, err
		}
		res, err := put(ctx, t.st, key, body, condFor(etag), kindRoot, DecodeRoot, func(cur *RootAttrs) bool {
			return cur.Change == r.Change
		})
		if err != nil {
			return namespace.Node{}, err
		}
		t.mu.Lock()
		if res.landed {
			t.learnRootLocked(&r.Node, res.etag)
			t.mu.Unlock()
			return rootNodeOf(&r.Node), nil
		}
		// Changed by another mount since (or never read): apply the change
		// again to what is stored now.
		var cur *Attrs
		if res.cur != nil {
			cur = &res.cur.Node
		}
		t.learnRootLocked(cur, res.curInfo.ETag)
		a, etag = t.rootSt.attrs, t.rootSt.etag
		t.mu.Unlock()
	}
	return namespace.Node{}, fmt.Errorf("the root's attributes: %w", ErrContended)
}

// rootDueLocked says whether the refresher reads the root's attributes again in
// the pass at now (as a name's: in use, current, and age old); it returns
// the ETag and Refresh count it would replace. mu held.
func (t *Tree) rootDueLocked(now time.Time, age time.Duration) (etag string, gen uint64, due bool) {
	rs := &t.rootSt
	if !rs.read || !rs.use.inUse(now, t.ttl) || rs.gen != t.gen || now.Sub(rs.learned) < age {
		return "", 0, false
	}
	return rs.etag, rs.gen, true
}

// refreshRoot reads the root's attributes again, for the refresher, and
// caches them if what the cache holds is still what the pass chose (etag,
// gen): a write or read of this mount since holds what is as new.
func (t *Tree) refreshRoot(ctx context.Context, etag string, gen uint64) {
	r, info, err := ReadRoot(ctx, t.st, t.root)
	if err != nil {
		t.log.Debug("namespace v2: the root's attributes read ahead failed; their next use reads them", zap.Error(err))
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rootSt.etag != etag || t.rootSt.gen != gen || t.gen != gen {
		return
	}
	var a *Attrs
	if r != nil {
		a = &r.Node
	}
	t.learnRootLocked(a, info.ETag)
}
