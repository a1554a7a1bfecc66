package blockmap

import (
	"context"
	"fmt"
	"slices"

	"github.com/ckptfs/ckptfs/segment"
)

// NodeImage is a node as it is (or would be) stored.
type NodeImage struct {
	Level int
	// Lo and Hi bound the keys the node covers in the tree now: [Lo, Hi),
	// Hi being math.MaxUint64 on the rightmost path. A leaf's Lo is how the
	// file engine tells which leaf an image is (leaf ranges do not overlap).
	Lo, Hi uint64
	Count  int
	// Ref is where the node is stored; zero for a dirty node.
	Ref segment.Ptr
	// Encoded is the node's MetaBlockSize bytes. For a dirty internal node
	// outside Commit, the pointers to its dirty children are zero: they
	// have no place yet.
	Encoded []byte
}

// PlaceFunc is told the image of a dirty node and returns where it will be
// stored (a non-zero Ptr).
type PlaceFunc func(n NodeImage) (segment.Ptr, error)

func (t *Tree) image(n *node, lo, hi uint64) NodeImage {
	b := make([]byte, t.opts.MetaBlockSize)
	var children []segment.Ptr
	if n.level > 0 {
		children = make([]segment.Ptr, len(n.kids))
		for i, k := range n.kids {
			children[i] = k.ref
		}
	}
	encodeInto(b, n.level, n.keys, n.vals, children)
	return NodeImage{Level: n.level, Lo: lo, Hi: hi, Count: len(n.keys), Ref: n.ref, Encoded: b}
}

// Commit serialises exactly the dirty nodes, children before parents and
// leaves in key order, asking place where each goes. It does not change t:
// it returns a clean tree that shares every unchanged node with t. The
// caller swaps it in once the objects holding the placed nodes are stored;
// on failure it keeps t, still dirty. Needs exclusive access to t.
func (t *Tree) Commit(ctx context.Context, place PlaceFunc) (*Tree, error) {
	if t.err != nil {
		return nil, t.err
	}
	nt := &Tree{
		opts:    t.opts,
		loader:  t.loader,
		leafCap: t.leafCap,
		intCap:  t.intCap,
		height:  t.height,
		tok:     &owner{},
		count:   t.count,
		counted: t.counted,
	}
	if t.root != nil {
		r, err := t.commit(ctx, t.root, 0, noUpperBound, place)
		if err != nil {
			return nil, fmt.Errorf("commit block map: %w", err)
		}
		nt.root = r
	}
	nt.baseRef, nt.baseHeight = nt.Root(), nt.height
	return nt, nil
}

// commit returns the clean slot standing for s.
func (t *Tree) commit(ctx context.Context, s *slot, lo, hi uint64, place PlaceFunc) (*slot, error) {
	if !s.ref.IsZero() {
		return s, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := s.n.Load()
	c := &node{level: n.level, keys: n.keys, vals: n.vals}
	if n.level > 0 {
		c.kids = make([]*slot, len(n.kids))
		for i, k := range n.kids {
			clo, chi := childRange(n, i, lo, hi)
			ck, err := t.commit(ctx, k, clo, chi, place)
			if err != nil {
				return nil, err
			}
			c.kids[i] = ck
		}
	}
	// c gets its own keys and vals: t still owns n and may change it in
	// place after this commit returns.
	c.keys, c.vals = slices.Clone(c.keys), slices.Clone(c.vals)
	img := t.image(c, lo, hi)
	ref, err := place(img)
	if err != nil {
		return nil, fmt.Errorf("place level-%d node [%d, %d): %w", n.level, lo, hi, err)
	}
	if ref.IsZero() {
		return nil, fmt.Errorf("place level-%d node [%d, %d): %w: zero pointer", n.level, lo, hi, ErrInvalidArgument)
	}
	c.ref = ref
	return newSlot(c), nil
}

// LeavesFor returns, in key order and once each, the leaves whose key range
// holds any of fbns (ascending), encoded as they are now. The file engine
// writes them into the object that holds those blocks.
func (t *Tree) LeavesFor(ctx context.Context, fbns []uint64) ([]NodeImage, error) {
	if t.err != nil {
		return nil, t.err
	}
	if !slices.IsSorted(fbns) {
		return nil, fmt.Errorf("leaves for fbns: %w: not sorted ascending", ErrInvalidArgument)
	}
	if len(fbns) == 0 || t.root == nil {
		return nil, nil
	}
	if fbns[len(fbns)-1] == noUpperBound {
		return nil, fmt.Errorf("leaves for fbns: %w: fbn %d out of range", ErrInvalidArgument, uint64(noUpperBound))
	}
	var out []NodeImage
	if err := t.leavesFor(ctx, t.root, t.height-1, 0, noUpperBound, fbns, &out); err != nil {
		return nil, fmt.Errorf("leaves for fbns %d..%d: %w", fbns[0], fbns[len(fbns)-1], err)
	}
	return out, nil
}

func (t *Tree) leavesFor(ctx context.Context, s *slot, level int, lo, hi uint64, fbns []uint64, out *[]NodeImage) error {
	n, err := t.load(ctx, s, level, lo, hi)
	if err != nil {
		return err
	}
	if level == 0 {
		*out = append(*out, t.image(n, lo, hi))
		return nil
	}
	for len(fbns) > 0 {
		i := childIndex(n, fbns[0])
		clo, chi := childRange(n, i, lo, hi)
		j, _ := slices.BinarySearch(fbns, chi) // fbns[:j] fall in child i
		if err := t.leavesFor(ctx, n.kids[i], level-1, clo, chi, fbns[:j], out); err != nil {
			return err
		}
		fbns = fbns[j:]
	}
	return nil
}

// Walk calls fn for every node reachable from the root, parents before
// children and children in key order, loading nodes as needed. ref is zero
// for a dirty node. For the cleaner and fsck.
func (t *Tree) Walk(ctx context.Context, fn func(ref segment.Ptr, level int, n NodeImage) error) error {
	if t.err != nil {
		return t.err
	}
	if t.root == nil {
		return nil
	}
	return t.walk(ctx, t.root, t.height-1, 0, noUpperBound, fn)
}

func (t *Tree) walk(ctx context.Context, s *slot, level int, lo, hi uint64, fn func(segment.Ptr, int, NodeImage) error) error {
	n, err := t.load(ctx, s, level, lo, hi)
	if err != nil {
		return fmt.Errorf("walk block map: %w", err)
	}
	if err := fn(n.ref, level, t.image(n, lo, hi)); err != nil {
		return err
	}
	for i, k := range n.kids {
		clo, chi := childRange(n, i, lo, hi)
		if err := t.walk(ctx, k, level-1, clo, chi, fn); err != nil {
			return err
		}
	}
	return nil
}
