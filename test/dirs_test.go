package test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Directories where features meet: a directory renamed or removed on one
// mount while another writes in it, holds it open, or has just listed it;
// the cleaner runs between the steps. A file is reached by its id, so a
// move of the directory above it changes nothing for its writer.

// TestDirRenamedUnderOpenWriter: mount B writes a file in d1 and keeps it
// open with writes not yet flushed; mount A moves d1 into another
// directory (d2/sub) and the cleaner runs past its grace. B's writes go on
// through its descriptor, and what its close flushes is the file at its
// new path on both mounts, its old path gone; moved out to the root and its
// directories removed on A, it reads the same, and nothing is reaped.
func TestDirRenamedUnderOpenWriter(t *testing.T) {
	v := newVolume(t)
	st := v.store()
	a, b := v.mount("ns_refresh=100ms"), v.mount("ns_refresh=100ms")
	if err := os.Mkdir(b.path("d1"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(b.path("d1/f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	part1 := bytes.Repeat([]byte("part one "), 40_000)
	if _, err := f.Write(part1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(a.path("d1/f")); return err })
	if err := os.Mkdir(a.path("d2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(a.path("d1"), a.path("d2/sub")); err != nil {
		t.Fatalf("rename d1 into d2 on the other mount: %v", err)
	}
	if n, _ := cleanLater(t, st); n != 0 {
		t.Fatalf("the cleaner deleted %d orphans; the file is named", n)
	}
	part2 := bytes.Repeat([]byte("part two "), 30_000)
	if _, err := f.Write(part2); err != nil {
		t.Fatalf("write after the directory moved: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after the directory moved: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(part1), part2...)
	waitFor(t, 10*time.Second, func() error {
		got, err := os.ReadFile(a.path("d2/sub/f"))
		if err != nil || !bytes.Equal(got, want) {
			return fmt.Errorf("read d2/sub/f on A: %d bytes, %v", len(got), err)
		}
		return nil
	})
	waitFor(t, 10*time.Second, func() error {
		if _, err := os.Stat(b.path("d1")); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("d1 on B after the move: %v", err)
		}
		return nil
	})
	readIs(t, b.path("d2/sub/f"), want)

	if err := os.Rename(a.path("d2/sub/f"), a.path("f")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"d2/sub", "d2"} {
		if err := os.Remove(a.path(d)); err != nil {
			t.Fatalf("rmdir %s: %v", d, err)
		}
	}
	if n, _ := cleanLater(t, st); n != 0 {
		t.Fatalf("the cleaner deleted %d orphans; the file is named", n)
	}
	waitFor(t, 10*time.Second, func() error {
		got, err := os.ReadFile(b.path("f"))
		if err != nil || !bytes.Equal(got, want) {
			return fmt.Errorf("read f on B: %d bytes, %v", len(got), err)
		}
		return nil
	})
	fsckClean(t, st)
}

// TestRmdirAfterOtherMountsCreate: mount B has listed an empty directory
// (the kernel may keep what it was told for a second) when mount A makes a
// file in it; B's rmdir must be refused (ENOTEMPTY), not remove a directory
// with a file in it, and the file must stay readable on both. Once A has
// removed the file, B's rmdir succeeds at once: a refusal is decided on the
// log's state, not on a view that lags it.
func TestRmdirAfterOtherMountsCreate(t *testing.T) {
	v := newVolume(t)
	a, b := v.mount("ns_refresh=100ms"), v.mount("ns_refresh=100ms")
	if err := os.Mkdir(b.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if list, err := os.ReadDir(b.path("d")); err != nil || len(list) != 0 {
		t.Fatalf("list d on B: %v, %v", list, err)
	}
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(a.path("d")); return err })
	if err := os.WriteFile(a.path("d/x"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rmdir(b.path("d")); err != syscall.ENOTEMPTY {
		t.Fatalf("rmdir on B of a directory A made a file in: %v, want ENOTEMPTY", err)
	}
	readIs(t, a.path("d/x"), []byte("kept"))
	readIs(t, b.path("d/x"), []byte("kept"))

	if err := os.Remove(a.path("d/x")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rmdir(b.path("d")); err != nil {
		t.Fatalf("rmdir on B right after A emptied the directory: %v", err)
	}
	waitFor(t, 10*time.Second, func() error {
		if _, err := os.Stat(a.path("d")); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("d on A after B removed it: %v", err)
		}
		return nil
	})
}

// TestCreateInDirectoryHeldOpenAcrossMounts: a program on mount B holds a
// directory open (as a shell's working directory, or a dirfd for openat)
// while mount A renames it. A file B creates through the descriptor lands
// in the directory under its new name. Once A has removed the directory
// (empty again), a create through B's descriptor fails with ENOENT, and
// the file created there before is where A moved it.
func TestCreateInDirectoryHeldOpenAcrossMounts(t *testing.T) {
	v := newVolume(t)
	a, b := v.mount("ns_refresh=100ms"), v.mount("ns_refresh=100ms")
	if err := os.Mkdir(a.path("work"), 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(b.path("work")); return err })
	dirfd, err := unix.Open(b.path("work"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	if err := os.Rename(a.path("work"), a.path("done")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Openat(dirfd, "out", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	if err != nil {
		t.Fatalf("create through the descriptor of a directory renamed on A: %v", err)
	}
	if _, err := unix.Write(fd, []byte("made in work")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Close(fd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		got, err := os.ReadFile(a.path("done/out"))
		if err != nil || string(got) != "made in work" {
			return fmt.Errorf("read done/out on A: %q, %v", got, err)
		}
		return nil
	})

	if err := os.Rename(a.path("done/out"), a.path("out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a.path("done")); err != nil {
		t.Fatal(err)
	}
	fd, err = unix.Openat(dirfd, "late", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	if err == nil {
		unix.Close(fd)
		t.Fatal("a create through the descriptor of a directory removed on A succeeded")
	}
	if err != unix.ENOENT {
		t.Fatalf("create in a directory removed on A: %v, want ENOENT", err)
	}
	readIs(t, b.path("out"), []byte("made in work"))
	if list, err := os.ReadDir(a.path("")); err != nil || len(list) != 1 || list[0].Name() != "out" {
		t.Fatalf("the root on A: %v, %v; want only out", list, err)
	}
}

// TestChangesInDirectoryReplacedOnOtherMount: mount A removes a directory
// and makes another under its name (rm -r latest; mkdir latest), as a job's
// first rank does before the others write their shards; right after, a
// program on mount B, whose view and kernel still lead to the old directory,
// runs mkdir -p and creates, renames, links and removes names in it. Every
// call must act on the new directory (the path names it), as on a local
// filesystem, not fail with ENOENT because the old one is gone. The same
// with the directory above replaced (rm -r ckpt; mkdir -p ckpt/latest). A
// directory removed and not made again is ENOENT, as it should be.
//
// B reads the namespace log only when a change of its own needs it
// (ns_refresh=1m): its view is the one before A's replacement until a call
// of its own is refused, never a view part way through A's changes (the
// old directory emptied, not yet removed), where a lookup misses a name,
// as it may for up to ns_refresh with any name another mount made.
func TestChangesInDirectoryReplacedOnOtherMount(t *testing.T) {
	v := newVolume(t)
	a, b := v.mount(""), v.mount("ns_refresh=1m")
	if err := os.MkdirAll(b.path("ckpt/latest"), 0o755); err != nil {
		t.Fatal(err)
	}
	replace := func(dir string) {
		t.Helper()
		waitFor(t, 10*time.Second, func() error { _, err := os.Stat(a.path(dir)); return err })
		if err := os.RemoveAll(a.path(dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(a.path("ckpt/latest"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		what string
		do   func() error
		want string // the name the step leaves in ckpt/latest on A
	}{
		{"create", func() error { return os.WriteFile(b.path("ckpt/latest/shard"), []byte("shard"), 0o644) }, "shard"},
		{"mkdir", func() error { return os.Mkdir(b.path("ckpt/latest/sub"), 0o755) }, "sub"},
		{"symlink", func() error { return os.Symlink("shard", b.path("ckpt/latest/link")) }, "link"},
	}
	for _, top := range []string{"ckpt/latest", "ckpt"} {
		for _, s := range steps {
			// B looks at the directory (its kernel and view now hold the
			// old one), then A replaces it.
			if _, err := os.Stat(b.path("ckpt/latest")); err != nil {
				t.Fatal(err)
			}
			replace(top)
			if err := os.MkdirAll(b.path("ckpt/latest"), 0o755); err != nil {
				t.Fatalf("replaced %s: mkdir -p on B: %v", top, err)
			}
			if err := s.do(); err != nil {
				t.Fatalf("replaced %s: %s on B: %v", top, s.what, err)
			}
			waitFor(t, 10*time.Second, func() error {
				list, err := os.ReadDir(a.path("ckpt/latest"))
				if err != nil || len(list) != 1 || list[0].Name() != s.want {
					return fmt.Errorf("replaced %s: %s on B left %v (%v) in ckpt/latest on A, want %s", top, s.what, list, err, s.want)
				}
				return nil
			})
		}
	}

	// Rename, link and unlink in a directory replaced with one that holds
	// the same names. (A name only the new directory holds may be missed
	// by B's view for up to ns_refresh, as any name another mount made.)
	if err := os.WriteFile(b.path("ckpt/latest/x"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(a.path("ckpt/latest/x")); return err })
	replace("ckpt/latest")
	if err := os.WriteFile(a.path("ckpt/latest/x"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b.path("ckpt/latest/x"), b.path("ckpt/latest/y")); err != nil {
		t.Fatalf("rename on B in the replaced directory: %v", err)
	}
	waitRead(t, a.path("ckpt/latest/y"), "new")
	replace("ckpt/latest")
	if err := os.WriteFile(a.path("ckpt/latest/y"), []byte("newer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(b.path("ckpt/latest/y"), b.path("ckpt/latest/z")); err != nil {
		t.Fatalf("link on B in the replaced directory: %v", err)
	}
	waitRead(t, a.path("ckpt/latest/z"), "newer")
	if err := os.Remove(b.path("ckpt/latest/z")); err != nil {
		t.Fatalf("unlink on B: %v", err)
	}
	if err := os.WriteFile(b.path("ckpt/latest/w"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(a.path("ckpt/latest/w")); return err })
	replace("ckpt/latest")
	if err := os.WriteFile(a.path("ckpt/latest/w"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(b.path("ckpt/latest/w")); err != nil {
		t.Fatalf("unlink on B in the replaced directory: %v", err)
	}
	waitFor(t, 10*time.Second, func() error {
		if list, err := os.ReadDir(a.path("ckpt/latest")); err != nil || len(list) != 0 {
			return fmt.Errorf("ckpt/latest on A after B's unlink: %v, %v; want it empty", list, err)
		}
		return nil
	})

	// Removed, not made again: ENOENT.
	if _, err := os.Stat(b.path("ckpt/latest")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(a.path("ckpt")); err != nil {
		t.Fatal(err)
	}
	err := os.WriteFile(b.path("ckpt/latest/late"), nil, 0o644)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("create on B in a directory A removed: %v, want ENOENT", err)
	}
}

// waitRead waits until the file at p holds want.
func waitRead(t *testing.T, p, want string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() error {
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			return fmt.Errorf("read %s: %q, %v; want %q", p, got, err, want)
		}
		return nil
	})
}
