package fusefs

import (
	"context"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The background cleaner runs on a writable mount with gc on, and on no
// other; a writable one takes the lease and lets it go at Close.
func TestCleanerOnlyOnWritableMounts(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	for _, tc := range []struct {
		opts string
		runs bool
	}{
		{"gc_interval=1s", true},
		{"gc_interval=1s,gc=off", false},
		{"gc_interval=1s,ro", false},
	} {
		cfg, err := config.ParseMount(1<<30, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		fsys, err := New(ctx, st, Options{Config: cfg})
		if err != nil {
			t.Fatalf("%s: %v", tc.opts, err)
		}
		if (fsys.gc != nil) != tc.runs {
			t.Errorf("%s: cleaner running %v; want %v", tc.opts, fsys.gc != nil, tc.runs)
		}
		if tc.runs {
			deadline := time.Now().Add(time.Minute)
			for {
				if _, _, ok := fsys.stored(); ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: no pass within a minute", tc.opts)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if err := fsys.Close(); err != nil {
			t.Fatal(err)
		}
		if tc.runs {
			b, _, err := staging.GetLimited(ctx, st, volume.GCLeaseKey(""), 1<<16)
			if err != nil {
				t.Fatal(err)
			}
			if holder, _, _, err := cleaner.DecodeLease(b); err != nil || holder != "" {
				t.Fatalf("the lease after Close: holder %q, %v; want let go", holder, err)
			}
		}
	}
}
