package blockmap

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
)

// build sets keys in order into a new tree over m.
func build(t testing.TB, m *memNodes, size int, keys []uint64) *Tree {
	t.Helper()
	tr := New(Options{MetaBlockSize: size}, m)
	for _, k := range keys {
		if err := tr.Set(context.Background(), k, val(k, 1)); err != nil {
			t.Fatalf("set %d: %v", k, err)
		}
	}
	return tr
}

func seq(lo, hi uint64) []uint64 {
	var out []uint64
	for k := lo; k < hi; k++ {
		out = append(out, k)
	}
	return out
}

type walked struct {
	ref   segment.Ptr
	level int
	img   NodeImage
}

func walkAll(t testing.TB, tr *Tree) []walked {
	t.Helper()
	var out []walked
	err := tr.Walk(context.Background(), func(ref segment.Ptr, level int, img NodeImage) error {
		out = append(out, walked{ref, level, img})
		return nil
	})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	return out
}

func TestBasicOperations(t *testing.T) {
	ctx := context.Background()
	tr := New(Options{MetaBlockSize: 256}, nil)
	steps := []struct {
		op  string
		fbn uint64
		v   uint32 // version of the value for set; 0: expect a hole for get
	}{
		{"get", 5, 0},
		{"set", 5, 1},
		{"get", 5, 1},
		{"set", 5, 2},
		{"get", 5, 2},
		{"get", 6, 0},
		{"set", 0, 1},
		{"set", math.MaxUint64 - 1, 1},
		{"get", math.MaxUint64 - 1, 1},
		{"get", math.MaxUint64, 0},
		{"delete", 5, 0},
		{"get", 5, 0},
		{"delete", 5, 0},
		{"get", 0, 1},
	}
	for i, s := range steps {
		var err error
		switch s.op {
		case "set":
			err = tr.Set(ctx, s.fbn, val(s.fbn, s.v))
		case "delete":
			err = tr.Delete(ctx, s.fbn)
		case "get":
			var got Value
			var ok bool
			got, ok, err = tr.Get(ctx, s.fbn)
			if ok != (s.v != 0) || (ok && got != val(s.fbn, s.v)) {
				t.Fatalf("step %d: get %d = %v, %v; want version %d", i, s.fbn, got, ok, s.v)
			}
		}
		if err != nil {
			t.Fatalf("step %d: %s %d: %v", i, s.op, s.fbn, err)
		}
	}
}

func TestInvalidArguments(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{0, 100, 300, 1 << 17} {
		tr := New(Options{MetaBlockSize: size}, nil)
		if _, _, err := tr.Get(ctx, 1); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("size %d: get err = %v, want ErrInvalidArgument", size, err)
		}
		if err := tr.Set(ctx, 1, val(1, 1)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("size %d: set err = %v", size, err)
		}
		if _, err := tr.Commit(ctx, newMemNodes().place); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("size %d: commit err = %v", size, err)
		}
	}
	opens := []struct {
		root   segment.Ptr
		height int
	}{
		{segment.Ptr{}, 1},
		{segment.Ptr{Cno: 1}, 0},
		{segment.Ptr{Cno: 1}, -1},
		{segment.Ptr{Cno: 1}, MaxHeight + 1},
	}
	for _, o := range opens {
		tr := Open(Options{MetaBlockSize: 256}, newMemNodes(), o.root, o.height)
		if err := tr.Scan(ctx, 0, 10, func(uint64, Value) error { return nil }); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("open %v height %d: scan err = %v, want ErrInvalidArgument", o.root, o.height, err)
		}
	}
	tr := New(Options{MetaBlockSize: 256}, nil)
	if err := tr.Set(ctx, 1, Value{CRC: 5}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("set zero pointer: err = %v", err)
	}
	if err := tr.Set(ctx, math.MaxUint64, val(1, 1)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("set fbn MaxUint64: err = %v", err)
	}
	if _, err := tr.LeavesFor(ctx, []uint64{3, 1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("leaves for unsorted fbns: err = %v", err)
	}
}

func TestSequentialAppendsLeaveFullNodes(t *testing.T) {
	for _, size := range []int{256, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			m := newMemNodes()
			n := uint64(LeafCapacity(size) * InternalCapacity(size) * 3)
			tr := build(t, m, size, seq(0, n))
			// The rightmost node of each level may be partial; every
			// other node is full.
			rightmost := map[int]uint64{}
			nodes := walkAll(t, tr)
			for _, w := range nodes {
				rightmost[w.level] = max(rightmost[w.level], w.img.Lo)
			}
			leaves := 0
			for _, w := range nodes {
				if w.img.Lo == rightmost[w.level] {
					continue
				}
				capacity := LeafCapacity(size)
				if w.level > 0 {
					capacity = InternalCapacity(size)
				} else {
					leaves++
				}
				if w.img.Count != capacity {
					t.Fatalf("level-%d node [%d, %d) holds %d entries, want %d", w.level, w.img.Lo, w.img.Hi, w.img.Count, capacity)
				}
			}
			if want := int(n)/LeafCapacity(size) - 1; leaves != want {
				t.Fatalf("%d full leaves, want %d", leaves, want)
			}
			checkShape(t, tr)
		})
	}
}

func TestMiddleSplit(t *testing.T) {
	// A full leaf (capacity 7) that takes a key in its middle splits 4/4.
	tr := build(t, newMemNodes(), 256, []uint64{0, 2, 4, 6, 8, 10, 12, 5})
	var counts []int
	for _, w := range walkAll(t, tr) {
		if w.level == 0 {
			counts = append(counts, w.img.Count)
		}
	}
	if !slices.Equal(counts, []int{4, 4}) {
		t.Fatalf("leaf counts %v, want [4 4]", counts)
	}
}

func TestCommitPlacesExactlyDirtyNodes(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := rng.Perm(3000)
	tr := New(Options{MetaBlockSize: 256}, m)
	for _, k := range keys {
		if err := tr.Set(ctx, uint64(k), val(uint64(k), 1)); err != nil {
			t.Fatal(err)
		}
	}
	if tr.Root() != (segment.Ptr{}) || !tr.Dirty() {
		t.Fatalf("uncommitted tree: root %v dirty %v", tr.Root(), tr.Dirty())
	}
	commitCounting := func(tr *Tree) (*Tree, []segment.Ptr) {
		t.Helper()
		var placed []segment.Ptr
		var lastLeafLo uint64
		sawParent := false
		c, err := tr.Commit(ctx, func(n NodeImage) (segment.Ptr, error) {
			if n.Level == 0 {
				if len(placed) > 0 && n.Lo < lastLeafLo {
					t.Fatalf("leaf [%d, ...) placed after leaf [%d, ...)", n.Lo, lastLeafLo)
				}
				lastLeafLo = n.Lo
			}
			if n.Level == tr.Height()-1 {
				sawParent = true
			} else if sawParent {
				t.Fatalf("node placed after the root")
			}
			p, err := m.place(n)
			placed = append(placed, p)
			return p, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return c, placed
	}
	dirty := tr.DirtyNodes()
	c1, placed := commitCounting(tr)
	if len(placed) != dirty || dirty != len(walkAll(t, tr)) {
		t.Fatalf("first commit placed %d nodes, DirtyNodes %d, tree has %d", len(placed), dirty, len(walkAll(t, tr)))
	}
	if c1.Dirty() || c1.DirtyNodes() != 0 || c1.Root() != placed[len(placed)-1] {
		t.Fatalf("committed tree: dirty %v (%d), root %v, last placed %v", c1.Dirty(), c1.DirtyNodes(), c1.Root(), placed[len(placed)-1])
	}
	// Commit did not change tr.
	if !tr.Dirty() || tr.DirtyNodes() != dirty {
		t.Fatalf("commit changed the tree: dirty %v, %d nodes", tr.Dirty(), tr.DirtyNodes())
	}

	// Change three keys far apart in a snapshot of the committed tree.
	oldRefs := map[segment.Ptr]bool{}
	for _, w := range walkAll(t, c1) {
		oldRefs[w.ref] = true
	}
	c1root := c1.Root()
	tr2 := c1.Snapshot()
	for _, k := range []uint64{10, 1500, 2990} {
		if err := tr2.Set(ctx, k, val(k, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr2.Set(ctx, 20, val(20, 1)); err != nil { // same value: no change
		t.Fatal(err)
	}
	dirty = tr2.DirtyNodes()
	if h := tr2.Height(); dirty < h || dirty > 3*h {
		t.Fatalf("three changed keys dirtied %d nodes in a tree of height %d", dirty, h)
	}
	c2, placed := commitCounting(tr2)
	if len(placed) != dirty {
		t.Fatalf("commit placed %d nodes, DirtyNodes said %d", len(placed), dirty)
	}
	newPlaced := map[segment.Ptr]bool{}
	for _, p := range placed {
		newPlaced[p] = true
	}
	shared := 0
	for _, w := range walkAll(t, c2) {
		switch {
		case newPlaced[w.ref]:
		case oldRefs[w.ref]:
			shared++
		default:
			t.Fatalf("node %v of the new tree is neither placed now nor shared", w.ref)
		}
	}
	if want := len(oldRefs) - dirty; shared != want {
		t.Fatalf("%d nodes shared with the old tree, want %d", shared, want)
	}
	// The old committed tree is unchanged.
	if c1.Root() != c1root || c1.Dirty() {
		t.Fatalf("old tree changed: root %v dirty %v", c1.Root(), c1.Dirty())
	}
	for _, k := range []uint64{10, 1500, 2990} {
		old, _, _ := c1.Get(ctx, k)
		now, _, _ := c2.Get(ctx, k)
		if old != val(k, 1) || now != val(k, 2) {
			t.Fatalf("key %d: old tree %v, new tree %v", k, old, now)
		}
	}
	checkShape(t, c2)
}

func TestCommitFailureKeepsTree(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	tr := build(t, m, 256, seq(0, 200))
	dirty := tr.DirtyNodes()
	boom := errors.New("store down")
	calls := 0
	_, err := tr.Commit(ctx, func(n NodeImage) (segment.Ptr, error) {
		if calls++; calls == 5 {
			return segment.Ptr{}, boom
		}
		return m.place(n)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("commit err = %v, want %v", err, boom)
	}
	if _, err := tr.Commit(ctx, func(NodeImage) (segment.Ptr, error) { return segment.Ptr{}, nil }); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("commit placing at a zero pointer: err = %v", err)
	}
	if !tr.Dirty() || tr.DirtyNodes() != dirty {
		t.Fatalf("after a failed commit: dirty %v, %d nodes, want %d", tr.Dirty(), tr.DirtyNodes(), dirty)
	}
	re := commitReopen(t, tr, m)
	if got := contents(t, re); len(got) != 200 {
		t.Fatalf("reopened tree holds %d keys", len(got))
	}
}

func TestCleanAndEmpty(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	tr := New(Options{MetaBlockSize: 256}, m)
	if tr.Dirty() || tr.Height() != 0 || !tr.Root().IsZero() {
		t.Fatalf("new tree: dirty %v height %d root %v", tr.Dirty(), tr.Height(), tr.Root())
	}
	for _, k := range seq(0, 100) {
		if err := tr.Set(ctx, k, val(k, 1)); err != nil {
			t.Fatal(err)
		}
	}
	re := commitReopen(t, tr, m)
	if re.Dirty() {
		t.Fatal("reopened tree is dirty")
	}
	if err := re.Set(ctx, 7, val(7, 1)); err != nil || re.Dirty() {
		t.Fatalf("setting an unchanged value: err %v, dirty %v", err, re.Dirty())
	}
	for _, k := range rand.New(rand.NewPCG(3, 4)).Perm(100) {
		if err := re.Delete(ctx, uint64(k)); err != nil {
			t.Fatal(err)
		}
		checkShape(t, re)
	}
	if !re.Dirty() || re.Height() != 0 || re.DirtyNodes() != 0 {
		t.Fatalf("emptied tree: dirty %v height %d dirty nodes %d", re.Dirty(), re.Height(), re.DirtyNodes())
	}
	c, err := re.Commit(ctx, func(NodeImage) (segment.Ptr, error) {
		t.Fatal("an empty tree placed a node")
		return segment.Ptr{}, nil
	})
	if err != nil || c.Dirty() || !c.Root().IsZero() || c.Height() != 0 {
		t.Fatalf("commit of the empty tree: %v, dirty %v root %v height %d", err, c.Dirty(), c.Root(), c.Height())
	}
}

func TestDeleteCollapsesRoot(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	tr := commitReopen(t, build(t, m, 256, seq(0, 2000)), m)
	h := tr.Height()
	// Keep only a run inside one leaf: the root collapses down to it.
	for k := uint64(0); k < 2000; k++ {
		if k >= 700 && k < 703 {
			continue
		}
		if err := tr.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if tr.Height() != 1 || h < 4 {
		t.Fatalf("height %d after deleting all but one leaf's keys (was %d)", tr.Height(), h)
	}
	if got := contents(t, tr); !maps.Equal(got, map[uint64]Value{700: val(700, 1), 701: val(701, 1), 702: val(702, 1)}) {
		t.Fatalf("contents %v", got)
	}
	checkShape(t, tr)
}

func TestTruncateDropsSubtreesUnloaded(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	base := build(t, m, 256, seq(0, 5000))
	c, err := base.Commit(ctx, m.place)
	if err != nil {
		t.Fatal(err)
	}
	root := walkAll(t, c)[0].img
	rootNode, err := DecodeNode(256, c.Root(), root.Encoded)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		from uint64
	}{
		{"middle", 2500},
		{"root child boundary", rootNode.Keys[1]},
		{"near start", 3},
		{"past the end", 9000},
		{"last key", 4999},
		{"everything", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := Open(Options{MetaBlockSize: 256}, m, c.Root(), c.Height())
			m.resetLoads()
			if err := tr.Truncate(ctx, tc.from); err != nil {
				t.Fatal(err)
			}
			// One path down to the cut, plus the nodes a collapsing root
			// must look at: never the dropped subtrees.
			if loads := m.totalLoads(); loads > c.Height()+1 || tc.from == 0 && loads != 0 {
				t.Fatalf("truncate at %d loaded %d nodes in a tree of height %d", tc.from, loads, c.Height())
			}
			got := contents(t, tr)
			if len(got) != int(min(tc.from, 5000)) {
				t.Fatalf("%d keys left, want %d", len(got), min(tc.from, 5000))
			}
			for k := range got {
				if k >= tc.from {
					t.Fatalf("key %d left after truncate at %d", k, tc.from)
				}
			}
			checkShape(t, tr)
		})
	}
}

func TestLazyLoadVerifies(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	store := func(n *Node) segment.Ptr {
		t.Helper()
		b, err := EncodeNode(256, n)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := m.place(NodeImage{Encoded: b})
		return p
	}
	leafA := store(leafNode(1, 2))
	leafB := store(leafNode(100, 101))
	outOfRange := store(leafNode(10, 60)) // under a parent range [50, ...)
	wrongLevel := store(internalNode(1, 50, 70))
	missing := segment.Ptr{Cno: 77, Part: 7, Slot: 7}
	root := func(kids ...segment.Ptr) segment.Ptr {
		return store(&Node{Level: 1, Keys: []uint64{0, 50}, Children: kids})
	}
	tests := []struct {
		name    string
		root    segment.Ptr
		height  int
		fbn     uint64
		bad     segment.Ptr
		corrupt bool
	}{
		{"fbn outside the parent's range", root(leafA, outOfRange), 2, 60, outOfRange, true},
		{"level other than the parent expects", root(leafA, wrongLevel), 2, 60, wrongLevel, true},
		{"root level other than the height", leafA, 2, 1, leafA, true},
		{"missing node", root(leafA, missing), 2, 60, missing, false},
		{"good", root(leafA, leafB), 2, 100, segment.Ptr{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := Open(Options{MetaBlockSize: 256}, m, tc.root, tc.height)
			_, _, err := tr.Get(ctx, tc.fbn)
			if tc.bad.IsZero() {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrCorruptNode) != tc.corrupt {
				t.Fatalf("err = %v, corrupt = %v, want %v", err, !tc.corrupt, tc.corrupt)
			}
			var ce *CorruptNodeError
			if tc.corrupt && (!errors.As(err, &ce) || ce.Ref != tc.bad) {
				t.Fatalf("err = %v does not name node %v", err, tc.bad)
			}
			// A failed load is not cached as success: it fails again.
			if _, _, err2 := tr.Get(ctx, tc.fbn); err2 == nil {
				t.Fatal("second get succeeded")
			}
		})
	}
}

func TestSnapshotIsolation(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	a := build(t, m, 256, seq(0, 500))
	b := a.Snapshot()
	if a.DirtyNodes() != b.DirtyNodes() {
		t.Fatalf("snapshot dirty nodes %d, tree %d", b.DirtyNodes(), a.DirtyNodes())
	}
	for k := uint64(0); k < 500; k += 3 {
		if err := a.Set(ctx, k, val(k, 2)); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(ctx, k+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Truncate(ctx, 400); err != nil {
		t.Fatal(err)
	}
	ga, gb := contents(t, a), contents(t, b)
	for k := uint64(0); k < 500; k++ {
		va, oka := ga[k]
		vb, okb := gb[k]
		wantA := k < 400
		if oka != wantA || (oka && va != val(k, map[bool]uint32{true: 2, false: 1}[k%3 == 0])) {
			t.Fatalf("tree: key %d = %v, %v", k, va, oka)
		}
		if okb != (k%3 != 1) || (okb && vb != val(k, 1)) {
			t.Fatalf("snapshot: key %d = %v, %v", k, vb, okb)
		}
	}
	checkShape(t, a)
	checkShape(t, b)
}

func TestLeavesFor(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	tr := commitReopen(t, build(t, m, 256, seq(0, 1000)), m)
	if err := tr.Set(ctx, 500, val(500, 9)); err != nil {
		t.Fatal(err)
	}
	fbns := []uint64{0, 1, 2, 499, 500, 501, 998, 5000}
	imgs, err := tr.LeavesFor(ctx, fbns)
	if err != nil {
		t.Fatal(err)
	}
	var los []uint64
	for _, img := range imgs {
		los = append(los, img.Lo)
		n, err := DecodeNode(256, img.Ref, img.Encoded)
		if err != nil || n.Level != 0 || len(n.Keys) != img.Count {
			t.Fatalf("leaf image [%d, %d): %v %+v", img.Lo, img.Hi, err, n)
		}
		for _, k := range n.Keys {
			if k < img.Lo || k >= img.Hi {
				t.Fatalf("key %d outside [%d, %d)", k, img.Lo, img.Hi)
			}
		}
		has500 := img.Lo <= 500 && 500 < img.Hi
		if has500 != img.Ref.IsZero() {
			t.Fatalf("leaf [%d, %d): ref %v (only the changed leaf is dirty)", img.Lo, img.Hi, img.Ref)
		}
		if has500 && n.Values[slices.Index(n.Keys, 500)] != val(500, 9) {
			t.Fatal("changed leaf does not show the new value")
		}
	}
	// Every fbn is in exactly one returned leaf, and leaves ascend.
	if !slices.IsSorted(los) || len(slices.Compact(slices.Clone(los))) != len(los) {
		t.Fatalf("leaf lows %v not strictly ascending", los)
	}
	for _, f := range fbns {
		n := 0
		for _, img := range imgs {
			if img.Lo <= f && f < img.Hi {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("fbn %d in %d leaves", f, n)
		}
	}
}

func TestConcurrentReadersLoadEachNodeOnce(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	c := commitReopen(t, build(t, m, 256, seq(0, 3000)), m)
	m.resetLoads()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 300 {
				k := uint64(rng.IntN(3000))
				var err error
				switch rng.IntN(4) {
				case 0:
					var v Value
					var ok bool
					if v, ok, err = c.Get(ctx, k); err == nil && (!ok || v != val(k, 1)) {
						err = fmt.Errorf("get %d = %v, %v", k, v, ok)
					}
				case 1:
					err = c.Scan(ctx, k, k+30, func(uint64, Value) error { return nil })
				case 2:
					_, err = c.LeavesFor(ctx, []uint64{k, k + 1})
				default:
					if rng.IntN(20) == 0 {
						err = c.Walk(ctx, func(segment.Ptr, int, NodeImage) error { return nil })
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ref, n := range m.loads {
		if n != 1 {
			t.Fatalf("node %v loaded %d times", ref, n)
		}
	}
}

func TestScanStopsOnError(t *testing.T) {
	tr := build(t, newMemNodes(), 256, seq(0, 100))
	stop := errors.New("enough")
	seen := 0
	err := tr.Scan(context.Background(), 10, 90, func(fbn uint64, v Value) error {
		if seen++; seen == 5 {
			return stop
		}
		return nil
	})
	if err != stop || seen != 5 {
		t.Fatalf("scan returned %v after %d calls", err, seen)
	}
}

// A snapshot is read while the tree it came from is changed: no data race
// (under -race) and the snapshot keeps its answers.
func TestSnapshotReadDuringWrites(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	a := commitReopen(t, build(t, m, 256, seq(0, 2000)), m)
	b := a.Snapshot()
	done := make(chan error, 1)
	go func() {
		for k := uint64(0); k < 2000; k++ {
			v, ok, err := b.Get(ctx, k)
			if err != nil || !ok || v != val(k, 1) {
				done <- fmt.Errorf("snapshot get %d = %v, %v, %v", k, v, ok, err)
				return
			}
		}
		done <- nil
	}()
	for k := uint64(0); k < 2000; k += 2 {
		if err := a.Set(ctx, k, val(k, 2)); err != nil {
			t.Fatal(err)
		}
		if err := a.Delete(ctx, k+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Truncate(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := contents(t, a); len(got) != 500 {
		t.Fatalf("tree holds %d keys, want 500", len(got))
	}
}
