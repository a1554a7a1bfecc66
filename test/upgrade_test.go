package test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
)

// TestUpgradeUnderAMount: ckptfs upgrade of a v1 volume while a v1 mount
// of it runs (docs/namespace-v2.md §6): the mount's next create fails with
// EIO and nothing it wrote before is lost (it still reads every file); a
// new mount is v2 and sees every file, directory and symlink with its
// content, and not the refused create; the upgrade run again is refused,
// "already namespace v2".
func TestUpgradeUnderAMount(t *testing.T) {
	need(t, "cp", "cmp", "ls", "mkdir", "ln", "readlink")
	v, store, opts, ckptfs := toolVolume(t)
	// A v1 volume whatever CKPTFS_TEST_NAMESPACE says: the upgrade converts one.
	if out, err := ckptfs("format", "-o", opts+",namespace=v1", store); err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	local := t.TempDir()
	small, big := filepath.Join(local, "small"), filepath.Join(local, "big")
	randomFile(t, small, 100<<10+7)
	randomFile(t, big, 3<<20)

	a := v.mount("")
	run(t, a.dir, "cp", small, "small")
	run(t, a.dir, "mkdir", "-p", "d/e")
	run(t, a.dir, "cp", big, "d/e/big")
	run(t, a.dir, "ln", "-s", "d/e/big", "link")
	run(t, a.dir, "sh", "-c", "echo inside > d/note && chmod 0600 d/note")

	if out, err := ckptfs("upgrade", "-o", opts, store); err != nil || !strings.Contains(out, "to namespace v2: 6 names") {
		t.Fatalf("upgrade under a mount: %v\n%s", err, out)
	}
	if d, err := ckvolume.ReadDescriptor(t.Context(), v.store(), ""); err != nil || d.NamespaceVersion() != config.NamespaceV2 {
		t.Fatalf("descriptor after the upgrade: %+v, %v", d, err)
	}

	// The v1 mount: fenced. Its create fails, what it holds reads back.
	if out, err := runErr(a.dir, "sh", "-c", "echo late > late"); err == nil || !strings.Contains(out, "Input/output error") {
		t.Fatalf("a create on the fenced v1 mount: %v\n%s; want EIO", err, out)
	}
	run(t, a.dir, "cmp", small, "small")
	run(t, a.dir, "cmp", big, "d/e/big")
	a.unmount()

	b := v.mount("")
	run(t, b.dir, "cmp", small, "small")
	run(t, b.dir, "cmp", big, "d/e/big")
	run(t, b.dir, "cmp", big, "link")
	if got := run(t, b.dir, "readlink", "link"); got != "d/e/big\n" {
		t.Errorf("readlink link: %q", got)
	}
	if got := run(t, b.dir, "cat", "d/note"); got != "inside\n" {
		t.Errorf("d/note: %q", got)
	}
	if fi, err := os.Stat(b.path("d/note")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("d/note's mode after the upgrade: %v, %v", fi, err)
	}
	if _, err := os.Lstat(b.path("late")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused create shows: %v", err)
	}
	if names := run(t, b.dir, "ls", "-A"); names != "d\nlink\nsmall\n" {
		t.Errorf("the root on a v2 mount:\n%s", names)
	}
	run(t, b.dir, "sh", "-c", "echo new > d/e/new")
	b.unmount()

	if out, err := ckptfs("upgrade", "-o", opts, store); err == nil || !strings.Contains(out, "already namespace v2") {
		t.Errorf("upgrade again: %v\n%s; want a refusal", err, out)
	}
}
