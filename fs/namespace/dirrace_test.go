package namespace

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestTwoMountsDirectoryRaces: two mounts change one small tree at once,
// both on the same few names (mkdir, rmdir, create, unlink, link, and
// renames of files and directories across directories, with
// RENAME_NOREPLACE and RENAME_EXCHANGE), while log writes are lost before or
// after the store took them. Each mount decides from its own view, which the
// other's changes make stale: a directory removed under it, a name taken, a
// directory renamed into the one it is moving. Every call must succeed and
// show its change at once, or fail with an error whose cause the mount's
// view shows right after it (the view it was decided on), or with the lost
// write; in the end both mounts and a fresh one must hold
// one tree: every directory reachable from the root exactly once (no cycle,
// none cut off), under the parent it names, and every file's link count the
// number of its names.
func TestTwoMountsDirectoryRaces(t *testing.T) {
	ops := 600
	if testing.Short() {
		ops = 200
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { dirRaces(t, seed, ops) })
	}
}

func dirRaces(t *testing.T, seed uint64, opsPerMount int) {
	ctx := context.Background()
	store := mem.New()
	flaky := &flakyStore{Store: store}
	var fmu sync.Mutex
	frng := rand.New(rand.NewPCG(seed, 7))
	flaky.putFault = func(string, int) (bool, error) {
		fmu.Lock()
		defer fmu.Unlock()
		switch frng.IntN(20) {
		case 0:
			return false, errLink // never stored
		case 1:
			return true, errLink // stored, the answer lost
		}
		return false, nil
	}
	mounts := []*Namespace{openNS(t, flaky, Options{CompactEvery: 53}), openNS(t, flaky, Options{CompactEvery: 53})}
	names := []string{"a", "b", "c"}
	counts := make([]map[string]int, len(mounts))
	var wg sync.WaitGroup
	errc := make(chan error, len(mounts))
	for m, ns := range mounts {
		counts[m] = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(m)))
			for i := range opsPerMount {
				if err := dirRaceStep(ctx, ns, rng, names, counts[m]); err != nil {
					errc <- fmt.Errorf("mount %d, step %d: %w", m, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("changes made (ok/err): %v %v", counts[0], counts[1])
	flaky.mu.Lock()
	flaky.putFault = nil
	flaky.mu.Unlock()
	for _, ns := range mounts {
		if err := ns.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fresh := openNS(t, store, Options{})
	if d0, d1, df := dump(t, mounts[0]), dump(t, mounts[1]), dump(t, fresh); d0 != d1 || d0 != df {
		t.Fatalf("the mounts differ:\nA     %s\nB     %s\nfresh %s", d0, d1, df)
	}
	checkTree(t, fresh)
}

// dirRaceStep makes one random change through ns, chosen from its own view,
// and checks the call's answer and that the change shows at once.
func dirRaceStep(ctx context.Context, ns *Namespace, rng *rand.Rand, names []string, counts map[string]int) error {
	if rng.IntN(8) == 0 {
		return ns.Refresh(ctx)
	}
	dirs, files := viewOf(ns)
	dir := func() Ino { return dirs[rng.IntN(len(dirs))] }
	name := func() string { return names[rng.IntN(len(names))] }
	var kind string
	var err error
	// check sees the change after a success; justify the cause of an
	// error after a failure: after either, ns's view is the one the call
	// was decided on (only this goroutine changes ns).
	var check, justify func(error) error
	switch k := rng.IntN(14); {
	case k < 3:
		kind = "mkdir"
		p, n := dir(), name()
		var node Node
		node, err = ns.Mkdir(ctx, p, n, 0o755, Owner{})
		check = func(error) error { return isAt(ns, p, n, node.Ino, KindDir) }
		justify = func(err error) error { return newRefused(ns, err, p, n) }
	case k < 5:
		kind = "rmdir"
		p, n := dir(), name()
		err = ns.Rmdir(ctx, p, n)
		check = func(error) error { return isGone(ns, p, n) }
		justify = func(err error) error { return removeRefused(ns, err, p, n, true) }
	case k < 7:
		kind = "create"
		p, n := dir(), name()
		var node Node
		node, err = ns.Create(ctx, p, n, 0o644, Owner{})
		check = func(error) error { return isAt(ns, p, n, node.Ino, KindFile) }
		justify = func(err error) error { return newRefused(ns, err, p, n) }
	case k < 8:
		kind = "unlink"
		p, n := dir(), name()
		_, err = ns.Unlink(ctx, p, n)
		check = func(error) error { return isGone(ns, p, n) }
		justify = func(err error) error { return removeRefused(ns, err, p, n, false) }
	case k < 9 && len(files) > 0:
		kind = "link"
		f, p, n := files[rng.IntN(len(files))], dir(), name()
		_, err = ns.Link(ctx, f, p, n)
		check = func(error) error { return isAt(ns, p, n, f, KindFile) }
		justify = func(err error) error {
			if errors.Is(err, ErrNotExist) {
				// gone, or an orphan: a name cannot come back
				if n, gerr := ns.GetNode(context.Background(), f); gerr != nil || n.Nlink == 0 {
					return nil
				}
			}
			return newRefused(ns, err, p, n)
		}
	default:
		p1, n1, p2, n2 := dir(), name(), dir(), name()
		var flags RenameFlags
		switch rng.IntN(4) {
		case 0:
			flags = RenameNoReplace
		case 1:
			flags = RenameExchange
		}
		kind = fmt.Sprintf("rename%d", flags)
		_, err = ns.Rename(ctx, p1, n1, p2, n2, flags)
		justify = func(err error) error { return renameRefused(ns, err, p1, n1, p2, n2, flags) }
		// The names are checked, not the nodes: the call may have
		// read the other mount's changes first, and renamed whatever
		// n1 named then.
		check = func(error) error {
			dst, err := ns.Lookup(context.Background(), p2, n2)
			if err != nil {
				return fmt.Errorf("%q in %d: %w", n2, p2, err)
			}
			src, err := ns.Lookup(context.Background(), p1, n1)
			switch {
			case flags == RenameExchange && err != nil:
				return fmt.Errorf("exchanged %q in %d: %w", n1, p1, err)
			case flags != RenameExchange && err == nil && src.Ino != dst.Ino:
				return fmt.Errorf("%q in %d is still there (node %d, the target %d)", n1, p1, src.Ino, dst.Ino)
			}
			return nil
		}
	}
	if err != nil {
		if errors.Is(err, errLink) {
			counts[kind+"-lost"]++
			return nil
		}
		if jerr := justify(err); jerr != nil {
			return fmt.Errorf("%s: %w; but %v", kind, err, jerr)
		}
		counts[kind+"-err"]++
		return nil
	}
	counts[kind]++
	if err := check(nil); err != nil {
		return fmt.Errorf("%s succeeded, then: %w", kind, err)
	}
	return nil
}

// viewOf returns the directories reachable from the root in ns's own view
// (the root first) and the files named in them.
func viewOf(ns *Namespace) (dirs, files []Ino) {
	dirs = []Ino{RootIno}
	for i := 0; i < len(dirs); i++ {
		list, err := ns.ReadDir(context.Background(), dirs[i])
		if err != nil {
			continue
		}
		for _, de := range list {
			switch de.Kind {
			case KindDir:
				dirs = append(dirs, de.Ino)
			case KindFile:
				files = append(files, de.Ino)
			}
		}
	}
	return dirs, files
}

// isAt: name n in directory p is node ino, of kind k, in ns's own view.
func isAt(ns *Namespace, p Ino, n string, ino Ino, k Kind) error {
	got, err := ns.Lookup(context.Background(), p, n)
	if err != nil {
		return fmt.Errorf("%q in %d: %w", n, p, err)
	}
	if got.Ino != ino || got.Kind != k {
		return fmt.Errorf("%q in %d is node %d (kind %v), want %d (kind %v)", n, p, got.Ino, got.Kind, ino, k)
	}
	return nil
}

// isGone: directory p has no name n in ns's own view (or p is gone).
func isGone(ns *Namespace, p Ino, n string) error {
	if got, err := ns.Lookup(context.Background(), p, n); err == nil {
		return fmt.Errorf("%q in %d is still there (node %d)", n, p, got.Ino)
	}
	return nil
}

// checkTree: every directory of ns is reachable from the root exactly once,
// under the parent it names, and every file's link count is the number of
// its names (0 for an orphan).
func checkTree(t *testing.T, ns *Namespace) {
	t.Helper()
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	st := ns.st
	seen := map[Ino]bool{RootIno: true}
	links := map[Ino]uint32{}
	stack := []Ino{RootIno}
	for len(stack) > 0 {
		d := st.nodes[stack[len(stack)-1]]
		stack = stack[:len(stack)-1]
		for name, de := range d.children {
			n := st.nodes[de.ino]
			if n == nil {
				t.Fatalf("%q in %d names node %d, which does not exist", name, d.ino, de.ino)
			}
			if n.kind != KindDir {
				links[n.ino]++
				continue
			}
			if seen[n.ino] {
				t.Fatalf("directory %d is reached twice (again as %q in %d)", n.ino, name, d.ino)
			}
			if n.parent != d.ino {
				t.Fatalf("directory %d is %q in %d but names %d its parent", n.ino, name, d.ino, n.parent)
			}
			seen[n.ino] = true
			stack = append(stack, n.ino)
		}
	}
	for ino, n := range st.nodes {
		switch {
		case n.kind == KindDir && !seen[ino]:
			t.Fatalf("directory %d (parent %d) is not reachable from the root", ino, n.parent)
		case n.kind != KindDir && n.nlink != links[ino]:
			t.Fatalf("file %d has link count %d and %d names", ino, n.nlink, links[ino])
		}
	}
}

// dirOK: p is a directory in ns's own view.
func dirOK(ns *Namespace, p Ino) bool {
	n, err := ns.GetNode(context.Background(), p)
	return err == nil && n.Kind == KindDir
}

// newRefused: a new name n in p (mkdir, create, link) was refused with err;
// the view must show why.
func newRefused(ns *Namespace, err error, p Ino, n string) error {
	_, lerr := ns.Lookup(context.Background(), p, n)
	switch {
	case errors.Is(err, ErrExist) && lerr == nil:
	case errors.Is(err, ErrNotExist) && !dirOK(ns, p):
	default:
		return fmt.Errorf("the view shows no cause (%q in %d: %v)", n, p, lerr)
	}
	return nil
}

// removeRefused: rmdir (dir) or unlink of n in p was refused with err.
func removeRefused(ns *Namespace, err error, p Ino, n string, dir bool) error {
	got, lerr := ns.Lookup(context.Background(), p, n)
	var entries int
	if lerr == nil && got.Kind == KindDir {
		list, _ := ns.ReadDir(context.Background(), got.Ino)
		entries = len(list)
	}
	switch {
	case errors.Is(err, ErrNotExist) && lerr != nil:
	case errors.Is(err, ErrNotDir) && dir && lerr == nil && got.Kind != KindDir:
	case errors.Is(err, ErrIsDir) && !dir && lerr == nil && got.Kind == KindDir:
	case errors.Is(err, ErrNotEmpty) && dir && entries > 0:
	default:
		return fmt.Errorf("the view shows no cause (%q in %d: %+v, %v, %d entries)", n, p, got, lerr, entries)
	}
	return nil
}

// renameRefused: rename of n1 in p1 to n2 in p2 was refused with err.
func renameRefused(ns *Namespace, err error, p1 Ino, n1 string, p2 Ino, n2 string, flags RenameFlags) error {
	src, serr := ns.Lookup(context.Background(), p1, n1)
	dst, derr := ns.Lookup(context.Background(), p2, n2)
	var dstEntries int
	if derr == nil && dst.Kind == KindDir {
		list, _ := ns.ReadDir(context.Background(), dst.Ino)
		dstEntries = len(list)
	}
	// under: p2 is src or inside it (a directory moved into itself), or,
	// for an exchange, p1 is dst or inside it.
	under := func(dir, ino Ino) bool {
		for i := 0; i < 10000; i++ {
			if ino == dir {
				return true
			}
			if ino == RootIno {
				return false
			}
			n, err := ns.GetNode(context.Background(), ino)
			if err != nil {
				return false
			}
			ino = n.Parent
		}
		return true
	}
	switch {
	case errors.Is(err, ErrNotExist) && (serr != nil || !dirOK(ns, p2) || flags == RenameExchange && derr != nil):
	case errors.Is(err, ErrExist) && flags == RenameNoReplace && derr == nil:
	case errors.Is(err, ErrInvalid) && serr == nil && src.Kind == KindDir && under(src.Ino, p2):
	case errors.Is(err, ErrInvalid) && flags == RenameExchange && derr == nil && dst.Kind == KindDir && under(dst.Ino, p1):
	case errors.Is(err, ErrNotEmpty) && flags == 0 && dstEntries > 0:
	case errors.Is(err, ErrNotDir) && flags == 0 && serr == nil && derr == nil && src.Kind == KindDir && dst.Kind != KindDir:
	case errors.Is(err, ErrIsDir) && flags == 0 && serr == nil && derr == nil && src.Kind != KindDir && dst.Kind == KindDir:
	default:
		return fmt.Errorf("the view shows no cause (source %+v, %v; target %+v, %v, %d entries)", src, serr, dst, derr, dstEntries)
	}
	return nil
}
