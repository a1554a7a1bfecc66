package test

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// With flush_conflict_policy=failfast, a flush that loses to another mount
// rolls the file back: every descriptor open on it learns that its unflushed
// writes are gone (its next fsync fails), not only the one whose fsync lost.
func TestFailFastLossReachesEveryDescriptor(t *testing.T) {
	v := newVolume(t)
	a := v.mount("flush_conflict_policy=failfast,ns_refresh=100ms")
	b := v.mount("ns_refresh=100ms")
	if err := os.WriteFile(a.path("f"), []byte("base"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd1, err := os.OpenFile(a.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd1.Close()
	fd2, err := os.OpenFile(a.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd2.Close()
	// The other mount publishes first.
	waitFor(t, 5*time.Second, func() error {
		got, err := os.ReadFile(b.path("f"))
		if err != nil {
			return err
		}
		if string(got) != "base" {
			return fmt.Errorf("reads %q", got)
		}
		return nil
	})
	if err := os.WriteFile(b.path("f"), []byte("winner"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fd2.WriteAt([]byte("lost by fd2"), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := fd1.WriteAt([]byte("fd1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fd1.Sync(); err == nil {
		t.Fatalf("fsync of the losing writer succeeded")
	}
	if err := fd2.Sync(); err == nil {
		t.Fatalf("fsync of a descriptor whose writes were rolled back succeeded")
	}
	// Reported once: the descriptor goes on.
	if err := fd2.Sync(); err != nil {
		t.Fatalf("second fsync: %v", err)
	}
}
