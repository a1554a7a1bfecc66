package blockmap

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/ckptfs/ckptfs/segment"
)

// Loader fetches the encoded bytes of a stored node (exactly MetaBlockSize
// bytes). It is called without any tree-wide lock held and may be called
// concurrently.
type Loader interface {
	LoadNode(ctx context.Context, ref segment.Ptr) ([]byte, error)
}

// Options of a tree.
type Options struct {
	// MetaBlockSize is the size of one encoded node: a power of two from
	// MinMetaBlockSize to MaxMetaBlockSize (4 KiB in production).
	MetaBlockSize int
}

// Validate refuses options a tree cannot use.
func (o Options) Validate() error {
	return ValidateMetaBlockSize(o.MetaBlockSize)
}

// owner is the token that lets one tree change a dirty node in place. Its
// field gives it a size: distinct pointers to zero-size values may be equal.
type owner struct{ _ byte }

// node is one node in memory. Its content never changes once the node is
// shared (with a snapshot, or because it is clean).
type node struct {
	// ref is where the node is stored; zero while the node is dirty.
	ref segment.Ptr
	// owner: the tree whose token this is may change the node in place.
	// INVARIANT: owner != nil only if ref is zero (clean nodes are immutable).
	owner *owner
	level int
	// keys: leaf fbns; internal: lowest fbn of each child, keys[0] being the
	// node's range low end when the node was made.
	keys []uint64
	vals []Value // leaf only
	kids []*slot // internal only
}

// slot is a parent's reference to a child: a stub holding the child's Ptr
// until the child is first needed, then the loaded node as well.
type slot struct {
	ref segment.Ptr // zero for a dirty child (then n is set from the start)
	mu  sync.Mutex  // serialises the one load of this stub
	// n is the node once loaded. GUARDED_BY(mu) for writes; read atomically.
	// INVARIANT: once set it never changes (a changed child gets a new slot).
	n atomic.Pointer[node]
}

func newSlot(n *node) *slot {
	s := &slot{ref: n.ref}
	s.n.Store(n)
	return s
}

// Tree is a copy-on-write B+tree from file block number (fbn) to Value.
// See the package documentation for the rules on concurrent use.
type Tree struct {
	opts   Options
	loader Loader
	// err is a sticky construction error (bad Options or root); every
	// method returns it.
	err     error
	leafCap int
	intCap  int

	// The fields below are GUARDED_BY the caller's write lock: mutations
	// (Set, Delete, Truncate, Snapshot) change them; reads only read them.

	// root is nil for the empty map (height 0).
	// INVARIANT: a dirty node's ancestors are all dirty, so every dirty
	// node is reachable through dirty nodes from a dirty root.
	root   *slot
	height int
	// tok marks the nodes this tree may change in place; Snapshot gives
	// both trees new tokens.
	tok *owner
	// baseRef and baseHeight are the root as last opened or committed.
	baseRef    segment.Ptr
	baseHeight int
	// count is the number of keys when counted; a tree opened from a root
	// does not know it until told (SetLen) or counted (CountLen). Set,
	// Delete and Truncate keep a known count true.
	count   int64
	counted bool
}

// New returns an empty tree. Invalid options make every method fail.
func New(o Options, l Loader) *Tree {
	return Open(o, l, segment.Ptr{}, 0)
}

// Len returns the number of keys (mapped blocks) and whether it is known: a
// tree opened from a root knows it only once told (SetLen) or counted
// (CountLen); an empty tree knows it is 0.
func (t *Tree) Len() (int64, bool) { return t.count, t.counted }

// SetLen tells the tree how many keys it has (as recorded next to its root
// by whoever committed it). Needs exclusive access to t.
func (t *Tree) SetLen(n int64) { t.count, t.counted = n, true }

// CountLen counts the keys by scanning the whole map (loading every leaf
// not loaded yet) and remembers the count. Needs exclusive access to t.
func (t *Tree) CountLen(ctx context.Context) (int64, error) {
	if t.counted {
		return t.count, nil
	}
	var n int64
	if err := t.Scan(ctx, 0, noUpperBound, func(uint64, Value) error { n++; return nil }); err != nil {
		return 0, fmt.Errorf("count block map: %w", err)
	}
	t.SetLen(n)
	return n, nil
}

// Open returns the tree stored with root at the given height (as an inode
// records it); nothing is fetched until a method needs it. Invalid options
// or an inconsistent root and height make every method fail.
func Open(o Options, l Loader, root segment.Ptr, height int) *Tree {
	t := &Tree{opts: o, loader: l, tok: &owner{}, baseRef: root, baseHeight: height}
	if err := o.Validate(); err != nil {
		t.err = fmt.Errorf("block map: %w", err)
		return t
	}
	t.leafCap = LeafCapacity(o.MetaBlockSize)
	t.intCap = InternalCapacity(o.MetaBlockSize)
	switch {
	case height < 0 || height > MaxHeight:
		t.err = fmt.Errorf("open block map at %v: %w: height %d out of range [0, %d]", root, ErrInvalidArgument, height, MaxHeight)
	case (height == 0) != root.IsZero():
		t.err = fmt.Errorf("open block map at %v: %w: height %d with root %v", root, ErrInvalidArgument, height, root)
	case height > 0:
		t.root = &slot{ref: root}
		t.height = height
	default:
		t.counted = true // the empty map
	}
	return t
}

// Height is the number of levels: 0 for the empty map, 1 when the root is a
// leaf.
func (t *Tree) Height() int { return t.height }

// Root is where the root node is stored: zero for the empty map. It is
// meaningful only when the tree is not Dirty.
func (t *Tree) Root() segment.Ptr {
	if t.root == nil {
		return segment.Ptr{}
	}
	return t.root.ref
}

// Dirty reports whether the tree differs from the one last opened or
// committed: some node is dirty, or the root or height changed.
func (t *Tree) Dirty() bool {
	return t.Root() != t.baseRef || t.height != t.baseHeight || (t.root != nil && t.root.ref.IsZero())
}

// DirtyNodes counts the nodes a Commit would place.
func (t *Tree) DirtyNodes() int {
	if t.root == nil {
		return 0
	}
	return countDirty(t.root)
}

func countDirty(s *slot) int {
	if !s.ref.IsZero() {
		return 0 // clean: so is everything under it
	}
	n := s.n.Load()
	c := 1
	for _, k := range n.kids {
		c += countDirty(k)
	}
	return c
}

// Snapshot returns a tree with the same content in O(1). The two share every
// node; a later change to either copies what it changes, so neither sees the
// other's changes. Needs exclusive access to t.
func (t *Tree) Snapshot() *Tree {
	s := *t
	s.tok = &owner{}
	t.tok = &owner{}
	return &s
}

// load returns the node of s, fetching and verifying it the first time. The
// node must be at level and its keys inside [lo, hi).
func (t *Tree) load(ctx context.Context, s *slot, level int, lo, hi uint64) (*node, error) {
	if n := s.n.Load(); n != nil {
		return n, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.n.Load(); n != nil {
		return n, nil
	}
	if t.loader == nil {
		return nil, fmt.Errorf("load block-map node %v: %w: tree has no loader", s.ref, ErrInvalidArgument)
	}
	b, err := t.loader.LoadNode(ctx, s.ref)
	if err != nil {
		return nil, fmt.Errorf("load block-map node %v (level %d): %w", s.ref, level, err)
	}
	d, err := DecodeNode(t.opts.MetaBlockSize, s.ref, b)
	if err != nil {
		return nil, err
	}
	if d.Level != level {
		return nil, corrupt(s.ref, "level %d where the parent expects level %d", d.Level, level)
	}
	first := 0
	if level > 0 {
		// An internal node's lo_0 records its range when it was written;
		// the range may since have grown downwards, never shrunk.
		if d.Keys[0] < lo {
			return nil, corrupt(s.ref, "lowest fbn %d below the range [%d, %d) its parent gives it", d.Keys[0], lo, hi)
		}
		first = 1
	}
	for _, k := range d.Keys[first:] {
		if k < lo || k >= hi {
			return nil, corrupt(s.ref, "fbn %d outside the range [%d, %d) its parent gives it", k, lo, hi)
		}
	}
	n := &node{ref: s.ref, level: level, keys: d.Keys, vals: d.Values}
	if level > 0 {
		n.kids = make([]*slot, len(d.Children))
		for i, c := range d.Children {
			n.kids[i] = &slot{ref: c}
		}
	}
	s.n.Store(n)
	return n, nil
}

// childIndex is the child of internal node n whose range holds fbn.
func childIndex(n *node, fbn uint64) int {
	return sort.Search(len(n.keys)-1, func(j int) bool { return n.keys[j+1] > fbn })
}

// childRange is the range of child i of n, n covering [lo, hi).
func childRange(n *node, i int, lo, hi uint64) (uint64, uint64) {
	clo, chi := lo, hi
	if i > 0 {
		clo = n.keys[i]
	}
	if i+1 < len(n.keys) {
		chi = n.keys[i+1]
	}
	return clo, chi
}

func (t *Tree) rootNode(ctx context.Context) (*node, error) {
	return t.load(ctx, t.root, t.height-1, 0, noUpperBound)
}

// Get returns the value of fbn; ok is false for a hole.
func (t *Tree) Get(ctx context.Context, fbn uint64) (Value, bool, error) {
	if t.err != nil {
		return Value{}, false, t.err
	}
	if t.root == nil || fbn == noUpperBound {
		return Value{}, false, nil
	}
	lo, hi := uint64(0), uint64(noUpperBound)
	n, err := t.rootNode(ctx)
	for err == nil && n.level > 0 {
		i := childIndex(n, fbn)
		lo, hi = childRange(n, i, lo, hi)
		n, err = t.load(ctx, n.kids[i], n.level-1, lo, hi)
	}
	if err != nil {
		return Value{}, false, fmt.Errorf("get fbn %d: %w", fbn, err)
	}
	i, found := slices.BinarySearch(n.keys, fbn)
	if !found {
		return Value{}, false, nil
	}
	return n.vals[i], true, nil
}

// Peek says whether fbn is a key, looking only at nodes already in memory:
// known is false when the answer needs a node not loaded yet. It never
// fetches, so it may be asked where a request must not be made.
func (t *Tree) Peek(fbn uint64) (present, known bool) {
	if t.err != nil {
		return false, false
	}
	if t.root == nil {
		return false, true
	}
	n := t.root.n.Load()
	for n != nil && n.level > 0 {
		n = n.kids[childIndex(n, fbn)].n.Load()
	}
	if n == nil {
		return false, false
	}
	_, found := slices.BinarySearch(n.keys, fbn)
	return found, true
}

// Scan calls fn for every key in [lo, hi), ascending. An error from fn stops
// the scan and is returned as is.
func (t *Tree) Scan(ctx context.Context, lo, hi uint64, fn func(fbn uint64, v Value) error) error {
	if t.err != nil {
		return t.err
	}
	if t.root == nil || lo >= hi {
		return nil
	}
	return t.scan(ctx, t.root, t.height-1, 0, noUpperBound, lo, hi, fn)
}

func (t *Tree) scan(ctx context.Context, s *slot, level int, nlo, nhi, lo, hi uint64, fn func(uint64, Value) error) error {
	n, err := t.load(ctx, s, level, nlo, nhi)
	if err != nil {
		return fmt.Errorf("scan [%d, %d): %w", lo, hi, err)
	}
	if level == 0 {
		i, _ := slices.BinarySearch(n.keys, lo)
		for ; i < len(n.keys) && n.keys[i] < hi; i++ {
			if err := fn(n.keys[i], n.vals[i]); err != nil {
				return err
			}
		}
		return nil
	}
	for i := childIndex(n, lo); i < len(n.kids); i++ {
		clo, chi := childRange(n, i, nlo, nhi)
		if clo >= hi {
			break
		}
		if err := t.scan(ctx, n.kids[i], level-1, clo, chi, lo, hi, fn); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// writable returns n itself if this tree may change it in place, else a
// dirty copy owned by this tree.
func (t *Tree) writable(n *node) *node {
	if n.owner == t.tok {
		return n
	}
	return &node{
		owner: t.tok,
		level: n.level,
		keys:  slices.Clone(n.keys),
		vals:  slices.Clone(n.vals),
		kids:  slices.Clone(n.kids),
	}
}

// Set maps fbn to v, copying the path to its leaf. Setting the value a key
// already has changes nothing.
func (t *Tree) Set(ctx context.Context, fbn uint64, v Value) error {
	_, err := t.Put(ctx, fbn, v)
	return err
}

// Put is Set, reporting whether fbn was a hole before (a key was added).
func (t *Tree) Put(ctx context.Context, fbn uint64, v Value) (added bool, err error) {
	if t.err != nil {
		return false, t.err
	}
	if fbn == noUpperBound {
		return false, fmt.Errorf("set fbn %d: %w: fbn out of range", fbn, ErrInvalidArgument)
	}
	if v.Ptr.IsZero() {
		return false, fmt.Errorf("set fbn %d: %w: zero pointer (a hole has no entry; use Delete)", fbn, ErrInvalidArgument)
	}
	if t.root == nil {
		t.root = newSlot(&node{owner: t.tok, keys: []uint64{fbn}, vals: []Value{v}})
		t.height = 1
		t.count++
		return true, nil
	}
	if t.height >= MaxHeight {
		return false, fmt.Errorf("set fbn %d: %w: tree at its maximum height %d", fbn, ErrInvalidArgument, MaxHeight)
	}
	root, err := t.rootNode(ctx)
	if err != nil {
		return false, fmt.Errorf("set fbn %d: %w", fbn, err)
	}
	nn, right, sep, err := t.set(ctx, root, 0, noUpperBound, fbn, v, &added)
	if err != nil {
		return false, fmt.Errorf("set fbn %d: %w", fbn, err)
	}
	if added {
		t.count++
	}
	if right != nil {
		nn = &node{
			owner: t.tok,
			level: nn.level + 1,
			keys:  []uint64{0, sep},
			kids:  []*slot{newSlot(nn), newSlot(right)},
		}
		t.height++
	}
	if nn != root {
		t.root = newSlot(nn)
	}
	return added, nil
}

// set puts fbn in the subtree n covering [lo, hi). It returns n itself when
// nothing changed, else the changed node, and the right half with its low
// end when the node split.
// added is set when fbn was not a key before.
func (t *Tree) set(ctx context.Context, n *node, lo, hi, fbn uint64, v Value, added *bool) (*node, *node, uint64, error) {
	if n.level == 0 {
		i, found := slices.BinarySearch(n.keys, fbn)
		if found {
			if n.vals[i] == v {
				return n, nil, 0, nil
			}
			w := t.writable(n)
			w.vals[i] = v
			return w, nil, 0, nil
		}
		*added = true
		w := t.writable(n)
		w.keys = slices.Insert(w.keys, i, fbn)
		w.vals = slices.Insert(w.vals, i, v)
		if len(w.keys) <= t.leafCap {
			return w, nil, 0, nil
		}
		at := t.splitPoint(len(w.keys), i, hi)
		r := &node{owner: t.tok, keys: slices.Clone(w.keys[at:]), vals: slices.Clone(w.vals[at:])}
		w.keys, w.vals = slices.Clip(w.keys[:at]), slices.Clip(w.vals[:at])
		return w, r, r.keys[0], nil
	}
	i := childIndex(n, fbn)
	clo, chi := childRange(n, i, lo, hi)
	c, err := t.load(ctx, n.kids[i], n.level-1, clo, chi)
	if err != nil {
		return nil, nil, 0, err
	}
	nc, right, sep, err := t.set(ctx, c, clo, chi, fbn, v, added)
	if err != nil {
		return nil, nil, 0, err
	}
	if nc == c && right == nil {
		return n, nil, 0, nil
	}
	w := t.writable(n)
	// keys[0] does not route (the node's range starts at lo) and may still
	// say where the node began before its parent's first child went
	// (removeChild): bring it down to lo, so that a separator inserted
	// below where it began keeps the keys sorted.
	w.keys[0] = lo
	if nc != c {
		w.kids[i] = newSlot(nc)
	}
	if right == nil {
		return w, nil, 0, nil
	}
	w.keys = slices.Insert(w.keys, i+1, sep)
	w.kids = slices.Insert(w.kids, i+1, newSlot(right))
	if len(w.keys) <= t.intCap {
		return w, nil, 0, nil
	}
	at := t.splitPoint(len(w.keys), i+1, hi)
	r := &node{owner: t.tok, level: w.level, keys: slices.Clone(w.keys[at:]), kids: slices.Clone(w.kids[at:])}
	w.keys, w.kids = slices.Clip(w.keys[:at]), slices.Clip(w.kids[:at])
	return w, r, r.keys[0], nil
}

// splitPoint is where an overflowing node of count entries splits, the new
// entry being at index inserted. An insert at the right end of the rightmost
// path is a sequential append: the left node keeps every old entry, full,
// so that appends leave full nodes behind. Otherwise split in the middle.
func (t *Tree) splitPoint(count, inserted int, hi uint64) int {
	if hi == noUpperBound && inserted == count-1 {
		return count - 1
	}
	return count / 2
}

// Delete removes fbn (a hole afterwards). A node whose last entry goes is
// removed from its parent; nodes are never merged otherwise, so a tree after
// many deletes may hold sparse nodes until they are rewritten.
func (t *Tree) Delete(ctx context.Context, fbn uint64) error {
	_, err := t.Remove(ctx, fbn)
	return err
}

// Remove is Delete, reporting whether fbn was a key (a block was removed).
func (t *Tree) Remove(ctx context.Context, fbn uint64) (removed bool, err error) {
	if t.err != nil {
		return false, t.err
	}
	if t.root == nil || fbn == noUpperBound {
		return false, nil
	}
	root, err := t.rootNode(ctx)
	if err != nil {
		return false, fmt.Errorf("delete fbn %d: %w", fbn, err)
	}
	nn, err := t.del(ctx, root, 0, noUpperBound, fbn, &removed)
	if err != nil {
		return false, fmt.Errorf("delete fbn %d: %w", fbn, err)
	}
	if !removed {
		return false, nil // not a key: nothing changed
	}
	if err := t.replaceRoot(ctx, root, nn); err != nil {
		return false, fmt.Errorf("delete fbn %d: %w", fbn, err)
	}
	t.count--
	return true, nil
}

// del removes fbn from n; it returns n when nothing changed and nil when n
// lost its last entry.
// found is set when fbn was a key.
func (t *Tree) del(ctx context.Context, n *node, lo, hi, fbn uint64, found *bool) (*node, error) {
	if n.level == 0 {
		i, ok := slices.BinarySearch(n.keys, fbn)
		if !ok {
			return n, nil
		}
		*found = true
		if len(n.keys) == 1 {
			return nil, nil
		}
		w := t.writable(n)
		w.keys = slices.Delete(w.keys, i, i+1)
		w.vals = slices.Delete(w.vals, i, i+1)
		return w, nil
	}
	i := childIndex(n, fbn)
	clo, chi := childRange(n, i, lo, hi)
	c, err := t.load(ctx, n.kids[i], n.level-1, clo, chi)
	if err != nil {
		return nil, err
	}
	nc, err := t.del(ctx, c, clo, chi, fbn, found)
	if err != nil || nc == c {
		return n, err
	}
	if nc != nil {
		w := t.writable(n)
		w.keys[0] = lo // see set
		w.kids[i] = newSlot(nc)
		return w, nil
	}
	if len(n.keys) == 1 {
		return nil, nil
	}
	w := t.writable(n)
	w.keys[0] = lo
	removeChild(w, i)
	return w, nil
}

// removeChild drops child i of w. When the first child goes, the next one
// takes over the node's low end, keys[0].
func removeChild(w *node, i int) {
	if i == 0 {
		w.keys = slices.Delete(w.keys, 1, 2)
	} else {
		w.keys = slices.Delete(w.keys, i, i+1)
	}
	w.kids = slices.Delete(w.kids, i, i+1)
}

// replaceRoot installs nn as the root in place of old (nil: the map is now
// empty) and collapses a root with one child into that child.
func (t *Tree) replaceRoot(ctx context.Context, old, nn *node) error {
	if nn == nil {
		t.root, t.height = nil, 0
		return nil
	}
	if nn != old {
		t.root = newSlot(nn)
	}
	for t.height > 1 {
		r, err := t.rootNode(ctx)
		if err != nil {
			return err
		}
		if len(r.kids) != 1 {
			break
		}
		t.root = r.kids[0]
		t.height--
	}
	return nil
}

// Truncate drops every key >= from. Subtrees wholly at or past from are
// dropped without being loaded when the tree does not know its count (Len);
// when it does, they are scanned first to count what goes, so the count
// stays true (the cost is the leaves past the cut, not their data).
func (t *Tree) Truncate(ctx context.Context, from uint64) error {
	_, err := t.TruncateN(ctx, from)
	return err
}

// TruncateN is Truncate, reporting how many keys it removed when the tree
// knows its count (0 otherwise).
func (t *Tree) TruncateN(ctx context.Context, from uint64) (removed int64, err error) {
	if t.err != nil {
		return 0, t.err
	}
	if t.root == nil {
		return 0, nil
	}
	if from == 0 {
		if t.counted {
			removed = t.count
		}
		t.root, t.height = nil, 0
		t.count, t.counted = 0, true
		return removed, nil
	}
	if t.counted && from != noUpperBound {
		if err := t.Scan(ctx, from, noUpperBound, func(uint64, Value) error { removed++; return nil }); err != nil {
			return 0, fmt.Errorf("truncate at fbn %d: %w", from, err)
		}
	}
	root, err := t.rootNode(ctx)
	if err != nil {
		return 0, fmt.Errorf("truncate at fbn %d: %w", from, err)
	}
	nn, err := t.trunc(ctx, root, 0, noUpperBound, from)
	if err != nil {
		return 0, fmt.Errorf("truncate at fbn %d: %w", from, err)
	}
	if err := t.replaceRoot(ctx, root, nn); err != nil {
		return 0, fmt.Errorf("truncate at fbn %d: %w", from, err)
	}
	t.count -= removed
	return removed, nil
}

// trunc drops the keys >= from of n, which covers [lo, hi) with lo < from.
func (t *Tree) trunc(ctx context.Context, n *node, lo, hi, from uint64) (*node, error) {
	if n.level == 0 {
		i, _ := slices.BinarySearch(n.keys, from)
		switch i {
		case len(n.keys):
			return n, nil
		case 0:
			return nil, nil
		}
		w := t.writable(n)
		w.keys, w.vals = w.keys[:i], w.vals[:i]
		return w, nil
	}
	// Child i covers from; children after it lie wholly past the cut. When
	// child i starts at the cut it goes unloaded too, and child i-1 (wholly
	// below the cut) stays as it is, unloaded.
	i := childIndex(n, from)
	if i > 0 && n.keys[i] == from {
		return t.keepChildren(n, i, nil, nil), nil
	}
	clo, chi := childRange(n, i, lo, hi)
	c, err := t.load(ctx, n.kids[i], n.level-1, clo, chi)
	if err != nil {
		return nil, err
	}
	nc, err := t.trunc(ctx, c, clo, chi, from)
	if err != nil {
		return nil, err
	}
	if nc == nil {
		return t.keepChildren(n, i, nil, nil), nil
	}
	return t.keepChildren(n, i+1, c, nc), nil
}

// keepChildren returns n with only its first keep children, child keep-1
// changed from c to nc (when c is not nil); nil when none is kept.
func (t *Tree) keepChildren(n *node, keep int, c, nc *node) *node {
	if keep == 0 {
		return nil
	}
	if nc == c && keep == len(n.kids) {
		return n
	}
	w := t.writable(n)
	w.keys, w.kids = w.keys[:keep], w.kids[:keep]
	if nc != c {
		w.kids[keep-1] = newSlot(nc)
	}
	return w
}
