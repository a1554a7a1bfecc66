package test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// TestTwoMounts: two mounts of one root see each other's files within the
// refresh interval, and concurrent namespace changes from both lose nothing.
func TestTwoMounts(t *testing.T) {
	v := newVolume(t)
	a := v.mount("ns_refresh=100ms")
	b := v.mount("ns_refresh=100ms")

	if err := os.WriteFile(a.path("from-a"), []byte("written by a"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		got, err := os.ReadFile(b.path("from-a"))
		if err != nil {
			return err
		}
		if string(got) != "written by a" {
			return fmt.Errorf("reads %q", got)
		}
		return nil
	})

	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for _, m := range []*mount{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				name := fmt.Sprintf("c-%p-%02d", m, i)
				if err := os.WriteFile(m.path(name), []byte(name), 0o644); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, m := range []*mount{a, b} {
		waitFor(t, 5*time.Second, func() error {
			ents, err := os.ReadDir(m.dir)
			if err != nil {
				return err
			}
			if len(ents) != 2*n+1 {
				return fmt.Errorf("%d entries, want %d", len(ents), 2*n+1)
			}
			for _, e := range ents {
				if e.Name() == "from-a" {
					continue
				}
				got, err := os.ReadFile(m.path(e.Name()))
				if err != nil {
					return err
				}
				if string(got) != e.Name() {
					return fmt.Errorf("%s reads %q", e.Name(), got)
				}
			}
			return nil
		})
	}
}

// waitFor retries f until it succeeds or limit passes.
func waitFor(t *testing.T, limit time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
