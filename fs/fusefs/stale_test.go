package fusefs

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/fs/engine/fakeclock"
	"github.com/ckptfs/ckptfs/fs/namespace"
)

// staleNodes makes files named by names on fsys and returns their nodes, as
// the kernel would have them after a lookup that answered each a size of
// 100 bytes: stale, as every file here is empty.
func staleNodes(t *testing.T, fsys *FS, names ...string) []*node {
	t.Helper()
	ctx := context.Background()
	root := &node{fsys: fsys, ino: namespace.RootIno}
	// A bridge without a server: what Open tells the kernel goes nowhere.
	fs.NewNodeFS(root, &fs.Options{})
	var out []*node
	for _, name := range names {
		if _, err := fsys.ns.Create(ctx, namespace.RootIno, name, 0o644, namespace.Owner{}); err != nil {
			t.Fatal(err)
		}
		var eo fuse.EntryOut
		in, errno := root.Lookup(ctx, name, &eo)
		if errno != 0 {
			t.Fatalf("lookup %s: %v", name, errno)
		}
		n := in.Operations().(*node)
		n.shownSize.Store(100 + 1)
		out = append(out, n)
	}
	return out
}

func openAs(n *node, pid uint32) syscall.Errno {
	ctx := fuse.NewContext(context.Background(), &fuse.Caller{Owner: fuse.Owner{Uid: 0, Gid: 0}, Pid: pid})
	h, _, errno := n.Open(ctx, syscall.O_RDONLY)
	if errno == 0 {
		h.(*handle).Release(ctx)
	}
	return errno
}

// An open that answered ESTALE for a stale size owes its caller the
// kernel's one retry, wherever the retry's lookup of the name leads: here to
// another file (the name was renamed over in between), whose size the kernel
// also holds stale. Owed to the file instead, the retry met a second ESTALE,
// which the kernel hands to the caller (the crash-and-fault campaign's read
// through its lagging read-only mount: "err 116: stale file handle").
func TestStaleOpenRetryFollowsTheCaller(t *testing.T) {
	t.Parallel()
	fsys, _ := newIdleFS(t, time.Second, time.Second)
	ns := staleNodes(t, fsys, "a", "b", "c")
	if errno := openAs(ns[0], 42); errno != syscall.ESTALE {
		t.Fatalf("open of a file whose size the kernel holds stale: %v, want ESTALE", errno)
	}
	if errno := openAs(ns[1], 42); errno != 0 {
		t.Fatalf("the kernel's retry, its lookup led to another stale file: %v, want it opened", errno)
	}
	// The retry is the caller's only: another caller's open of a stale file
	// still has the kernel look its name up again.
	if errno := openAs(ns[2], 43); errno != syscall.ESTALE {
		t.Fatalf("another caller's open of a stale file: %v, want ESTALE", errno)
	}
	if errno := openAs(ns[2], 43); errno != 0 {
		t.Fatalf("its retry: %v, want it opened", errno)
	}
}

// The retry owed after an open answered ESTALE for a stale size is owed to
// the retry, however long it takes: its lookup and open wait on the store,
// seconds each on a slow or failing link (a reader mount whose requests took
// up to 10 s: 13 of 66 opens failed with ESTALE when a retry owed lapsed
// after staleSizeQuiet and the retry met a second one). The file's size
// moved again meanwhile.
func TestStaleOpenRetryTakesLong(t *testing.T) {
	t.Parallel()
	fsys, _ := newIdleFS(t, time.Second, time.Second)
	clk := fakeclock.New()
	fsys.staleRetries.now = clk.Now
	ns := staleNodes(t, fsys, "a")
	if errno := openAs(ns[0], 42); errno != syscall.ESTALE {
		t.Fatalf("open of a file whose size the kernel holds stale: %v, want ESTALE", errno)
	}
	clk.Advance(time.Minute) // the retry's lookup and open on a slow store
	ns[0].shownSize.Store(200 + 1)
	if errno := openAs(ns[0], 42); errno != 0 {
		t.Fatalf("the kernel's retry a minute later, the size moved again: %v, want it opened", errno)
	}
}

// A retry owed whose walk failed at a lookup never opens: the caller's
// next open of a stale file, later, is sent back as any other.
func TestStaleRetryEndsAtFailedLookup(t *testing.T) {
	t.Parallel()
	fsys, _ := newIdleFS(t, time.Second, time.Second)
	ns := staleNodes(t, fsys, "a", "b")
	if errno := openAs(ns[0], 42); errno != syscall.ESTALE {
		t.Fatalf("open of a file whose size the kernel holds stale: %v, want ESTALE", errno)
	}
	root := ns[0].EmbeddedInode().Root().Operations().(*node)
	ctx := fuse.NewContext(context.Background(), &fuse.Caller{Owner: fuse.Owner{Uid: 0, Gid: 0}, Pid: 42})
	var eo fuse.EntryOut
	if _, errno := root.Lookup(ctx, "gone", &eo); errno != syscall.ENOENT {
		t.Fatalf("lookup of a missing name: %v, want ENOENT", errno)
	}
	if errno := openAs(ns[1], 42); errno != syscall.ESTALE {
		t.Fatalf("the caller's open of another stale file after its retry's walk failed: %v, want ESTALE", errno)
	}
}

// open(O_RDONLY|O_CREAT) of a name another mount just made: the create,
// refused by the log, answers ESTALE, and the kernel's retry opens the
// name for reading. Its lookup answered a size that moved before the open
// read the head (the other mount appends): the open is the retry owed to
// the caller, not a second ESTALE (7 of 120 on a file:// volume, as lock
// files and flock(1) open).
func TestCreateStaleRetryOpensForReading(t *testing.T) {
	t.Parallel()
	fsys, _ := newIdleFS(t, time.Second, time.Second)
	clk := fakeclock.New()
	fsys.staleRetries.now = clk.Now
	ns := staleNodes(t, fsys, "lock")
	root := ns[0].EmbeddedInode().Root().Operations().(*node)
	ctx := fuse.NewContext(context.Background(), &fuse.Caller{Owner: fuse.Owner{Uid: 0, Gid: 0}, Pid: 42})
	var eo fuse.EntryOut
	if _, _, _, errno := root.Create(ctx, "lock", syscall.O_RDONLY|syscall.O_CREAT, 0o644, &eo); errno != syscall.ESTALE {
		t.Fatalf("create of a name another mount made: %v, want ESTALE", errno)
	}
	if errno := openAs(ns[0], 42); errno != 0 {
		t.Fatalf("the kernel's retry, for reading, the size moved since its lookup: %v, want it opened", errno)
	}
	// Owed once: the caller's next open of a stale file, past the file's
	// quiet while, is sent back.
	clk.Advance(staleSizeQuiet + time.Second)
	if errno := openAs(ns[0], 42); errno != syscall.ESTALE {
		t.Fatalf("the caller's next open of the stale file: %v, want ESTALE", errno)
	}
}

// The retry owed after a create refused for another mount's name, by a
// caller outside the mount's PID namespace (thread id 0, which its callers
// share): another caller's open took the retry first, and the retry's open,
// for reading, found the size moved since its lookup (the other mount
// appends). Sent back a second time, the kernel handed ESTALE to the
// program (the crash-and-fault campaign's rocreat through mount B, which
// runs in a PID namespace of its own: "err 116: stale file handle").
func TestCreateStaleRetryTakenByAnotherCaller(t *testing.T) {
	t.Parallel()
	fsys, _ := newIdleFS(t, time.Second, time.Second)
	ns := staleNodes(t, fsys, "lock", "other")
	root := ns[0].EmbeddedInode().Root().Operations().(*node)
	ctx := fuse.NewContext(context.Background(), &fuse.Caller{Owner: fuse.Owner{Uid: 0, Gid: 0}, Pid: 0})
	var eo fuse.EntryOut
	if _, _, _, errno := root.Create(ctx, "lock", syscall.O_RDONLY|syscall.O_CREAT, 0o644, &eo); errno != syscall.ESTALE {
		t.Fatalf("create of a name another mount made: %v, want ESTALE", errno)
	}
	if errno := openAs(ns[1], 0); errno != 0 {
		t.Fatalf("another caller's open, which takes the retry owed to id 0: %v, want it opened", errno)
	}
	if errno := openAs(ns[0], 0); errno != 0 {
		t.Fatalf("the kernel's retry of the create, for reading, the size moved since its lookup: %v, want it opened", errno)
	}
}
