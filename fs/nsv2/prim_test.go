package nsv2

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The primitives against the memory store: one table per primitive, each
// case a state of the name before, the call, and what the caller is told
// and the store holds after.

// cid is a change, mount or file id made of n.
func cid(n int) string { return fmt.Sprintf("%032x", n) }

// fb is the binding of a file of one name, ino n.
func fb(n int) *Binding {
	return &Binding{Ino: namespace.Ino(1<<20 | n), Kind: namespace.KindFile, Node: &Attrs{Mode: 0o644, FileID: cid(n)}}
}

// clock is the store's clock as a test's mount knows it: now, or (late)
// past TxGrace after every lock written so far.
type clock struct {
	mu   sync.Mutex
	late bool
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.late {
		return time.Now().Add(TxGrace + time.Minute)
	}
	return time.Now()
}

func (c *clock) pass() { c.mu.Lock(); c.late = true; c.mu.Unlock() }

// name is one name of the tests: directory, fragments, name.
type name struct {
	dir   namespace.Ino
	frags uint32
	name  string
}

var (
	nameA = name{1, 4, "a"}
	nameB = name{2, 1, "b"}
)

func (nm name) key(t testing.TB) string {
	k, err := DentryKey(root, nm.dir, nm.frags, nm.name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// dentryOf is a dentry object of nm by change, bound to b (nil: a
// tombstone).
func dentryOf(nm name, change string, b *Binding) *Dentry {
	return &Dentry{Dir: nm.dir, Frags: nm.frags, Name: Name(nm.name), Change: change, Bound: b}
}

// store puts d at its key unconditionally and returns its ETag.
func store(t testing.TB, st staging.Store, d *Dentry) string {
	t.Helper()
	body, err := EncodeDentry(d)
	if err != nil {
		t.Fatal(err)
	}
	key, err := d.Key(root)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Put(context.Background(), key, body, staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return info.ETag
}

// stored is the dentry at nm's key (nil: none) and its ETag.
func stored(t testing.TB, st staging.Store, nm name) (*Dentry, string) {
	t.Helper()
	d, info, err := read(context.Background(), st, nm.key(t), kindDentry, DecodeDentry)
	if errors.Is(err, staging.ErrNotFound) {
		return nil, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return d, info.ETag
}

// view is nm's binding as a reader takes it, with the store's clock late or
// not.
func view(t testing.TB, st staging.Store, nm name, late bool) Resolved {
	t.Helper()
	c := &clock{late: late}
	r, err := New(st, root, c.now).Resolve(context.Background(), nm.dir, nm.frags, nm.name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// renameAB is the op list of a rename of nameA to nameB, of the file of
// binding fb(1).
func renameAB() []Op {
	return []Op{
		{Dir: nameA.dir, Frags: nameA.frags, Name: Name(nameA.name)},
		{Dir: nameB.dir, Frags: nameB.frags, Name: Name(nameB.name), To: fb(1)},
	}
}

// lockAB locks nameA (bound to fb(1), ETag etagA) and nameB (no object) for
// a rename by tx, and fails t if it cannot.
func lockAB(t testing.TB, n *Names, tx, etagA string) []Locked {
	t.Helper()
	locks, err := n.Lock(context.Background(), tx, renameAB(), []Held{{ETag: etagA, Bound: fb(1)}, {}})
	if err != nil {
		t.Fatal(err)
	}
	return locks
}

func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

func TestBind(t *testing.T) {
	ours := cid(100)
	for _, tc := range []struct {
		name string
		// before sets the store up; late: the store's clock is past
		// TxGrace after it.
		before func(t *testing.T, st staging.Store, n *Names)
		late   bool
		want   error
		// bound: the name is bound by our change after (else it holds
		// what it held, as a reader takes it: wantView).
		bound    bool
		wantView *Binding
	}{
		{name: "new name", before: func(*testing.T, staging.Store, *Names) {}, bound: true},
		{name: "over a tombstone", before: func(t *testing.T, st staging.Store, _ *Names) {
			store(t, st, dentryOf(nameB, cid(1), nil))
		}, bound: true},
		{name: "taken", before: func(t *testing.T, st staging.Store, _ *Names) {
			store(t, st, dentryOf(nameB, cid(1), fb(2)))
		}, want: namespace.ErrExist, wantView: fb(2)},
		{name: "our own, bound before", before: func(t *testing.T, st staging.Store, _ *Names) {
			store(t, st, dentryOf(nameB, ours, fb(3)))
		}, bound: true},
		{name: "locked, undecided", before: func(t *testing.T, st staging.Store, n *Names) {
			lockAB(t, n, cid(7), store(t, st, dentryOf(nameA, cid(1), fb(1))))
		}, want: ErrLocked},
		{name: "locked, committed to it", before: func(t *testing.T, st staging.Store, n *Names) {
			lockAB(t, n, cid(7), store(t, st, dentryOf(nameA, cid(1), fb(1))))
			if _, err := n.Decide(context.Background(), &Decision{Tx: cid(7), Outcome: Commit, Ops: renameAB()}); err != nil {
				t.Fatal(err)
			}
		}, want: namespace.ErrExist, wantView: fb(1)},
		{name: "locked, aborted", before: func(t *testing.T, st staging.Store, n *Names) {
			lockAB(t, n, cid(7), store(t, st, dentryOf(nameA, cid(1), fb(1))))
			if _, err := n.Decide(context.Background(), &Decision{Tx: cid(7), Outcome: Abort}); err != nil {
				t.Fatal(err)
			}
		}, bound: true},
		{name: "locked, undecided past TxGrace", before: func(t *testing.T, st staging.Store, n *Names) {
			lockAB(t, n, cid(7), store(t, st, dentryOf(nameA, cid(1), fb(1))))
		}, late: true, bound: true},
		{name: "damaged", before: func(t *testing.T, st staging.Store, _ *Names) {
			if _, err := st.Put(context.Background(), nameB.key(t), []byte("CKN2junk"), staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}, want: namespace.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mem.New()
			c := &clock{}
			n := New(st, root, c.now)
			tc.before(t, st, n)
			if tc.late {
				c.pass()
			}
			etag, err := n.Bind(context.Background(), nameB.dir, nameB.frags, nameB.name, ours, fb(3))
			wantErr(t, err, tc.want)
			if errors.Is(err, namespace.ErrCorrupt) {
				return // the name is EIO, left as it is
			}
			d, cur := stored(t, st, nameB)
			if tc.bound {
				if d == nil || d.Change != ours || !reflect.DeepEqual(d.Bound, fb(3)) || d.Lock != nil || etag != cur {
					t.Fatalf("after bind: %+v (ETag %s), want bound by %s (ETag %s)", d, cur, ours, etag)
				}
				return
			}
			if d != nil && d.Change == ours {
				t.Fatalf("refused bind wrote %+v", d)
			}
			var ne *NameError
			if errors.Is(err, namespace.ErrExist) && (!errors.As(err, &ne) || ne.ETag != cur || !reflect.DeepEqual(ne.Dentry.Bound, tc.wantView)) {
				t.Fatalf("EEXIST %v does not carry the binding found (ETag %s)", err, cur)
			}
			if tc.wantView != nil {
				if v := view(t, st, nameB, false); !reflect.DeepEqual(v.Bound, tc.wantView) {
					t.Fatalf("name reads %+v, want %+v", v.Bound, tc.wantView)
				}
			}
		})
	}
}

func TestBindInvalid(t *testing.T) {
	n := New(mem.New(), root, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		what string
		err  error
	}{
		{"name with /", second(n.Bind(ctx, 1, 1, "a/b", cid(1), fb(1)))},
		{"fragments 3", second(n.Bind(ctx, 1, 3, "a", cid(1), fb(1)))},
		{"change id", second(n.Bind(ctx, 1, 1, "a", "x", fb(1)))},
		{"no binding", second(n.Bind(ctx, 1, 1, "a", cid(1), nil))},
		{"tombstone without ETag", second(n.Tombstone(ctx, 1, 1, "a", cid(1), ""))},
		{"lock without ops", second(n.Lock(ctx, cid(1), nil, nil))},
		{"lock held mismatch", second(n.Lock(ctx, cid(1), renameAB(), []Held{{}}))},
		{"claim mount id", second(n.ClaimBatch(ctx, "m", 1))},
		{"finish outcome", n.Finish(ctx, nil, "maybe")},
	} {
		if !errors.Is(tc.err, namespace.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.what, tc.err)
		}
	}
}

func TestTombstone(t *testing.T) {
	ours := cid(100)
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, st staging.Store) (etag string)
		want   error
		gone   bool
	}{
		{name: "held ETag", before: func(t *testing.T, st staging.Store) string {
			return store(t, st, dentryOf(nameA, cid(1), fb(1)))
		}, gone: true},
		{name: "changed since", before: func(t *testing.T, st staging.Store) string {
			old := store(t, st, dentryOf(nameA, cid(1), fb(1)))
			store(t, st, dentryOf(nameA, cid(2), fb(2)))
			return old
		}, want: ErrStale},
		{name: "no object", before: func(t *testing.T, st staging.Store) string { return `"x"` }, want: ErrStale},
		{name: "our own, done before", before: func(t *testing.T, st staging.Store) string {
			old := store(t, st, dentryOf(nameA, cid(1), fb(1)))
			store(t, st, dentryOf(nameA, ours, nil))
			return old
		}, gone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mem.New()
			etag := tc.before(t, st)
			before, beforeETag := stored(t, st, nameA)
			got, err := New(st, root, nil).Tombstone(context.Background(), nameA.dir, nameA.frags, nameA.name, ours, etag)
			wantErr(t, err, tc.want)
			d, cur := stored(t, st, nameA)
			if tc.gone {
				if d == nil || !d.Tombstone() || d.Change != ours || got != cur {
					t.Fatalf("after tombstone: %+v (ETag %s, told %s)", d, cur, got)
				}
				return
			}
			if cur != beforeETag {
				t.Fatalf("refused tombstone changed the name: %+v", d)
			}
			var ne *NameError
			if !errors.As(err, &ne) || ne.ETag != cur || !reflect.DeepEqual(ne.Dentry, before) {
				t.Fatalf("%v does not carry what the name holds (%+v, ETag %s)", err, before, cur)
			}
		})
	}
}

func TestClaimBatch(t *testing.T) {
	ctx := context.Background()
	ours := cid(100)
	claim := func(t *testing.T, st staging.Store, batch uint64, body []byte) {
		key, _ := BatchKey(root, batch)
		if body == nil {
			var err error
			if body, err = EncodeBatch(&Batch{N: batch, Mount: cid(1)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Put(ctx, key, body, staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, st staging.Store)
		from   uint64
		want   uint64
		err    error
	}{
		{name: "free", before: func(*testing.T, staging.Store) {}, from: 1, want: 1},
		{name: "taken", before: func(t *testing.T, st staging.Store) { claim(t, st, 1, nil); claim(t, st, 2, nil) }, from: 1, want: 3},
		{name: "damaged claim skipped", before: func(t *testing.T, st staging.Store) { claim(t, st, 1, []byte("junk")) }, from: 1, want: 2},
		{name: "ours before", before: func(t *testing.T, st staging.Store) {
			body, _ := EncodeBatch(&Batch{N: 1, Mount: ours})
			claim(t, st, 1, body)
		}, from: 1, want: 1},
		{name: "all taken", before: func(t *testing.T, st staging.Store) {
			for b := uint64(5); b < 5+maxClaims; b++ {
				claim(t, st, b, nil)
			}
		}, from: 5, err: ErrNoBatch},
		{name: "past the last", before: func(*testing.T, staging.Store) {}, from: maxBatch + 1, err: ErrNoBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mem.New()
			tc.before(t, st)
			got, err := New(st, root, nil).ClaimBatch(ctx, ours, tc.from)
			wantErr(t, err, tc.err)
			if tc.err != nil {
				return
			}
			key, _ := BatchKey(root, got)
			b, _, err := read(ctx, st, key, kindBatch, DecodeBatch)
			if got != tc.want || err != nil || b.Mount != ours {
				t.Fatalf("claimed %d (%+v, %v), want %d of ours", got, b, err, tc.want)
			}
		})
	}
}

// TestChange runs a rename of nameA (bound) to nameB (no object) through its
// steps and their refusals: every name reads all-old or all-new at every
// point, and as the decision says.
func TestChange(t *testing.T) {
	ctx := context.Background()
	tx := cid(7)
	oldView := func(t *testing.T, st staging.Store, late bool) {
		t.Helper()
		if a, b := view(t, st, nameA, late), view(t, st, nameB, late); !reflect.DeepEqual(a.Bound, fb(1)) || b.Bound != nil {
			t.Fatalf("a reads %+v, b %+v: want the old names", a.Bound, b.Bound)
		}
	}
	newView := func(t *testing.T, st staging.Store) {
		t.Helper()
		a, b := view(t, st, nameA, false), view(t, st, nameB, false)
		if a.Bound != nil || !reflect.DeepEqual(b.Bound, fb(1)) || a.Pending || b.Pending {
			t.Fatalf("a reads %+v, b %+v: want the new names", a, b)
		}
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, st staging.Store, n *Names, c *clock, etagA string)
	}{
		{"commit, finish", func(t *testing.T, st staging.Store, n *Names, c *clock, etagA string) {
			locks := lockAB(t, n, tx, etagA)
			oldView(t, st, false)
			if v := view(t, st, nameA, false); !v.Pending {
				t.Fatalf("an undecided lock reads %+v, want pending", v)
			}
			got, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: renameAB()})
			if err != nil || got != Commit {
				t.Fatalf("decide: %s, %v", got, err)
			}
			if err := n.Finish(ctx, locks, Commit); err != nil {
				t.Fatal(err)
			}
			newView(t, st)
			for _, nm := range []name{nameA, nameB} {
				if d, _ := stored(t, st, nm); d.Lock != nil || d.Change != tx || len(d.Ops) != 2 {
					t.Fatalf("%s after finish: %+v", nm.name, d)
				}
			}
		}},
		{"commit, readers resolve", func(t *testing.T, st staging.Store, n *Names, c *clock, etagA string) {
			lockAB(t, n, tx, etagA)
			if _, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: renameAB()}); err != nil {
				t.Fatal(err)
			}
			b := view(t, st, nameB, false)
			if b.Decision == nil || b.Decision.Outcome != Commit || len(b.Decision.Ops) != 2 {
				t.Fatalf("b resolved without the decision: %+v", b)
			}
			newView(t, st)
		}},
		{"lock refused, undone", func(t *testing.T, st staging.Store, n *Names, c *clock, etagA string) {
			store(t, st, dentryOf(nameB, cid(2), nil)) // b changed since "read"
			_, err := n.Lock(ctx, tx, renameAB(), []Held{{ETag: etagA, Bound: fb(1)}, {}})
			var ne *NameError
			if !errors.As(err, &ne) || !errors.Is(err, ErrStale) || ne.Key != nameB.key(t) || ne.Dentry.Change != cid(2) {
				t.Fatalf("lock: %v, want ErrStale on b", err)
			}
			if a, _ := stored(t, st, nameA); a.Lock != nil {
				t.Fatalf("a still locked: %+v", a)
			}
			oldView(t, st, false)
		}},
		{"lock by another change", func(t *testing.T, st staging.Store, n *Names, c *clock, etagA string) {
			lockAB(t, n, cid(8), etagA)
			_, err := n.Lock(ctx, tx, renameAB(), []Held{{ETag: etagA, Bound: fb(1)}, {}})
			var ne *NameError
			if !errors.As(err, &ne) || !errors.Is(err, ErrStale) || ne.Dentry.Lock == nil || ne.Dentry.Change != cid(8) {
				t.Fatalf("lock: %v, want ErrStale naming the other lock", err)
			}
		}},
		{"dead lock aborted, late commit refused", func(t *testing.T, st staging.Store, n *Names, c *clock, etagA string) {
			locks := lockAB(t, n, tx, etagA)
			oldView(t, st, true) // a reader past TxGrace aborts it
			got, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: renameAB()})
			if got != Abort || !errors.Is(err, ErrAborted) {
				t.Fatalf("decide: %s, %v, want abort", got, err)
			}
			if err := n.Finish(ctx, locks, Abort); err != nil {
				t.Fatal(err)
			}
			oldView(t, st, false)
		}},
		{"abort after commit takes the commit", func(t *testing.T, st staging.Store, n *Names, c *clock, etagA string) {
			lockAB(t, n, tx, etagA)
			if _, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: renameAB()}); err != nil {
				t.Fatal(err)
			}
			got, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Abort})
			if got != Commit || err != nil {
				t.Fatalf("abort after commit: %s, %v", got, err)
			}
			c.pass()
			newView(t, st)
		}},
		{"abort, finish", func(t *testing.T, st staging.Store, n *Names, c *clock, etagA string) {
			locks := lockAB(t, n, tx, etagA)
			if got, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Abort, Ops: renameAB()}); got != Abort || err != nil {
				t.Fatalf("decide abort: %s, %v", got, err)
			}
			if err := n.Finish(ctx, locks, Abort); err != nil {
				t.Fatal(err)
			}
			oldView(t, st, false)
			if b, _ := stored(t, st, nameB); b == nil || !b.Tombstone() {
				t.Fatalf("b after abort: %+v, want a tombstone", b)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mem.New()
			c := &clock{}
			etagA := store(t, st, dentryOf(nameA, cid(1), fb(1)))
			tc.run(t, st, New(st, root, c.now), c, etagA)
		})
	}
}

// TestResolveUndecided: a lock with no decision reads as the old binding,
// pending, until TxGrace has passed by the store's clock; then the reader
// aborts it, and the name is free again.
func TestResolveUndecided(t *testing.T) {
	st := mem.New()
	c := &clock{}
	n := New(st, root, c.now)
	lockAB(t, n, cid(7), store(t, st, dentryOf(nameA, cid(1), fb(1))))
	for _, nm := range []name{nameA, nameB} {
		r := view(t, st, nm, false)
		if !r.Pending || r.Decision != nil {
			t.Fatalf("%s: %+v, want pending", nm.name, r)
		}
	}
	if _, err := n.Bind(context.Background(), nameB.dir, nameB.frags, nameB.name, cid(9), fb(9)); !errors.Is(err, ErrLocked) {
		t.Fatalf("bind on a pending lock: %v", err)
	}
	r := view(t, st, nameB, true)
	if r.Pending || r.Bound != nil || r.Decision == nil || r.Decision.Outcome != Abort {
		t.Fatalf("late: %+v, want aborted", r)
	}
	key, _ := DecisionKey(root, cid(7))
	if x, _, err := read(context.Background(), st, key, kindDecision, DecodeDecision); err != nil || x.Outcome != Abort || len(x.Ops) != 2 {
		t.Fatalf("decision %+v, %v: want abort with the lock's ops", x, err)
	}
	if _, err := n.Bind(context.Background(), nameB.dir, nameB.frags, nameB.name, cid(9), fb(9)); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentBinders: of several binders of one name at once, exactly
// one wins and the others are told EEXIST, on a new name and over a
// tombstone. The goroutines start together; nothing depends on timing.
func TestConcurrentBinders(t *testing.T) {
	const binders, rounds = 8, 40
	st := mem.New()
	n := New(st, root, nil)
	for r := range rounds {
		nm := name{3, 4, fmt.Sprintf("n%d", r)}
		if r%2 == 1 {
			store(t, st, dentryOf(nm, cid(1), nil))
		}
		start := make(chan struct{})
		errs := make([]error, binders)
		var wg sync.WaitGroup
		for i := range binders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = n.Bind(context.Background(), nm.dir, nm.frags, nm.name, cid(1000+i), fb(i))
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: binders %d and %d both won", r, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, namespace.ErrExist):
				t.Fatalf("round %d: binder %d: %v, want EEXIST", r, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no binder won", r)
		}
		if d, _ := stored(t, st, nm); d.Change != cid(1000+winner) {
			t.Fatalf("round %d: the name is %s's, the winner was %d", r, d.Change, winner)
		}
	}
}

// deny is a store whose writes all fail with err (a 403, or a full store),
// its reads passing: what a read-only policy or a quota gives.
type deny struct {
	staging.Store
	err error
}

func (d deny) Put(ctx context.Context, key string, _ []byte, _ staging.PutOptions) (staging.ObjectInfo, error) {
	return staging.ObjectInfo{}, fmt.Errorf("put %s: %w", key, d.err)
}

// TestWritesDenied: a 403 or a full store fails every primitive with that
// error, wrapped and reachable, saying nothing was stored, and stores
// nothing.
func TestWritesDenied(t *testing.T) {
	ctx := context.Background()
	for _, cause := range []error{errors.New("403 AccessDenied"), errors.New("507 Insufficient Storage")} {
		st := mem.New()
		etagA := store(t, st, dentryOf(nameA, cid(1), fb(1)))
		before := st.Len()
		n := New(deny{st, cause}, root, nil)
		for what, err := range map[string]error{
			"bind":      second(n.Bind(ctx, nameB.dir, nameB.frags, nameB.name, cid(9), fb(9))),
			"tombstone": second(n.Tombstone(ctx, nameA.dir, nameA.frags, nameA.name, cid(9), etagA)),
			"lock":      second(n.Lock(ctx, cid(9), renameAB(), []Held{{ETag: etagA, Bound: fb(1)}, {}})),
			"decide":    second(n.Decide(ctx, &Decision{Tx: cid(9), Outcome: Abort})),
			"claim":     second(n.ClaimBatch(ctx, cid(9), 1)),
		} {
			if !errors.Is(err, cause) || !strings.Contains(err.Error(), "not stored") {
				t.Errorf("%s: %v, want %v, not stored", what, err, cause)
			}
		}
		if st.Len() != before {
			t.Fatalf("%v: %d objects after, %d before", cause, st.Len(), before)
		}
		oldView(t, st)
	}
}

func oldView(t *testing.T, st staging.Store) {
	t.Helper()
	if a, b := view(t, st, nameA, false), view(t, st, nameB, false); !reflect.DeepEqual(a.Bound, fb(1)) || b.Bound != nil || a.Pending {
		t.Fatalf("a reads %+v, b %+v: want the old names", a, b)
	}
}
