package nsv2

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The moves log (moves.go): its entry's format, directories moved across
// directories through namespace.Names, two mounts crossing their moves,
// and faults.

func sampleMove() *MoveEntry {
	return &MoveEntry{Seq: 7, Tx: cid(5), Dirs: []MovedDir{{Ino: 1<<40 | 3, From: 1, To: 1<<40 | 4}}}
}

func TestMoveEntryFormat(t *testing.T) {
	m := sampleMove()
	key := must(m.Key(root))(t)
	if want := root + "/ns2/moves/0000000000000007"; key != want {
		t.Fatalf("key %s, want %s", key, want)
	}
	data := must(EncodeMove(m))(t)
	got := must(DecodeMove(key, data))(t)
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %+v, want %+v", got, m)
	}
	if r, seq, err := ParseMoveKey(key); err != nil || r != root || seq != 7 {
		t.Fatalf("parse %s: %q %d %v", key, r, seq, err)
	}
	for _, k := range []string{root + "/ns2/moves/0000000000000000", root + "/ns2/moves/7",
		root + "/ns2/moves/000000000000000A", root + "/ns2/move/0000000000000007"} {
		if _, _, err := ParseMoveKey(k); err == nil {
			t.Errorf("key %s parsed", k)
		}
	}
	// Another key than its own is corrupt.
	if _, err := DecodeMove(must(MoveKey(root, 8))(t), data); !errors.Is(err, namespace.ErrCorrupt) {
		t.Errorf("decoded at another seq's key: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(m *MoveEntry)
	}{
		{"seq 0", func(m *MoveEntry) { m.Seq = 0 }},
		{"bad change id", func(m *MoveEntry) { m.Tx = "x" }},
		{"no directory", func(m *MoveEntry) { m.Dirs = nil }},
		{"three directories", func(m *MoveEntry) { m.Dirs = append(m.Dirs, m.Dirs[0], m.Dirs[0]) }},
		{"ino 0", func(m *MoveEntry) { m.Dirs[0].Ino = 0 }},
		{"the root moved", func(m *MoveEntry) { m.Dirs[0].Ino = namespace.RootIno }},
		{"from 0", func(m *MoveEntry) { m.Dirs[0].From = 0 }},
		{"to 0", func(m *MoveEntry) { m.Dirs[0].To = 0 }},
		{"from is to", func(m *MoveEntry) { m.Dirs[0].From = m.Dirs[0].To }},
		{"into itself", func(m *MoveEntry) { m.Dirs[0].To = m.Dirs[0].Ino }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sampleMove()
			tc.edit(m)
			if _, err := EncodeMove(m); !errors.Is(err, namespace.ErrInvalid) {
				t.Errorf("encoded: %v", err)
			}
			// Written by hand, it is corrupt when read.
			k, err := MoveKey(root, max(m.Seq, 1))
			if err != nil {
				t.Fatal(err)
			}
			body := fmt.Sprintf(`{"s":%d,"c":%q,"d":[`, m.Seq, m.Tx)
			for i, d := range m.Dirs {
				if i > 0 {
					body += ","
				}
				body += fmt.Sprintf(`{"i":%d,"f":%d,"t":%d}`, d.Ino, d.From, d.To)
			}
			body += "]}"
			if m.Dirs == nil {
				body = fmt.Sprintf(`{"s":%d,"c":%q}`, m.Seq, m.Tx)
			}
			if _, err := DecodeMove(k, sealRaw(kindMove, []byte(body))); !errors.Is(err, namespace.ErrCorrupt) {
				t.Errorf("decoded %s: %v", body, err)
			}
		})
	}
}

func FuzzDecodeMove(f *testing.F) {
	m := sampleMove()
	f.Add(must(m.Key(root))(f), must(EncodeMove(m))(f))
	f.Fuzz(func(t *testing.T, key string, data []byte) {
		v, err := DecodeMove(key, data)
		if err != nil {
			return
		}
		enc, err := EncodeMove(v)
		if err != nil {
			t.Fatalf("decoded entry does not encode: %v", err)
		}
		again, err := DecodeMove(key, enc)
		if err != nil || !reflect.DeepEqual(v, again) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, v)
		}
	})
}

// moveEntries is the keys of the moves log's entries in st.
func moveEntries(t *testing.T, st staging.Store) []string {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, root+"/ns2/moves/")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// TestMoveDirectories: directories moved across directories through
// namespace.Names: into a sibling, into the root, out of and into deeper
// directories, an exchange of two directories of two directories; one
// into itself or any directory below it is EINVAL and changes nothing. The
// log is empty after each (its entries deleted once decided), and another
// mount reads every move.
func TestMoveDirectories(t *testing.T) {
	ctx := context.Background()
	rt := namespace.RootIno
	// The tree: a/ holding a1/ holding a2/ holding f, and b/ holding b1/.
	type tree struct{ a, a1, a2, b, b1 namespace.Node }
	build := func(t *testing.T, ns namespace.Names) tree {
		var tr tree
		tr.a = must(ns.Mkdir(ctx, rt, "a", 0o755, owner))(t)
		tr.a1 = must(ns.Mkdir(ctx, tr.a.Ino, "a1", 0o755, owner))(t)
		tr.a2 = must(ns.Mkdir(ctx, tr.a1.Ino, "a2", 0o755, owner))(t)
		must(ns.Create(ctx, tr.a2.Ino, "f", 0o644, owner))(t)
		tr.b = must(ns.Mkdir(ctx, rt, "b", 0o755, owner))(t)
		tr.b1 = must(ns.Mkdir(ctx, tr.b.Ino, "b1", 0o755, owner))(t)
		return tr
	}
	type where struct {
		dir  func(tree) namespace.Ino
		name string
		ino  func(tree) namespace.Ino
	}
	at := func(dir func(tree) namespace.Ino, name string, ino func(tree) namespace.Ino) where {
		return where{dir, name, ino}
	}
	top := func(tree) namespace.Ino { return rt }
	a := func(tr tree) namespace.Ino { return tr.a.Ino }
	a1 := func(tr tree) namespace.Ino { return tr.a1.Ino }
	a2 := func(tr tree) namespace.Ino { return tr.a2.Ino }
	b := func(tr tree) namespace.Ino { return tr.b.Ino }
	b1 := func(tr tree) namespace.Ino { return tr.b1.Ino }
	for _, tc := range []struct {
		name  string
		run   func(ns namespace.Names, tr tree) error
		want  error
		after []where // names there after (with the node they bind)
		gone  []where // names not there after
	}{
		{name: "into a sibling (mv a b/)", run: func(ns namespace.Names, tr tree) error {
			_, err := ns.Rename(ctx, rt, "a", tr.b.Ino, "a", 0)
			return err
		}, after: []where{at(b, "a", a), at(a, "a1", a1)}, gone: []where{at(top, "a", a)}},
		{name: "into the root", run: func(ns namespace.Names, tr tree) error {
			_, err := ns.Rename(ctx, tr.a1.Ino, "a2", rt, "top", 0)
			return err
		}, after: []where{at(top, "top", a2)}, gone: []where{at(a1, "a2", a2)}},
		{name: "deep into another branch", run: func(ns namespace.Names, tr tree) error {
			_, err := ns.Rename(ctx, tr.a1.Ino, "a2", tr.b1.Ino, "x", 0)
			return err
		}, after: []where{at(b1, "x", a2)}, gone: []where{at(a1, "a2", a2)}},
		{name: "a directory of one into another", run: func(ns namespace.Names, tr tree) error {
			_, err := ns.Rename(ctx, tr.b.Ino, "b1", tr.a.Ino, "a1x", 0)
			return err
		}, after: []where{at(a, "a1x", b1)}, gone: []where{at(b, "b1", b1)}},
		{name: "exchange of two directories of two directories", run: func(ns namespace.Names, tr tree) error {
			_, err := ns.Rename(ctx, tr.a.Ino, "a1", tr.b.Ino, "b1", namespace.RenameExchange)
			return err
		}, after: []where{at(a, "a1", b1), at(b, "b1", a1)}},
		{name: "into itself", run: func(ns namespace.Names, tr tree) error {
			_, err := ns.Rename(ctx, rt, "a", tr.a.Ino, "a", 0)
			return err
		}, want: namespace.ErrInvalid, after: []where{at(top, "a", a)}},
		{name: "into its own descendant (mv a a/a1/a2/)", run: func(ns namespace.Names, tr tree) error {
			_, err := ns.Rename(ctx, rt, "a", tr.a2.Ino, "a", 0)
			return err
		}, want: namespace.ErrInvalid, after: []where{at(top, "a", a), at(a1, "a2", a2)}, gone: []where{at(a2, "a", a)}},
		{name: "exchanged into its own descendant", run: func(ns namespace.Names, tr tree) error {
			_, err := ns.Rename(ctx, rt, "a", tr.a1.Ino, "a2", namespace.RenameExchange)
			return err
		}, want: namespace.ErrInvalid, after: []where{at(top, "a", a), at(a1, "a2", a2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mem.NewS3ETags()
			one := openTree(t, st, 1)
			tr := build(t, one)
			err := tc.run(one, tr)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("told %v, want %v", err, tc.want)
			}
			one.tidyWait()
			if l := moveEntries(t, st); len(l) != 0 {
				t.Fatalf("the moves log holds %v after", l)
			}
			two := openTree(t, st, 2)
			must(two.ReadDir(ctx, rt))(t)
			for _, ns := range []namespace.Names{one, two} {
				// Look every directory up from the root, as the kernel
				// would, so that the mount knows each.
				var walk func(dir namespace.Ino, depth int)
				walk = func(dir namespace.Ino, depth int) {
					if depth > 8 {
						t.Fatalf("directory %d: deeper than the tree: a loop", dir)
					}
					for name, ino := range names(t, ns, dir) {
						if n := must(ns.Lookup(ctx, dir, name))(t); n.Kind == namespace.KindDir {
							walk(ino, depth+1)
						}
					}
				}
				walk(rt, 0)
				for _, w := range tc.after {
					if n, err := ns.Lookup(ctx, w.dir(tr), w.name); err != nil || n.Ino != w.ino(tr) {
						t.Fatalf("%s in %d: %+v, %v; want %d", w.name, w.dir(tr), n, err, w.ino(tr))
					}
				}
				for _, w := range tc.gone {
					if n, err := ns.Lookup(ctx, w.dir(tr), w.name); !errors.Is(err, namespace.ErrNotExist) {
						t.Fatalf("%s in %d after: %+v, %v", w.name, w.dir(tr), n, err)
					}
				}
			}
		})
	}
}

// TestTwoMountsCrossedMoves: mv a b/ on one mount against mv b a/ on
// another, at once, many times: exactly one succeeds, the other is EINVAL
// (its target is now inside what it moves), and the tree has no loop.
func TestTwoMountsCrossedMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt := namespace.RootIno
	for i := range 20 {
		st := mem.NewS3ETags()
		one, two := openTree(t, st, 1), openTree(t, st, 2)
		a := must(one.Mkdir(ctx, rt, "a", 0o755, owner))(t)
		b := must(one.Mkdir(ctx, rt, "b", 0o755, owner))(t)
		must(two.Lookup(ctx, rt, "a"))(t)
		must(two.Lookup(ctx, rt, "b"))(t)
		errs := race(
			func() error { _, err := one.Rename(ctx, rt, "a", b.Ino, "a", 0); return err },
			func() error { _, err := two.Rename(ctx, rt, "b", a.Ino, "b", 0); return err })
		won := -1
		for j, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("round %d: both moves succeeded", i)
			case err == nil:
				won = j
			case !errors.Is(err, namespace.ErrInvalid) && !errors.Is(err, namespace.ErrNotExist):
				// ENOENT: the loser's source moved away before it read it.
				t.Fatalf("round %d: mount %d: %v", i, j+1, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: neither move succeeded: %v", i, errs)
		}
		three := openTree(t, st, 3)
		l := names(t, three, rt)
		want, in, inName := map[string]namespace.Ino{"b": b.Ino}, b.Ino, "a"
		if won == 1 {
			want, in, inName = map[string]namespace.Ino{"a": a.Ino}, a.Ino, "b"
		}
		if !reflect.DeepEqual(l, want) {
			t.Fatalf("round %d: mount %d won; the root lists %v", i, won+1, l)
		}
		must(three.Lookup(ctx, rt, map[int]string{0: "b", 1: "a"}[won]))(t)
		if n := must(three.Lookup(ctx, in, inName))(t); len(names(t, three, n.Ino)) != 0 {
			t.Fatalf("round %d: the directory moved is not empty", i)
		}
		one.tidyWait()
		two.tidyWait()
		if e := moveEntries(t, st); len(e) != 0 {
			t.Fatalf("round %d: the moves log holds %v", i, e)
		}
	}
}

// TestMoveAfterADeadMover: a mount that died between its entry and its
// decision holds the next move up until TxGrace has passed; then the next
// move decides it abort, deletes its entry and goes on.
func TestMoveAfterADeadMover(t *testing.T) {
	ctx := context.Background()
	rt := namespace.RootIno
	st := mem.NewS3ETags()
	one := openTree(t, st, 1)
	a := must(one.Mkdir(ctx, rt, "a", 0o755, owner))(t)
	b := must(one.Mkdir(ctx, rt, "b", 0o755, owner))(t)
	// A dead mover's entry: a at seq 1, for a change never decided.
	dead := &MoveEntry{Seq: 1, Tx: cid(99), Dirs: []MovedDir{{Ino: a.Ino, From: rt, To: b.Ino}}}
	if _, err := st.Put(ctx, must(dead.Key(root))(t), must(EncodeMove(dead))(t), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Within TxGrace: the move waits, until its deadline (a mount whose
	// first wait meets it).
	impatient, err := Open(Config{Store: st, Root: root, Mount: cid(2), FirstBatch: 1<<40 + 2*16,
		Sleep: func(context.Context, time.Duration) error { return context.DeadlineExceeded }})
	if err != nil {
		t.Fatal(err)
	}
	defer impatient.Close()
	must(impatient.Lookup(ctx, rt, "a"))(t)
	must(impatient.Lookup(ctx, rt, "b"))(t)
	if _, err := impatient.Rename(ctx, rt, "b", a.Ino, "b", 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("a move behind an undecided one: %v, want ErrLocked", err)
	}
	if e := moveEntries(t, st); len(e) != 1 {
		t.Fatalf("after the refused move the log holds %v, want the dead mover's entry", e)
	}
	// Past TxGrace by the store's clock.
	late, err := Open(Config{Store: st, Root: root, Mount: cid(3), FirstBatch: 1<<40 + 3*16,
		StoreNow: func() time.Time { return time.Now().Add(2 * TxGrace) }})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	must(late.Lookup(ctx, rt, "a"))(t)
	must(late.Lookup(ctx, rt, "b"))(t)
	if _, err := late.Rename(ctx, rt, "b", a.Ino, "b", 0); err != nil {
		t.Fatalf("the move after TxGrace: %v", err)
	}
	late.tidyWait()
	if x := must(late.p.Decide(ctx, &Decision{Tx: dead.Tx, Outcome: Abort}))(t); x != Abort {
		t.Fatalf("the dead mover's change: %s", x)
	}
	if e := moveEntries(t, st); len(e) != 0 {
		t.Fatalf("the log holds %v", e)
	}
}

// moveFaultCases are directories moved across directories, by mount 2.
func moveFaultCases() []treeFaultCase {
	ctx := context.Background()
	rt := namespace.RootIno
	var a, b namespace.Node
	state := func(t *testing.T, three namespace.Names, into string) string {
		l := names(t, three, rt)
		switch {
		case reflect.DeepEqual(l, map[string]namespace.Ino{"a": a.Ino, "b": b.Ino}):
			if _, err := three.Lookup(ctx, b.Ino, into); !errors.Is(err, namespace.ErrNotExist) {
				return fmt.Sprintf("a in the root and in b: %v", err)
			}
			return "none"
		case reflect.DeepEqual(l, map[string]namespace.Ino{"b": b.Ino}):
			if n, err := three.Lookup(ctx, b.Ino, into); err != nil || n.Ino != a.Ino {
				return fmt.Sprintf("a gone from the root, in b: %+v, %v", n, err)
			}
			return "done"
		}
		return fmt.Sprintf("the root lists %v", l)
	}
	setup := func(t *testing.T, one, two namespace.Names) {
		a = must(one.Mkdir(ctx, rt, "a", 0o755, owner))(t)
		b = must(one.Mkdir(ctx, rt, "b", 0o755, owner))(t)
		must(two.Lookup(ctx, rt, "a"))(t)
		must(two.Lookup(ctx, rt, "b"))(t)
	}
	return []treeFaultCase{
		{name: "mv a b/", setup: setup, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Rename(ctx, rt, "a", b.Ino, "a", 0)
			return err
		}, state: func(t *testing.T, three namespace.Names) string { return state(t, three, "a") }},
	}
}

// TestMoveFaults: a fault at every request of a move across directories
// (the log's requests among them), and a mount dying after each: the store
// holds the move whole or not at all, and a move after it (on another
// mount, past TxGrace) finds the log free.
func TestMoveFaults(t *testing.T) {
	for _, fc := range moveFaultCases() {
		t.Run(fc.name+"/fault", func(t *testing.T) { faultAtEveryRequest(t, fc, 6) })
		t.Run(fc.name+"/dies", func(t *testing.T) { diesAtEveryRequest(t, fc) })
	}
}

// TestMoveRequests: the requests of mv a b/ with the log empty, as a
// figure, in 8 round trips: the create lease on b (PUT, then GET of its
// seal: the first name this mount adds there), the log's LIST, its entry,
// the LIST that shows it stands, the walk up from b (one GET), the locks
// (two PUTs at once), the decision; the entry is deleted after the call.
func TestMoveRequests(t *testing.T) {
	ctx := context.Background()
	rt := namespace.RootIno
	st := mem.NewS3ETags()
	ps := newPathStore(st)
	c := newFakeClock()
	one := openTreeTTL(t, ps, 1, c)
	t.Cleanup(ps.free) // before one's Close, which waits for the tidy
	must(one.Mkdir(ctx, rt, "a", 0o755, owner))(t)
	b := must(one.Mkdir(ctx, rt, "b", 0o755, owner))(t)
	if _, err := one.Lookup(ctx, b.Ino, "a"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatal(err)
	}
	ps.reset()
	ps.meet = rounds(0, 2)
	if _, err := one.Rename(ctx, rt, "a", b.Ino, "a", 0); err != nil {
		t.Fatal(err)
	}
	reqs, n, failed := ps.path()
	if len(failed) > 0 {
		t.Fatal(failed)
	}
	want := "get d, get seal, list moves, list moves, put d, put d, put lease, put moves, put tx"
	if got := strings.Join(sortedCopy(reqs), ", "); got != want || n != 8 {
		t.Fatalf("mv a b/ sent %s in %d round trips, want %s in 8", got, n, want)
	}
}

// TestRenameTwoFaults: two faults in a row at every request of the
// renames, whose locks are sent at once. Not the move across directories
// nor rmdir: where both faults leave a change undecided (a decision whose
// answer and read-back both failed), the change made again waits for it
// until TxGrace has passed by the store's clock, 30 s of real time here;
// TestMoveAfterADeadMover and TestTreeMultiDies cover that wait.
func TestRenameTwoFaults(t *testing.T) {
	for _, fc := range multiFaultCases() {
		if fc.name == "rmdir" {
			continue
		}
		t.Run(fc.name, func(t *testing.T) { twoFaults(t, fc) })
	}
}
