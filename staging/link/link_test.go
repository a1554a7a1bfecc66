package link_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/link"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func TestLinkProfileByName(t *testing.T) {
	for _, name := range []string{"directory", "general", "none"} {
		p, err := link.ProfileByName(name)
		if err != nil || p.Name != name {
			t.Errorf("%s: %+v, %v", name, p, err)
		}
	}
	if p, _ := link.ProfileByName("directory"); p.Latency != 3*time.Millisecond || p.PerRequestBps != 200e6 || p.TotalBps != 800e6 {
		t.Errorf("directory profile %+v", p)
	}
	if p, _ := link.ProfileByName("general"); p.Latency != 30*time.Millisecond || p.PerRequestBps != 90e6 || p.TotalBps != 450e6 {
		t.Errorf("general profile %+v", p)
	}
	if _, err := link.ProfileByName("fast"); err == nil {
		t.Errorf("unknown profile accepted")
	}
}

// Lower bounds only: a loaded machine may be slower, never faster.
func TestLinkSingleTransfer(t *testing.T) {
	p := link.Profile{Name: "test", Latency: 20 * time.Millisecond, PerRequestBps: 100e6, TotalBps: 1e9}
	l := link.New(mem.New(), p)
	const n = 4 << 20
	data := make([]byte, n)
	min := p.Latency + time.Duration(float64(n)/p.PerRequestBps*float64(time.Second))
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"put", func() error { _, err := l.Put(t.Context(), "k", data, staging.PutOptions{}); return err }},
		{"get", func() error { _, _, err := l.Get(t.Context(), "k", staging.Whole()); return err }},
	} {
		start := time.Now()
		if err := tc.do(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < min {
			t.Errorf("%s of %d bytes took %v, less than %v", tc.name, n, d, min)
		}
	}
	start := time.Now()
	if _, err := l.Head(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < p.Latency {
		t.Errorf("head took %v, less than the latency", d)
	}
}

// Four transfers in parallel share the total bandwidth.
func TestLinkSharedTotal(t *testing.T) {
	p := link.Profile{Name: "test", Latency: time.Millisecond, PerRequestBps: 400e6, TotalBps: 200e6}
	l := link.New(mem.New(), p)
	const n = 2 << 20
	data := make([]byte, n)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() {
			_, errs[i] = l.Put(t.Context(), "k", data, staging.PutOptions{})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	min := time.Duration(float64(4*n) / p.TotalBps * float64(time.Second))
	if d := time.Since(start); d < min {
		t.Fatalf("4 parallel puts of %d bytes took %v, less than %v", n, d, min)
	}
}

func TestLinkCancel(t *testing.T) {
	m := mem.New()
	l := link.New(m, link.Profile{Name: "slow", Latency: time.Millisecond, PerRequestBps: 1e6})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	// 10 MB at 1 MB/s: only a cancel ends this within the test's life.
	_, err := l.Put(ctx, "k", make([]byte, 10e6), staging.PutOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("put: %v, want context.Canceled", err)
	}
	if m.Len() != 0 {
		t.Fatalf("a canceled put reached the store")
	}
	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	if _, err := l.Head(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("head: %v, want context.Canceled", err)
	}
}

func BenchmarkLinkDirectory(b *testing.B) {
	l := link.New(mem.New(), link.ProfileDirectory)
	data := make([]byte, 16<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := l.Put(b.Context(), "k", data, staging.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLinkGets keeps a fixed number of ranged GETs of one size in flight
// on a memory store behind each reference link and reports the total rate:
// the emulator must carry the link's TotalBps once enough requests are in
// flight to fill it (TotalBps/PerRequestBps of them, five on general), and not
// cap below it.
func BenchmarkLinkGets(b *testing.B) {
	for _, p := range []link.Profile{link.ProfileGeneral, link.ProfileDirectory} {
		for _, inflight := range []int{1, 5, 8, 16} {
			for _, size := range []int{4 << 20, 8 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("%s/inflight=%d/size=%dMiB", p.Name, inflight, size>>20), func(b *testing.B) {
					benchLinkGets(b, p, inflight, size)
				})
			}
		}
	}
}

func benchLinkGets(b *testing.B, p link.Profile, inflight, size int) {
	m := mem.New()
	const obj = 64 << 20
	if _, err := m.Put(b.Context(), "k", make([]byte, obj), staging.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	l := link.New(m, p)
	// Enough GETs that the ramp (the first latency) is a small part of the
	// whole: at least 32 per request slot, and at least one second of link.
	gets := max(32*inflight, int(p.TotalBps/float64(size))+1)
	b.SetBytes(int64(gets * size))
	b.ResetTimer()
	for b.Loop() {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make([]error, inflight)
		for w := range inflight {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= gets {
						return
					}
					off := int64(i*size) % (obj - int64(size) + 1)
					if _, _, err := l.Get(b.Context(), "k", staging.Range{Off: off, Len: int64(size)}); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}
