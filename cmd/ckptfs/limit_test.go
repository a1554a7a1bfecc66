package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
	"github.com/ckptfs/ckptfs/staging/limit"
)

// TestMountMaxRequests: max_requests (and its alias max_threads) puts the
// mount-wide cap right on the store, under every other wrapper; 0 puts
// none.
func TestMountMaxRequests(t *testing.T) {
	for _, tc := range []struct {
		opts string
		want int // 0: no cap
	}{
		{"", 0},
		{"max_requests=0", 0},
		{"max_requests=3", 3},
		{"max_threads=5", 5},
	} {
		var items []string
		if tc.opts != "" {
			items = []string{tc.opts}
		}
		_, cfg, err := parseMountOpts(items)
		if err != nil {
			t.Fatalf("%q: %v", tc.opts, err)
		}
		var got staging.Store
		wrap := func(st staging.Store) staging.Store { got = st; return st }
		fsys, err := openFSWrapped("file://"+t.TempDir(), storeOpts{create: true}, cfg, nopLog(), func(string) {}, wrap)
		if err != nil {
			t.Fatalf("%q: %v", tc.opts, err)
		}
		fsys.Close()
		lim, capped := got.(*limit.Store)
		switch {
		case tc.want == 0 && capped:
			t.Errorf("%q: the store is capped at %d", tc.opts, lim.Max())
		case tc.want == 0:
			if _, ok := got.(*dir.Store); !ok {
				t.Errorf("%q: the store is a %T", tc.opts, got)
			}
		case !capped || lim.Max() != tc.want:
			t.Errorf("%q: the store is a %T, want one capped at %d", tc.opts, got, tc.want)
		default:
			if _, ok := lim.Inner().(*dir.Store); !ok {
				t.Errorf("%q: the cap wraps a %T, want the store itself", tc.opts, lim.Inner())
			}
		}
	}
	_, _, err := parseMountOpts([]string{"max_requests=5000"})
	if err == nil || !strings.Contains(err.Error(), "max_requests") || !errors.Is(err, config.ErrInvalidValue) {
		t.Errorf("max_requests=5000: %v", err)
	}
}
