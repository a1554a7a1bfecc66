package cleaner_test

import (
	"context"
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
	waitFor(t, "b shows the holder's totals", func() bool { _, _, ok := b.Stored(); return ok })
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
