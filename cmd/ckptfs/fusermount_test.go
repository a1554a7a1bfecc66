package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMountDetachedSaysStderr: what the mount wrote on stderr before it
// failed (fusermount3's reason) leads the error, in one line; a mount that
// wrote nothing keeps its error.
func TestMountDetachedSaysStderr(t *testing.T) {
	cause := errors.New("mount /m: fusermount exited with code 256\n")
	err := mountDetached(func() error {
		fmt.Fprintln(os.Stderr, "/usr/bin/fusermount3: failed to open /dev/fuse: Permission denied")
		fmt.Fprintln(os.Stderr, "second line")
		return cause
	})
	want := "/usr/bin/fusermount3: failed to open /dev/fuse: Permission denied; second line (mount /m: fusermount exited with code 256): " +
		"a mount by a user other than root needs /dev/fuse readable and writable by them (mode 0666, as most systems make it)"
	if err == nil || err.Error() != want || !errors.Is(err, cause) {
		t.Fatalf("%v\nwant %s", err, want)
	}
	if err := mountDetached(func() error { return cause }); err != cause {
		t.Fatalf("%v; want the mount's own error", err)
	}
	if err := mountDetached(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestReportFailureOneLine: an error ending in a newline (go-fuse's
// "fusermount exited with code 256\n") is one line without a dangling "; ".
func TestReportFailureOneLine(t *testing.T) {
	var b strings.Builder
	reportFailure(nil, &b, errors.New("mount /m: fusermount exited with code 256\n"))
	if want := "ckptfs mount: mount /m: fusermount exited with code 256\n"; b.String() != want {
		t.Fatalf("%q, want %q", b.String(), want)
	}
}
