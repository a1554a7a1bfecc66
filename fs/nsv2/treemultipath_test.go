package nsv2

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The critical path of a rename: the requests sent before the call returns,
// and how many of them follow one another (round trips); the rest, the
// tidy of its locks, after it, read right by every mount before it lands.

// pathStore records the requests of calls (not of tidies) and how they
// overlap, holds the tidies' requests until release is closed, and makes
// the requests of each class (meet) wait until width of them are in flight
// at once: a class sent one after another never gets there, and the test
// fails at the request rather than count a round trip by luck.
type pathStore struct {
	staging.Store
	meet    func(op staging.Op, key string) (class string, width int) // "" none
	release chan struct{}
	once    sync.Once

	mu      sync.Mutex
	seq     int
	reqs    []pathReq
	waiting map[string]chan struct{}
	count   map[string]int
	failed  []string
}

// pathReq is one request of a call: what, and its start and end in seq.
type pathReq struct {
	op         staging.Op
	key        string
	start, end int
}

func newPathStore(st staging.Store) *pathStore {
	return &pathStore{Store: st, release: make(chan struct{}), waiting: map[string]chan struct{}{}, count: map[string]int{}}
}

// do runs f as request op of key.
func (p *pathStore) do(ctx context.Context, op staging.Op, key string, f func()) {
	if isTidy(ctx) {
		<-p.release
		f()
		return
	}
	p.mu.Lock()
	p.seq++
	i := len(p.reqs)
	p.reqs = append(p.reqs, pathReq{op: op, key: key, start: p.seq})
	class, width := "", 0
	if p.meet != nil {
		class, width = p.meet(op, key)
	}
	var ch chan struct{}
	if class != "" {
		if p.waiting[class] == nil {
			p.waiting[class] = make(chan struct{})
		}
		ch = p.waiting[class]
		if p.count[class]++; p.count[class] == width {
			close(ch)
			p.waiting[class], p.count[class] = nil, 0
		}
	}
	p.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			p.mu.Lock()
			p.failed = append(p.failed, fmt.Sprintf("%s %s: not sent beside the %d others of its round", op, key, width-1))
			p.mu.Unlock()
		}
	}
	f()
	p.mu.Lock()
	p.seq++
	p.reqs[i].end = p.seq
	p.mu.Unlock()
}

func (p *pathStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (info staging.ObjectInfo, err error) {
	p.do(ctx, staging.OpPut, key, func() { info, err = p.Store.Put(ctx, key, data, opts) })
	return info, err
}

func (p *pathStore) Get(ctx context.Context, key string, r staging.Range) (data []byte, info staging.ObjectInfo, err error) {
	p.do(ctx, staging.OpGet, key, func() { data, info, err = p.Store.Get(ctx, key, r) })
	return data, info, err
}

func (p *pathStore) Head(ctx context.Context, key string) (info staging.ObjectInfo, err error) {
	p.do(ctx, staging.OpHead, key, func() { info, err = p.Store.Head(ctx, key) })
	return info, err
}

func (p *pathStore) List(ctx context.Context, prefix, startAfter string, max int) (page staging.ListPage, err error) {
	p.do(ctx, staging.OpList, prefix, func() { page, err = p.Store.List(ctx, prefix, startAfter, max) })
	return page, err
}

func (p *pathStore) Delete(ctx context.Context, key string) (err error) {
	p.do(ctx, staging.OpDelete, key, func() { err = p.Store.Delete(ctx, key) })
	return err
}

// free lets the tidies' requests go.
func (p *pathStore) free() { p.once.Do(func() { close(p.release) }) }

// reset forgets the requests recorded.
func (p *pathStore) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs, p.failed = nil, nil
}

// path is the requests recorded (as "OP kind", sorted by start), and the
// round trips: the longest chain of requests each begun after the one
// before it ended.
func (p *pathStore) path() (reqs []string, rounds int, failed []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	depth := make([]int, len(p.reqs))
	for i, r := range p.reqs {
		depth[i] = 1
		for j, q := range p.reqs {
			if q.end != 0 && q.end < r.start && depth[j]+1 > depth[i] {
				depth[i] = depth[j] + 1
			}
		}
		rounds = max(rounds, depth[i])
		reqs = append(reqs, fmt.Sprintf("%s %s", r.op, keyKind(r.key)))
	}
	return reqs, rounds, p.failed
}

// keyKind is which of ns2's objects key is.
func keyKind(key string) string {
	for _, k := range []string{"/ns2/d/", "/ns2/tx/", "/ns2/orphan/", "/ns2/lease/", "/ns2/seal/", "/ns2/moves/"} {
		if strings.Contains(key, k) {
			return strings.Trim(k[len("/ns2"):], "/")
		}
	}
	return key
}

// rounds makes the requests of each round of a rename wait for one
// another (pathStore.meet): the first reads (GETs of dentries) when there
// are reads, then the writes before the decision (dentry PUTs, orphan
// records) of width writes.
func rounds(reads, writes int) func(op staging.Op, key string) (string, int) {
	return func(op staging.Op, key string) (string, int) {
		switch k := keyKind(key); {
		case op == staging.OpGet && k == "d" && reads > 0:
			return "read", reads
		case op == staging.OpPut && k == "d", k == "orphan":
			return "write", writes
		}
		return "", 0
	}
}

// lockedKeys is the keys of dentries in st that hold a lock.
func lockedKeys(t *testing.T, st staging.Store) []string {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, root+"/ns2/d/")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		d, _, err := read(context.Background(), st, o.Key, kindDentry, DecodeDentry)
		if err != nil {
			t.Fatal(err)
		}
		if d.Lock != nil {
			out = append(out, o.Key)
		}
	}
	return out
}

// openTreeTTL is mount m's Tree on st with a TTL and lease clock c, as a
// mount opens it (ns_refresh).
func openTreeTTL(t testing.TB, st staging.Store, m int, c *fakeClock) *Tree {
	t.Helper()
	tr, err := Open(Config{Store: st, Root: root, Mount: cid(m), FirstBatch: 1<<40 + uint64(m)*16,
		Clock: c.now, Sleep: c.sleep, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// TestRenameCriticalPath: a rename returns after its locks (sent at once)
// and its decision: two round trips when the mount knows both names (the
// kernel looked them up just before), three when it must read them (both
// at once); 7 requests in 7 round trips before (two GETs, two locks, the
// decision, two resolutions, one after the other). Its locks are resolved
// after it returns; until then this mount and another read the rename
// whole, from the decision, even a mount that cannot write the
// resolution; at Close the tidy lands and no lock is left.
func TestRenameCriticalPath(t *testing.T) {
	ctx := context.Background()
	rt := namespace.RootIno
	for _, tc := range []struct {
		name string
		// setup makes the names through one and looks them up through
		// the renaming mount (two), as the kernel does before a rename.
		setup    func(t *testing.T, one, two namespace.Names) namespace.Node
		from, to string
		meet     func(op staging.Op, key string) (string, int)
		want     []string
		rounds   int
		orphan   bool // the rename replaces a file
	}{
		{name: "directory within its parent, names known", setup: func(t *testing.T, one, two namespace.Names) namespace.Node {
			n := must(two.Mkdir(ctx, rt, "step.tmp", 0o755, owner))(t)
			must(two.Lookup(ctx, rt, "step.tmp"))(t)
			if _, err := two.Lookup(ctx, rt, "step"); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("lookup of the target: %v", err)
			}
			return n
		}, from: "step.tmp", to: "step", meet: rounds(0, 2),
			want: []string{"put d", "put d", "put tx"}, rounds: 2},
		{name: "file within its parent, names known", setup: func(t *testing.T, one, two namespace.Names) namespace.Node {
			n := must(two.Create(ctx, rt, "f.tmp", 0o644, owner))(t)
			if _, err := two.Lookup(ctx, rt, "f"); !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("lookup of the target: %v", err)
			}
			return n
		}, from: "f.tmp", to: "f", meet: rounds(0, 3),
			// The GET: a stale orphan record of the file moved, beside
			// the locks.
			want: []string{"get orphan", "put d", "put d", "put tx"}, rounds: 2},
		{name: "file over a file, names known", setup: func(t *testing.T, one, two namespace.Names) namespace.Node {
			n := must(two.Create(ctx, rt, "f.tmp", 0o644, owner))(t)
			must(two.Create(ctx, rt, "f", 0o644, owner))(t)
			return n
		}, from: "f.tmp", to: "f", meet: rounds(0, 4), orphan: true,
			want: []string{"get orphan", "put d", "put d", "put orphan", "put tx"}, rounds: 2},
		{name: "directory of another mount's, names not known", setup: func(t *testing.T, one, two namespace.Names) namespace.Node {
			return must(one.Mkdir(ctx, rt, "step.tmp", 0o755, owner))(t)
		}, from: "step.tmp", to: "step", meet: rounds(2, 2),
			want: []string{"get d", "get d", "put d", "put d", "put tx"}, rounds: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mem.NewS3ETags()
			ps := newPathStore(st)
			c := newFakeClock()
			one, two := openTreeTTL(t, st, 1, c), openTreeTTL(t, ps, 2, c)
			t.Cleanup(ps.free) // before two's Close, which waits for them
			n := tc.setup(t, one, two)
			ps.reset()
			ps.meet = tc.meet
			if _, err := two.Rename(ctx, rt, tc.from, rt, tc.to, 0); err != nil {
				t.Fatal(err)
			}
			reqs, rounds, failed := ps.path()
			ps.meet = nil
			if len(failed) > 0 {
				t.Fatalf("not sent at once: %v", failed)
			}
			if strings.Join(sortedCopy(reqs), ", ") != strings.Join(tc.want, ", ") || rounds != tc.rounds {
				t.Fatalf("the rename sent %v in %d round trips, want %v in %d", reqs, rounds, tc.want, tc.rounds)
			}
			if l := lockedKeys(t, st); len(l) != 2 {
				t.Fatalf("locks in the store before the tidy: %v, want both names'", l)
			}
			// Read by a mount that cannot write the resolution (the
			// locks stay), by this mount, and by another that can.
			denied := openTreeTTL(t, deny{Store: st, err: errors.New("denied")}, 3, c)
			for i, ns := range []namespace.Names{denied, two, one} {
				if got := must(ns.Lookup(ctx, rt, tc.to))(t); got.Ino != n.Ino {
					t.Fatalf("mount %d: %s is %d, want %d", i, tc.to, got.Ino, n.Ino)
				}
				if _, err := ns.Lookup(ctx, rt, tc.from); !errors.Is(err, namespace.ErrNotExist) {
					t.Fatalf("mount %d: lookup of %s after: %v", i, tc.from, err)
				}
				l := names(t, ns, rt)
				if _, ok := l[tc.from]; ok || l[tc.to] != n.Ino {
					t.Fatalf("mount %d lists %v", i, l)
				}
				if i == 0 && len(lockedKeys(t, st)) != 2 {
					t.Fatalf("a mount that cannot write resolved a lock")
				}
			}
			if o := must(one.Orphans(ctx))(t); (len(o) == 1) != tc.orphan {
				t.Fatalf("orphans %+v", o)
			}
			ps.free()
			if err := two.Close(); err != nil {
				t.Fatal(err)
			}
			if l := lockedKeys(t, st); len(l) != 0 {
				t.Fatalf("locks left after Close: %v", l)
			}
		})
	}
}

// sortedCopy is s sorted.
func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestRenameTidiedOnItsMount: a mount's own next change of a name its
// rename left locked (the tidy held back) reads it, resolves it from the
// decision and goes on: a rename there and back, and a rename of the
// directory renamed.
func TestRenameTidiedOnItsMount(t *testing.T) {
	ctx := context.Background()
	rt := namespace.RootIno
	st := mem.NewS3ETags()
	ps := newPathStore(st)
	c := newFakeClock()
	a := openTreeTTL(t, ps, 1, c)
	t.Cleanup(ps.free)
	d := must(a.Mkdir(ctx, rt, "a", 0o755, owner))(t)
	for _, step := range [][2]string{{"a", "b"}, {"b", "a"}, {"a", "c"}} {
		if _, err := a.Rename(ctx, rt, step[0], rt, step[1], 0); err != nil {
			t.Fatalf("rename %s to %s: %v", step[0], step[1], err)
		}
	}
	ps.free()
	for _, ns := range []namespace.Names{a, openTree(t, st, 2)} {
		if l := names(t, ns, rt); len(l) != 1 || l["c"] != d.Ino {
			t.Fatalf("the root lists %v, want c only", l)
		}
	}
}

// TestTwoMountsLockCrossed: two mounts change the same two names at once,
// each naming them in the other order (an exchange of x and y against one
// of y and x; a rename of x over y against one of y over x): the locks of
// both are sent at once, so each may take one name and be refused the
// other. Neither waits holding a lock — the one refused undoes its own and
// tries again after a random wait — so both finish (no deadlock), and the
// names end as the two changes made one after the other.
func TestTwoMountsLockCrossed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt := namespace.RootIno
	st := mem.NewS3ETags()
	a, b := openTree(t, st, 1), openTree(t, st, 2)
	x := must(a.Create(ctx, rt, "x", 0o644, owner))(t)
	y := must(a.Create(ctx, rt, "y", 0o644, owner))(t)
	for i := range 20 {
		errs := race(
			func() error { _, err := a.Rename(ctx, rt, "x", rt, "y", namespace.RenameExchange); return err },
			func() error { _, err := b.Rename(ctx, rt, "y", rt, "x", namespace.RenameExchange); return err })
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if l := names(t, openTree(t, st, 3+i), rt); l["x"] != x.Ino || l["y"] != y.Ino {
			t.Fatalf("round %d: two exchanges left %v", i, l)
		}
	}
	// Renames over each other: one goes first, the other moves the name
	// back or finds its source gone.
	for i := range 10 {
		errs := race(
			func() error { _, err := a.Rename(ctx, rt, "x", rt, "y", 0); return err },
			func() error { _, err := b.Rename(ctx, rt, "y", rt, "x", 0); return err })
		for _, err := range errs {
			if err != nil && !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		l := names(t, openTree(t, st, 30+i), rt)
		if len(l) != 1 {
			t.Fatalf("round %d: renames over each other left %v", i, l)
		}
		for n := range l { // put both names back for the next round
			if n != "x" {
				must(a.Rename(ctx, rt, n, rt, "x", 0))(t)
			}
			must(a.Create(ctx, rt, "y", 0o644, owner))(t)
		}
	}
}

// TestRenameMoreFaults: a fault at every request, and a mount dying after
// each, of the renames the critical path counts: a directory within its
// parent, and a file over another, both names known to the mount.
func TestRenameMoreFaults(t *testing.T) {
	ctx := context.Background()
	rt := namespace.RootIno
	var d, f, g namespace.Node
	rootIs := func(t *testing.T, three namespace.Names, done, none map[string]namespace.Ino) string {
		l := names(t, three, rt)
		for name, ino := range l {
			if n := must(three.Lookup(ctx, rt, name))(t); n.Ino != ino {
				return fmt.Sprintf("%s listed as %d, looked up as %d", name, ino, n.Ino)
			}
		}
		switch {
		case fmt.Sprint(l) == fmt.Sprint(done):
			return "done"
		case fmt.Sprint(l) == fmt.Sprint(none):
			return "none"
		}
		return fmt.Sprintf("the root lists %v", l)
	}
	cases := []treeFaultCase{
		{name: "directory within its parent", setup: func(t *testing.T, one, two namespace.Names) {
			d = must(one.Mkdir(ctx, rt, "step.tmp", 0o755, owner))(t)
			must(two.Lookup(ctx, rt, "step.tmp"))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Rename(ctx, rt, "step.tmp", rt, "step", 0)
			return err
		}, state: func(t *testing.T, three namespace.Names) string {
			return rootIs(t, three, map[string]namespace.Ino{"step": d.Ino}, map[string]namespace.Ino{"step.tmp": d.Ino})
		}},
		{name: "file over a file, known", setup: func(t *testing.T, one, two namespace.Names) {
			f = must(one.Create(ctx, rt, "f.tmp", 0o644, owner))(t)
			g = must(one.Create(ctx, rt, "f", 0o644, owner))(t)
			must(two.Lookup(ctx, rt, "f.tmp"))(t)
			must(two.Lookup(ctx, rt, "f"))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Rename(ctx, rt, "f.tmp", rt, "f", 0)
			return err
		}, state: func(t *testing.T, three namespace.Names) string {
			s := rootIs(t, three, map[string]namespace.Ino{"f": f.Ino}, map[string]namespace.Ino{"f": g.Ino, "f.tmp": f.Ino})
			o := must(three.Orphans(ctx))(t)
			if s == "done" && (len(o) != 1 || o[0].Ino != g.Ino) || s == "none" && len(o) != 0 {
				return fmt.Sprintf("%s with orphans %+v", s, o)
			}
			return s
		}},
	}
	for _, fc := range cases {
		t.Run(fc.name+"/fault", func(t *testing.T) { faultAtEveryRequest(t, fc, 3) })
		t.Run(fc.name+"/dies", func(t *testing.T) { diesAtEveryRequest(t, fc) })
	}
}
