package cleaner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// waitFor polls ok for at most a generous bound.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two mounts' background cleaners on one volume: one holds the lease and
// makes every pass, in passes of a bounded number of files, and reaps the
// removed files; the other makes none but shows the holder's totals. Once
// the holder stops, the other takes the lease it let go and goes on.
func TestBackgroundOneAtATime(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var gone []string
	for i := range 30 {
		name := "f" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		n, err := ns.Create(ctx, namespace.RootIno, name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 2, uint64(i))
		if i%2 == 0 {
			if _, err := ns.Unlink(ctx, namespace.RootIno, name); err != nil {
				t.Fatal(err)
			}
			gone = append(gone, n.FileID)
		}
	}
	ns.Close()
	start := func(passes *atomic.Int32, maxFiles *atomic.Int32) *cleaner.Background {
		return cleaner.StartBackground(st, "", cleaner.BackgroundOptions{
			Options:  cleaner.Options{Keep: 1, Grace: time.Nanosecond},
			Interval: time.Millisecond, MaxFiles: 4, LeaseTTL: time.Hour,
			OnPass: func(rep *cleaner.Report, err error) {
				if err != nil {
					t.Errorf("pass: %v", err)
				}
				if rep != nil {
					passes.Add(1)
					if int32(rep.Files) > maxFiles.Load() {
						maxFiles.Store(int32(rep.Files))
					}
				}
			},
		})
	}
	var pa, pb, ma, mb atomic.Int32
	a := start(&pa, &ma)
	waitFor(t, "a's first pass", func() bool { return pa.Load() > 0 })
	b := start(&pb, &mb)
	defer b.Stop()
	waitFor(t, "the removed files reaped", func() bool {
		for _, id := range gone {
			if countKeys(t, st, "f/"+id+"/") > 0 {
				return false
			}
		}
		return true
	})
	// The volume no longer changes: the holder's figure, each file as of
	// its last pass (4 files a pass), comes to what the files hold.
	var held int64
	for _, o := range listAll(t, st, "f/") {
		held += o.Size
	}
	waitFor(t, "a shows what the files hold", func() bool { _, n, ok := a.Stored(); return ok && n == held })
	waitFor(t, "b shows the holder's totals", func() bool { _, n, ok := b.Stored(); return ok && n == held })
	if n := pb.Load(); n != 0 {
		t.Fatalf("b made %d passes while a held the lease", n)
	}
	if m := ma.Load(); m > 4 {
		t.Fatalf("a pass took %d files; at most 4", m)
	}
	before := pa.Load()
	a.Stop()
	after := pa.Load()
	if after < before {
		t.Fatal("passes counted backwards")
	}
	waitFor(t, "b takes over the lease a let go", func() bool { return pb.Load() > 2 })
	if pa.Load() != after {
		t.Fatal("a made a pass after Stop returned")
	}
	_, bytes, ok := b.Stored()
	if !ok || bytes <= 0 {
		t.Fatalf("b's totals: %d bytes, %v", bytes, ok)
	}
}

func countKeys(t *testing.T, st staging.Store, prefix string) int {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

// failList fails the listings of the files while fail is set.
type failList struct {
	staging.Store
	fail  atomic.Bool
	tried atomic.Int32
}

func (s *failList) List(ctx context.Context, prefix, after string, max int) (staging.ListPage, error) {
	if prefix == "f/" && s.fail.Load() {
		s.tried.Add(1)
		return staging.ListPage{}, errors.New("injected: list failed")
	}
	return s.Store.List(ctx, prefix, after, max)
}

// A pass whose listing fails says nothing of what the volume holds: df
// keeps no figure from it (it showed 0 bytes used), and the next whole
// sweep gives the figure.
func TestBackgroundFailedListingCountsNothing(t *testing.T) {
	ctx := context.Background()
	raw := mem.New()
	ns, err := namespace.Open(ctx, raw, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := ns.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	writeHistory(t, raw, n.FileID, params(segment.FormatStream, false), 2, 1)
	ns.Close()
	want := int64(0)
	objs, err := staging.ListAll(ctx, raw, "f/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		want += o.Size
	}
	st := &failList{Store: raw}
	st.fail.Store(true)
	b := cleaner.StartBackground(st, "", cleaner.BackgroundOptions{
		Options:  cleaner.Options{Grace: time.Hour},
		Interval: time.Millisecond, LeaseTTL: time.Hour,
	})
	defer b.Stop()
	waitFor(t, "a failed pass", func() bool { return st.tried.Load() > 2 })
	if _, bytes, ok := b.Stored(); ok {
		t.Fatalf("a pass whose listing failed counted %d bytes stored", bytes)
	}
	st.fail.Store(false)
	waitFor(t, "a whole sweep", func() bool { _, _, ok := b.Stored(); return ok })
	if _, bytes, _ := b.Stored(); bytes != want {
		t.Fatalf("stored %d bytes; the files hold %d", bytes, want)
	}
}

func listAll(t *testing.T, st staging.Store, prefix string) []staging.ObjectInfo {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
