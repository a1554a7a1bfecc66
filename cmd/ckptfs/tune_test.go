package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
)

// TestTune: format stores the retention policy given, tune shows it and
// changes what its flags name, refuses bad values with a usage error, and a
// policy that does not decode is an error of tune and of gc.
func TestTune(t *testing.T) {
	root := t.TempDir()
	store := "file://" + root
	cmd := func(want int, args ...string) string {
		t.Helper()
		var out, errOut strings.Builder
		if code := run(append([]string{"ckptfs"}, args...), &out, &errOut); code != want {
			t.Fatalf("%v exited %d, want %d: %s%s", args, code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	cmd(0, "format", "--keep", "5", store)
	if out := cmd(0, "tune", store); !strings.Contains(out, "keep=5 keep_for=1h0m0s (the volume's)") {
		t.Fatalf("tune after format --keep 5: %s", out)
	}
	if out := cmd(0, "tune", "--keep-for", "7d", store); !strings.Contains(out, "keep=5 keep_for=168h0m0s") {
		t.Fatalf("tune --keep-for 7d: %s", out)
	}
	if out := cmd(2, "tune", "--keep", "-1", store); !strings.Contains(out, "--keep -1: want a number from 0") {
		t.Fatalf("tune --keep -1: %s", out)
	}
	st, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, _, stored, err := volume.ReadPolicy(ctx, st, "")
	if err != nil || !stored || p != (volume.Policy{Keep: 5, KeepFor: 7 * 24 * time.Hour}) {
		t.Fatalf("stored policy %v %v %v", p, stored, err)
	}
	if _, err := st.Put(ctx, volume.PolicyKey, []byte(`{"version":1,"keep":-4,"keep_for":"1h"}`), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := cmd(1, "tune", store); !strings.Contains(out, "keep -4") {
		t.Fatalf("tune of a bad policy: %s", out)
	}
	if out := cmd(1, "gc", store); !strings.Contains(out, "keep -4") || !strings.Contains(out, "ckptfs tune") {
		t.Fatalf("gc of a volume with a bad policy: %s", out)
	}
	cmd(0, "gc", "--keep", "1", "--keep-for", "0", store)
	if out := cmd(0, "tune", "--keep", "2", store); !strings.Contains(out, "keep=2 keep_for=1h0m0s") {
		t.Fatalf("tune over a bad policy: %s", out)
	}
	fresh := "file://" + t.TempDir()
	cmd(0, "format", fresh)
	if out := cmd(0, "tune", fresh); !strings.Contains(out, "keep=3 keep_for=1h0m0s (the default") {
		t.Fatalf("tune of a volume without a policy: %s", out)
	}
}
