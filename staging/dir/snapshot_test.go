package dir_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
)

// A listing of the directory store is one instant's view of a folder: while
// one goroutine creates keys in order (each created only once the one
// before is stored, as the namespace log is) and others replace and delete
// other objects of the folder, a listing that shows key n also shows every
// key before it. Listing the folder in several reads misses, on a folder
// hashed by name, a key renamed in while it runs and shows the next.
func TestDirListPointInTime(t *testing.T) {
	d, err := dir.NewWith(t.TempDir(), dir.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const prefix = "ns/log/"
	key := func(i int) string { return fmt.Sprintf("%s%020d", prefix, i) }
	// A folder of some size: a listing takes several reads of 8 KiB.
	var others []string
	for i := range 600 {
		k := fmt.Sprintf("%sother-%04d", prefix, i)
		others = append(others, k)
		if _, err := d.Put(ctx, k, []byte("x"), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	creates := 3000
	if testing.Short() {
		creates = 1500
	}
	var made atomic.Int64
	stop := make(chan struct{}) // closed when the creates are done
	quit := make(chan struct{}) // closed when the test stops early
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Go(func() {
		defer close(stop)
		for i := 1; i <= creates; i++ {
			select {
			case <-quit:
				return
			default:
			}
			if _, err := d.Put(ctx, key(i), []byte("e"), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}}); err != nil {
				errs <- err
				return
			}
			made.Store(int64(i))
		}
	})
	for w := range 2 { // churn: replace and delete the other objects
		wg.Go(func() {
			for i := w; ; i += 2 {
				select {
				case <-stop:
					return
				case <-quit:
					return
				default:
				}
				k := others[i%len(others)]
				if i%3 == 0 {
					_ = d.Delete(ctx, k)
				} else if _, err := d.Put(ctx, k, []byte("y"), staging.PutOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	lists, deadline := 0, time.Now().Add(60*time.Second)
	var failed string
	for done := false; !done && failed == ""; {
		select {
		case <-stop:
			done = true
		default:
		}
		before := made.Load()
		objs, err := staging.ListAll(ctx, d, prefix)
		if err != nil {
			failed = err.Error()
			break
		}
		lists++
		n, top := 0, 0
		for _, o := range objs {
			if rest, ok := strings.CutPrefix(o.Key, prefix); ok && !strings.HasPrefix(rest, "other-") {
				n++
				top, _ = strconv.Atoi(rest)
			}
		}
		switch {
		case n != top:
			failed = fmt.Sprintf("listing %d shows %d of keys 1..%d (created before it: %d): a key before the last is missing", lists, n, top, before)
		case int64(top) < before:
			failed = fmt.Sprintf("listing %d shows keys up to %d, %d were created before it began", lists, top, before)
		}
		if time.Now().After(deadline) {
			break // a slow machine: what was checked stands
		}
	}
	close(quit)
	wg.Wait()
	if failed != "" {
		t.Fatal(failed)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d listings over %d creates", lists, creates)
}
