package staging_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

func TestLinkProfileByName(t *testing.T) {
	for _, name := range []string{"directory", "general", "none"} {
		p, err := staging.LinkProfileByName(name)
		if err != nil || p.Name != name {
			t.Errorf("%s: %+v, %v", name, p, err)
		}
	}
	if p, _ := staging.LinkProfileByName("directory"); p.Latency != 3*time.Millisecond || p.PerRequestBps != 200e6 || p.TotalBps != 800e6 {
		t.Errorf("directory profile %+v", p)
	}
	if p, _ := staging.LinkProfileByName("general"); p.Latency != 30*time.Millisecond || p.PerRequestBps != 90e6 || p.TotalBps != 450e6 {
		t.Errorf("general profile %+v", p)
	}
	if _, err := staging.LinkProfileByName("fast"); err == nil {
		t.Errorf("unknown profile accepted")
	}
}

// Lower bounds only: a loaded machine may be slower, never faster.
func TestLinkSingleTransfer(t *testing.T) {
	p := staging.LinkProfile{Name: "test", Latency: 20 * time.Millisecond, PerRequestBps: 100e6, TotalBps: 1e9}
	l := staging.NewLink(staging.NewMem(), p)
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
	p := staging.LinkProfile{Name: "test", Latency: time.Millisecond, PerRequestBps: 400e6, TotalBps: 200e6}
	l := staging.NewLink(staging.NewMem(), p)
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
	m := staging.NewMem()
	l := staging.NewLink(m, staging.LinkProfile{Name: "slow", Latency: time.Millisecond, PerRequestBps: 1e6})
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
	l := staging.NewLink(staging.NewMem(), staging.ProfileDirectory)
	data := make([]byte, 16<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := l.Put(b.Context(), "k", data, staging.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
