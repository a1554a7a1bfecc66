package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestChangeCostsNoList: a change at a trusted tail is one PUT, without
// reading the log first, whatever the log's length; the only other requests
// are the snapshots and the trimming passes after them, accounted here.
func TestChangeCostsNoList(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	c := counting.New(mem)
	ns := openNS(t, c, Options{CompactEvery: 100})
	d, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	c.Reset()
	const creates = 1000
	per := map[int]counting.Counts{}
	for i := 1; i <= creates; i++ {
		before := c.Snapshot()
		if _, err := ns.Create(ctx, d.Ino, fmt.Sprint(i), 0o644, Owner{}); err != nil {
			t.Fatal(err)
		}
		ns.Wait() // the snapshot's trimming pass, if any, is counted with it
		if i == 10 || i == creates {
			per[i] = c.Snapshot().Sub(before)
		}
	}
	total := c.Snapshot()
	snaps, err := staging.ListAll(ctx, mem, prefix(testRoot)+snapDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) == 0 {
		t.Fatal("no snapshot written")
	}
	s := int64(len(snaps)) // all younger than TrimGrace: none trimmed
	t.Logf("%d creates: %v; %d snapshots", creates, total, s)
	for _, tc := range []struct {
		op   staging.Op
		want int64
	}{
		{staging.OpPut, creates + s},
		{staging.OpList, 2 * s}, // each trimming pass: one page of the log, one of the snapshots
		{staging.OpGet, 0},
		{staging.OpHead, 0},
		{staging.OpDelete, 0},
	} {
		if got := total.Op(tc.op).Requests; got != tc.want {
			t.Errorf("%s requests: %d, want %d", tc.op, got, tc.want)
		}
	}
	for _, i := range []int{10, creates} {
		if got := per[i]; got.Total().Requests != 1 || got.Op(staging.OpPut).Requests != 1 {
			t.Errorf("create #%d: %v, want one PUT", i, got)
		}
	}
}

// TestIdleRefreshOneGet: a refresh when nothing changed is one GET; with the
// tail no longer trusted it is one LIST, which trusts it again.
func TestIdleRefreshOneGet(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	c := counting.New(mem)
	clock := newFakeClock()
	ns := openNS(t, c, Options{Clock: clock.Now})
	other := openNS(t, mem, Options{})
	for i := range 5 {
		if _, err := ns.Mkdir(ctx, RootIno, fmt.Sprint(i), 0o755, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	refresh := func() counting.Counts {
		t.Helper()
		before := c.Snapshot()
		if err := ns.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		return c.Snapshot().Sub(before)
	}
	want := func(what string, got counting.Counts, gets, lists int64) {
		t.Helper()
		if got.Op(staging.OpGet).Requests != gets || got.Op(staging.OpList).Requests != lists || got.Total().Requests != gets+lists {
			t.Errorf("%s: %v, want %d GET and %d LIST", what, got, gets, lists)
		}
	}
	want("idle refresh", refresh(), 1, 0)
	want("idle refresh again", refresh(), 1, 0)
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(ctx, RootIno, "x", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	seq := ns.Seq()
	// Found by the one GET, then listed on (nothing more; the tail confirmed).
	want("refresh after another mount's change", refresh(), 1, 1)
	if ns.Seq() != seq+1 || dump(t, ns) != dump(t, other) {
		t.Fatalf("after refresh: seq %d, want %d; states equal: %v", ns.Seq(), seq+1, dump(t, ns) == dump(t, other))
	}
	want("idle refresh after that", refresh(), 1, 0)
	clock.Advance(2 * time.Minute) // past the default TailTrust
	want("refresh with an old tail", refresh(), 0, 1)
	want("idle refresh once trusted again", refresh(), 1, 0)
}

// slowLog delays every log entry PUT: a store with some latency, during
// which changes queue.
type slowLog struct {
	staging.Store
	delay time.Duration
}

func (s *slowLog) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if _, ok := parseSeq(key, prefix(testRoot)+logDir); ok {
		time.Sleep(s.delay)
	}
	return s.Store.Put(ctx, key, data, opts)
}

// TestGroupCommit: concurrent changes share entries; every one is there
// once, with its own ino; of changes that conflict inside one entry exactly
// one wins; a mount replaying the log holds the same state.
func TestGroupCommit(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	ns := openNS(t, &slowLog{Store: mem, delay: 5 * time.Millisecond}, Options{})
	d, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, files, shared = 64, 1000, 10
	var next atomic.Int64
	var wins [shared]atomic.Int64
	made := make([]Node, files)
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ns.Mkdir(ctx, RootIno, fmt.Sprintf("s%d", g%shared), 0o755, Owner{}); err == nil {
				wins[g%shared].Add(1)
			} else if !errors.Is(err, ErrExist) {
				errc <- err
				return
			}
			for {
				i := int(next.Add(1)) - 1
				if i >= files {
					return
				}
				n, err := ns.Create(ctx, d.Ino, fmt.Sprint(i), 0o644, Owner{})
				if err != nil {
					errc <- err
					return
				}
				made[i] = n
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for k := range wins {
		if w := wins[k].Load(); w != 1 {
			t.Errorf("mkdir s%d succeeded %d times, want once", k, w)
		}
	}
	entries := logEntries(t, mem)
	ops := 0
	for _, e := range entries {
		ops += len(e.ops())
	}
	t.Logf("%d ops in %d entries", ops, len(entries))
	if ops != 1+shared+files {
		t.Fatalf("%d ops in the log, want %d", ops, 1+shared+files)
	}
	if len(entries) >= files/4 {
		t.Fatalf("%d entries for %d concurrent creates: not grouped", len(entries), files)
	}
	inos := map[Ino]bool{}
	for i, n := range made {
		got, err := ns.Lookup(context.Background(), d.Ino, fmt.Sprint(i))
		if err != nil || got != n || n.Kind != KindFile {
			t.Fatalf("file %d: lookup %+v, %v; create returned %+v", i, got, err, n)
		}
		if inos[n.Ino] {
			t.Fatalf("ino %d twice", n.Ino)
		}
		inos[n.Ino] = true
	}
	if dump(t, openNS(t, mem, Options{})) != dump(t, ns) {
		t.Fatal("a mount replaying the log differs")
	}
}

// countRefusals counts the log PUTs refused because another mount had the
// seq.
func countRefusals(s staging.Store, n *atomic.Int64) *flakyStore {
	f := &flakyStore{Store: s}
	f.putFault = func(string, int) (bool, error) { return false, nil }
	f.onResult = func(err error) {
		if errors.Is(err, staging.ErrPrecondition) {
			n.Add(1)
		}
	}
	return f
}

// TestTwoMountsOptimistic: two mounts appending without reading the log
// first, taking turns and never refreshing: each refusal is read, applied
// and the change checked again (a name the other took gives ErrExist); both
// end identical.
func TestTwoMountsOptimistic(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	var refused atomic.Int64
	a := openNS(t, countRefusals(mem, &refused), Options{})
	b := openNS(t, countRefusals(mem, &refused), Options{})
	ok := 0
	for i := range 50 {
		if _, err := a.Create(ctx, RootIno, fmt.Sprintf("a%d", i), 0o644, Owner{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Create(ctx, RootIno, fmt.Sprintf("b%d", i), 0o644, Owner{}); err != nil {
			t.Fatal(err)
		}
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		if _, err := first.Mkdir(ctx, RootIno, fmt.Sprintf("s%d", i), 0o755, Owner{}); err != nil {
			t.Fatal(err)
		}
		if _, err := second.Mkdir(ctx, RootIno, fmt.Sprintf("s%d", i), 0o755, Owner{}); !errors.Is(err, ErrExist) {
			t.Fatalf("mkdir of the name the other mount took: %v, want ErrExist", err)
		}
		ok += 3
	}
	if refused.Load() == 0 {
		t.Fatal("no append was refused: the mounts did not append optimistically")
	}
	t.Logf("%d appends refused", refused.Load())
	for _, ns := range []*Namespace{a, b} {
		if err := ns.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if ns.Seq() != uint64(ok) {
			t.Fatalf("seq %d, want %d", ns.Seq(), ok)
		}
	}
	if dump(t, a) != dump(t, b) {
		t.Fatal("mounts differ")
	}
}

// TestTrimSafety: mount b looks away for longer than TailTrust while mount
// a writes, snapshots and trims the log. b's next change must not trust its
// old tail (the seq after it was used and trimmed): it lists, sees the gap,
// loads the snapshot and appends at a fresh seq. A mount that only
// refreshes does the same.
func TestTrimSafety(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	clock := newFakeClock()
	a := openNS(t, mem, Options{CompactEvery: 10, Clock: clock.Now})
	b := openNS(t, mem, Options{Clock: clock.Now})
	reader := openNS(t, mem, Options{Clock: clock.Now})
	if _, err := b.Mkdir(ctx, RootIno, "b0", 0o755, Owner{}); err != nil {
		t.Fatal(err)
	}
	bSeq := b.Seq()
	for i := range 30 {
		if _, err := a.Create(ctx, RootIno, fmt.Sprintf("a%d", i), 0o644, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	a.Wait()
	if _, err := mem.Head(ctx, LogKey(testRoot, bSeq+1)); err != nil {
		t.Fatalf("entries younger than TrimGrace were trimmed: %v", err)
	}
	clock.Advance(pastTrimGrace)
	for i := range 30 {
		if _, err := a.Create(ctx, RootIno, fmt.Sprintf("late%d", i), 0o644, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	a.Wait()
	snaps, err := staging.ListAll(ctx, mem, prefix(testRoot)+snapDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 1 {
		t.Fatalf("%d snapshots after trimming, want the newest only", len(snaps))
	}
	newest, _ := parseSeq(snaps[0].Key, prefix(testRoot)+snapDir)
	entries := logEntries(t, mem)
	if len(entries) == 0 || entries[0].Seq != newest {
		t.Fatalf("log starts at %v after trimming, want the newest snapshot's seq %d", entries, newest)
	}
	if _, err := mem.Head(ctx, LogKey(testRoot, bSeq+1)); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("entry %d, after b's tail, not trimmed: %v", bSeq+1, err)
	}
	aSeq := a.Seq()
	if _, err := b.Create(ctx, RootIno, "a0", 0o644, Owner{}); !errors.Is(err, ErrExist) {
		t.Fatalf("b creates a name a made while b looked away: %v, want ErrExist", err)
	}
	if _, err := b.Create(ctx, RootIno, "b1", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	if b.Seq() != aSeq+1 {
		t.Fatalf("b appended at %d, want %d (after a's last entry)", b.Seq(), aSeq+1)
	}
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	want := dump(t, a)
	if dump(t, b) != want || dump(t, reader) != want || dump(t, openNS(t, mem, Options{})) != want {
		t.Fatal("mounts differ after trimming")
	}
}

// holdFirstLog holds the first log entry PUT until release is closed, then
// stores it.
type holdFirstLog struct {
	staging.Store
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *holdFirstLog) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if _, ok := parseSeq(key, prefix(testRoot)+logDir); ok {
		first := false
		s.once.Do(func() { first = true })
		if first {
			close(s.entered)
			<-s.release
		}
	}
	return s.Store.Put(ctx, key, data, opts)
}

// TestQueuedChangeCancelled: a change queued behind an entry being sent,
// whose caller is interrupted, returns at once with the context's error and
// is never sent; the change in flight lands.
func TestQueuedChangeCancelled(t *testing.T) {
	for _, gone := range []bool{false, true} {
		t.Run(fmt.Sprintf("gone=%v", gone), func(t *testing.T) {
			mem := mem.New()
			st := &holdFirstLog{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
			ns := openNS(t, st, Options{})
			first := make(chan error, 1)
			go func() {
				_, err := ns.Mkdir(context.Background(), RootIno, "a", 0o755, Owner{})
				first <- err
			}()
			<-st.entered
			ctx, cancel := context.WithCancel(context.Background())
			if gone {
				ctx = WithGone(ctx, func() bool { return true })
			}
			second := make(chan error, 1)
			go func() {
				_, err := ns.Mkdir(ctx, RootIno, "b", 0o755, Owner{})
				second <- err
			}()
			deadline := time.Now().Add(hangGuard)
			for {
				ns.qmu.Lock()
				queued := len(ns.queue)
				ns.qmu.Unlock()
				if queued == 1 {
					break
				}
				if time.Now().After(deadline) {
					close(st.release)
					t.Fatal("the second change is never queued")
				}
				time.Sleep(time.Millisecond)
			}
			cancel()
			select {
			case err := <-second:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("queued change interrupted: %v, want context.Canceled", err)
				}
			case <-time.After(hangGuard):
				t.Error("a queued change waits for the entry before it")
			}
			close(st.release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			ns.Wait()
			if _, err := ns.Lookup(context.Background(), RootIno, "b"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("lookup b: %v, want ErrNotExist", err)
			}
			if n := len(logEntries(t, mem)); n != 1 {
				t.Fatalf("%d log entries, want 1", n)
			}
		})
	}
}

func TestOrphaned(t *testing.T) {
	ctx := context.Background()
	ns := openNS(t, mem.New(), Options{})
	n, err := ns.Create(ctx, RootIno, "f", 0o644, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() error
		want bool
	}{
		{"named", func() error { return nil }, false},
		{"linked", func() error { _, err := ns.Link(ctx, n.Ino, RootIno, "g"); return err }, false},
		{"one name gone", func() error { _, err := ns.Unlink(ctx, RootIno, "f"); return err }, false},
		{"last name gone", func() error { _, err := ns.Unlink(ctx, RootIno, "g"); return err }, true},
		{"forgotten", func() error { return ns.Forget(ctx, n.FileID) }, false},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := orphaned(t, ns, n.FileID); got != s.want {
			t.Errorf("%s: Orphaned = %v, want %v", s.name, got, s.want)
		}
	}
	if orphaned(t, ns, NewFileID()) {
		t.Error("an unknown file id is an orphan")
	}
}

func TestTailTrustBound(t *testing.T) {
	cases := []struct {
		trust, grace time.Duration
		ok           bool
	}{
		{0, 0, true},
		{time.Minute, 4 * time.Minute, true},
		{time.Minute, 3 * time.Minute, false},
		{5 * time.Minute, 0, false}, // over a quarter of the default 10 minutes
	}
	for _, tc := range cases {
		_, err := Open(context.Background(), mem.New(), testRoot, Options{TailTrust: tc.trust, TrimGrace: tc.grace})
		if (err == nil) != tc.ok {
			t.Errorf("TailTrust %v, TrimGrace %v: %v, want ok=%v", tc.trust, tc.grace, err, tc.ok)
		}
	}
}

// TestEntryOfSeveralOps: an entry's ops apply in order, each after the
// ones before it, inos seq<<16|i; one that does not apply refuses the whole
// entry and leaves the state as it was.
func TestEntryOfSeveralOps(t *testing.T) {
	id := NewFileID()
	st := newState()
	e := newEntry(1, id, 5, []op{
		{Kind: opMkdir, Parent: RootIno, Name: "d", Mode: 0o755},
		{Kind: opCreate, Parent: inoOf(1, 0), Name: "f", Mode: 0o644, FileID: NewFileID()},
		{Kind: opRename, Parent: inoOf(1, 0), Name: "f", NewParent: RootIno, NewName: "g"},
	})
	if err := st.apply(e, false); err != nil {
		t.Fatal(err)
	}
	g := st.nodes[RootIno].children["g"]
	if g.ino != inoOf(1, 1) || g.cookie != uint64(inoOf(1, 2)) || st.seq != 1 {
		t.Fatalf("g = %+v at seq %d, want ino %d cookie %d", g, st.seq, inoOf(1, 1), inoOf(1, 2))
	}
	before := fmt.Sprint(st.record())
	bad := newEntry(2, id, 6, []op{
		{Kind: opUnlink, Parent: RootIno, Name: "g"},
		{Kind: opSetXattr, Ino: inoOf(1, 0), Name: "user.x", Value: []byte("v")},
		{Kind: opRmdir, Parent: RootIno, Name: "g"}, // gone already
	})
	for _, dry := range []bool{true, false} {
		if err := st.apply(bad, dry); err == nil {
			t.Fatalf("dry=%v: an entry whose last op does not apply was applied", dry)
		}
		if got := fmt.Sprint(st.record()); got != before || st.seq != 1 {
			t.Fatalf("dry=%v: a refused entry changed the state", dry)
		}
	}
}

// TestMemoryPerNode measures the memory of the state: per file (node, name
// and file id) and per further name (a hard link).
func TestMemoryPerNode(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100,000 nodes")
	}
	const n = 100_000
	heap := func() uint64 {
		var ms runtimeMemStats
		readMemStats(&ms)
		return ms.HeapAlloc
	}
	st := newState()
	id := NewFileID()
	base := heap()
	for i := range n {
		e := &entry{Seq: uint64(i + 1), ID: id, Time: int64(i), Op: &op{Kind: opCreate, Parent: RootIno,
			Name: bname(fmt.Sprintf("file-%06d", i)), Mode: 0o644, FileID: NewFileID()}}
		if err := st.apply(e, false); err != nil {
			t.Fatal(err)
		}
	}
	files := heap()
	for i := range n {
		e := &entry{Seq: uint64(n + i + 1), ID: id, Time: int64(i), Op: &op{Kind: opLink, Ino: inoOf(1, 0),
			Parent: RootIno, Name: bname(fmt.Sprintf("link-%06d", i))}}
		if err := st.apply(e, false); err != nil {
			t.Fatal(err)
		}
	}
	links := heap()
	perFile := float64(files-base) / n
	perName := float64(links-files) / n
	t.Logf("%.0f bytes per file (node, 11-byte name, file id), %.0f bytes per further name", perFile, perName)
	if perFile > 1024 || perName > 512 {
		t.Fatalf("%.0f bytes per file, %.0f per name: more than budgeted", perFile, perName)
	}
	if len(st.nodes) != n+1 {
		t.Fatal(len(st.nodes))
	}
}

// TestTrimPages: a log longer than a listing page is trimmed page by page,
// down to the snapshot's entry, and a mount opened after reads the snapshot
// and what follows only.
func TestTrimPages(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	clock := newFakeClock()
	ns := openNS(t, mem, Options{CompactEvery: 1 << 40, Clock: clock.Now})
	const n = 2500
	for i := range n {
		if _, err := ns.Create(ctx, RootIno, fmt.Sprint(i), 0o644, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(pastTrimGrace)
	c := counting.New(mem)
	ns.store = c // the trimmer's requests, counted
	if err := ns.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	ns.Wait()
	if got := c.Snapshot().Op(staging.OpDelete).Requests; got != n-1 {
		t.Fatalf("%d deletes, want %d (every entry below the snapshot's)", got, n-1)
	}
	if lists := c.Snapshot().Op(staging.OpList).Requests; lists < 3 {
		t.Fatalf("%d listings for %d entries: not in pages", lists, n)
	}
	entries := logEntries(t, mem)
	if len(entries) != 1 || entries[0].Seq != n {
		t.Fatalf("%d entries left, want the snapshot's (%d) only", len(entries), n)
	}
	counted := counting.New(mem)
	fresh := openNS(t, counted, Options{})
	if dump(t, fresh) != dump(t, ns) {
		t.Fatal("a mount opened after trimming differs")
	}
	if got := counted.Snapshot().Total().Requests; got > 5 {
		t.Fatalf("open after trimming: %v", counted.Snapshot())
	}
}

// TestRefusedChangeVerified: a change its check refuses at a trusted tail
// costs one GET (is the state the end of the log?) and no PUT; when another
// mount changed the log meanwhile, the change is checked against that.
func TestRefusedChangeVerified(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	c := counting.New(mem)
	ns := openNS(t, c, Options{})
	other := openNS(t, mem, Options{})
	if _, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{}); err != nil {
		t.Fatal(err)
	}
	before := c.Snapshot()
	if _, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{}); !errors.Is(err, ErrExist) {
		t.Fatalf("mkdir of an existing name: %v", err)
	}
	if got := c.Snapshot().Sub(before); got.Total().Requests != 1 || got.Op(staging.OpGet).Requests != 1 {
		t.Fatalf("refused mkdir: %v, want one GET", got)
	}
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(ctx, RootIno, "x", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	// ns has not seen x: its unlink must not be refused by its stale state.
	if _, err := ns.Unlink(ctx, RootIno, "x"); err != nil {
		t.Fatalf("unlink of a name another mount made: %v", err)
	}
}

// TestNoResendPastTrimGrace: an entry whose sends fail is not resent at its
// seq once half of TrimGrace has passed since the tail confirmation the seq
// was chosen on, whatever PutAttempts and FinishTimeout allow.
func TestNoResendPastTrimGrace(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	clock := newFakeClock()
	store := &flakyStore{Store: mem}
	ns := openNS(t, store, Options{PutAttempts: 10, Clock: clock.Now})
	store.putFault = func(string, int) (bool, error) {
		clock.Advance(6 * time.Minute) // past half the default TrimGrace
		return false, errLink
	}
	if _, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{}); !errors.Is(err, errLink) {
		t.Fatalf("mkdir over a failing link: %v, want the link error", err)
	}
	store.mu.Lock()
	puts := store.logPuts
	store.mu.Unlock()
	if puts != 1 {
		t.Fatalf("%d sends, want 1", puts)
	}
}
