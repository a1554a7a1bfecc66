package test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// fileRequests counts the requests a mount sends about files' objects
// (keys under f/), leaving out the namespace refreshes of the mount.
type fileRequests struct {
	staging.Store
	n atomic.Int64
}

func (s *fileRequests) count(key string) {
	if strings.HasPrefix(key, "f/") {
		s.n.Add(1)
	}
}

func (s *fileRequests) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	s.count(key)
	return s.Store.Get(ctx, key, r)
}

func (s *fileRequests) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	s.count(key)
	return s.Store.Head(ctx, key)
}

func (s *fileRequests) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	s.count(prefix)
	return s.Store.List(ctx, prefix, startAfter, max)
}

// TestCheckpointListingCost: listing .checkpoints/<file> reads the chain of
// checkpoints once, one request per checkpoint; ls -l after it costs about
// nothing more, and a lookup and read of one checkpoint on a fresh mount a
// handful of requests, whichever it is.
func TestCheckpointListingCost(t *testing.T) {
	need(t, "ls", "python3", "cat")
	const n = 300
	v := newVolume(t)
	w := v.mount("")
	run(t, w.dir, "python3", "-c", fmt.Sprintf(`
import os
fd = os.open("log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
for i in range(1, %d + 1):
    os.write(fd, b"line %%d\n" %% i)
    os.fsync(fd)
os.close(fd)
`, n))
	w.unmount()

	fresh := func() (*mount, *fileRequests) {
		var c *fileRequests
		m := v.mountWrapped("", func(st staging.Store) staging.Store {
			c = &fileRequests{Store: st}
			return c
		})
		return m, c
	}
	m, c := fresh()
	out := run(t, m.dir, "ls", ".checkpoints/log")
	listed := c.n.Load()
	if got := len(strings.Fields(out)); got != n {
		t.Fatalf("ls lists %d checkpoints, want %d", got, n)
	}
	out = run(t, m.dir, "ls", "-l", ".checkpoints/log")
	long := c.n.Load() - listed
	if got := strings.Count(out, "\n") - 1; got != n { // less the "total" line
		t.Fatalf("ls -l lists %d checkpoints, want %d:\n%s", got, n, out)
	}
	t.Logf("%d checkpoints: ls %d requests, ls -l %d more", n, listed, long)
	if listed > n+n/10 {
		t.Errorf("ls of %d checkpoints cost %d requests, want about %d", n, listed, n)
	}
	if long > 10 {
		t.Errorf("ls -l after ls cost %d more requests, want a few", long)
	}
	m.unmount()

	for _, cno := range []int{1, n / 2, n} {
		m, c := fresh()
		got, err := os.ReadFile(m.path(fmt.Sprintf(".checkpoints/log/%d", cno)))
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		for i := 1; i <= cno; i++ {
			fmt.Fprintf(&want, "line %d\n", i)
		}
		if string(got) != want.String() {
			t.Fatalf("checkpoint %d reads %d bytes, want %d", cno, len(got), want.Len())
		}
		reqs := c.n.Load()
		t.Logf("checkpoint %d read on a fresh mount: %d requests", cno, reqs)
		if reqs > 10 {
			t.Errorf("reading checkpoint %d on a fresh mount cost %d requests, want a handful", cno, reqs)
		}
		m.unmount()
	}
}

// TestCheckpointsPathFollowsRename: a path under .checkpoints leads to the
// file that has the name now, right after a rename over it. Before the fix
// the kernel kept the entry (its timeout): .checkpoints/f/1 read the old
// file's first checkpoint for up to a second (found by the campaign).
func TestCheckpointsPathFollowsRename(t *testing.T) {
	v := newVolume(t)
	m := v.mount("")
	if err := os.WriteFile(m.path("f"), []byte("old file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(m.path(".checkpoints/f/1")); err != nil || string(got) != "old file" {
		t.Fatalf(".checkpoints/f/1: %q, %v", got, err)
	}
	if err := os.WriteFile(m.path("g"), []byte("the new one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.path("g"), m.path("f")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(m.path(".checkpoints/f/1")); err != nil || string(got) != "the new one" {
		t.Fatalf("after g was renamed over f, .checkpoints/f/1 reads %q (%v), want g's first checkpoint", got, err)
	}
}

// TestCheckpointPublishedOnAnotherMount: a checkpoint another mount has
// just published is found by its number at once, though this mount read
// the file's head a moment before. Before the fix the lookup answered
// ENOENT for max(ns_refresh, 1 s) (found by the campaign).
func TestCheckpointPublishedOnAnotherMount(t *testing.T) {
	v := newVolume(t)
	a, b := v.mount("ns_refresh=5s"), v.mount("ns_refresh=5s")
	if err := os.WriteFile(a.path("f"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() error {
		_, err := os.ReadFile(b.path(".checkpoints/f/1"))
		return err
	})
	if err := os.WriteFile(a.path("f"), []byte("second"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(b.path(".checkpoints/f/2")); err != nil || string(got) != "second" {
		t.Fatalf(".checkpoints/f/2 on the other mount right after the close: %q, %v", got, err)
	}
}

// TestCheckpointListedRightAfterPublish: a listing of .checkpoints/<file>
// shows the checkpoint a close has just published, through the mount that
// closed and through another, though each listed the file a moment before.
// Before the fix both listed the old head's chain for max(ns_refresh, 1 s):
// found by the campaign, where the cleaner had meanwhile removed the old
// newest checkpoint, so the newest listed read as ENOENT.
func TestCheckpointListedRightAfterPublish(t *testing.T) {
	v := newVolume(t)
	a, b := v.mount("ns_refresh=5s"), v.mount("ns_refresh=5s")
	if err := os.WriteFile(a.path("f"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	list := func(m *mount) ([]string, error) {
		ents, err := os.ReadDir(m.path(".checkpoints/f"))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names, err
	}
	waitFor(t, 20*time.Second, func() error {
		if got, err := list(b); err != nil || len(got) != 1 || got[0] != "1" {
			return fmt.Errorf("the other mount lists %q (%v)", got, err)
		}
		return nil
	})
	if got, err := list(a); err != nil || len(got) != 1 || got[0] != "1" {
		t.Fatalf("after the first close: %q (%v), want [1]", got, err)
	}
	if err := os.WriteFile(a.path("f"), []byte("second"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*mount{a, b} {
		got, err := list(m)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(got, "2") {
			t.Fatalf("%s lists %q right after the second close, want 2 among them", m.dir, got)
		}
		if data, err := os.ReadFile(m.path(".checkpoints/f/2")); err != nil || string(data) != "second" {
			t.Fatalf("%s: .checkpoints/f/2 reads %q, %v", m.dir, data, err)
		}
	}
}
