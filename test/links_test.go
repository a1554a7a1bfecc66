package test

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// Hard links where features meet: a file with two names, one of them gone,
// is not an orphan to the cleaner, another mount, a copy by reference or the
// WAL; it becomes one with its last name.

// readIs fails the test unless the file at p holds want.
func readIs(t *testing.T, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %s: %d bytes (%.16q), want %d (%.16q)", p, len(got), got, len(want), want)
	}
}

// nlinkIs waits until the mount shows p with n names.
func nlinkIs(t *testing.T, p string, n uint64) {
	t.Helper()
	waitFor(t, 10*time.Second, func() error {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return err
		}
		if st.Nlink != n {
			return fmt.Errorf("%s has %d links, want %d", p, st.Nlink, n)
		}
		return nil
	})
}

// TestHardLinkAcrossMountsUnderCleaner: the first name of a file unlinked on
// one mount, its second name made and later written on another; the cleaner
// runs past its grace between each step. The file is never reaped while a
// name leads to it, on either mount, and is once its last name goes.
func TestHardLinkAcrossMountsUnderCleaner(t *testing.T) {
	v := newVolume(t)
	st := v.store()
	a, b := v.mount("ns_refresh=100ms"), v.mount("ns_refresh=100ms")
	first := bytes.Repeat([]byte("first "), 50_000)
	if err := os.WriteFile(a.path("x"), first, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(b.path("x")); return err })
	if err := os.Link(b.path("x"), b.path("y")); err != nil {
		t.Fatalf("link on the other mount: %v", err)
	}
	nlinkIs(t, a.path("x"), 2)
	if err := os.Remove(a.path("x")); err != nil {
		t.Fatal(err)
	}
	if n, _ := cleanLater(t, st); n != 0 {
		t.Fatalf("the cleaner deleted %d orphans with a name left", n)
	}
	readIs(t, a.path("y"), first)
	readIs(t, b.path("y"), first)
	nlinkIs(t, b.path("y"), 1)

	// Written through the second name on the mount that did not create
	// the file, then read on the one that did.
	f, err := os.OpenFile(b.path("y"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	both := append(bytes.Clone(first), "second"...)
	waitFor(t, 10*time.Second, func() error {
		got, err := os.ReadFile(a.path("y"))
		if err != nil || !bytes.Equal(got, both) {
			return fmt.Errorf("read y: %d bytes, %v", len(got), err)
		}
		return nil
	})
	if n, _ := cleanLater(t, st); n != 0 {
		t.Fatalf("the cleaner deleted %d orphans with a name left", n)
	}
	readIs(t, b.path("y"), both)
	fsckClean(t, st)

	// The last name gone: an orphan, reaped.
	if err := os.Remove(a.path("y")); err != nil {
		t.Fatal(err)
	}
	if n, _ := cleanLater(t, st); n != 1 {
		t.Fatalf("the cleaner deleted %d orphans, want 1", n)
	}
	if n := countObjects(t, st, "f/"); n != 0 {
		t.Fatalf("%d objects left under f/ with no file named", n)
	}
	fsckClean(t, st)
}

// TestHardLinkOfOpenFile: a file open with writes not yet flushed gets a
// second name, loses its first, and is renamed over and copied by
// reference through its second: the writes the close flushes are in every
// name and copy that came after them, and survive the cleaner.
func TestHardLinkOfOpenFile(t *testing.T) {
	need(t, "cp")
	v := newVolume(t)
	st := v.store()
	a := v.mount("ns_refresh=100ms")
	f, err := os.Create(a.path("x"))
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("unflushed "), 100_000)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a.path("x"), a.path("y")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a.path("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("more")); err != nil {
		t.Fatalf("write after the first name went: %v", err)
	}
	data = append(data, "more"...)
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	readIs(t, a.path("y"), data)

	// A copy by reference through the second name, then the second name
	// renamed over: the copy keeps what it was copied from.
	run(t, a.dir, "cp", "y", "z")
	if err := os.Link(a.path("y"), a.path("w")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.path("q"), []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(a.path("q"), a.path("y")); err != nil {
		t.Fatal(err)
	}
	readIs(t, a.path("w"), data)
	readIs(t, a.path("y"), []byte("other"))
	if n, _ := cleanLater(t, st); n != 0 {
		t.Fatalf("the cleaner deleted %d orphans with a name left", n)
	}
	readIs(t, a.path("w"), data)
	readIs(t, a.path("z"), data)

	// Its last name gone, an orphan the copy still points into: kept
	// whole, read through the copy before and after a remount; reaped
	// once the copy is gone too.
	if err := os.Remove(a.path("w")); err != nil {
		t.Fatal(err)
	}
	if n, ref := cleanLater(t, st); n != 0 || ref != 1 {
		t.Fatalf("the cleaner deleted %d orphans and kept %d for a copy, want 0 and 1 (the linked file)", n, ref)
	}
	readIs(t, a.path("z"), data)
	a.unmount()
	a2 := v.mount("")
	readIs(t, a2.path("z"), data)
	readIs(t, a2.path("y"), []byte("other"))
	fsckClean(t, st)
	if err := os.Remove(a2.path("z")); err != nil {
		t.Fatal(err)
	}
	if n, ref := cleanLater(t, st); n != 2 || ref != 0 {
		t.Fatalf("the cleaner deleted %d orphans and kept %d for a copy, want 2 (the linked file and its copy) and 0", n, ref)
	}
	readIs(t, a2.path("y"), []byte("other"))
	fsckClean(t, st)
}

// TestHardLinkWithWAL: with the WAL, a file written (not flushed) through
// one name on one mount is read through its other name on another mount,
// which sees every acknowledged write; its first name unlinked, the writes
// go on and are read there again.
func TestHardLinkWithWAL(t *testing.T) {
	v := newVolume(t)
	st := v.store()
	a, b := v.mount("wal=on,ns_refresh=100ms"), v.mount("wal=on,ns_refresh=100ms")
	f, err := os.Create(a.path("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a.path("x"), a.path("y")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(b.path("y")); return err })
	readIs(t, b.path("y"), []byte("one"))
	if err := os.Remove(a.path("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("two")); err != nil {
		t.Fatal(err)
	}
	readIs(t, b.path("y"), []byte("onetwo"))
	if n, _ := cleanLater(t, st); n != 0 {
		t.Fatalf("the cleaner deleted %d orphans with a name left", n)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	readIs(t, b.path("y"), []byte("onetwo"))
	a.unmount()
	b.unmount()
	waitWALClean(t, st)
	fsckClean(t, st)
}
