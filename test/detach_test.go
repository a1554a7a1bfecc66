package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDetachedMountSaysWhyFusermountFailed: a mount by a user other than
// root goes through fusermount3, and when that fails a detached mount
// (whose stderr is /dev/null) passes on what fusermount3 said, not only
// "fusermount exited with code 256". nobody may reach the mount point but
// not write it, and here may not open /dev/fuse either: fusermount3 refuses
// for one reason or the other, and says which.
func TestDetachedMountSaysWhyFusermountFailed(t *testing.T) {
	need(t, "fusermount3", "setpriv")
	if os.Geteuid() != 0 {
		t.Skip("running as nobody needs root")
	}
	bin := ckptfsBinary(t)
	top, err := os.MkdirTemp("", "ckptfs-detach-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	dir := filepath.Join(top, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := asNobody("/", bin, "mount", "-o", "log_file=/dev/null", "mem://", dir)
	if isMounted(t, dir) {
		runErr("", "umount", "-l", dir)
		t.Fatalf("nobody mounted %s: %q", dir, out)
	}
	if err == nil || !strings.HasPrefix(out, "ckptfs mount: ") || !strings.Contains(out, "fusermount3: ") ||
		strings.Count(out, "\n") != 1 {
		t.Fatalf("mount as nobody: %v, %q; want one line with what fusermount3 said", err, out)
	}
}
