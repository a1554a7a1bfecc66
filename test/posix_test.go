package test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenFileSemantics: a file renamed over or unlinked while open stays
// readable and writable through its descriptor (what becomes of its data
// afterwards: TestUnlinkedFileLeftToCleaner).
func TestOpenFileSemantics(t *testing.T) {
	v := newVolume(t)
	m := v.mount("")

	t.Run("unlink while open", func(t *testing.T) {
		p := m.path("u")
		if err := os.WriteFile(p, []byte("before"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat after unlink: %v", err)
		}
		if _, err := f.WriteAt([]byte("AFTER!"), 0); err != nil {
			t.Fatalf("write after unlink: %v", err)
		}
		b := make([]byte, 6)
		if _, err := f.ReadAt(b, 0); err != nil || string(b) != "AFTER!" {
			t.Fatalf("read after unlink: %q, %v", b, err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close after unlink: %v", err)
		}
	})

	t.Run("rename over while open", func(t *testing.T) {
		p := m.path("r")
		if err := os.WriteFile(p, []byte("old version"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := os.WriteFile(p+".tmp", []byte("new version"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 11)
		if _, err := f.ReadAt(b, 0); err != nil || string(b) != "old version" {
			t.Fatalf("old descriptor reads %q, %v", b, err)
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != "new version" {
			t.Fatalf("name reads %q, %v", got, err)
		}
	})
}

// TestLinksAndTimes covers the pitfalls of hard links, symlinks and
// utimensat with UTIME_OMIT.
func TestLinksAndTimes(t *testing.T) {
	need(t, "touch", "ln")
	v := newVolume(t)
	m := v.mount("")

	t.Run("nlink right after link", func(t *testing.T) {
		a := m.path("a")
		if err := os.WriteFile(a, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		if n := nlink(t, a); n != 1 {
			t.Fatalf("nlink %d, want 1", n)
		}
		run(t, "", "ln", a, m.path("b"))
		for _, p := range []string{a, m.path("b")} {
			if n := nlink(t, p); n != 2 {
				t.Fatalf("nlink of %s right after link: %d, want 2", filepath.Base(p), n)
			}
		}
		if err := os.Remove(a); err != nil {
			t.Fatal(err)
		}
		if n := nlink(t, m.path("b")); n != 1 {
			t.Fatalf("nlink after unlink of the other name: %d, want 1", n)
		}
		if b, err := os.ReadFile(m.path("b")); err != nil || string(b) != "data" {
			t.Fatalf("read through the remaining link: %q %v", b, err)
		}
	})

	t.Run("symlink", func(t *testing.T) {
		if err := os.Symlink("b", m.path("s")); err != nil {
			t.Fatal(err)
		}
		if tgt, err := os.Readlink(m.path("s")); err != nil || tgt != "b" {
			t.Fatalf("readlink: %q %v", tgt, err)
		}
		if b, err := os.ReadFile(m.path("s")); err != nil || string(b) != "data" {
			t.Fatalf("read through symlink: %q %v", b, err)
		}
	})

	t.Run("touch -m keeps atime", func(t *testing.T) {
		p := m.path("times")
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, "", "touch", "-a", "-d", "2001-02-03 04:05:06", p)
		run(t, "", "touch", "-m", "-d", "2010-01-01 00:00:00", p)
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		at := time.Unix(st.Atim.Unix())
		mt := time.Unix(st.Mtim.Unix())
		if at.Year() != 2001 {
			t.Errorf("atime %v after touch -m, want the 2001 one kept", at)
		}
		if mt.Year() != 2010 {
			t.Errorf("mtime %v, want 2010", mt)
		}
		m2 := v.mount("")
		if err := syscall.Stat(m2.path("times"), &st); err != nil {
			t.Fatal(err)
		}
		if y := time.Unix(st.Mtim.Unix()).Year(); y != 2010 {
			t.Errorf("mtime year %d in another mount, want 2010", y)
		}
	})

	t.Run("chmod", func(t *testing.T) {
		p := m.path("b")
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v %v, want 0600", fi.Mode(), err)
		}
	})
}

func nlink(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Nlink
}

// TestReaddirWhileDeleting lists a directory a few entries at a time while
// deleting entries already listed and not yet listed: every entry that stays
// is listed exactly once.
func TestReaddirWhileDeleting(t *testing.T) {
	v := newVolume(t)
	m := v.mount("")
	dir := m.path("d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 120
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seen := map[string]int{}
	deleted := map[string]bool{}
	for round := 0; ; round++ {
		names, err := d.Readdirnames(7)
		for _, name := range names {
			seen[name]++
			// Delete what was just listed, and one entry not yet listed. An
			// entry deleted after the listing began may still be listed
			// (POSIX leaves it open); it was then deleted here already.
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !(deleted[name] && errors.Is(err, os.ErrNotExist)) {
				t.Fatal(err)
			}
			deleted[name] = true
		}
		victim := fmt.Sprintf("f%03d", (round*37+50)%n)
		if !deleted[victim] && seen[victim] == 0 {
			// Listed later (already buffered) or not at all: both are fine.
			if err := os.Remove(filepath.Join(dir, victim)); err == nil {
				deleted[victim] = true
			}
		}
		if err != nil || len(names) == 0 {
			break
		}
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("f%03d", i)
		switch c := seen[name]; {
		case c > 1:
			t.Errorf("%s listed %d times", name, c)
		case c == 0 && !deleted[name]:
			t.Errorf("%s never listed and never deleted", name)
		}
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("left in the directory: %d entries, %v", len(left), err)
	}
}

// TestFallocate: fallocate extends a file (mode 0) and punches holes (the
// other modes: TestFallocateModes).
func TestFallocate(t *testing.T) {
	need(t, "fallocate")
	v := newVolume(t)
	m := v.mount("")
	p := m.path("pre")
	if err := os.WriteFile(p, bytes.Repeat([]byte{7}, 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "", "fallocate", "-l", "1000000", p)
	fi, err := os.Stat(p)
	if err != nil || fi.Size() != 1000000 {
		t.Fatalf("size after fallocate: %v %v, want 1000000", fi.Size(), err)
	}
	run(t, "", "fallocate", "-p", "-o", "1000", "-l", "5000", p)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range b {
		want := byte(0)
		if i < 100000 && (i < 1000 || i >= 6000) {
			want = 7
		}
		if c != want {
			t.Fatalf("byte %d = %d after punching a hole, want %d", i, c, want)
		}
	}
}

// TestCheckpointsAndXattrs: every checkpoint is readable under .checkpoints,
// the cno and format attributes follow the file, user xattrs persist.
func TestCheckpointsAndXattrs(t *testing.T) {
	v := newVolume(t)
	m := v.mount("")
	p := m.path("doc")
	for _, s := range []string{"version one", "version two", "version three!"} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cno := getxattr(t, p, "user.ckptfs.cno")
	if f := getxattr(t, p, "user.ckptfs.format"); f != "stream" && f != "parted" {
		t.Fatalf("format attribute %q", f)
	}
	ents, err := os.ReadDir(m.path(".checkpoints/doc"))
	if err != nil {
		t.Fatal(err)
	}
	var cnos []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			t.Fatalf("entry %q of .checkpoints/doc", e.Name())
		}
		cnos = append(cnos, n)
	}
	sort.Ints(cnos)
	if len(cnos) < 3 || strconv.Itoa(cnos[len(cnos)-1]) != cno {
		t.Fatalf("checkpoints %v, latest cno attribute %s", cnos, cno)
	}
	var got []string
	for _, c := range cnos {
		b, err := os.ReadFile(m.path(fmt.Sprintf(".checkpoints/doc/%d", c)))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	if want := []string{"version one", "version two", "version three!"}; strings.Join(got[len(got)-3:], "|") != strings.Join(want, "|") {
		t.Fatalf("checkpoint contents %q, want %q", got, want)
	}
	if err := os.WriteFile(m.path(fmt.Sprintf(".checkpoints/doc/%d", cnos[0])), []byte("x"), 0o644); err == nil {
		t.Fatal("writing an old checkpoint succeeded")
	}
	if ents, _ := os.ReadDir(m.dir); len(ents) != 1 {
		t.Fatalf("root lists %d entries, want only doc (.checkpoints is hidden)", len(ents))
	}

	if err := syscall.Setxattr(p, "user.color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setxattr(p, "user.ckptfs.cno", []byte("1"), 0); err == nil {
		t.Fatal("setting user.ckptfs.cno succeeded")
	}
	m.unmount()
	m = v.mount("")
	if c := getxattr(t, m.path("doc"), "user.color"); c != "blue" {
		t.Fatalf("user.color after remount: %q", c)
	}
	if c := getxattr(t, m.path("doc"), "user.ckptfs.cno"); c != cno {
		t.Fatalf("cno after remount: %s, want %s", c, cno)
	}
}

func getxattr(t *testing.T, p, name string) string {
	t.Helper()
	b := make([]byte, 256)
	n, err := syscall.Getxattr(p, name, b)
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", p, name, err)
	}
	return string(b[:n])
}

// TestWritePastMaxSize: a write at or past the largest file size (2^60) is
// EFBIG, as on ext4 and as POSIX has it; one that crosses it is short, up
// to the limit, as on ext4; a truncate past it is EFBIG too.
func TestWritePastMaxSize(t *testing.T) {
	m := newVolume(t).mount("")
	f, err := os.Create(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const limit = 1 << 60
	for _, off := range []int64{limit, limit + 4096, 1 << 62} {
		if n, err := syscall.Pwrite(int(f.Fd()), []byte("x"), off); !errors.Is(err, syscall.EFBIG) {
			t.Errorf("pwrite at %d: %d, %v, want EFBIG", off, n, err)
		}
	}
	if n, err := syscall.Pwrite(int(f.Fd()), []byte("12345678"), limit-3); err != nil || n != 3 {
		t.Errorf("pwrite of 8 bytes at 2^60-3: %d, %v, want a short write of 3", n, err)
	}
	b := make([]byte, 3)
	if n, err := syscall.Pread(int(f.Fd()), b, limit-3); err != nil || n != 3 || string(b) != "123" {
		t.Errorf("pread at 2^60-3: %q, %v, want \"123\"", b, err)
	}
	if err := f.Truncate(limit + 1); !errors.Is(err, syscall.EFBIG) {
		t.Errorf("ftruncate to 2^60+1: %v, want EFBIG", err)
	}
	if err := os.Truncate(m.path("f"), 1<<62); !errors.Is(err, syscall.EFBIG) {
		t.Errorf("truncate to 2^62: %v, want EFBIG", err)
	}
	if err := f.Truncate(limit); err != nil {
		t.Errorf("ftruncate to 2^60: %v", err)
	}
}

// TestCreateWithModeZero: open(O_CREAT) with mode 0, mkdir and mkfifo with
// mode 0, and chmod 0 leave mode 0000 (umask 0), as on a local filesystem:
// programs make files of mode 0 on purpose (lock files, FreeBSD's mv -f),
// and a POSIX conformance suite's open/26.t checks it. Root may still open
// them.
func TestCreateWithModeZero(t *testing.T) {
	m := newVolume(t).mount("")
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	fd, err := syscall.Open(m.path("lock"), syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	if err := syscall.Mkdir(m.path("dir"), 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(m.path("fifo"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("chmodded"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m.path("chmodded"), 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		typ  uint32
	}{{"lock", syscall.S_IFREG}, {"dir", syscall.S_IFDIR}, {"fifo", syscall.S_IFIFO}, {"chmodded", syscall.S_IFREG}} {
		var st syscall.Stat_t
		if err := syscall.Lstat(m.path(c.name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode != c.typ {
			t.Errorf("%s: mode %o, want %o", c.name, st.Mode, c.typ)
		}
	}
	if b, err := os.ReadFile(m.path("chmodded")); err != nil || string(b) != "x" {
		t.Errorf("root reads a file of mode 0: %q, %v", b, err)
	}
}
