package fusefs

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// newIdleFS makes a volume on a counting memory store whose namespace refresh
// starts at every and backs off up to most.
func newIdleFS(t *testing.T, every, most time.Duration) (*FS, *counting.Store) {
	t.Helper()
	st := counting.New(mem.New())
	c := config.MountDefault(1 << 30)
	c.NSRefresh, c.NSRefreshMax = every, most
	fsys, err := New(context.Background(), st, Options{Config: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	return fsys, st
}

// waitFor polls cond every few milliseconds for up to limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// An idle mount refreshes less and less often: over two seconds with
// ns_refresh=20ms (100 refreshes without backoff) and ns_refresh_max=320ms
// it makes about ten, each its request or two, and nothing else.
func TestIdleMountBacksOff(t *testing.T) {
	t.Parallel()
	fsys, st := newIdleFS(t, 20*time.Millisecond, 320*time.Millisecond)
	st.Reset()
	time.Sleep(2 * time.Second)
	c := st.Snapshot()
	refreshes := fsys.refreshes.Load()
	t.Logf("idle for 2s: %d refreshes, %v", refreshes, c)
	if refreshes < 2 || refreshes > 20 {
		t.Errorf("an idle mount refreshed %d times in 2s, want about 10 (at most 20, at least 2)", refreshes)
	}
	if reqs := c.Total().Requests; reqs > 2*refreshes || reqs > 40 {
		t.Errorf("an idle mount sent %d requests in 2s (%v) for %d refreshes", reqs, c, refreshes)
	}
	if got := time.Duration(fsys.refreshEvery.Load()); got != 320*time.Millisecond {
		t.Errorf("after 2s idle the refresh interval is %v, want ns_refresh_max 320ms", got)
	}
}

// Another mount's change reaches an idle mount within ns_refresh_max (plus
// slack), and using the mount brings the interval back to ns_refresh.
func TestIdleMountSeesChanges(t *testing.T) {
	t.Parallel()
	fsys, st := newIdleFS(t, 20*time.Millisecond, 320*time.Millisecond)
	waitFor(t, 10*time.Second, "backed off to ns_refresh_max", func() bool {
		return time.Duration(fsys.refreshEvery.Load()) == 320*time.Millisecond
	})
	other, err := namespace.Open(context.Background(), st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(context.Background(), namespace.RootIno, "theirs", 0o644, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Looked up in the namespace directly: not a use of the mount.
	waitFor(t, 5*time.Second, "another mount's create seen", func() bool {
		_, err := fsys.ns.Lookup(context.Background(), namespace.RootIno, "theirs")
		return err == nil
	})
	t.Logf("another mount's create seen after %v idle (ns_refresh_max 320ms)", time.Since(start))
	// A change found brings the interval back to ns_refresh, from where it
	// takes 300ms to back off to ns_refresh_max again.
	waitFor(t, 5*time.Second, "ns_refresh after a change was found", func() bool {
		return time.Duration(fsys.refreshEvery.Load()) < 320*time.Millisecond
	})
}

// A lookup on a mount that has backed off far brings its next refresh at
// once, not when the long wait ends, and the request itself is answered
// without waiting for it.
func TestUseWakesTheRefresh(t *testing.T) {
	t.Parallel()
	fsys, _ := newIdleFS(t, 20*time.Millisecond, 10*time.Second)
	// 20+40+...+1280ms: the loop then waits 2.56s.
	waitFor(t, 20*time.Second, "backed off to 2.56s", func() bool {
		return time.Duration(fsys.refreshEvery.Load()) >= 2560*time.Millisecond
	})
	before := fsys.refreshes.Load()
	root := &node{fsys: fsys, ino: namespace.RootIno}
	var out fuse.EntryOut
	if _, errno := root.Lookup(context.Background(), "nothing", &out); errno != syscall.ENOENT {
		t.Fatalf("lookup: %v, want ENOENT", errno)
	}
	// Well within the 2.56s the loop would otherwise still wait.
	waitFor(t, 1500*time.Millisecond, "a refresh after the lookup", func() bool {
		return fsys.refreshes.Load() > before
	})
	if got := time.Duration(fsys.refreshEvery.Load()); got >= 320*time.Millisecond {
		t.Errorf("after a lookup the refresh interval is %v, want it back near ns_refresh 20ms", got)
	}
}

// A change made through this mount counts as use: the next refresh comes
// ns_refresh after it.
func TestOwnChangeResetsTheBackoff(t *testing.T) {
	t.Parallel()
	fsys, _ := newIdleFS(t, 20*time.Millisecond, 320*time.Millisecond)
	waitFor(t, 10*time.Second, "backed off to ns_refresh_max", func() bool {
		return time.Duration(fsys.refreshEvery.Load()) == 320*time.Millisecond
	})
	// Straight through the namespace: the loop sees it in Seq.
	if _, err := fsys.ns.Mkdir(context.Background(), namespace.RootIno, "d", 0o755, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "ns_refresh after a change of this mount", func() bool {
		return time.Duration(fsys.refreshEvery.Load()) < 320*time.Millisecond
	})
}

// A lookup that misses on a mount whose last read of the log is older than
// twice ns_refresh (it backed off while idle) reads the log before it answers, so
// that another mount's new name is found at the first look.
func TestMissedLookupReadsTheLog(t *testing.T) {
	t.Parallel()
	fsys, st := newIdleFS(t, 20*time.Millisecond, 10*time.Second)
	waitFor(t, 20*time.Second, "backed off to 1.28s", func() bool {
		return time.Duration(fsys.refreshEvery.Load()) >= 1280*time.Millisecond
	})
	// The loop has just read the log and waits 1.28s now: let that read
	// be older than ns_refresh.
	time.Sleep(100 * time.Millisecond)
	other, err := namespace.Open(context.Background(), st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(context.Background(), namespace.RootIno, "theirs", 0o644, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := fsys.lookup(ctx, namespace.RootIno, "theirs"); err != nil {
		t.Fatalf("first lookup of another mount's new name on an idle mount: %v, want it found", err)
	}
	// A miss right after a read of the log costs no request.
	before := st.Snapshot().Total().Requests
	if _, err := fsys.lookup(ctx, namespace.RootIno, "nothing"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("lookup: %v, want ErrNotExist", err)
	}
	if got := st.Snapshot().Total().Requests - before; got != 0 {
		t.Errorf("a miss within ns_refresh of the last read made %d requests, want 0", got)
	}
}
