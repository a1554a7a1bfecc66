package nsv2

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// latencyStore is a store whose every request takes d of c's time.
type latencyStore struct {
	staging.Store
	c *fakeClock
	d time.Duration
}

func (s latencyStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	s.c.sleep(ctx, s.d)
	return s.Store.Get(ctx, key, r)
}

func (s latencyStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	s.c.sleep(ctx, s.d)
	return s.Store.Put(ctx, key, data, opts)
}

func (s latencyStore) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	s.c.sleep(ctx, s.d)
	return s.Store.List(ctx, prefix, startAfter, max)
}

// openTTL is mount m's Tree on st with clock c, a TTL of one second and no
// refresher goroutine: the test runs its passes (refreshPass).
func openTTL(t testing.TB, st staging.Store, m int, c *fakeClock) *Tree {
	t.Helper()
	tr, err := Open(Config{Store: st, Root: root, Mount: cid(m), FirstBatch: 1<<40 + uint64(m)*16,
		Clock: c.now, Sleep: c.sleep, TTL: time.Second, RefreshEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// The requests on a create's path, as a mount sends them: for each file in
// d/sub, the kernel looks up d and sub once its entry timeout (as long as
// the TTL) is over, the mount reads sub's default ACL and looks the new name
// up (a miss, and on a miss it reads sub's node), then creates it; the
// file's head and data take three more round trips. Every request takes 30
// ms. With the refresher's passes run every TTL/8 in between, the creates
// send their PUT and nothing else: the names and the listing in use are
// read again before they expire, and the lease renewed. Without them,
// about once a TTL a create waits a GET of d, one of sub and a LIST of sub
// (before the refresher, a lookup of a name known but stale listed its
// directory first, then read it: a LIST and a GET), and past LeaseRenew
// one waits for the lease's renewal.
func TestCreatePathRequests(t *testing.T) {
	for _, tc := range []struct {
		name   string
		passes bool
	}{{"refresher", true}, {"none", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := newFakeClock()
			cs := counting.New(mem.NewS3ETags())
			a := openTTL(t, latencyStore{cs, c, 30 * time.Millisecond}, 1, c)
			rt := namespace.RootIno
			d := must(a.Mkdir(ctx, rt, "d", 0o755, owner))(t)
			sub := must(a.Mkdir(ctx, d.Ino, "sub", 0o755, owner))(t)
			kernel := map[string]time.Time{} // when the kernel last looked each up
			lastPass := c.now()
			fg, bg := map[staging.Op]int64{}, map[staging.Op]int64{}
			add := func(m map[staging.Op]int64, c counting.Counts) {
				for _, op := range []staging.Op{staging.OpPut, staging.OpGet, staging.OpList, staging.OpHead, staging.OpDelete} {
					m[op] += c.Op(op).Requests
				}
			}
			create := func(i int) {
				for _, p := range []struct {
					dir  namespace.Ino
					name string
				}{{rt, "d"}, {d.Ino, "sub"}} {
					if c.now().Sub(kernel[p.name]) >= time.Second {
						must(a.Lookup(ctx, p.dir, p.name))(t)
						kernel[p.name] = c.now()
					}
				}
				if _, err := a.GetXattr(ctx, sub.Ino, "user.acl"); !errors.Is(err, namespace.ErrNoAttr) {
					t.Fatal(err)
				}
				name := fmt.Sprintf("f%03d", i)
				if _, err := a.Lookup(ctx, sub.Ino, name); !errors.Is(err, namespace.ErrNotExist) {
					t.Fatal(err)
				}
				must(a.GetNode(ctx, sub.Ino))(t)
				must(a.Create(ctx, sub.Ino, name, 0o644, owner))(t)
				c.sleep(ctx, 90*time.Millisecond) // the file's head and data
			}
			// The first 16 (about 3 s): the lease, the batch, the first
			// listing, and the first reads of d and sub, before their uses
			// span half a TTL and the refresher takes them as in use.
			for i := range 80 {
				s0 := cs.Snapshot()
				create(i)
				if i >= 16 {
					add(fg, cs.Snapshot().Sub(s0))
				}
				if tc.passes && c.now().Sub(lastPass) >= time.Second/8 {
					s1 := cs.Snapshot()
					a.refreshPass(ctx)
					add(bg, cs.Snapshot().Sub(s1))
					lastPass = c.now()
				}
			}
			puts, reads := fg[staging.OpPut], fg[staging.OpGet]+fg[staging.OpList]+fg[staging.OpHead]
			t.Logf("64 creates: on their path %v; read ahead %v", fg, bg)
			switch {
			case tc.passes && (puts != 64 || reads != 0 || fg[staging.OpDelete] != 0):
				t.Errorf("with the refresher, 64 creates waited for %v, want their 64 PUTs alone", fg)
			case !tc.passes && reads == 0:
				t.Errorf("without the refresher, 64 creates over %v waited for no read", 64*180*time.Millisecond)
			}
		})
	}
}

// A lookup of a name cached bound but past its TTL reads the name (one
// GET); it listed the directory first (a LIST, then the GET).
func TestStaleNameOneGet(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	cs := counting.New(mem.NewS3ETags())
	a := openTTL(t, cs, 1, c)
	rt := namespace.RootIno
	must(a.Mkdir(ctx, rt, "d", 0o755, owner))(t)
	c.sleep(ctx, time.Second)
	s0 := cs.Snapshot()
	must(a.Lookup(ctx, rt, "d"))(t)
	if got := cs.Snapshot().Sub(s0); got.Total().Requests != 1 || got.Op(staging.OpGet).Requests != 1 {
		t.Fatalf("a lookup of a stale name sent %v, want one GET", got)
	}
}

// failList is a store whose LISTs fail while fail is set.
type failList struct {
	staging.Store
	fail *atomic.Bool
}

func (s failList) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	if s.fail.Load() {
		return staging.ListPage{}, errors.New("injected")
	}
	return s.Store.List(ctx, prefix, startAfter, max)
}

// A listing read ahead answers misses as the listing it replaces did, for
// the TTL from when its LIST was sent; a pass sends nothing for a listing
// younger than 3/4 of the TTL, nor for one not used for two TTLs. A
// listing read ahead that fails leaves the old one to expire: a miss past
// the TTL lists again, and finds a name another mount made since.
func TestListingReadAhead(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	st := mem.NewS3ETags()
	cs := counting.New(st)
	var fail atomic.Bool
	a := openTTL(t, failList{cs, &fail}, 1, c)
	b := openTree(t, st, 2)
	rt := namespace.RootIno
	d := must(a.Mkdir(ctx, rt, "d", 0o755, owner))(t)
	must(b.Lookup(ctx, rt, "d"))(t)
	miss := func(name string) error {
		_, err := a.Lookup(ctx, d.Ino, name)
		return err
	}
	pass := func() counting.Counts {
		s0 := cs.Snapshot()
		a.refreshPass(ctx)
		return cs.Snapshot().Sub(s0)
	}
	if err := miss("x"); !errors.Is(err, namespace.ErrNotExist) { // lists d
		t.Fatal(err)
	}
	must(b.Create(ctx, d.Ino, "x", 0o644, owner))(t)
	c.sleep(ctx, 500*time.Millisecond)
	if got := pass(); got.Total().Requests != 0 {
		t.Fatalf("a pass over a listing half its TTL old sent %v", got)
	}
	if err := miss("x"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("x, made after the listing, within its TTL: %v; want the listing's answer", err)
	}
	c.sleep(ctx, 300*time.Millisecond)
	if got := pass(); got.Op(staging.OpList).Requests != 1 || got.Total().Requests != 1 {
		t.Fatalf("a pass over a listing in use 0.8 TTL old sent %v, want one LIST", got)
	}
	s0 := cs.Snapshot()
	must(a.Lookup(ctx, d.Ino, "x"))(t) // in the new listing: read
	if err := miss("y"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatal(err)
	}
	if got := cs.Snapshot().Sub(s0); got.Op(staging.OpList).Requests != 0 {
		t.Fatalf("lookups after the read ahead sent %v, want no LIST", got)
	}

	// The read ahead fails: the listing expires, and the next miss lists.
	must(b.Create(ctx, d.Ino, "y", 0o644, owner))(t)
	c.sleep(ctx, 800*time.Millisecond)
	fail.Store(true)
	pass()
	fail.Store(false)
	if err := miss("y"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("y within the TTL of the listing: %v", err)
	}
	c.sleep(ctx, 200*time.Millisecond)
	must(a.Lookup(ctx, d.Ino, "y"))(t)

	// Not used for two TTLs: nothing is read ahead.
	c.sleep(ctx, 2*time.Second)
	if got := pass(); got.Total().Requests != 0 {
		t.Fatalf("a pass over names and listings unused for two TTLs sent %v", got)
	}
}

// A name in use is read again before its TTL is over, and keeps being
// served; another mount's change of it shows by the read ahead.
func TestNameReadAhead(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	st := mem.NewS3ETags()
	cs := counting.New(st)
	a := openTTL(t, cs, 1, c)
	b := openTree(t, st, 2)
	rt := namespace.RootIno
	f := must(a.Create(ctx, rt, "f", 0o644, owner))(t)
	must(b.Lookup(ctx, rt, "f"))(t)
	mode := uint32(0o600)
	must(b.SetAttr(ctx, f.Ino, namespace.SetAttr{Mode: &mode}))(t)
	must(a.Lookup(ctx, rt, "f"))(t) // the first use
	for range 3 {
		c.sleep(ctx, 800*time.Millisecond)
		must(a.Lookup(ctx, rt, "f"))(t) // a use, from the cache
		s0 := cs.Snapshot()
		a.refreshPass(ctx)
		if got := cs.Snapshot().Sub(s0); got.Op(staging.OpGet).Requests != 1 {
			t.Fatalf("a pass over a name in use 0.8 TTL old sent %v, want its GET", got)
		}
	}
	s0 := cs.Snapshot()
	n := must(a.Lookup(ctx, rt, "f"))(t)
	if got := cs.Snapshot().Sub(s0); got.Total().Requests != 0 || n.Mode != mode {
		t.Fatalf("lookup after the read ahead: mode %o, sent %v; want %o from the cache", n.Mode, got, mode)
	}
}

// gateStore holds the answer to a GET of key until release is closed,
// after reading it (so the answer is what the store held before).
type gateStore struct {
	staging.Store
	key     string
	entered chan struct{}
	release chan struct{}
}

func (s gateStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	b, info, err := s.Store.Get(ctx, key, r)
	if key == s.key {
		close(s.entered)
		<-s.release
	}
	return b, info, err
}

// A read ahead of a name whose answer comes after this mount changed the
// name caches nothing: the change is newer. Before the check, the entry
// of the change was replaced by the older read, and a stat showed the old
// mode until the next read.
func TestReadAheadKeepsNewerChange(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	st := mem.NewS3ETags()
	rt := namespace.RootIno
	key, err := DentryKey(root, rt, 1, "f")
	if err != nil {
		t.Fatal(err)
	}
	g := gateStore{Store: st, key: key, entered: make(chan struct{}), release: make(chan struct{})}
	a := openTTL(t, g, 1, c)
	f := must(a.Create(ctx, rt, "f", 0o644, owner))(t)
	must(a.Lookup(ctx, rt, "f"))(t)
	c.sleep(ctx, 800*time.Millisecond)
	must(a.Lookup(ctx, rt, "f"))(t) // used over 0.8 TTL: in use
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.refreshPass(ctx)
	}()
	<-g.entered
	mode := uint32(0o600)
	must(a.SetAttr(ctx, f.Ino, namespace.SetAttr{Mode: &mode}))(t)
	close(g.release)
	<-done
	if n := must(a.GetNode(ctx, f.Ino))(t); n.Mode != mode {
		t.Fatalf("after a read ahead that began before the chmod: mode %o, want %o", n.Mode, mode)
	}
}

// Close stops the refresher and waits for it.
func TestRefresherStoppedByClose(t *testing.T) {
	ctx := context.Background()
	a, err := Open(Config{Store: mem.NewS3ETags(), Root: root, Mount: cid(1), FirstBatch: 1<<40 + 16,
		TTL: time.Second, RefreshEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if a.refresher == nil {
		t.Fatal("no refresher with a TTL")
	}
	must(a.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
	must(a.Lookup(ctx, namespace.RootIno, "f"))(t)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.refresher.done:
	default:
		t.Fatal("Close returned with the refresher running")
	}
	b, err := Open(Config{Store: mem.NewS3ETags(), Root: root, Mount: cid(2), TTL: time.Second, RefreshEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.refresher != nil {
		t.Fatal("a refresher with RefreshEvery < 0")
	}
}

// A create lease in use is renewed by the refresher before LeaseRenew is
// over, so that the creates after send their PUT alone; before, the first
// create past LeaseRenew waited for the lease's PUT and the seal's GET. A
// renewal ahead that finds the directory sealed drops the lease, and the
// next create in it fails as at a renewal of its own.
func TestLeaseRenewedAhead(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	st := mem.NewS3ETags()
	cs := counting.New(st)
	a := openTTL(t, cs, 1, c)
	d := must(a.Mkdir(ctx, namespace.RootIno, "d", 0o755, owner))(t)
	must(a.Create(ctx, d.Ino, "f0", 0o644, owner))(t) // takes the lease
	c.sleep(ctx, 8*time.Second)
	must(a.Create(ctx, d.Ino, "f1", 0o644, owner))(t) // under it, still valid
	s0 := cs.Snapshot()
	a.refreshPass(ctx)
	if got := cs.Snapshot().Sub(s0); got.Op(staging.OpPut).Requests != 1 || got.Op(staging.OpGet).Requests < 1 {
		t.Fatalf("a pass over a lease in use renewed 8 s ago sent %v, want its PUT and the seal's GET", got)
	}
	c.sleep(ctx, 4*time.Second) // 12 s after the lease was taken, 4 s after its renewal
	s1 := cs.Snapshot()
	must(a.Create(ctx, d.Ino, "f2", 0o644, owner))(t)
	if got := cs.Snapshot().Sub(s1); got.Total().Requests != 1 {
		t.Fatalf("a create 12 s after the lease was taken sent %v, want its PUT alone", got)
	}

	// Another mount's removal has sealed d (its change not decided).
	key, err := SealKey(root, d.Ino)
	if err != nil {
		t.Fatal(err)
	}
	body, err := EncodeSeal(&Seal{Dir: d.Ino, Tx: newID()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, key, body, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c.sleep(ctx, 4*time.Second)
	a.refreshPass(ctx)
	lk, err := LeaseKey(root, d.Ino, cid(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Head(ctx, lk); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("the lease after a renewal ahead saw the seal: %v, want it deleted", err)
	}
	if _, err := a.Create(ctx, d.Ino, "f3", 0o644, owner); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("a create in a directory whose seal the renewal ahead saw: %v, want ErrNotExist", err)
	}
}

// Names used in one burst (a listing's names stat'ed once: ls -l) are not
// read ahead: only uses over half a TTL or more count as in use.
func TestBurstNotReadAhead(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	cs := counting.New(mem.NewS3ETags())
	a := openTTL(t, cs, 1, c)
	rt := namespace.RootIno
	for i := range 10 {
		must(a.Create(ctx, rt, fmt.Sprintf("f%d", i), 0o644, owner))(t)
	}
	for range 3 {
		for i := range 10 {
			must(a.Lookup(ctx, rt, fmt.Sprintf("f%d", i)))(t)
		}
		c.sleep(ctx, 100*time.Millisecond)
	}
	c.sleep(ctx, 600*time.Millisecond)
	s0 := cs.Snapshot()
	a.refreshPass(ctx)
	if got := cs.Snapshot().Sub(s0); got.Total().Requests != 0 {
		t.Fatalf("a pass after a burst of lookups 0.3 TTL long sent %v", got)
	}
}
