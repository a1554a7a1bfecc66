package nsv2

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The primitives under faults: each is run with a fault at its k-th request
// for every k (an error, the store's 500 or 503 that its client gave up on,
// and a lost answer: the request applied, its answer lost), and then with
// two faults in a row (a lost answer whose read-back fails too). After each
// run the store must hold the change whole or not at all, never a part, and
// what the caller was told must say which.

// faultCase is one primitive's run from one state.
type faultCase struct {
	name  string
	setup func(t *testing.T, st staging.Store, n *Names)
	late  bool // the store's clock is past TxGrace during the run
	// run is the call; it says "done" or "none" when it answers nil.
	run func(ctx context.Context, n *Names) (string, error)
	// state says what the store holds after: "done", "none", or what
	// else it holds (a half change).
	state func(t *testing.T, st staging.Store) string
	// read: run only reads (and tidies); its error says nothing of the
	// state, which is the same whatever it answers.
	read bool
	// retry: calling run again with the same ids after an error finishes
	// the change.
	retry bool
	// settled: after one fault, neither name is left locked by an
	// undecided change (no reader waits TxGrace for it).
	settled bool
}

// boundBy is "done" when nm is bound to b by change, "none" when a reader
// takes it as unbound (or as bound to old, when old is set), else what it
// holds.
func boundBy(t *testing.T, st staging.Store, nm name, change string, b, old *Binding) string {
	d, _ := stored(t, st, nm)
	if d != nil && d.Change == change && d.Lock == nil && reflect.DeepEqual(d.Bound, b) {
		return "done"
	}
	if v := view(t, st, nm, true); reflect.DeepEqual(v.Bound, old) && !v.Pending {
		return "none"
	}
	return fmt.Sprintf("%+v", d)
}

// renameRun is a rename of nameA to nameB as a caller makes it from the
// primitives: lock, decide commit, finish; a decision whose answer is lost
// for good is settled by deciding abort, which finds the commit if it
// landed.
func renameRun(ctx context.Context, n *Names, tx, etagA string) (string, error) {
	locks, err := n.Lock(ctx, tx, renameAB(), []Held{{ETag: etagA, Bound: fb(1)}, {}})
	if err != nil {
		return "", err
	}
	out, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: renameAB()})
	if out == "" {
		if out, err = n.Decide(ctx, &Decision{Tx: tx, Outcome: Abort, Ops: renameAB()}); err != nil {
			return "", fmt.Errorf("rename: not known whether committed: %w", err)
		}
	}
	_ = n.Finish(ctx, locks, out) // tidying: readers resolve what it leaves
	if out != Commit {
		return "", fmt.Errorf("rename: %w", ErrAborted)
	}
	return "done", nil
}

func faultCases() []faultCase {
	ours := cid(100)
	tx := cid(7)
	bindB := func(ctx context.Context, n *Names) (string, error) {
		_, err := n.Bind(ctx, nameB.dir, nameB.frags, nameB.name, ours, fb(3))
		return "done", err
	}
	boundB := func(t *testing.T, st staging.Store) string { return boundBy(t, st, nameB, ours, fb(3), nil) }
	lockB := func(t *testing.T, st staging.Store, n *Names) {
		lockAB(t, n, tx, store(t, st, dentryOf(nameA, cid(1), fb(1))))
	}
	var etagA string // of nameA as set up, for tombstone and rename
	return []faultCase{
		{name: "bind new", setup: func(*testing.T, staging.Store, *Names) {}, run: bindB, state: boundB, retry: true},
		{name: "bind over tombstone", setup: func(t *testing.T, st staging.Store, _ *Names) {
			store(t, st, dentryOf(nameB, cid(1), nil))
		}, run: bindB, state: boundB, retry: true},
		{name: "bind over aborted lock", setup: func(t *testing.T, st staging.Store, n *Names) {
			lockB(t, st, n)
			if _, err := n.Decide(context.Background(), &Decision{Tx: tx, Outcome: Abort}); err != nil {
				t.Fatal(err)
			}
		}, run: bindB, state: boundB, retry: true},
		{name: "bind over dead lock", setup: lockB, late: true, run: bindB, state: boundB, retry: true},
		{name: "tombstone", setup: func(t *testing.T, st staging.Store, _ *Names) {
			etagA = store(t, st, dentryOf(nameA, cid(1), fb(1)))
		}, run: func(ctx context.Context, n *Names) (string, error) {
			_, err := n.Tombstone(ctx, nameA.dir, nameA.frags, nameA.name, ours, etagA)
			return "done", err
		}, state: func(t *testing.T, st staging.Store) string {
			return boundBy(t, st, nameA, ours, nil, fb(1))
		}, retry: true},
		{name: "claim batch", setup: func(t *testing.T, st staging.Store, n *Names) {
			if _, err := n.ClaimBatch(context.Background(), cid(1), 0); err != nil {
				t.Fatal(err)
			}
		}, run: func(ctx context.Context, n *Names) (string, error) {
			b, err := n.ClaimBatch(ctx, ours, 0)
			if err == nil && b != 1 {
				return fmt.Sprintf("batch %d", b), nil
			}
			return "done", err
		}, state: func(t *testing.T, st staging.Store) string {
			var mine []uint64
			objs, err := staging.ListAll(context.Background(), st, root+"/ns2/ino/")
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				b, _, err := read(context.Background(), st, o.Key, kindBatch, DecodeBatch)
				if err != nil {
					t.Fatal(err)
				}
				if b.Mount == ours {
					mine = append(mine, b.N)
				}
			}
			switch {
			case len(mine) == 0:
				return "none"
			case len(mine) == 1 && mine[0] == 1:
				return "done"
			}
			return fmt.Sprintf("batches %v", mine)
		}, retry: true},
		{name: "rename", setup: func(t *testing.T, st staging.Store, _ *Names) {
			etagA = store(t, st, dentryOf(nameA, cid(1), fb(1)))
		}, run: func(ctx context.Context, n *Names) (string, error) {
			return renameRun(ctx, n, tx, etagA)
		}, state: renameState, settled: true},
		{name: "resolve committed", setup: func(t *testing.T, st staging.Store, n *Names) {
			lockB(t, st, n)
			if _, err := n.Decide(context.Background(), &Decision{Tx: tx, Outcome: Commit, Ops: renameAB()}); err != nil {
				t.Fatal(err)
			}
		}, run: func(ctx context.Context, n *Names) (string, error) {
			r, err := n.Resolve(ctx, nameB.dir, nameB.frags, nameB.name)
			if err == nil && (!reflect.DeepEqual(r.Bound, fb(1)) || r.Pending) {
				return fmt.Sprintf("%+v", r), nil
			}
			return "done", err
		}, state: renameState, read: true},
		{name: "resolve dead lock", setup: lockB, late: true, run: func(ctx context.Context, n *Names) (string, error) {
			r, err := n.Resolve(ctx, nameB.dir, nameB.frags, nameB.name)
			if err == nil && (r.Bound != nil || r.Pending || r.Decision == nil || r.Decision.Outcome != Abort) {
				return fmt.Sprintf("%+v", r), nil
			}
			return "none", err
		}, state: renameState, read: true},
	}
}

// renameState is "done" when nameA and nameB read as after the rename,
// "none" as before, to a reader past TxGrace (who resolves every lock).
func renameState(t *testing.T, st staging.Store) string {
	a, b := view(t, st, nameA, true), view(t, st, nameB, true)
	switch {
	case a.Bound == nil && reflect.DeepEqual(b.Bound, fb(1)):
		return "done"
	case reflect.DeepEqual(a.Bound, fb(1)) && b.Bound == nil:
		return "none"
	}
	return fmt.Sprintf("half: a %+v, b %+v", a.Bound, b.Bound)
}

// runFaulted runs fc on a fresh store with rules, and returns what the
// caller was told, the state after, and how many faults fired.
func runFaulted(t *testing.T, fc faultCase, rules ...faulty.Rule) (told string, err error, state string, fired int, st *mem.Store, n *Names, pending int) {
	t.Helper()
	st = mem.New()
	fc.setup(t, st, New(st, root, nil))
	f := faulty.New(st, 1)
	for _, r := range rules {
		f.Add(r)
	}
	c := &clock{late: fc.late}
	n = New(f, root, c.now)
	told, err = fc.run(context.Background(), n)
	fired = f.Injected()
	f.Clear()
	for _, nm := range []name{nameA, nameB} {
		if view(t, st, nm, false).Pending {
			pending++
		}
	}
	return told, err, fc.state(t, st), fired, st, n, pending
}

func TestFaultAtEveryRequest(t *testing.T) {
	for _, fc := range faultCases() {
		t.Run(fc.name, func(t *testing.T) {
			told, err, state, _, _, _, _ := runFaulted(t, fc)
			if err != nil || told != "done" && told != "none" || state != told {
				t.Fatalf("without faults: told %q, %v; store %s", told, err, state)
			}
			clean := state
			for _, kind := range []faulty.Kind{faulty.Error, faulty.LostAnswer} {
				for k := 1; ; k++ {
					told, err, state, fired, _, _, pending := runFaulted(t, fc, faulty.Rule{Nth: k, Times: 1, Kind: kind})
					if fired == 0 {
						if k < 2 {
							t.Fatalf("%s at %d: no request", kind, k)
						}
						break
					}
					where := fmt.Sprintf("%s at request %d", kind, k)
					switch {
					case state != "done" && state != "none":
						t.Fatalf("%s: the store holds a part: %s", where, state)
					case err == nil && told != state:
						t.Fatalf("%s: told %q, the store holds %q", where, told, state)
					case err != nil && !fc.read && state != "none":
						t.Fatalf("%s: told %v, yet the store holds the change", where, err)
					case err != nil && fc.read && state != clean:
						t.Fatalf("%s: a read changed the outcome: %s", where, state)
					case fc.settled && pending > 0:
						t.Fatalf("%s: %d names left locked, undecided", where, pending)
					}
				}
			}
		})
	}
}

// TestTwoFaults: a lost answer (or an error) whose read-back fails too. The
// change may then have landed: the caller is told so ("not known"), and
// calling again with the same ids finishes it.
func TestTwoFaults(t *testing.T) {
	for _, fc := range faultCases() {
		t.Run(fc.name, func(t *testing.T) {
			for _, kind := range []faulty.Kind{faulty.Error, faulty.LostAnswer} {
				for k := 1; ; k++ {
					told, err, state, fired, st, n, _ := runFaulted(t, fc,
						faulty.Rule{Nth: k, Times: 1, Kind: kind}, faulty.Rule{Nth: k + 1, Times: 1, Kind: faulty.Error})
					if fired == 0 {
						break
					}
					where := fmt.Sprintf("%s at request %d, error at %d", kind, k, k+1)
					switch {
					case state != "done" && state != "none":
						t.Fatalf("%s: the store holds a part: %s", where, state)
					case err == nil && told != state:
						t.Fatalf("%s: told %q, the store holds %q", where, told, state)
					case err != nil && !fc.read && state == "done" && !strings.Contains(err.Error(), "not known"):
						t.Fatalf("%s: told %v, not that it may have landed, and it did", where, err)
					}
					if err == nil || !fc.retry {
						continue
					}
					if told, err = fc.run(context.Background(), n); err != nil || told != "done" {
						t.Fatalf("%s: again without faults: told %q, %v", where, told, err)
					}
					if state = fc.state(t, st); state != "done" {
						t.Fatalf("%s: again without faults: the store holds %s", where, state)
					}
				}
			}
		})
	}
}

// TestLockLeftIsAborted: a lock whose fate Lock could not tell is aborted
// at once, so that no reader waits TxGrace for it.
func TestLockLeftIsAborted(t *testing.T) {
	st := mem.New()
	etagA := store(t, st, dentryOf(nameA, cid(1), fb(1)))
	f := faulty.New(st, 1)
	// The name of the first key is locked first: its answer is lost, and
	// so is the read-back, so Lock cannot tell whether it is locked.
	f.Add(faulty.Rule{Op: staging.OpPut, Nth: 1, Times: 1, Kind: faulty.LostAnswer})
	f.Add(faulty.Rule{Op: staging.OpGet, Nth: 1, Times: 1, Kind: faulty.Error})
	first, old := nameA, fb(1)
	if nameB.key(t) < nameA.key(t) {
		first, old = nameB, nil
	}
	_, err := New(f, root, nil).Lock(context.Background(), cid(7), renameAB(), []Held{{ETag: etagA, Bound: fb(1)}, {}})
	if !errors.Is(err, faulty.ErrInjected) || !strings.Contains(err.Error(), "not known") {
		t.Fatalf("lock: %v", err)
	}
	if d, _ := stored(t, st, first); d == nil || d.Lock == nil || d.Change != cid(7) {
		t.Fatalf("the test wants %s's lock left: %+v", first.name, d)
	}
	r := view(t, st, first, false)
	if r.Pending || !reflect.DeepEqual(r.Bound, old) || r.Decision == nil || r.Decision.Outcome != Abort {
		t.Fatalf("%s reads %+v, want its lock aborted at once", first.name, r)
	}
}
