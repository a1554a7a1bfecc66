package test

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRenameFlagsOwnersStatfs: renameat2 with RENAME_NOREPLACE and
// RENAME_EXCHANGE, chown, and statfs.
func TestRenameFlagsOwnersStatfs(t *testing.T) {
	v := newVolume(t)
	m := v.mount("")
	write := func(name, s string) {
		if err := os.WriteFile(m.path(name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, err := os.ReadFile(m.path(name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write("a", "A")
	write("b", "B")
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}

	err := unix.Renameat2(unix.AT_FDCWD, m.path("a"), unix.AT_FDCWD, m.path("b"), unix.RENAME_NOREPLACE)
	if !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("RENAME_NOREPLACE over an existing name: %v, want EEXIST", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, m.path("a"), unix.AT_FDCWD, m.path("b"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	if read("a") != "B" || read("b") != "A" {
		t.Fatalf("after exchange a=%q b=%q", read("a"), read("b"))
	}
	// Across directories, over an existing name.
	write("d/c", "C")
	if err := os.Rename(m.path("a"), m.path("d/c")); err != nil {
		t.Fatal(err)
	}
	if read("d/c") != "B" {
		t.Fatalf("d/c = %q after rename over it", read("d/c"))
	}
	if _, err := os.Stat(m.path("a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a after rename: %v", err)
	}

	if err := os.Chown(m.path("b"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(m.path("b"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 1234 || st.Gid != 5678 {
		t.Fatalf("owner %d:%d after chown, want 1234:5678", st.Uid, st.Gid)
	}

	var fs syscall.Statfs_t
	if err := syscall.Statfs(m.dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Bavail == 0 || fs.Bsize == 0 || fs.Namelen != 255 {
		t.Fatalf("statfs: %+v", fs)
	}
}
