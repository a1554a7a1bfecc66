package blockmap

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
)

// memNodes is an in-memory node store: a Loader, and a PlaceFunc source that
// gives every placed node a fresh Ptr. It counts loads.
type memNodes struct {
	mu    sync.Mutex
	nodes map[segment.Ptr][]byte // GUARDED_BY(mu)
	next  uint32                 // GUARDED_BY(mu)
	loads map[segment.Ptr]int    // GUARDED_BY(mu)
	cno   uint64
}

func newMemNodes() *memNodes {
	return &memNodes{nodes: map[segment.Ptr][]byte{}, loads: map[segment.Ptr]int{}, cno: 1}
}

func (m *memNodes) LoadNode(ctx context.Context, ref segment.Ptr) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.nodes[ref]
	if !ok {
		return nil, fmt.Errorf("no node at %v", ref)
	}
	m.loads[ref]++
	return b, nil
}

// place stores n under a fresh Ptr.
func (m *memNodes) place(n NodeImage) (segment.Ptr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	p := segment.Ptr{Cno: m.cno, Part: 0, Slot: m.next}
	m.nodes[p] = n.Encoded
	return p, nil
}

func (m *memNodes) totalLoads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := 0
	for _, n := range m.loads {
		c += n
	}
	return c
}

func (m *memNodes) resetLoads() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads = map[segment.Ptr]int{}
}

// val is a distinct non-zero Value for fbn and a version.
func val(fbn uint64, version uint32) Value {
	return Value{Ptr: segment.Ptr{Cno: fbn + 1, Part: version, Slot: uint32(fbn)}, CRC: uint32(fbn) ^ version<<16}
}

// commitReopen commits t into m and opens the result afresh (nothing loaded).
func commitReopen(t testing.TB, tr *Tree, m *memNodes) *Tree {
	t.Helper()
	c, err := tr.Commit(context.Background(), m.place)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	return Open(tr.opts, m, c.Root(), c.Height())
}

// contents scans the whole tree into a map.
func contents(t testing.TB, tr *Tree) map[uint64]Value {
	t.Helper()
	got := map[uint64]Value{}
	last := int64(-1)
	err := tr.Scan(context.Background(), 0, noUpperBound, func(fbn uint64, v Value) error {
		if int64(fbn) <= last {
			return fmt.Errorf("scan not ascending: %d after %d", fbn, last)
		}
		last = int64(fbn)
		got[fbn] = v
		return nil
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return got
}

// checkShape verifies the structural invariants of the whole tree (loading
// it): levels, key ranges, capacities, no empty node, a root with more than
// one child, clean nodes only under clean nodes, and that clean nodes
// encode to what is stored.
func checkShape(t testing.TB, tr *Tree) {
	t.Helper()
	if tr.root == nil {
		if tr.height != 0 {
			t.Fatalf("empty tree with height %d", tr.height)
		}
		return
	}
	root, err := tr.rootNode(context.Background())
	if err != nil {
		t.Fatalf("shape: %v", err)
	}
	if root.level > 0 && len(root.kids) < 2 {
		t.Fatalf("shape: root with %d children", len(root.kids))
	}
	if err := shapeOf(tr, tr.root, tr.height-1, 0, noUpperBound); err != nil {
		t.Fatalf("shape: %v", err)
	}
}

func shapeOf(tr *Tree, s *slot, level int, lo, hi uint64) error {
	n, err := tr.load(context.Background(), s, level, lo, hi)
	if err != nil {
		return err
	}
	if n.level != level || n.ref != s.ref {
		return fmt.Errorf("node %v: level %d ref %v in a slot for level %d ref %v", n.ref, n.level, n.ref, level, s.ref)
	}
	if len(n.keys) == 0 {
		return fmt.Errorf("node %v: empty", n.ref)
	}
	if level == 0 && (len(n.keys) > tr.leafCap || len(n.vals) != len(n.keys)) ||
		level > 0 && (len(n.keys) > tr.intCap || len(n.kids) != len(n.keys)) {
		return fmt.Errorf("node %v: %d keys %d vals %d kids", n.ref, len(n.keys), len(n.vals), len(n.kids))
	}
	for i, k := range n.keys {
		if i > 0 && k <= n.keys[i-1] {
			return fmt.Errorf("node %v: keys not ascending", n.ref)
		}
		if (level == 0 || i > 0) && (k < lo || k >= hi) {
			return fmt.Errorf("node %v: key %d outside [%d, %d)", n.ref, k, lo, hi)
		}
	}
	if !n.ref.IsZero() {
		b, err := tr.loader.LoadNode(context.Background(), n.ref)
		if err != nil {
			return err
		}
		if img := tr.image(n, lo, hi); string(img.Encoded) != string(b) {
			return fmt.Errorf("clean node %v encodes differently from what is stored", n.ref)
		}
	}
	for i, k := range n.kids {
		if !n.ref.IsZero() && k.ref.IsZero() {
			return fmt.Errorf("clean node %v has a dirty child", n.ref)
		}
		clo, chi := childRange(n, i, lo, hi)
		if err := shapeOf(tr, k, level-1, clo, chi); err != nil {
			return err
		}
	}
	return nil
}
