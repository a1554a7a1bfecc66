package nsv2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// user.ckptfs.fragments (frags.go): set on an empty directory, refused on
// one with names and for a value out of bounds, and safe against another
// mount adding a name at the same moment or with the count it had cached.

// fragsXattr is the fragment count ns answers for dir.
func fragsXattr(t *testing.T, ns namespace.Names, dir namespace.Ino) string {
	t.Helper()
	return string(must(ns.GetXattr(context.Background(), dir, FragmentsXattr))(t))
}

// nameIn finds a name, of prefix, that is not in fragment 0 of a
// directory of frags fragments: a name a mount adds with a count of 1
// then lands where one of frags does not look.
func nameIn(prefix string, frags uint32) string {
	for i := 0; ; i++ {
		if n := fmt.Sprintf("%s%d", prefix, i); Frag(n, frags) != 0 {
			return n
		}
	}
}

// storedAt says whether name is stored in dir at the key of a directory of
// frags fragments.
func storedAt(t *testing.T, st staging.Store, dir namespace.Ino, frags uint32, name string) bool {
	t.Helper()
	_, err := st.Head(context.Background(), must(DentryKey(root, dir, frags, name))(t))
	if err != nil && !errors.Is(err, staging.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

func TestFragmentsSet(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	st := mem.NewS3ETags()
	a, b := openTreeClock(t, st, 1, c), openTreeClock(t, st, 2, c)
	rt := namespace.RootIno
	d := must(a.Mkdir(ctx, rt, "d", 0o755, owner))(t)
	f := must(a.Create(ctx, rt, "f", 0o644, owner))(t)
	if got := fragsXattr(t, a, d.Ino); got != "1" {
		t.Fatalf("fragments of a new directory %q", got)
	}
	for _, v := range []string{"", "0", "3", "512", "1024", "x", "-1", "16\n", " 16", "016", "+16", "1e1", "99999999999"} {
		if err := a.SetXattr(ctx, d.Ino, FragmentsXattr, []byte(v), 0); !errors.Is(err, namespace.ErrInvalid) {
			t.Errorf("fragments %q: %v, want ErrInvalid", v, err)
		}
	}
	for _, c := range []struct {
		what string
		ino  namespace.Ino
		want error
	}{{"a file", f.Ino, namespace.ErrInvalid}, {"the root", rt, namespace.ErrNotSupported}} {
		if err := a.SetXattr(ctx, c.ino, FragmentsXattr, []byte("16"), 0); !errors.Is(err, c.want) {
			t.Errorf("fragments of %s: %v, want %v", c.what, err, c.want)
		}
	}
	if _, err := a.GetXattr(ctx, f.Ino, FragmentsXattr); !errors.Is(err, namespace.ErrNoAttr) {
		t.Errorf("fragments of a file: %v, want ErrNoAttr", err)
	}
	if got := fragsXattr(t, a, rt); got != "1" {
		t.Errorf("fragments of the root %q", got)
	}
	if err := a.RemoveXattr(ctx, d.Ino, FragmentsXattr); !errors.Is(err, namespace.ErrNotPermitted) {
		t.Errorf("removexattr of the fragments: %v", err)
	}
	for _, v := range []string{"256", "1", "16"} {
		if err := a.SetXattr(ctx, d.Ino, FragmentsXattr, []byte(v), 0); err != nil {
			t.Fatalf("fragments %s of an empty directory: %v", v, err)
		}
		if got := fragsXattr(t, a, d.Ino); got != v {
			t.Fatalf("fragments after setting %s: %q", v, got)
		}
	}
	if l := must(a.ListXattr(ctx, d.Ino))(t); slices.Contains(l, FragmentsXattr) {
		t.Errorf("listed: %q", l)
	}
	// Another mount, new, sees the count; its names land in the count's
	// fragments, and a directory made there inherits it.
	must(b.Lookup(ctx, rt, "d"))(t)
	if got := fragsXattr(t, b, d.Ino); got != "16" {
		t.Fatalf("fragments on another mount %q", got)
	}
	var names []string
	for i := range 20 {
		n := fmt.Sprintf("n%d", i)
		must(b.Create(ctx, d.Ino, n, 0o644, owner))(t)
		if !storedAt(t, st, d.Ino, 16, n) {
			t.Fatalf("%s not in its fragment of 16", n)
		}
		names = append(names, n)
	}
	sub := must(b.Mkdir(ctx, d.Ino, "sub", 0o755, owner))(t)
	if got := fragsXattr(t, b, sub.Ino); got != "16" {
		t.Errorf("fragments of a directory made in one of 16: %q", got)
	}
	var listed []string
	for _, de := range must(a.ReadDir(ctx, d.Ino))(t) {
		listed = append(listed, de.Name)
	}
	if want := append(slices.Clone(names), "sub"); !sameSet(listed, want) {
		t.Fatalf("listing %q, want %q", listed, want)
	}
	// With names: the same count is nothing to do; another is refused.
	if err := a.SetXattr(ctx, d.Ino, FragmentsXattr, []byte("16"), 0); err != nil {
		t.Errorf("the same count on a directory with names: %v", err)
	}
	if err := b.SetXattr(ctx, d.Ino, FragmentsXattr, []byte("4"), 0); !errors.Is(err, namespace.ErrNotEmpty) {
		t.Errorf("another count on a directory with names: %v, want ErrNotEmpty", err)
	}
	three := openTreeClock(t, st, 3, c)
	if _, err := three.GetXattr(ctx, d.Ino, FragmentsXattr); !errors.Is(err, namespace.ErrNotExist) {
		t.Errorf("fragments of a directory a mount never saw: %v, want ErrNotExist", err)
	}
	must(three.Lookup(ctx, rt, "d"))(t)
	if got := fragsXattr(t, three, d.Ino); got != "16" {
		t.Errorf("fragments after a refusal %q", got)
	}
}

// sameSet says whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// A mount that cached a directory's count before another mount changed it
// adds a name with the count the seal says: after the change (its lease
// run out meanwhile), and after a removal refused over it wrote its own
// seal. Without the seal's count, the name would land in a fragment the
// directory does not have, and no listing nor lookup would find it.
func TestFragmentsStaleCount(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	st := mem.NewS3ETags()
	a, b, s := openTreeClock(t, st, 1, c), openTreeClock(t, st, 2, c), openTreeClock(t, st, 3, c)
	rt := namespace.RootIno
	d := must(a.Mkdir(ctx, rt, "d", 0o755, owner))(t)
	must(b.Lookup(ctx, rt, "d"))(t)
	must(s.Lookup(ctx, rt, "d"))(t)
	must(b.Create(ctx, d.Ino, "x", 0o644, owner))(t) // b's lease
	must(b.Unlink(ctx, d.Ino, "x"))(t)
	if err := a.SetXattr(ctx, d.Ino, FragmentsXattr, []byte("16"), 0); err != nil {
		t.Fatal(err) // b's lease waited out
	}
	y := nameIn("y", 16)
	must(b.Create(ctx, d.Ino, y, 0o644, owner))(t)
	if !storedAt(t, st, d.Ino, 16, y) {
		t.Fatalf("%s added by a mount that held the count 1 is not in its fragment of 16", y)
	}
	if _, err := a.Lookup(ctx, d.Ino, y); err != nil {
		t.Fatalf("%s on the mount that set the count: %v", y, err)
	}
	// A removal refused (d has a name) writes its seal over the change's.
	if err := a.Rmdir(ctx, rt, "d"); !errors.Is(err, namespace.ErrNotEmpty) {
		t.Fatalf("rmdir of a directory with a name: %v", err)
	}
	w := nameIn("w", 16)
	must(s.Create(ctx, d.Ino, w, 0o644, owner))(t)
	if !storedAt(t, st, d.Ino, 16, w) {
		t.Fatalf("%s added by a mount that held the count 1, after a refused removal, is not in its fragment of 16", w)
	}
	var listed []string
	for _, de := range must(a.ReadDir(ctx, d.Ino))(t) {
		listed = append(listed, de.Name)
	}
	if !sameSet(listed, []string{y, w}) {
		t.Fatalf("listing %q", listed)
	}
	if got := fragsXattr(t, s, d.Ino); got != "16" {
		t.Errorf("fragments on the mount that held 1: %q", got)
	}
}

// A mount adding a name while another changes the count: with its lease
// valid, its name lands first and the change is refused (ErrNotEmpty);
// renewing its lease, it meets the change's seal, waits for its decision
// (its first wait is where the changer goes on), and adds the name with
// the new count.
func TestFragmentsCreateDuring(t *testing.T) {
	for _, renew := range []bool{false, true} {
		t.Run(fmt.Sprintf("renewing %v", renew), func(t *testing.T) {
			ctx := context.Background()
			c, cb := newFakeClock(), newFakeClock()
			st := mem.NewS3ETags()
			a, b := openTreeClock(t, st, 1, c), openTreeClock(t, st, 2, cb)
			rt := namespace.RootIno
			d := must(a.Mkdir(ctx, rt, "d", 0o755, owner))(t)
			must(b.Lookup(ctx, rt, "d"))(t)
			must(b.Create(ctx, d.Ino, "x", 0o644, owner))(t)
			must(b.Unlink(ctx, d.Ino, "x"))(t)
			if renew {
				cb.sleep(ctx, LeaseRenew+time.Second)
			}
			n := nameIn("n", 16)
			waited, done := make(chan struct{}), make(chan struct{})
			cb.mu.Lock()
			cb.onSleep = func() { close(waited) } // b's first wait for a change
			cb.mu.Unlock()
			var berr error
			c.mu.Lock()
			c.onSleep = func() { // a waits b's lease out: b adds a name now
				go func() { defer close(done); _, berr = b.Create(ctx, d.Ino, n, 0o644, owner) }()
				select {
				case <-waited:
				case <-done:
				}
			}
			c.mu.Unlock()
			err := a.SetXattr(ctx, d.Ino, FragmentsXattr, []byte("16"), 0)
			<-done
			if berr != nil {
				t.Fatalf("the create during the change: %v", berr)
			}
			want, frags := "16", uint32(16)
			if !renew {
				if !errors.Is(err, namespace.ErrNotEmpty) {
					t.Fatalf("the change with a name added under a valid lease: %v, want ErrNotEmpty", err)
				}
				want, frags = "1", 1
			} else {
				if err != nil {
					t.Fatalf("the change: %v", err)
				}
				select {
				case <-waited:
				default:
					t.Fatal("the create renewing its lease did not wait for the change")
				}
			}
			if !storedAt(t, st, d.Ino, frags, n) {
				t.Fatalf("%s is not in its fragment of %d", n, frags)
			}
			three := openTreeClock(t, st, 3, c)
			must(three.Lookup(ctx, rt, "d"))(t)
			if got := fragsXattr(t, three, d.Ino); got != want {
				t.Fatalf("fragments %q, want %s", got, want)
			}
			if _, err := three.Lookup(ctx, d.Ino, n); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
		})
	}
}

// The change of a count with a fault at each of its requests: the store
// holds it or not, and the answer says which.
func TestFragmentsFaultAtEveryRequest(t *testing.T) {
	ctx := context.Background()
	var d namespace.Node
	fc := treeFaultCase{name: "fragments", setup: func(t *testing.T, one, two namespace.Names) {
		d = must(one.Mkdir(ctx, namespace.RootIno, "d", 0o755, owner))(t)
		must(two.Lookup(ctx, namespace.RootIno, "d"))(t)
	}, run: func(ctx context.Context, ns namespace.Names) error {
		return ns.SetXattr(ctx, d.Ino, FragmentsXattr, []byte("16"), 0)
	}, state: func(t *testing.T, three namespace.Names) string {
		must(three.Lookup(ctx, namespace.RootIno, "d"))(t)
		switch got := fragsXattr(t, three, d.Ino); got {
		case "16":
			return "done"
		case "1":
			return "none"
		default:
			return got
		}
	}}
	faultAtEveryRequest(t, fc, 4)
}

// The trim deletes old leases only on a removed directory: one whose
// fragment count a committed change set is live, and its leases stay.
func TestFragmentsTrimKeepsLeases(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	key, _ := SealKey(root, 9)
	body, err := EncodeSeal(&Seal{Dir: 9, Tx: cid(90), Was: 1, Frags: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, key, body, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b := &Binding{Ino: 9, Kind: namespace.KindDir, Frags: 16, Node: &Attrs{Mode: 0o755}}
	if _, err := New(st, root, nil).decide(ctx, &Decision{Tx: cid(90), Outcome: Commit, Ops: []Op{{Dir: namespace.RootIno, Frags: 1, Name: "d", To: b}}}); err != nil {
		t.Fatal(err)
	}
	lease := putLease(t, st, 9, 1, 1)
	r := trimAt(t, st, 2*TrimGrace, false)
	if !has(t, st, lease) {
		t.Fatalf("the lease on a directory whose fragment count changed was trimmed (report %+v)", r)
	}
}

// A seal's fragment counts: each a fragment count, fr only with was.
func TestSealFragsRefused(t *testing.T) {
	key, _ := SealKey(root, 2)
	for _, s := range []Seal{{Dir: 2, Tx: idA, Frags: 16}, {Dir: 2, Tx: idA, Was: 3}, {Dir: 2, Tx: idA, Was: 1, Frags: 512},
		{Dir: 2, Tx: idA, Was: 512}} {
		if _, err := EncodeSeal(&s); !errors.Is(err, namespace.ErrInvalid) {
			t.Errorf("encode %+v: %v, want ErrInvalid", s, err)
		}
		body, _ := json.Marshal(&s)
		_, err := DecodeSeal(key, sealRaw(kindSeal, body))
		wantCorrupt(t, fmt.Sprintf("%+v", s), key, err)
	}
}
