package blockmap

import (
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
)

// When every key of an internal node's first child goes, the next child
// takes over the low end of the range, but its own first key still says
// where it began. A later insert below that key that splits a node must not
// put a separator below it: every node committed then must decode (a
// checkpoint whose map does not decode cannot be read).
func TestRemovedFirstChildThenInsertBelow(t *testing.T) {
	ctx := context.Background()
	for _, order := range []string{"ascending", "descending"} {
		t.Run(order, func(t *testing.T) {
			m := newMemNodes()
			tr := build(t, m, 256, seq(0, 3000)) // height 4 at 256-byte nodes
			commit := func() {
				t.Helper()
				c, err := tr.Commit(ctx, func(n NodeImage) (segment.Ptr, error) {
					if _, err := DecodeNode(256, segment.Ptr{}, n.Encoded); err != nil && n.Level == 0 {
						t.Fatalf("leaf image does not decode: %v", err)
					}
					return m.place(n)
				})
				if err != nil {
					t.Fatal(err)
				}
				tr = c
				// Every stored node decodes and checks.
				for _, w := range walkAll(t, Open(Options{MetaBlockSize: 256}, m, tr.Root(), tr.Height())) {
					if _, err := DecodeNode(256, w.ref, w.img.Encoded); err != nil {
						t.Fatalf("stored node: %v", err)
					}
				}
			}
			commit()
			// Empty the first level-1 child of every level-2 node but the
			// first, then refill it: its next sibling has taken over its
			// range, with a first key above everything refilled.
			var firsts [][2]uint64
			ws := walkAll(t, tr)
			for i, w := range ws {
				if w.level == 2 && w.img.Lo > 0 && i+1 < len(ws) && ws[i+1].level == 1 {
					firsts = append(firsts, [2]uint64{ws[i+1].img.Lo, ws[i+1].img.Hi})
				}
			}
			if len(firsts) == 0 {
				t.Fatal("no level-2 node to empty the first child of")
			}
			for _, r := range firsts {
				for k := r[0]; k < r[1]; k++ {
					if err := tr.Delete(ctx, k); err != nil {
						t.Fatal(err)
					}
				}
			}
			commit()
			for _, r := range firsts {
				for i := uint64(0); i < r[1]-r[0]; i++ {
					k := r[0] + i
					if order == "descending" {
						k = r[1] - 1 - i
					}
					if err := tr.Set(ctx, k, val(k, 2)); err != nil {
						t.Fatal(err)
					}
				}
			}
			commit()
			for k := uint64(0); k < 3000; k++ {
				v, ok, err := tr.Get(ctx, k)
				if err != nil || !ok || v.Ptr.IsZero() {
					t.Fatalf("get %d: %v %v %v", k, v, ok, err)
				}
			}
		})
	}
}

// A map written before that fix, with an internal node whose first key is
// above its second, still reads: the first key does not route.
func TestStaleFirstKeyStoredReads(t *testing.T) {
	ctx := context.Background()
	m := newMemNodes()
	put := func(level int, keys []uint64, vals []Value, kids []segment.Ptr) segment.Ptr {
		b := make([]byte, 256)
		encodeInto(b, level, keys, vals, kids)
		p, err := m.place(NodeImage{Level: level, Encoded: b})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	l0 := put(0, []uint64{5, 6}, []Value{val(5, 1), val(6, 1)}, nil)
	l1 := put(0, []uint64{20, 21}, []Value{val(20, 1), val(21, 1)}, nil)
	l2 := put(0, []uint64{100, 101}, []Value{val(100, 1), val(101, 1)}, nil)
	a := put(1, []uint64{50, 20}, nil, []segment.Ptr{l0, l1}) // first key stale, above the second
	b := put(1, []uint64{100}, nil, []segment.Ptr{l2})
	root := put(2, []uint64{0, 100}, nil, []segment.Ptr{a, b})
	tr := Open(Options{MetaBlockSize: 256}, m, root, 3)
	var got []uint64
	if err := tr.Scan(ctx, 0, 1000, func(fbn uint64, v Value) error {
		if v != val(fbn, 1) {
			t.Errorf("fbn %d: %v", fbn, v)
		}
		got = append(got, fbn)
		return nil
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if len(got) != 6 {
		t.Fatalf("scan found %v", got)
	}
	// Changing it writes a node whose keys are sorted again.
	if err := tr.Set(ctx, 7, val(7, 1)); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Commit(ctx, func(n NodeImage) (segment.Ptr, error) {
		if n.Level == 1 && n.Lo == 0 {
			d, err := DecodeNode(256, segment.Ptr{}, n.Encoded)
			if err != nil || d.Keys[0] != 0 {
				t.Errorf("rewritten node: %+v, %v; want its first key 0", d, err)
			}
		}
		return m.place(n)
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := c.Get(ctx, 7); err != nil || !ok || v != val(7, 1) {
		t.Fatalf("get 7: %v %v %v", v, ok, err)
	}
}
