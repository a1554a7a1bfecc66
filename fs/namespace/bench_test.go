package namespace

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestOneMountManyGoroutines: changes, reads and refreshes from several
// goroutines of one mount; run with -race.
func TestOneMountManyGoroutines(t *testing.T) {
	ctx := context.Background()
	ns := openNS(t, mem.New(), Options{CompactEvery: 50})
	const writers, each = 4, 50
	var wg sync.WaitGroup
	errc := make(chan error, writers+1)
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				n, err := ns.Create(ctx, RootIno, fmt.Sprintf("w%d-%d", w, i), 0o644, Owner{})
				if err != nil {
					errc <- err
					return
				}
				if i%2 == 0 {
					if _, err := ns.Rename(ctx, RootIno, fmt.Sprintf("w%d-%d", w, i), RootIno, fmt.Sprintf("r%d-%d", w, i), 0); err != nil {
						errc <- err
						return
					}
				}
				if _, err := ns.GetNode(context.Background(), n.Ino); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var rg sync.WaitGroup
	rg.Add(1)
	go func() {
		defer rg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := ns.ReadDir(context.Background(), RootIno); err != nil {
				errc <- err
				return
			}
			if err := ns.Refresh(ctx); err != nil {
				errc <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	rg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	list, err := ns.ReadDir(context.Background(), RootIno)
	if err != nil || len(list) != writers*each {
		t.Fatalf("%d entries, %v; want %d", len(list), err, writers*each)
	}
	// Changes made at once share entries: every one is in the log once.
	ops := 0
	for _, e := range logEntries(t, ns.store) {
		ops += len(e.ops())
	}
	if ops != writers*each*3/2 || ns.Seq() > uint64(ops) {
		t.Fatalf("%d ops in %d entries, want %d ops", ops, ns.Seq(), writers*each*3/2)
	}
	if dump(t, openNS(t, ns.store, Options{})) != dump(t, ns) {
		t.Fatal("a fresh mount differs")
	}
}

func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	ns := openNS(b, mem.New(), Options{})
	d, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := ns.Create(ctx, d.Ino, fmt.Sprint(i), 0o644, Owner{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateParallel: creates from many goroutines, over a store with
// a millisecond of latency per entry, where group commit shares entries.
func BenchmarkCreateParallel(b *testing.B) {
	ctx := context.Background()
	ns := openNS(b, &slowLog{Store: mem.New(), delay: time.Millisecond}, Options{})
	d, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := ns.Create(ctx, d.Ino, fmt.Sprint(next.Add(1)), 0o644, Owner{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(next.Load())/float64(ns.Seq()), "ops/entry")
}

// BenchmarkOpen: opening a root of 10,000 files, from the log alone and from
// a snapshot.
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	for _, snap := range []bool{false, true} {
		b.Run(fmt.Sprintf("snapshot=%v", snap), func(b *testing.B) {
			store := mem.New()
			ns := openNS(b, store, Options{CompactEvery: 1 << 40})
			for i := range 10000 {
				if _, err := ns.Create(ctx, RootIno, fmt.Sprint(i), 0o644, Owner{}); err != nil {
					b.Fatal(err)
				}
			}
			if snap {
				if err := ns.Compact(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Open(ctx, store, testRoot, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
