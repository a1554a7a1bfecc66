package main

import (
	"context"
	"strings"
	"testing"
)

// A store URL with user information never shows it in an error, whether it
// parses or not, and neither does the name shown in logs and the mount table.
func TestStoreSecretNeverPrinted(t *testing.T) {
	ctx := context.Background()
	for _, spec := range []string{
		"s3://AKIAKEY:s3cret@/prefix",       // parses, no bucket
		"s3://AKIAKEY:s3%zzcret@bucket/vol", // does not parse
		"file://AKIAKEY:s3cret@/relative",   // a host where none belongs
		"ftp://AKIAKEY:s3cret@host/x",       // unknown scheme
	} {
		_, _, err := openStore(ctx, spec, storeOpts{})
		if err == nil {
			t.Errorf("openStore(%s) accepted", spec)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "AKIAKEY") {
			t.Errorf("openStore's error shows the user information: %v", err)
		}
		if s := redactStore(spec); strings.Contains(s, "s3cret") || strings.Contains(s, "AKIAKEY") {
			t.Errorf("redactStore(%s) = %s", spec, s)
		}
	}
}
