package nsv2

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// Rename, exchange and rmdir with a fault at each of their requests, and
// run by a mount that dies after its k-th request: the store holds each
// change whole or not at all, as other mounts read it.

// multiFaultCases are the changes of several names, run by mount 2.
func multiFaultCases() []treeFaultCase {
	ctx := context.Background()
	root := namespace.RootIno
	var f, g namespace.Node
	mk := func(t *testing.T, one namespace.Names) {
		f = must(one.Create(ctx, root, "f", 0o644, owner))(t)
		g = must(one.Create(ctx, root, "g", 0o644, owner))(t)
	}
	// rootState is "done" or "none" when the root binds exactly done or
	// none (name to ino) and the orphans are doneOrphans or none.
	rootState := func(t *testing.T, three namespace.Names, done, none map[string]namespace.Ino, doneOrphans []namespace.Orphan) string {
		l := names(t, three, root)
		for name, ino := range l {
			if n := must(three.Lookup(ctx, root, name))(t); n.Ino != ino {
				return fmt.Sprintf("%s listed as %d, looked up as %d", name, ino, n.Ino)
			}
		}
		o := must(three.Orphans(ctx))(t)
		switch {
		case reflect.DeepEqual(l, done) && reflect.DeepEqual(o, doneOrphans):
			return "done"
		case reflect.DeepEqual(l, none) && len(o) == 0:
			return "none"
		}
		return fmt.Sprintf("the root lists %v, orphans %+v", l, o)
	}
	return []treeFaultCase{
		{name: "rename", setup: func(t *testing.T, one, _ namespace.Names) { mk(t, one) },
			run: func(ctx context.Context, ns namespace.Names) error {
				_, err := ns.Rename(ctx, root, "f", root, "h", 0)
				return err
			}, state: func(t *testing.T, three namespace.Names) string {
				return rootState(t, three, map[string]namespace.Ino{"h": f.Ino, "g": g.Ino},
					map[string]namespace.Ino{"f": f.Ino, "g": g.Ino}, nil)
			}},
		{name: "rename over a file", setup: func(t *testing.T, one, two namespace.Names) {
			mk(t, one)
			must(two.Lookup(ctx, root, "g"))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			_, err := ns.Rename(ctx, root, "f", root, "g", 0)
			return err
		}, state: func(t *testing.T, three namespace.Names) string {
			return rootState(t, three, map[string]namespace.Ino{"g": f.Ino},
				map[string]namespace.Ino{"f": f.Ino, "g": g.Ino}, []namespace.Orphan{{Ino: g.Ino, FileID: g.FileID}})
		}},
		{name: "exchange", setup: func(t *testing.T, one, _ namespace.Names) { mk(t, one) },
			run: func(ctx context.Context, ns namespace.Names) error {
				_, err := ns.Rename(ctx, root, "f", root, "g", namespace.RenameExchange)
				return err
			}, state: func(t *testing.T, three namespace.Names) string {
				return rootState(t, three, map[string]namespace.Ino{"f": g.Ino, "g": f.Ino},
					map[string]namespace.Ino{"f": f.Ino, "g": g.Ino}, nil)
			}},
		{name: "rmdir", setup: func(t *testing.T, one, _ namespace.Names) {
			mk(t, one)
			f = must(one.Mkdir(ctx, root, "e", 0o755, owner))(t)
		}, run: func(ctx context.Context, ns namespace.Names) error {
			return ns.Rmdir(ctx, root, "e")
		}, state: func(t *testing.T, three namespace.Names) string {
			return rootState(t, three, map[string]namespace.Ino{"g": g.Ino, "f": must(three.Lookup(ctx, root, "f"))(t).Ino},
				map[string]namespace.Ino{"g": g.Ino, "f": must(three.Lookup(ctx, root, "f"))(t).Ino, "e": f.Ino}, nil)
		}},
	}
}

func TestTreeMultiFaultAtEveryRequest(t *testing.T) {
	for _, fc := range multiFaultCases() {
		t.Run(fc.name, func(t *testing.T) { faultAtEveryRequest(t, fc, 3) })
	}
}

// dyingStore fails every request after the first n: a mount that died
// there (its later requests never reach the store).
type dyingStore struct {
	staging.Store
	mu sync.Mutex
	n  int
}

var errDead = errors.New("the mount died")

func (d *dyingStore) alive() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n <= 0 {
		return errDead
	}
	d.n--
	return nil
}

func (d *dyingStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if err := d.alive(); err != nil {
		return staging.ObjectInfo{}, err
	}
	return d.Store.Put(ctx, key, data, opts)
}

func (d *dyingStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if err := d.alive(); err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	return d.Store.Get(ctx, key, r)
}

func (d *dyingStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if err := d.alive(); err != nil {
		return staging.ObjectInfo{}, err
	}
	return d.Store.Head(ctx, key)
}

func (d *dyingStore) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	if err := d.alive(); err != nil {
		return staging.ListPage{}, err
	}
	return d.Store.List(ctx, prefix, startAfter, max)
}

func (d *dyingStore) Delete(ctx context.Context, key string) error {
	if err := d.alive(); err != nil {
		return err
	}
	return d.Store.Delete(ctx, key)
}

// TestTreeMultiDies: mount 2 dies after its k-th request of a change, for
// every k; a mount whose clock of the store is past TxGrace then reads the
// store (resolving, as abort, a lock left undecided) and finds all or none
// of the change, and a mount after it the same.
func TestTreeMultiDies(t *testing.T) {
	for _, fc := range multiFaultCases() {
		t.Run(fc.name, func(t *testing.T) { diesAtEveryRequest(t, fc) })
	}
}

// diesAtEveryRequest runs fc by a mount that dies after its k-th request,
// for every k until fc is done within k; a mount whose clock of the store
// is past TxGrace then reads the store (resolving, as abort, a lock left
// undecided) and finds all or none of the change, and a mount after it the
// same. Requests after the call (the tidy of its locks) count as the
// mount's too: it dies there as well.
func diesAtEveryRequest(t *testing.T, fc treeFaultCase) {
	t.Helper()
	ctx := context.Background()
	for k := 0; ; k++ {
		st := mem.NewS3ETags()
		d := &dyingStore{Store: st, n: 1 << 30}
		one, two := openTree(t, st, 1), openTree(t, d, 2)
		fc.setup(t, one, two)
		d.mu.Lock()
		d.n = k
		d.mu.Unlock()
		err := fc.run(ctx, two)
		late, err2 := Open(Config{Store: st, Root: root, Mount: cid(3), FirstBatch: 1<<40 + 3*16,
			StoreNow: func() time.Time { return time.Now().Add(2 * TxGrace) }})
		if err2 != nil {
			t.Fatal(err2)
		}
		state := fc.state(t, late)
		_ = late.Close()
		after := fc.state(t, openTree(t, st, 4))
		where := fmt.Sprintf("died after request %d", k)
		switch {
		case state != "done" && state != "none":
			t.Fatalf("%s: the store holds a part: %s", where, state)
		case after != state:
			t.Fatalf("%s: read %s, then %s", where, state, after)
		case err == nil && state != "done":
			t.Fatalf("%s: told done, the store holds %s", where, state)
		}
		if err == nil {
			return // the change needed no more than k requests
		}
	}
}
