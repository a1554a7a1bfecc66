package nsv2

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// walkFixture: mount b makes d/s0..s7, 16 files in each; a has looked d up.
func walkFixture(t *testing.T, st staging.Store, a, b *Tree) (d namespace.Node, subs []namespace.Node) {
	t.Helper()
	ctx := context.Background()
	d = must(b.Mkdir(ctx, namespace.RootIno, "d", 0o755, owner))(t)
	for i := range 8 {
		s := must(b.Mkdir(ctx, d.Ino, fmt.Sprintf("s%d", i), 0o755, owner))(t)
		subs = append(subs, s)
		for j := range 16 {
			must(b.Create(ctx, s.Ino, fmt.Sprintf("f%02d", j), 0o644, owner))(t)
		}
	}
	must(a.Lookup(ctx, namespace.RootIno, "d"))(t)
	return d, subs
}

// A walk of d (its listing, then each subdirectory's) by mount a, of names
// mount b made: once the walk lists its first subdirectory, the others are
// read ahead, and the walk's listing of each sends its LIST and nothing
// more; without the walk ahead, each sends a GET a name. What each listing
// shows is still as of its own LIST: a name b makes after the read ahead
// shows, one b removes does not.
func TestWalkAhead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ahead    int
		wantGets int64
	}{
		// s3's new name and s5's tombstone, read by the walk itself.
		{"walk ahead", 0, 2},
		// Every key of the 7: 16 names each, s3's new one on top.
		{"none", -1, 7*16 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.NewS3ETags()
			cs := counting.New(st)
			a, err := Open(Config{Store: cs, Root: root, Mount: cid(1), FirstBatch: 1<<40 + 16, WalkAhead: tc.ahead})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b := openTree(t, st, 2)
			d, subs := walkFixture(t, st, a, b)
			must(a.ReadDir(ctx, d.Ino))(t)
			must(a.ReadDir(ctx, subs[0].Ino))(t)
			a.bg.Wait() // the read ahead, so that what follows counts the walk's own requests
			must(b.Create(ctx, subs[3].Ino, "late", 0o644, owner))(t)
			must(b.Unlink(ctx, subs[5].Ino, "f00"))(t)
			s0 := cs.Snapshot()
			for i, s := range subs[1:] {
				ents := must(a.ReadDir(ctx, s.Ino))(t)
				var names []string
				for _, e := range ents {
					names = append(names, e.Name)
				}
				got := strings.Join(names, " ")
				switch i + 1 {
				case 3:
					if len(ents) != 17 || !strings.Contains(got, "late") {
						t.Errorf("s3 after b's create: %s", got)
					}
				case 5:
					if len(ents) != 15 || strings.Contains(got, "f00") {
						t.Errorf("s5 after b's unlink: %s", got)
					}
				default:
					if len(ents) != 16 {
						t.Errorf("s%d: %s", i+1, got)
					}
				}
			}
			got := cs.Snapshot().Sub(s0)
			if l, g := got.Op(staging.OpList).Requests, got.Op(staging.OpGet).Requests; l != 7 || g != tc.wantGets {
				t.Fatalf("the walk of 7 subdirectories sent %v; want 7 LISTs and %d GETs", got, tc.wantGets)
			}
		})
	}
}

// blockList is a store whose LISTs under prefix wait for their context.
type blockList struct {
	staging.Store
	prefix  string
	entered chan struct{}
	once    atomic.Bool
	out     atomic.Bool // a LIST that waited has returned
}

func (s *blockList) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	if strings.HasPrefix(prefix, s.prefix) {
		if s.once.CompareAndSwap(false, true) {
			close(s.entered)
		}
		<-ctx.Done()
		s.out.Store(true)
		return staging.ListPage{}, ctx.Err()
	}
	return s.Store.List(ctx, prefix, startAfter, max)
}

// Close cancels the walk ahead and waits for it.
func TestWalkAheadStoppedByClose(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	b := openTree(t, st, 2)
	bl := &blockList{Store: st, prefix: "\x00", entered: make(chan struct{})}
	a, err := Open(Config{Store: bl, Root: root, Mount: cid(1), FirstBatch: 1<<40 + 16, WalkAhead: 1})
	if err != nil {
		t.Fatal(err)
	}
	d, subs := walkFixture(t, st, a, b)
	must(a.ReadDir(ctx, d.Ino))(t)
	bl.prefix = a.fragPrefix(subs[1].Ino, 0)
	must(a.ReadDir(ctx, subs[0].Ino))(t)
	<-bl.entered // the read ahead of s1 waits in its LIST
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !bl.out.Load() {
		t.Fatal("Close returned with the walk ahead's LIST in flight")
	}
}
