package test

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// cnoOf reads the last published checkpoint of a file.
func cnoOf(t *testing.T, p string) int {
	t.Helper()
	n, err := strconv.Atoi(getxattr(t, p, "user.ckptfs.cno"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDurability: fsync publishes a checkpoint and the program keeps
// writing, appending and overwriting; O_SYNC writes publish before they
// return; flush_interval publishes without a close; close publishes before it
// returns (another mount reads the data right away).
func TestDurability(t *testing.T) {
	v := newVolume(t)
	m := v.mount("flush_interval=200ms")

	t.Run("fsync then keep writing", func(t *testing.T) {
		p := m.path("log")
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		before := cnoOf(t, p)
		if _, err := f.WriteString("one\n"); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if c := cnoOf(t, p); c <= before {
			t.Fatalf("cno %d after fsync, was %d", c, before)
		}
		for _, s := range []string{"two\n", "three\n"} {
			if _, err := f.WriteString(s); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.WriteString("four\n"); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		g, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.WriteAt([]byte("ONE"), 0); err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		other := v.mount("")
		if b, err := os.ReadFile(other.path("log")); err != nil || string(b) != "ONE\ntwo\nthree\nfour\n" {
			t.Fatalf("another mount reads %q, %v", b, err)
		}
	})

	t.Run("O_SYNC", func(t *testing.T) {
		p := m.path("sync")
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|syscall.O_SYNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for i := 0; i < 3; i++ {
			before := cnoOf(t, p)
			if _, err := f.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if c := cnoOf(t, p); c <= before {
				t.Fatalf("write %d with O_SYNC: cno %d, was %d", i, c, before)
			}
		}
	})

	t.Run("flush_interval", func(t *testing.T) {
		p := m.path("periodic")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		before := cnoOf(t, p)
		if _, err := f.Write([]byte("not closed")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() error {
			if c := cnoOf(t, p); c <= before {
				return os.ErrDeadlineExceeded
			}
			return nil
		})
	})
}
