package nsv2

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// crashAfter is a process that dies after left more requests: every
// request after them fails, unsent.
type crashAfter struct {
	staging.Store
	left atomic.Int64
	sent atomic.Int64
}

var errCrashed = errors.New("crashed")

func (s *crashAfter) take() error {
	if s.left.Add(-1) < 0 {
		return errCrashed
	}
	s.sent.Add(1)
	return nil
}

func (s *crashAfter) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if err := s.take(); err != nil {
		return staging.ObjectInfo{}, err
	}
	return s.Store.Put(ctx, key, data, o)
}

func (s *crashAfter) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if err := s.take(); err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	return s.Store.Get(ctx, key, r)
}

func (s *crashAfter) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if err := s.take(); err != nil {
		return staging.ObjectInfo{}, err
	}
	return s.Store.Head(ctx, key)
}

func (s *crashAfter) List(ctx context.Context, prefix, after string, max int) (staging.ListPage, error) {
	if err := s.take(); err != nil {
		return staging.ListPage{}, err
	}
	return s.Store.List(ctx, prefix, after, max)
}

func (s *crashAfter) Delete(ctx context.Context, key string) error {
	if err := s.take(); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key)
}

// TestForgetLinkedCrash: the Forget of a file whose names were several,
// the last gone, dying after each of its requests, leaves a state that the
// next Forget (of a mount, or of the cleaner's index) finishes: the orphan
// record and the inode object both deleted. Deleting the record first left
// an inode object no record pointed to, which nothing deleted.
func TestForgetLinkedCrash(t *testing.T) {
	ctx := context.Background()
	top := namespace.RootIno
	orphaned := func(t *testing.T) (*mem.Store, namespace.Node) {
		st := mem.NewS3ETags()
		one := openTree(t, st, 1)
		f := must(one.Create(ctx, top, "f", 0o644, owner))(t)
		must(one.Link(ctx, f.Ino, top, "g"))(t)
		must(one.Unlink(ctx, top, "f"))(t)
		must(one.Unlink(ctx, top, "g"))(t)
		// Its locks resolved: the state every reader takes, stored.
		must(struct{}{}, one.Close())(t)
		return st, f
	}
	gone := func(t *testing.T, st staging.Store, f namespace.Node, k int, how string) {
		t.Helper()
		okey, _ := OrphanKey(root, f.FileID)
		for _, key := range []string{okey, inodeKeyOf(f.Ino)} {
			if _, err := st.Head(ctx, key); !errors.Is(err, staging.ErrNotFound) {
				t.Fatalf("crash after %d requests, then %s: %s left (%v)", k, how, staging.TruncKey(key), err)
			}
		}
	}

	// The requests of one Forget.
	st, f := orphaned(t)
	cs := &crashAfter{Store: st}
	cs.left.Store(1 << 30)
	two := openTree(t, cs, 2)
	cs.sent.Store(0)
	if err := two.Forget(ctx, f.FileID); err != nil {
		t.Fatal(err)
	}
	total := int(cs.sent.Load())
	gone(t, st, f, total, "nothing")
	if total < 2 {
		t.Fatalf("a Forget of %d requests", total)
	}

	for k := 0; k < total; k++ {
		for _, next := range []string{"a mount's Forget", "the cleaner's"} {
			st, f := orphaned(t)
			cs := &crashAfter{Store: st}
			cs.left.Store(1 << 30)
			two := openTree(t, cs, 2)
			cs.left.Store(int64(k))
			_ = two.Forget(ctx, f.FileID) // dies somewhere
			var err error
			if next == "a mount's Forget" {
				err = openTree(t, st, 3).Forget(ctx, f.FileID)
			} else {
				x := NewIndex(st, root)
				x.Resolve = true
				r, ok, rerr := x.Record(ctx, f.FileID, time.Hour, time.Now())
				switch {
				case rerr != nil:
					err = rerr
				case !ok:
					err = namespace.ErrNotExist
				case r.State != RecordOrphan:
					t.Fatalf("crash after %d requests: the record reads as %v (%v)", k, r.State, r.Err)
				default:
					err = x.Forget(ctx, f.FileID, r.Orphan.Change, r.Orphan.Ino)
				}
			}
			if err != nil && !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("crash after %d requests, then %s: %v", k, next, err)
			}
			gone(t, st, f, k, next)
		}
	}
}
