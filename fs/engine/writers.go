package engine

// Writer markers (package writermark): a writer that holds objects no
// published head names keeps a marker under the file's prefix, so that the
// cleaner deletes none of them. The File's Keeper (File.wm) stores, renews
// and deletes it; this file is what a flush asks of it.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/fs/writermark"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// ErrLostObject: an object the next checkpoint would name is gone (its
// writer's marker lapsed and a cleaner deleted it).
var ErrLostObject = errors.New("object of an unpublished checkpoint is gone")

// LostObjectError names the missing object. Nothing was published.
type LostObjectError struct {
	Prefix string
	Key    string
}

func (e *LostObjectError) Error() string {
	return fmt.Sprintf("%s: %s is gone while this writer's marker had lapsed; the checkpoint that would name it is not published",
		e.Prefix, e.Key)
}

func (e *LostObjectError) Unwrap() error { return ErrLostObject }

// Clock is the time a writer's marker keeps (writermark.Clock); tests drive
// a fake one.
type Clock = writermark.Clock

// holdWritersLocked makes the marker cover the objects about to be stored
// under the pending checkpoint number. The caller holds mu.
func (f *File) holdWritersLocked(ctx context.Context) error {
	return f.holdWriters(ctx, f.markCnoLocked())
}

// markCnoLocked is the checkpoint number the marker must cover for the
// objects about to be stored: the pending one, or the next.
func (f *File) markCnoLocked() uint64 {
	if f.pendingCno != 0 {
		return f.pendingCno
	}
	return f.head.Cno + 1
}

// holdWriters is holdWritersLocked for checkpoint number cno, taken under
// mu (markCnoLocked); it takes no lock of f, so a flush calls it without mu.
func (f *File) holdWriters(ctx context.Context, cno uint64) error {
	if err := f.wm.Hold(ctx, cno); err != nil {
		if errors.Is(err, writermark.ErrClosed) {
			err = ErrClosed
		}
		return fmt.Errorf("writer marker of %s: %w", f.prefix, err)
	}
	return nil
}

// verifyWritersLocked runs right before a head naming objs (the last is part
// 0) and the objects this writer stored since its head is published: the
// marker must be live, and if it lapsed meanwhile every such object must
// still exist. The caller holds mu.
func (f *File) verifyWritersLocked(ctx context.Context, objs []*plannedObject) error {
	return f.verifyWriters(ctx, func() []string { return f.namedKeysLocked(objs) })
}

// namedKeysLocked is the keys of objs and of the objects this writer stored
// since its head (partial segments, objects sent ahead, leaves they hold),
// sorted: what a head naming objs names of this writer's. The caller holds
// mu.
func (f *File) namedKeysLocked(objs []*plannedObject) []string {
	return f.namedKeys(f.written, f.leafImages, objs)
}

// namedKeys is namedKeysLocked with the records and the leaves stored since
// the head given (a flush's, taken under mu).
func (f *File) namedKeys(written map[uint64]blockmap.Value, leafImages map[uint64]segment.Ptr, objs []*plannedObject) []string {
	names := make(map[segment.ObjectName]struct{})
	for _, v := range written {
		names[v.Ptr.Object()] = struct{}{}
	}
	for _, p := range leafImages {
		names[p.Object()] = struct{}{}
	}
	for _, o := range objs {
		names[o.name] = struct{}{}
	}
	keys := make([]string, 0, len(names))
	for n := range names {
		keys = append(keys, f.key(n))
	}
	slices.Sort(keys)
	return keys
}

// verifyWriters is verifyWritersLocked with the keys to check given by
// named, which is called only when the marker lapsed; it takes no lock of
// f (a flush calls it without mu, named giving what it took under mu).
func (f *File) verifyWriters(ctx context.Context, named func() []string) error {
	for {
		must, lapses, err := f.wm.Check(ctx)
		if err != nil {
			return fmt.Errorf("writer marker of %s: %w", f.prefix, err)
		}
		if !must {
			return nil
		}
		keys := named()
		f.log.Warn("the writer marker lapsed; checking the objects the checkpoint names", zap.Int("objects", len(keys)))
		for _, k := range keys {
			f.s.requests.Add(1)
			if _, err := f.st.Head(ctx, k); err != nil {
				if errors.Is(err, staging.ErrNotFound) {
					return &LostObjectError{Prefix: f.prefix, Key: k}
				}
				return fmt.Errorf("check %s: %w", k, err)
			}
		}
		f.wm.Checked(lapses)
	}
}
