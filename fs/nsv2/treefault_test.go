package nsv2

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The Tree's create and unlink with a fault at each of their requests (an
// error, or a lost answer: applied, its answer lost), then two in a row:
// the store holds the change whole or not at all, as another mount reads
// it, and the answer says which.

// treeFaultCase is one change run by mount 2 on a faulty store.
type treeFaultCase struct {
	name string
	// setup prepares the store through mount 1, and mount 2's cache.
	setup func(t *testing.T, one, two namespace.Names)
	run   func(ctx context.Context, ns namespace.Names) error
	// state says "done" or "none", as a third mount reads the store, or
	// what else it holds.
	state func(t *testing.T, three namespace.Names) string
}

func treeFaultCases() []treeFaultCase {
	ctx := context.Background()
	var f namespace.Node // the file unlinked
	return []treeFaultCase{
		{name: "create, first of the mount (claims a batch)", setup: func(*testing.T, namespace.Names, namespace.Names) {},
			run: func(ctx context.Context, ns namespace.Names) error {
				_, err := ns.Create(ctx, namespace.RootIno, "new", 0o644, owner)
				return err
			}, state: createdState},
		{name: "create", setup: func(t *testing.T, _, two namespace.Names) {
			must(two.Create(ctx, namespace.RootIno, "other", 0o644, owner))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Create(ctx, namespace.RootIno, "new", 0o644, owner)
			return err
		}, state: createdState},
		{name: "create over a tombstone", setup: func(t *testing.T, one, two namespace.Names) {
			must(two.Create(ctx, namespace.RootIno, "other", 0o644, owner))(t)
			must(one.Create(ctx, namespace.RootIno, "new", 0o644, owner))(t)
			must(one.Unlink(ctx, namespace.RootIno, "new"))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Create(ctx, namespace.RootIno, "new", 0o644, owner)
			return err
		}, state: createdState},
		{name: "unlink of a file not cached", setup: func(t *testing.T, one, _ namespace.Names) {
			f = must(one.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Unlink(ctx, namespace.RootIno, "f")
			return err
		}, state: func(t *testing.T, three namespace.Names) string { return unlinkedState(t, three, f) }},
		{name: "unlink of a file cached", setup: func(t *testing.T, one, two namespace.Names) {
			f = must(one.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
			must(two.Lookup(ctx, namespace.RootIno, "f"))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Unlink(ctx, namespace.RootIno, "f")
			return err
		}, state: func(t *testing.T, three namespace.Names) string { return unlinkedState(t, three, f) }},
	}
}

// createdState: "done" when "new" is bound to a file, "none" when it is
// not bound.
func createdState(t *testing.T, three namespace.Names) string {
	n, err := three.Lookup(context.Background(), namespace.RootIno, "new")
	switch {
	case errors.Is(err, namespace.ErrNotExist):
		return "none"
	case err != nil:
		t.Fatal(err)
	case n.Kind == namespace.KindFile:
		return "done"
	}
	return fmt.Sprintf("%+v", n)
}

// unlinkedState: "done" when f's name is gone and f is an orphan, "none"
// when the name binds f and f is named, not an orphan.
func unlinkedState(t *testing.T, three namespace.Names, f namespace.Node) string {
	ctx := context.Background()
	n, err := three.Lookup(ctx, namespace.RootIno, "f")
	if err != nil && !errors.Is(err, namespace.ErrNotExist) {
		t.Fatal(err)
	}
	orphaned := must(three.Orphaned(ctx, f.FileID))(t)
	orphans := must(three.Orphans(ctx))(t)
	switch {
	case err != nil && orphaned && len(orphans) == 1 && orphans[0].FileID == f.FileID:
		return "done"
	case err == nil && n.Ino == f.Ino && !orphaned && len(orphans) == 0 && must(three.Named(ctx, f.FileID))(t):
		return "none"
	}
	return fmt.Sprintf("lookup %+v, %v; orphaned %v; orphans %+v", n, err, orphaned, orphans)
}

// runTreeFaulted runs fc with rules on mount 2's store; it returns the
// answer, the state after, how many faults fired, and mount 2 to try again.
func runTreeFaulted(t *testing.T, fc treeFaultCase, rules ...faulty.Rule) (err error, state string, fired int, two namespace.Names, st staging.Store) {
	t.Helper()
	st = mem.New()
	f := faulty.New(st, 1)
	one, two := openTree(t, st, 1), openTree(t, f, 2)
	fc.setup(t, one, two)
	for _, r := range rules {
		f.Add(r)
	}
	err = fc.run(context.Background(), two)
	two.(*Tree).tidyWait() // the change's requests after the call count as its own
	fired = f.Injected()
	f.Clear()
	return err, fc.state(t, openTree(t, st, 3)), fired, two, st
}

func TestTreeFaultAtEveryRequest(t *testing.T) {
	for _, fc := range treeFaultCases() {
		t.Run(fc.name, func(t *testing.T) { faultAtEveryRequest(t, fc, 2) })
	}
}

// faultAtEveryRequest runs fc without faults (it must be done), then with
// an error and with a lost answer at each request in turn, from the first
// until a run makes fewer requests (least of them at the fewest): the store
// holds the change whole or not at all, and the answer says which (an
// error is the store's, or says that whether it landed is not known).
func faultAtEveryRequest(t *testing.T, fc treeFaultCase, least int) {
	t.Helper()
	if err, state, _, _, _ := runTreeFaulted(t, fc); err != nil || state != "done" {
		t.Fatalf("without faults: %v; the store holds %s", err, state)
	}
	for _, kind := range []faulty.Kind{faulty.Error, faulty.LostAnswer} {
		for k := 1; ; k++ {
			err, state, fired, _, _ := runTreeFaulted(t, fc, faulty.Rule{Nth: k, Times: 1, Kind: kind})
			if fired == 0 {
				if k < least {
					t.Fatalf("%s at %d: no request", kind, k)
				}
				break
			}
			where := fmt.Sprintf("%s at request %d", kind, k)
			switch {
			case state != "done" && state != "none":
				t.Fatalf("%s: the store holds a part: %s", where, state)
			case err == nil && state != "done":
				t.Fatalf("%s: told done, the store holds %s", where, state)
			case err != nil && state != "none":
				t.Fatalf("%s: told %v, the store holds the change", where, err)
			case err != nil && !errors.Is(err, faulty.ErrInjected) && !strings.Contains(err.Error(), "not known"):
				// A refused condition whose read-back failed is
				// "not known": the refusal may be of a resend of a
				// write that landed (prim.go, put).
				t.Fatalf("%s: told %v, neither the store's error nor that it is not known", where, err)
			}
		}
	}
}

// TestTreeTwoFaults: a fault whose read-back fails too. The change may then
// have landed: the answer says so ("not known"), and the change made again
// finds what the store holds.
func TestTreeTwoFaults(t *testing.T) {
	for _, fc := range treeFaultCases() {
		t.Run(fc.name, func(t *testing.T) { twoFaults(t, fc) })
	}
}

// twoFaults runs fc with an error or a lost answer at each request in
// turn and an error at the next (the read-back of the first, often): the
// store holds the change whole or not at all, and the answer says so or
// that it is not known; fc made again then finds what the store holds.
func twoFaults(t *testing.T, fc treeFaultCase) {
	t.Helper()
	for _, kind := range []faulty.Kind{faulty.Error, faulty.LostAnswer} {
		for k := 1; ; k++ {
			err, state, fired, two, _ := runTreeFaulted(t, fc,
				faulty.Rule{Nth: k, Times: 1, Kind: kind}, faulty.Rule{Nth: k + 1, Times: 1, Kind: faulty.Error})
			if fired == 0 {
				break
			}
			where := fmt.Sprintf("%s at request %d, error at %d", kind, k, k+1)
			switch {
			case state != "done" && state != "none":
				t.Fatalf("%s: the store holds a part: %s", where, state)
			case err == nil && state != "done":
				t.Fatalf("%s: told done, the store holds %s", where, state)
			case err != nil && state == "done" && !strings.Contains(err.Error(), "not known"):
				t.Fatalf("%s: told %v, not that it may have landed, and it did", where, err)
			}
			if err == nil {
				continue
			}
			// Again, without faults: done now, or told that it was
			// (the name is there, or gone).
			err = fc.run(context.Background(), two)
			if err != nil && !errors.Is(err, namespace.ErrExist) && !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("%s: again: %v", where, err)
			}
		}
	}
}

// BenchmarkTreeRequests counts the store's requests of a create and of a
// lookup by another mount (a miss: one GET), the figures of section 9's
// "requests per file" for the names (a file's head and data come on top).
func BenchmarkTreeRequests(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		run  func(b *testing.B, c *counting.Store, one, two namespace.Names)
	}{
		{name: "create", run: func(b *testing.B, c *counting.Store, one, _ namespace.Names) {
			must(one.Create(ctx, namespace.RootIno, "warm", 0o644, owner))(b) // the batch claim
			c.Reset()
			b.ResetTimer()
			for i := range b.N {
				must(one.Create(ctx, namespace.RootIno, fmt.Sprintf("f%d", i), 0o644, owner))(b)
			}
		}},
		{name: "lookup other mount's", run: func(b *testing.B, c *counting.Store, one, two namespace.Names) {
			for i := range b.N {
				must(one.Create(ctx, namespace.RootIno, fmt.Sprintf("f%d", i), 0o644, owner))(b)
			}
			c.Reset()
			b.ResetTimer()
			for i := range b.N {
				must(two.Lookup(ctx, namespace.RootIno, fmt.Sprintf("f%d", i)))(b)
			}
		}},
		{name: "unlink", run: func(b *testing.B, c *counting.Store, one, _ namespace.Names) {
			for i := range b.N {
				must(one.Create(ctx, namespace.RootIno, fmt.Sprintf("f%d", i), 0o644, owner))(b)
			}
			c.Reset()
			b.ResetTimer()
			for i := range b.N {
				must(one.Unlink(ctx, namespace.RootIno, fmt.Sprintf("f%d", i)))(b)
			}
		}},
		// A listing of 100 names another mount made, by a mount that has
		// read none of them (a GET each: no digests yet), then by one that
		// has (the LIST's ETags match its cache).
		{name: "readdir of 100, cold", run: func(b *testing.B, c *counting.Store, one, _ namespace.Names) {
			for i := range 100 {
				must(one.Create(ctx, namespace.RootIno, fmt.Sprintf("f%d", i), 0o644, owner))(b)
			}
			c.Reset()
			b.ResetTimer()
			for i := range b.N {
				must(openTree(b, c, 10+i).ReadDir(ctx, namespace.RootIno))(b)
			}
		}},
		{name: "readdir of 100, warm", run: func(b *testing.B, c *counting.Store, one, two namespace.Names) {
			for i := range 100 {
				must(one.Create(ctx, namespace.RootIno, fmt.Sprintf("f%d", i), 0o644, owner))(b)
			}
			must(two.ReadDir(ctx, namespace.RootIno))(b)
			c.Reset()
			b.ResetTimer()
			for range b.N {
				if err := two.Refresh(ctx); err != nil {
					b.Fatal(err)
				}
				must(two.ReadDir(ctx, namespace.RootIno))(b)
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := counting.New(mem.New())
			tc.run(b, c, openTree(b, c, 1), openTree(b, c, 2))
			b.StopTimer()
			s := c.Snapshot()
			b.ReportMetric(float64(s.Total().Requests)/float64(b.N), "requests/op")
			b.ReportMetric(float64(s.Op(staging.OpPut).Requests)/float64(b.N), "PUTs/op")
			b.ReportMetric(float64(s.Op(staging.OpGet).Requests)/float64(b.N), "GETs/op")
			b.ReportMetric(float64(s.Op(staging.OpList).Requests)/float64(b.N), "LISTs/op")
		})
	}
}
