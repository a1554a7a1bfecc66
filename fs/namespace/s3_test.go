package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// TestMountsS3: two mounts on a real S3 server, each changing from several
// goroutines at once (group commit, appends without reading first, refusals
// by the other mount's entries, names both race for), with snapshots and
// trimming by the server's LastModified. Both mounts, a mount that only
// refreshes and one opened at the end hold the same state.
//
// Trimming needs the mounts' clock to agree with the server's (within a
// fraction of TrimGrace): "fake clock" advances the mounts' clock past
// TrimGrace only after the changes, once every mount has read the whole log,
// then trims it all; "real clock" (not with -short: it waits out a TrimGrace
// of seconds) trims while both mounts are changing.
func TestMountsS3(t *testing.T) {
	t.Run("fake clock", func(t *testing.T) {
		clock := newFakeClock()
		opts := Options{CompactEvery: 40, Clock: clock.Now}
		runMountsS3(t, opts, false, func(t *testing.T, mounts []*Namespace) {
			for _, ns := range mounts {
				if err := ns.Refresh(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			clock.Advance(pastTrimGrace)
			if err := mounts[0].Compact(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("real clock", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits out a TrimGrace of seconds")
		}
		// LastModified may be whole seconds, an object looking up to one
		// second older than it is: TrimGrace is well above that.
		opts := Options{CompactEvery: 40, TailTrust: time.Second, TrimGrace: 4 * time.Second}
		runMountsS3(t, opts, true, func(*testing.T, []*Namespace) {
			time.Sleep(opts.TrimGrace + time.Second) // not a timing assertion: the grace must pass
		})
	})
}

// runMountsS3 runs two rounds of changes and trim between them (midway) or
// after them.
func runMountsS3(t *testing.T, opts Options, midway bool, trim func(*testing.T, []*Namespace)) {
	ctx := context.Background()
	store := s3test.NewStore(t)
	mounts := []*Namespace{openNS(t, store, opts), openNS(t, store, opts)}
	reader := openNS(t, store, opts)
	perGoroutine := 30
	if testing.Short() {
		perGoroutine = 10
	}
	const goroutines = 4
	round := func(r int) {
		t.Helper()
		var wg sync.WaitGroup
		errc := make(chan error, len(mounts)*goroutines)
		for m, ns := range mounts {
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perGoroutine {
						if _, err := ns.Create(ctx, RootIno, fmt.Sprintf("r%d-m%d-g%d-%d", r, m, g, i), 0o644, Owner{}); err != nil {
							errc <- err
							return
						}
						if _, err := ns.Mkdir(ctx, RootIno, fmt.Sprintf("r%d-shared-%d", r, i), 0o755, Owner{}); err != nil && !errors.Is(err, ErrExist) {
							errc <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		for _, ns := range mounts {
			ns.Wait()
		}
	}
	round(0)
	if midway {
		trim(t, mounts)
	}
	round(1)
	if !midway {
		trim(t, mounts)
	}
	for _, ns := range mounts {
		ns.Wait()
	}
	if _, err := store.Head(ctx, LogKey(testRoot, 1)); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("entry 1 not trimmed: %v", err)
	}
	for _, ns := range append(mounts, reader) {
		if err := ns.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := dump(t, mounts[0])
	for i, ns := range []*Namespace{mounts[1], reader, openNS(t, store, Options{})} {
		if dump(t, ns) != want {
			t.Fatalf("mount %d differs", i+1)
		}
	}
	list, err := mounts[0].ReadDir(context.Background(), RootIno)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (len(mounts)*goroutines*perGoroutine + perGoroutine); len(list) != want {
		t.Fatalf("%d names, want %d", len(list), want)
	}
	for _, ns := range append(mounts, reader) {
		if err := ns.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
