package blockmap

import (
	"context"
	"flag"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/segment"
)

var (
	modelSeed = flag.Uint64("blockmap.seed", 0, "seed of TestModel (0: from the clock)")
	modelOps  = flag.Int("blockmap.ops", 1_000_000, "operations of TestModel (a tenth under -short)")
)

type modelSnapshot struct {
	tree *Tree
	want map[uint64]Value
}

// TestModel runs random operations against the tree and a plain map and
// compares every answer, with commits, reopens and snapshots in between.
func TestModel(t *testing.T) {
	seed := *modelSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	ops := *modelOps
	if testing.Short() {
		ops /= 10
	}
	t.Logf("seed %d (rerun with -blockmap.seed=%d), %d ops", seed, seed, ops)
	defer func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d", seed)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx := context.Background()
	const keySpace = 12000
	opts := Options{MetaBlockSize: 256}

	mem := newMemNodes()
	tr := New(opts, mem)
	want := map[uint64]Value{}
	var snaps []modelSnapshot
	var version uint32
	appendNext := uint64(0)
	maxHeight, commits, reopens, switches := 0, 0, 0, 0

	randKey := func() uint64 {
		if rng.IntN(4) == 0 { // near the end: appends and overwrites there
			return uint64(keySpace - 200 + rng.IntN(200))
		}
		return uint64(rng.IntN(keySpace))
	}

	for op := 0; op < ops && !t.Failed(); op++ {
		r := rng.IntN(10000)
		switch {
		case r < 3000: // set or overwrite
			k := randKey()
			version++
			v := val(k, version)
			added, err := tr.Put(ctx, k, v)
			if err != nil {
				t.Fatalf("op %d: set %d: %v", op, k, err)
			}
			if _, had := want[k]; added == had {
				t.Fatalf("op %d: put %d says added=%v, the model had it: %v", op, k, added, had)
			}
			want[k] = v
		case r < 3250: // a run of sequential appends past everything
			if appendNext < keySpace {
				appendNext = keySpace
			}
			for range 1 + rng.IntN(16) {
				version++
				v := val(appendNext, version)
				if err := tr.Set(ctx, appendNext, v); err != nil {
					t.Fatalf("op %d: append %d: %v", op, appendNext, err)
				}
				want[appendNext] = v
				appendNext++
			}
		case r < 4300: // delete (often a hole)
			k := randKey()
			if rng.IntN(3) == 0 && appendNext > keySpace {
				k = keySpace + uint64(rng.IntN(int(appendNext-keySpace)))
			}
			removed, err := tr.Remove(ctx, k)
			if err != nil {
				t.Fatalf("op %d: delete %d: %v", op, k, err)
			}
			if _, had := want[k]; removed != had {
				t.Fatalf("op %d: remove %d says removed=%v, the model had it: %v", op, k, removed, had)
			}
			delete(want, k)
		case r < 8400: // get
			k := randKey()
			got, ok, err := tr.Get(ctx, k)
			w, wok := want[k]
			if err != nil || ok != wok || got != w {
				t.Fatalf("op %d: get %d = %v, %v, %v; want %v, %v", op, k, got, ok, err, w, wok)
			}
		case r < 9000: // scan a short range
			lo := randKey()
			hi := lo + uint64(rng.IntN(24))
			var got []uint64
			err := tr.Scan(ctx, lo, hi, func(fbn uint64, v Value) error {
				if want[fbn] != v {
					t.Errorf("op %d: scan [%d,%d): %d = %v, want %v", op, lo, hi, fbn, v, want[fbn])
				}
				got = append(got, fbn)
				return nil
			})
			if err != nil {
				t.Fatalf("op %d: scan: %v", op, err)
			}
			var exp []uint64
			for k := lo; k < hi; k++ {
				if _, ok := want[k]; ok {
					exp = append(exp, k)
				}
			}
			if !slices.Equal(got, exp) {
				t.Fatalf("op %d: scan [%d,%d) = %v, want %v", op, lo, hi, got, exp)
			}
		case r < 9002: // truncate
			from := uint64(rng.IntN(keySpace + 400))
			if rng.IntN(20) == 0 {
				from = 0
			}
			_, known := tr.Len()
			removed, err := tr.TruncateN(ctx, from)
			if err != nil {
				t.Fatalf("op %d: truncate %d: %v", op, from, err)
			}
			gone := int64(0)
			for k := range want {
				if k >= from {
					delete(want, k)
					gone++
				}
			}
			if known && removed != gone {
				t.Fatalf("op %d: truncate %d removed %d keys, the model %d", op, from, removed, gone)
			}
			if appendNext > from {
				appendNext = from
			}
		case r < 9006: // commit, then go on with the committed tree or a reopened one
			dirty := tr.DirtyNodes()
			placed := 0
			c, err := tr.Commit(ctx, func(n NodeImage) (segment.Ptr, error) {
				placed++
				return mem.place(n)
			})
			if err != nil {
				t.Fatalf("op %d: commit: %v", op, err)
			}
			if placed != dirty {
				t.Fatalf("op %d: commit placed %d nodes, DirtyNodes said %d", op, placed, dirty)
			}
			if c.Dirty() || c.DirtyNodes() != 0 || c.Height() != tr.Height() {
				t.Fatalf("op %d: committed tree dirty=%v (%d nodes), height %d want %d", op, c.Dirty(), c.DirtyNodes(), c.Height(), tr.Height())
			}
			commits++
			switch rng.IntN(3) {
			case 0:
				tr = c
			case 1:
				tr = Open(opts, mem, c.Root(), c.Height())
				// Told the count (as a head records it), or left to count
				// it later.
				if rng.IntN(2) == 0 {
					tr.SetLen(int64(len(want)))
				}
				reopens++
			default:
				// The caller may keep the dirty tree (a failed store).
			}
		case r < 9007: // snapshot, or go on changing an older snapshot instead
			if len(snaps) > 0 && rng.IntN(3) == 0 {
				i := rng.IntN(len(snaps))
				old := snaps[i]
				snaps[i] = modelSnapshot{tree: tr, want: want}
				tr, want = old.tree, old.want
				appendNext = 0
				for k := range want {
					appendNext = max(appendNext, k+1)
				}
				switches++
				break
			}
			snaps = append(snaps, modelSnapshot{tree: tr.Snapshot(), want: maps.Clone(want)})
			if len(snaps) > 4 {
				snaps = snaps[1:]
			}
		case r < 9009: // check a snapshot whole, and the tree's shape
			if len(snaps) > 0 {
				s := snaps[rng.IntN(len(snaps))]
				if got := contents(t, s.tree); !maps.Equal(got, s.want) {
					t.Fatalf("op %d: snapshot holds %d keys, want %d (or values differ)", op, len(got), len(s.want))
				}
			}
			if rng.IntN(4) == 0 {
				if got := contents(t, tr); !maps.Equal(got, want) {
					t.Fatalf("op %d: tree holds %d keys, want %d (or values differ)", op, len(got), len(want))
				}
				checkShape(t, tr)
			}
		default: // get a key that is likely present
			k := appendNext - 1 - uint64(rng.IntN(50))
			got, ok, err := tr.Get(ctx, k)
			w, wok := want[k]
			if err != nil || ok != wok || got != w {
				t.Fatalf("op %d: get %d = %v, %v, %v; want %v, %v", op, k, got, ok, err, w, wok)
			}
		}
		if n, known := tr.Len(); known && n != int64(len(want)) {
			t.Fatalf("op %d: Len = %d, the model holds %d keys", op, n, len(want))
		} else if !known && rng.IntN(50) == 0 {
			n, err := tr.CountLen(ctx)
			if err != nil || n != int64(len(want)) {
				t.Fatalf("op %d: CountLen = %d, %v; the model holds %d keys", op, n, err, len(want))
			}
		}
		maxHeight = max(maxHeight, tr.Height())
	}
	if got := contents(t, tr); !maps.Equal(got, want) {
		t.Fatalf("end: tree holds %d keys, want %d (or values differ)", len(got), len(want))
	}
	checkShape(t, tr)
	for i, s := range snaps {
		if got := contents(t, s.tree); !maps.Equal(got, s.want) {
			t.Fatalf("end: snapshot %d holds %d keys, want %d", i, len(got), len(s.want))
		}
	}
	t.Logf("max height %d, %d commits, %d reopens, %d switches to a snapshot, %d keys at the end",
		maxHeight, commits, reopens, switches, len(want))
	if maxHeight < 4 {
		t.Errorf("max height %d: the model did not build a deep tree", maxHeight)
	}
}
