package namespace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging/dir"
)

// Two mounts of one directory store: eight writers create files on A while
// B refreshes, lists and unlinks A's files every few milliseconds. Every
// create and unlink succeeds (an unlink may find the name gone: ErrNotExist
// only), and both end in the same state. Listings of the log taken while
// entries are renamed in used to show entry N+1 without N, which was taken
// for a trimmed gap: "log entries N..N missing".
func TestTwoMountsDirStoreStress(t *testing.T) {
	ctx := context.Background()
	d, err := dir.NewWith(t.TempDir(), dir.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	// A tail trusted for 1ns: every change and refresh lists the log.
	a := openNS(t, d, Options{TailTrust: time.Nanosecond})
	b := openNS(t, d, Options{TailTrust: time.Nanosecond})
	perWriter := 250
	if !testing.Short() {
		perWriter = 600
	}
	deadline := time.Now().Add(20 * time.Second) // bounds the run on a slow machine
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 8 {
		wg.Go(func() {
			for i := range perWriter {
				if time.Now().After(deadline) {
					return
				}
				if _, err := a.Create(ctx, RootIno, fmt.Sprintf("a-%d-%d", w, i), 0o644, Owner{}); err != nil {
					errs <- fmt.Errorf("create on A: %w", err)
					return
				}
			}
		})
	}
	done, stopB := make(chan struct{}), make(chan struct{})
	var unlinked int
	var bErr error
	go func() {
		defer close(done)
		for {
			if err := b.Refresh(ctx); err != nil {
				bErr = fmt.Errorf("refresh on B: %w", err)
				return
			}
			ents, err := b.ReadDir(context.Background(), RootIno)
			if err != nil {
				bErr = fmt.Errorf("readdir on B: %w", err)
				return
			}
			for _, e := range ents {
				if !strings.HasPrefix(e.Name, "a-") || len(e.Name)%3 != 0 {
					continue // B unlinks about a third of the names
				}
				if _, err := b.Unlink(ctx, RootIno, e.Name); err != nil && !errors.Is(err, ErrNotExist) {
					bErr = fmt.Errorf("unlink %s on B: %w", e.Name, err)
					return
				}
				unlinked++
			}
			select {
			case <-stopB:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	wg.Wait()
	close(stopB)
	<-done
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if bErr != nil {
		t.Error(bErr)
	}
	if t.Failed() {
		return
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if dump(t, a) != dump(t, b) {
		t.Fatal("A and B differ after the run")
	}
	t.Logf("B unlinked %d names", unlinked)
}
