package fusefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// slowHeads is a store whose reads of head objects take delay each and that
// counts them and the most it had in flight at once.
type slowHeads struct {
	staging.Store
	delay time.Duration

	mu          sync.Mutex
	reads       int // GUARDED_BY(mu)
	failNext    int // the next head reads to fail; GUARDED_BY(mu)
	inFlight    int // GUARDED_BY(mu)
	maxInFlight int // GUARDED_BY(mu)
}

func (s *slowHeads) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if !strings.HasSuffix(key, "/"+volume.HeadName) {
		return s.Store.Get(ctx, key, r)
	}
	s.mu.Lock()
	s.reads++
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	fail := s.failNext > 0
	s.failNext--
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, staging.ObjectInfo{}, ctx.Err()
	}
	if fail {
		return nil, staging.ObjectInfo{}, errors.New("injected failure")
	}
	return s.Store.Get(ctx, key, r)
}

func (s *slowHeads) counts() (reads, maxInFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.maxInFlight
}

// headTestConfig keeps heads cached for longer than the test takes, so that
// only what the code does decides how often a head is read.
func headTestConfig() config.Config {
	c := config.MountDefault(1 << 30)
	c.NSRefresh = 30 * time.Second
	c.NSRefreshMax = 30 * time.Second
	return c
}

// newHeadFS makes a volume over a store whose head reads take delay, with
// n files (f0000...) in the root, each with a head written and none open or
// cached.
func newHeadFS(t *testing.T, n int, delay time.Duration) (*FS, *slowHeads, []namespace.Node) {
	t.Helper()
	ctx := context.Background()
	st := &slowHeads{Store: mem.New(), delay: delay}
	fsys, err := New(ctx, st, Options{Config: headTestConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	var nodes []namespace.Node
	for i := range n {
		nn, err := fsys.ns.Create(ctx, namespace.RootIno, fmt.Sprintf("f%04d", i), 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		f, err := engineCreate(ctx, fsys, nn.FileID)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		nodes = append(nodes, nn)
	}
	return fsys, st, nodes
}

// list reads directory ino to the end through a directory handle, as the
// kernel's readdir does.
func list(t *testing.T, fsys *FS, ino namespace.Ino) []string {
	t.Helper()
	d := &dirHandle{fsys: fsys, ino: ino, parent: namespace.RootIno}
	var names []string
	for {
		e, errno := d.Readdirent(context.Background())
		if errno != 0 {
			t.Fatalf("readdir: %v", errno)
		}
		if e == nil {
			return names
		}
		names = append(names, e.Name)
	}
}

// A cold listing of 200 files has their heads read several at a time, in the
// background, and the stats that follow (ls -l) read nothing more: each head
// is read exactly once, the stats that arrive while it is read wait for that
// read instead of making their own.
func TestListingPrefetchesHeads(t *testing.T) {
	const n = 200
	fsys, st, nodes := newHeadFS(t, n, 5*time.Millisecond)
	if names := list(t, fsys, namespace.RootIno); len(names) != n+2 {
		t.Fatalf("listed %d entries, want %d", len(names), n+2)
	}
	ctx := context.Background()
	stat := func() {
		t.Helper()
		for _, nn := range nodes {
			var a fuse.Attr
			if errno := fsys.fillAttr(ctx, nn, &a); errno != 0 {
				t.Fatalf("stat %s: %v", nn.FileID, errno)
			}
		}
	}
	stat() // right behind the listing, as ls -l is
	reads, most := st.counts()
	if reads != n {
		t.Errorf("listing and stat of %d files read %d heads, want %d (one each)", n, reads, n)
	}
	if most < 8 {
		t.Errorf("at most %d head reads were in flight at once, want at least 8", most)
	}
	if most > prefetchConcurrency+1 {
		t.Errorf("%d head reads in flight at once, more than the prefetch's %d and one stat", most, prefetchConcurrency)
	}
	stat()
	if again, _ := st.counts(); again != reads {
		t.Errorf("a second stat of every file read %d more heads, want none", again-reads)
	}
}

// Stats of one file that arrive together read its head once.
func TestConcurrentStatsShareOneRead(t *testing.T) {
	fsys, st, nodes := newHeadFS(t, 1, 20*time.Millisecond)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if _, err := fsys.fileHead(context.Background(), nodes[0].FileID); err != nil {
				t.Errorf("stat: %v", err)
			}
		})
	}
	wg.Wait()
	if reads, _ := st.counts(); reads != 1 {
		t.Fatalf("10 concurrent stats of one file read its head %d times, want 1", reads)
	}
}

// A stat interrupted while the head is read returns at once with EINTR's
// error; the read goes on for the others and is remembered.
func TestInterruptedStatLeavesTheReadToOthers(t *testing.T) {
	fsys, st, nodes := newHeadFS(t, 1, 50*time.Millisecond)
	id := nodes[0].FileID
	ctx, cancel := context.WithCancel(context.Background())
	other := make(chan error, 1)
	go func() {
		_, err := fsys.fileHead(context.Background(), id)
		other <- err
	}()
	cancel()
	if _, err := fsys.fileHead(ctx, id); err != context.Canceled {
		t.Fatalf("interrupted stat: %v, want context.Canceled", err)
	}
	if err := <-other; err != nil {
		t.Fatalf("the other stat: %v", err)
	}
	if _, err := fsys.fileHead(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if reads, _ := st.counts(); reads != 1 {
		t.Fatalf("%d head reads, want 1", reads)
	}
}

// The cache of heads keeps at most its bound, forgetting the least recently
// used; a read that started before the entry now cached does not replace
// it.
func TestHeadCacheBounded(t *testing.T) {
	c := newHeadCache(3)
	t0 := time.Now()
	for i := range 5 {
		c.put(fmt.Sprint(i), headInfo{size: int64(i), seen: t0})
		if _, ok := c.get("0"); !ok && i < 5 {
			t.Fatalf("after put %d: the most used entry was forgotten", i)
		}
	}
	if c.len() != 3 {
		t.Fatalf("%d entries, want the bound 3", c.len())
	}
	for id, want := range map[string]bool{"0": true, "1": false, "2": false, "3": true, "4": true} {
		if _, ok := c.peek(id); ok != want {
			t.Errorf("entry %s cached %v, want %v", id, ok, want)
		}
	}
	c.put("4", headInfo{size: 40, seen: t0.Add(time.Second)})
	c.put("4", headInfo{size: 41, seen: t0}) // read before the entry above
	if h, _ := c.peek("4"); h.size != 40 {
		t.Errorf("an older read replaced a newer head: size %d, want 40", h.size)
	}
	c.remove("0")
	if _, ok := c.peek("0"); ok || c.len() != 2 {
		t.Errorf("remove left the entry or the count (%d)", c.len())
	}
}

// However many files are stat'ed, the mount remembers at most the cache's
// bound of heads.
func TestStatsKeepTheCacheBounded(t *testing.T) {
	fsys, _, nodes := newHeadFS(t, 40, 0)
	fsys.mu.Lock()
	fsys.heads = newHeadCache(16)
	fsys.mu.Unlock()
	for _, nn := range nodes {
		if _, err := fsys.fileHead(context.Background(), nn.FileID); err != nil {
			t.Fatal(err)
		}
	}
	fsys.mu.Lock()
	n := fsys.heads.len()
	fsys.mu.Unlock()
	if n != 16 {
		t.Fatalf("%d heads cached after stats of %d files, want the bound 16", n, len(nodes))
	}
}

// waitReads waits until st has served at least n head reads.
func waitReads(t *testing.T, st *slowHeads, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if reads, _ := st.counts(); reads >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d head reads after 10s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A prefetch that fails leaves the file uncached: its stat reads the head
// itself, and succeeds.
func TestFailedPrefetchLeavesTheStat(t *testing.T) {
	fsys, st, nodes := newHeadFS(t, 1, 0)
	st.mu.Lock()
	st.failNext = 1
	st.mu.Unlock()
	list(t, fsys, namespace.RootIno)
	waitReads(t, st, 1)
	var a fuse.Attr
	if errno := fsys.fillAttr(context.Background(), nodes[0], &a); errno != 0 {
		t.Fatalf("stat after a failed prefetch: %v", errno)
	}
	if reads, _ := st.counts(); reads != 2 {
		t.Fatalf("%d head reads, want 2 (the failed prefetch, the stat's)", reads)
	}
}

// A file open here is not prefetched: its engine answers.
func TestPrefetchSkipsOpenFiles(t *testing.T) {
	fsys, st, nodes := newHeadFS(t, 3, 0)
	ctx := context.Background()
	of, err := fsys.acquire(ctx, nodes[0].FileID)
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.release(ctx, of, false)
	before, _ := st.counts()
	list(t, fsys, namespace.RootIno)
	waitReads(t, st, before+2)
	time.Sleep(20 * time.Millisecond) // room for a wrong read of the open file
	if reads, _ := st.counts(); reads-before != 2 {
		t.Fatalf("a listing of 3 files, one open, read %d heads, want 2", reads-before)
	}
}
