package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// hidingStore leaves key out of the next hides listings that would show
// it,
// as a listing taken while the entry is being created may: it sees a later
// entry and not this one.
type hidingStore struct {
	staging.Store
	mu    sync.Mutex
	key   string
	hides int // listings left to hide key from
	hid   int // listings it was hidden from
}

func (h *hidingStore) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	page, err := h.Store.List(ctx, prefix, startAfter, max)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil || h.hides == 0 {
		return page, err
	}
	for i, o := range page.Objects {
		if o.Key == h.key {
			page.Objects = append(page.Objects[:i:i], page.Objects[i+1:]...)
			h.hides--
			h.hid++
			break
		}
	}
	return page, nil
}

// A listing that shows entry N+1 without N is no gap until N is known
// missing: a mount refreshing or changing over it reads N by name and
// applies it, and the log is not called corrupt. A gap that persists, with
// no snapshot covering it, still is.
func TestLogGapRechecked(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		hides int // listings that hide the entry: a refresh lists twice before the locked path
		do    func(ns *Namespace) error
	}{
		{"refresh", 2, func(ns *Namespace) error { return ns.Refresh(ctx) }},
		{"change", 1, func(ns *Namespace) error {
			_, err := ns.Mkdir(ctx, RootIno, "reader", 0o755, Owner{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := mem.New()
			w := openNS(t, mem, Options{})
			mkdir := func(name string) {
				t.Helper()
				if _, err := w.Mkdir(ctx, RootIno, name, 0o755, Owner{}); err != nil {
					t.Fatal(err)
				}
			}
			mkdir("0")
			h := &hidingStore{Store: mem, key: LogKey(testRoot, 2)}
			// A tail trusted for 1ns: every refresh and change lists.
			ns := openNS(t, h, Options{TailTrust: time.Nanosecond, Clock: testClock()})
			for i := 1; i < 4; i++ {
				mkdir(fmt.Sprint(i))
			}
			h.mu.Lock()
			h.hides = tc.hides
			h.mu.Unlock()
			if err := tc.do(ns); err != nil {
				t.Fatalf("%s over a listing that hid entry 2: %v", tc.name, err)
			}
			if h.hid != tc.hides {
				t.Fatalf("the listing hid entry 2 %d times, want %d", h.hid, tc.hides)
			}
			if err := w.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got, want := dump(t, ns), dump(t, w); got != want {
				t.Fatalf("state after a hidden entry:\n%s\nwant\n%s", got, want)
			}
		})
	}
	t.Run("missing for good", func(t *testing.T) {
		mem := mem.New()
		w := openNS(t, mem, Options{})
		ns := openNS(t, mem, Options{TailTrust: time.Nanosecond, Clock: testClock()})
		for i := range 3 {
			if _, err := w.Mkdir(ctx, RootIno, fmt.Sprint(i), 0o755, Owner{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := mem.Delete(ctx, LogKey(testRoot, 2)); err != nil {
			t.Fatal(err)
		}
		if err := ns.Refresh(ctx); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("refresh over a gap no snapshot covers: %v, want ErrCorrupt", err)
		}
	})
}
