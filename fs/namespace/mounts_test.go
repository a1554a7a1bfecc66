package namespace

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func TestTwoMountsSeeEachOther(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	a := openNS(t, store, Options{})
	b := openNS(t, store, Options{})
	d, err := a.Mkdir(ctx, RootIno, "d", 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lookup(context.Background(), RootIno, "d"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("b sees d before Refresh: %v", err)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Lookup(context.Background(), RootIno, "d"); err != nil || got != d {
		t.Fatalf("b Lookup d = %+v, %v; want %+v", got, err, d)
	}
	// A change reads what it missed first: b's create in a's new dir works,
	// and a's create of a name b took is refused.
	if _, err := a.Create(ctx, d.Ino, "x", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, d.Ino, "x", 0o644, Owner{}); !errors.Is(err, ErrExist) {
		t.Fatalf("b creates a's name: %v", err)
	}
	if _, err := b.Create(ctx, d.Ino, "y", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Rename(ctx, d.Ino, "y", RootIno, "y", 0); err != nil {
		t.Fatalf("a renames b's file: %v", err)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if dump(t, a) != dump(t, b) {
		t.Fatal("mounts differ after Refresh")
	}
}

// TestConcurrentMountsConverge runs random changes from two mounts at once
// in a few shared directories. Each mount works on its own names (so it
// knows what must exist) and both race for shared names (exactly one wins).
func TestConcurrentMountsConverge(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	setup := openNS(t, store, Options{})
	var dirs []Ino
	for i := range 3 {
		d, err := setup.Mkdir(ctx, RootIno, fmt.Sprintf("d%d", i), 0o755, Owner{})
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d.Ino)
	}
	const opsPerMount = 500
	races := &flakyStore{Store: store}
	var lost atomic.Int64
	races.putFault = func(string, int) (bool, error) { return false, nil }
	races.onResult = func(err error) {
		if errors.Is(err, staging.ErrPrecondition) {
			lost.Add(1)
		}
	}
	mounts := []*Namespace{openNS(t, races, Options{CompactEvery: 97}), openNS(t, races, Options{CompactEvery: 97})}
	type place struct {
		dir  Ino
		name string
	}
	models := make([]map[place]bool, len(mounts))
	sharedWins := make([]int, len(mounts))
	changes := make([]int, len(mounts))
	var wg sync.WaitGroup
	errc := make(chan error, len(mounts))
	for m, ns := range mounts {
		models[m] = map[place]bool{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(m), 42))
			model := models[m]
			var live []place
			for i := range opsPerMount {
				dir := dirs[rng.IntN(len(dirs))]
				switch k := rng.IntN(10); {
				case k < 5 || len(live) == 0:
					p := place{dir, fmt.Sprintf("m%d-%d", m, i)}
					if _, err := ns.Create(ctx, p.dir, p.name, 0o644, Owner{}); err != nil {
						errc <- fmt.Errorf("mount %d create: %w", m, err)
						return
					}
					model[p], live = true, append(live, p)
					changes[m]++
				case k < 7:
					j := rng.IntN(len(live))
					from := live[j]
					to := place{dir, fmt.Sprintf("m%d-r%d", m, i)}
					if _, err := ns.Rename(ctx, from.dir, from.name, to.dir, to.name, 0); err != nil {
						errc <- fmt.Errorf("mount %d rename: %w", m, err)
						return
					}
					delete(model, from)
					model[to], live[j] = true, to
					changes[m]++
				case k < 9:
					j := rng.IntN(len(live))
					p := live[j]
					if _, err := ns.Unlink(ctx, p.dir, p.name); err != nil {
						errc <- fmt.Errorf("mount %d unlink: %w", m, err)
						return
					}
					delete(model, p)
					live = append(live[:j], live[j+1:]...)
					changes[m]++
				default:
					_, err := ns.Mkdir(ctx, dirs[0], fmt.Sprintf("shared-%d", i%50), 0o755, Owner{})
					switch {
					case err == nil:
						sharedWins[m]++
						changes[m]++
					case !errors.Is(err, ErrExist):
						errc <- fmt.Errorf("mount %d shared mkdir: %w", m, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	t.Logf("%d appends lost a race", lost.Load())
	for err := range errc {
		t.Fatal(err)
	}
	for _, ns := range mounts {
		if err := ns.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if dump(t, mounts[0]) != dump(t, mounts[1]) {
		t.Fatal("mounts did not converge")
	}
	if dump(t, mounts[0]) != dump(t, openNS(t, store, Options{})) {
		t.Fatal("a fresh mount (from the snapshots) differs")
	}
	want := 3 + changes[0] + changes[1]
	if got := int(mounts[0].Seq()); got != want {
		t.Fatalf("log has %d entries, %d changes succeeded", got, want)
	}
	// Every name each mount made and kept is there, and nothing else.
	var gotNames, wantNames []string
	for _, d := range dirs {
		list, err := mounts[0].ReadDir(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range list {
			if de.Kind == KindFile {
				gotNames = append(gotNames, fmt.Sprintf("%d/%s", d, de.Name))
			}
		}
	}
	for _, model := range models {
		for p := range model {
			wantNames = append(wantNames, fmt.Sprintf("%d/%s", p.dir, p.name))
		}
	}
	sort.Strings(gotNames)
	sort.Strings(wantNames)
	if fmt.Sprint(gotNames) != fmt.Sprint(wantNames) {
		t.Fatalf("files:\n got %v\nwant %v", gotNames, wantNames)
	}
	list, _ := mounts[0].ReadDir(context.Background(), dirs[0])
	shared := 0
	for _, de := range list {
		if de.Kind == KindDir {
			shared++
		}
	}
	if shared != sharedWins[0]+sharedWins[1] {
		t.Fatalf("%d shared dirs, %d+%d mkdirs succeeded", shared, sharedWins[0], sharedWins[1])
	}
	// Orphans are the files created and no longer named.
	creates := 0
	for _, e := range logEntries(t, store) {
		for _, o := range e.ops() {
			if o.Kind == opCreate {
				creates++
			}
		}
	}
	if got := len(orphans(t, mounts[0])); got != creates-len(wantNames) {
		t.Fatalf("%d orphans, want %d (creates %d, files left %d)", got, creates-len(wantNames), creates, len(wantNames))
	}
}

// TestAppendAppliedOnce: a send whose answer is lost (stored, but the caller
// sees an error) must not apply twice; a send that failed must be resent.
func TestAppendAppliedOnce(t *testing.T) {
	cases := []struct {
		name     string
		fault    func(key string, n int) (bool, error)
		wantErr  bool
		attempts int
	}{
		{"answer lost once", func(_ string, n int) (bool, error) {
			if n == 1 {
				return true, errLink
			}
			return false, nil
		}, false, 0},
		{"answer lost as a precondition failure of the resend", func(_ string, n int) (bool, error) {
			if n == 1 {
				return true, fmt.Errorf("resent put: %w", staging.ErrPrecondition)
			}
			return false, nil
		}, false, 0},
		{"every answer lost", func(string, int) (bool, error) { return true, errLink }, false, 0},
		{"send failed once", func(_ string, n int) (bool, error) {
			if n == 1 {
				return false, errLink
			}
			return false, nil
		}, false, 0},
		{"refused by a write still in flight", func(_ string, n int) (bool, error) {
			if n <= 2 {
				return false, fmt.Errorf("409 conditional request conflict: %w", staging.ErrPrecondition)
			}
			return false, nil
		}, false, 0},
		{"every send failed", func(string, int) (bool, error) { return false, errLink }, true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := mem.New()
			store := &flakyStore{Store: mem}
			ns := openNS(t, store, Options{PutAttempts: tc.attempts})
			other := openNS(t, mem, Options{})
			if _, err := other.Mkdir(ctx, RootIno, "d", 0o755, Owner{}); err != nil {
				t.Fatal(err)
			}
			// Seen first, so that the faults hit the send of the create's
			// own entry, not a refused send at the mkdir's seq.
			if err := ns.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			store.putFault = tc.fault
			_, err := ns.Create(ctx, RootIno, "x", 0o644, Owner{})
			if tc.wantErr {
				if err == nil || !errors.Is(err, errLink) {
					t.Fatalf("Create = %v, want the link error", err)
				}
				if len(logEntries(t, mem)) != 1 {
					t.Fatal("a failed send was stored")
				}
				store.putFault = nil
				if _, err := ns.Create(ctx, RootIno, "x", 0o644, Owner{}); err != nil {
					t.Fatalf("Create after the link healed: %v", err)
				}
			} else if err != nil {
				t.Fatalf("Create: %v", err)
			}
			entries := logEntries(t, mem)
			creates := 0
			for _, e := range entries {
				for _, o := range e.ops() {
					if o.Kind == opCreate {
						creates++
					}
				}
			}
			if creates != 1 || len(entries) != 2 {
				t.Fatalf("%d entries, %d creates; want 2 and 1", len(entries), creates)
			}
			if _, err := ns.Lookup(context.Background(), RootIno, "x"); err != nil {
				t.Fatal(err)
			}
			if err := other.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if dump(t, other) != dump(t, ns) {
				t.Fatal("mounts differ")
			}
		})
	}
}

// TestLostAnswerThenConflict: our first send timed out without being
// stored, another mount took the seq meanwhile; our change lands at the next
// seq, once, and is checked against the other's change.
func TestLostAnswerThenConflict(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	store := &flakyStore{Store: mem}
	ns := openNS(t, store, Options{})
	other := openNS(t, mem, Options{})
	store.putFault = func(key string, n int) (bool, error) {
		if n == 1 {
			// The other mount wins the seq while our send is lost.
			if _, err := other.Create(ctx, RootIno, "taken", 0o644, Owner{}); err != nil {
				t.Error(err)
			}
			return false, errLink
		}
		return false, nil
	}
	if _, err := ns.Create(ctx, RootIno, "taken", 0o644, Owner{}); !errors.Is(err, ErrExist) {
		t.Fatalf("Create of a name taken meanwhile: %v", err)
	}
	store.putFault = func(key string, n int) (bool, error) {
		if n == 3 {
			if _, err := other.Create(ctx, RootIno, "b", 0o644, Owner{}); err != nil {
				t.Error(err)
			}
			return false, errLink
		}
		return false, nil
	}
	if _, err := ns.Create(ctx, RootIno, "mine", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	if got := len(logEntries(t, mem)); got != 3 {
		t.Fatalf("%d entries, want 3", got)
	}
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if dump(t, other) != dump(t, ns) {
		t.Fatal("mounts differ")
	}
}

func TestCompaction(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	// Entries may only go once older than TrimGrace: the lagging mounts'
	// clock moves past it before they look at the cleaned log, else they
	// would (rightly) trust their tail.
	clock := newFakeClock()
	lagging := openNS(t, store, Options{CompactEvery: 10, Clock: clock.Now})
	ns := openNS(t, store, Options{CompactEvery: 10})
	if up, err := ns.Compactable(ctx); err != nil || up != 0 {
		t.Fatalf("Compactable on a fresh root = %d, %v", up, err)
	}
	d, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 24 {
		name := fmt.Sprintf("f%d", i)
		n, err := ns.Create(ctx, d.Ino, name, 0o644, Owner{})
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := ns.SetXattr(ctx, n.Ino, "user.i", []byte(name), 0); err != nil {
				t.Fatal(err)
			}
		}
		if i%4 == 0 {
			if _, err := ns.Unlink(ctx, d.Ino, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	seq := ns.Seq()
	objs, err := staging.ListAll(ctx, store, prefix(testRoot)+snapDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != int(seq/10) {
		t.Fatalf("%d snapshots after %d entries, want %d", len(objs), seq, seq/10)
	}
	up, err := ns.Compactable(ctx)
	if err != nil || up != seq/10*10-1 {
		t.Fatalf("Compactable = %d, %v; want %d", up, err, seq/10*10-1)
	}
	// The cleaner deletes what the snapshot covers.
	for s := uint64(1); s <= up; s++ {
		if err := store.Delete(ctx, LogKey(testRoot, s)); err != nil {
			t.Fatal(err)
		}
	}
	fresh := openNS(t, store, Options{})
	if dump(t, fresh) != dump(t, ns) {
		t.Fatal("a mount opened from the snapshot differs")
	}
	if fresh.Seq() != seq {
		t.Fatalf("fresh mount at seq %d, want %d", fresh.Seq(), seq)
	}
	if len(orphans(t, fresh)) != 6 {
		t.Fatalf("%d orphans from the snapshot, want 6", len(orphans(t, fresh)))
	}
	clock.Advance(pastTrimGrace)
	if err := lagging.Refresh(ctx); err != nil {
		t.Fatalf("lagging mount past a cleaned log: %v", err)
	}
	if dump(t, lagging) != dump(t, ns) {
		t.Fatal("lagging mount differs after Refresh")
	}
	// A mount that lags behind a log that ends at the snapshot: Compact
	// writes a snapshot as of the newest entry, the cleaner deletes all it
	// may, and the lagging mount must notice rather than append at a seq
	// that was used.
	lagging2 := openNS(t, store, Options{Clock: clock.Now})
	for i := range 5 {
		if _, err := ns.Mkdir(ctx, RootIno, fmt.Sprintf("late%d", i), 0o755, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ns.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	seq = ns.Seq()
	if up, _ := ns.Compactable(ctx); up != seq-1 {
		t.Fatalf("Compactable after Compact = %d, want %d", up, seq-1)
	}
	for s := uint64(1); s < seq; s++ {
		_ = store.Delete(ctx, LogKey(testRoot, s))
	}
	clock.Advance(pastTrimGrace)
	if _, err := lagging2.Mkdir(ctx, RootIno, "late0", 0o755, Owner{}); !errors.Is(err, ErrExist) {
		t.Fatalf("lagging mount's mkdir of a name made meanwhile: %v", err)
	}
	if _, err := lagging2.Mkdir(ctx, RootIno, "after", 0o755, Owner{}); err != nil {
		t.Fatal(err)
	}
	if lagging2.Seq() != seq+1 {
		t.Fatalf("lagging mount appended at %d, want %d", lagging2.Seq(), seq+1)
	}
	if err := ns.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if dump(t, openNS(t, store, Options{})) != dump(t, ns) || dump(t, lagging2) != dump(t, ns) {
		t.Fatal("mounts differ after compaction and cleaning")
	}
}

func TestLogGapIsCorrupt(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	ns := openNS(t, store, Options{})
	for i := range 3 {
		if _, err := ns.Mkdir(ctx, RootIno, fmt.Sprint(i), 0o755, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Delete(ctx, LogKey(testRoot, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, store, testRoot, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open over a gap: %v", err)
	}
}
