package blockmap

import (
	"context"
	"math/rand/v2"
	"testing"
)

// BenchmarkAppend measures sequential appends into 4 KiB nodes.
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	tr := New(Options{MetaBlockSize: 4096}, nil)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := tr.Set(ctx, uint64(i), val(uint64(i), 1)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOverwriteAfterCommit measures the copy-on-write cost of the first
// change under a committed tree of 1M blocks (a path of clean nodes copied).
func BenchmarkOverwriteAfterCommit(b *testing.B) {
	ctx := context.Background()
	m := newMemNodes()
	tr := build(b, m, 4096, seq(0, 1<<20))
	c, err := tr.Commit(ctx, m.place)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	b.ReportAllocs()
	for b.Loop() {
		s := c.Snapshot()
		k := uint64(rng.IntN(1 << 20))
		if err := s.Set(ctx, k, val(k, 2)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet measures lookups in a loaded tree of 1M blocks.
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	tr := build(b, newMemNodes(), 4096, seq(0, 1<<20))
	rng := rand.New(rand.NewPCG(1, 1))
	for b.Loop() {
		if _, ok, err := tr.Get(ctx, uint64(rng.IntN(1<<20))); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkCommit measures committing 1M freshly appended blocks (the
// index of a 4 GiB file at 4 KiB blocks).
func BenchmarkCommit(b *testing.B) {
	ctx := context.Background()
	tr := build(b, newMemNodes(), 4096, seq(0, 1<<20))
	b.SetBytes(int64(tr.DirtyNodes()) * 4096)
	for b.Loop() {
		m := newMemNodes()
		if _, err := tr.Commit(ctx, m.place); err != nil {
			b.Fatal(err)
		}
	}
}
