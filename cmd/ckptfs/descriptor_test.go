package main

import (
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/config"
)

// TestDescriptorShown: a missing volume's message names its descriptor as
// the store shows it, user information redacted.
func TestDescriptorShown(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"s3://bucket/tpyo", "s3://bucket/tpyo/ckptfs.json"},
		{"s3://bucket/tpyo/", "s3://bucket/tpyo/ckptfs.json"},
		{"s3://bucket", "s3://bucket/ckptfs.json"},
		{"file:///var/lib/vol", "file:///var/lib/vol/ckptfs.json"},
		{"mem://", "mem://ckptfs.json"},
	} {
		if got := descriptorShown(tc.spec); got != tc.want {
			t.Errorf("descriptorShown(%q) = %q, want %q", tc.spec, got, tc.want)
		}
	}
	if got := descriptorShown("s3://AKIA:secret@bucket/p"); strings.Contains(got, "secret") || !strings.HasSuffix(got, "/p/ckptfs.json") {
		t.Errorf("descriptorShown of a URL with a key = %q", got)
	}

	// The read-only mount's message names it too.
	store := "file://" + t.TempDir()
	cfg := config.MountDefault(config.TotalRAM())
	cfg.ReadOnly = true
	_, err := openFS(store, storeOpts{}, cfg, nopLog(), func(string) {})
	want := "no ckptfs volume at " + store + " (no " + store + "/ckptfs.json there), and a read-only mount creates none"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("read-only mount of an empty store: %v, want %q...", err, want)
	}
}
