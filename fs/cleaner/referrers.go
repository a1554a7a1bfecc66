package cleaner

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// referrers reads, once per run, what each copy by reference points at: the
// files its lineages name and, by file, the names of that file's objects its
// checkpoints point into.
type referrers struct {
	st    staging.Store
	files string  // the prefix of the volume's files ("" unknown)
	o     Options // the retention that decides which checkpoints of a copy count
	byID  map[string]referrerRead
}

// referrer is what one copy points at, over the checkpoints its own
// retention keeps (the same rule as its cleaning: Keep, KeepFor, pinned).
// A checkpoint it drops keeps nothing: the objects only it named become
// unreferenced then, and their grace counts from then.
type referrer struct {
	noHead bool
	names  map[string]map[segment.ObjectName]bool // by file: its objects the maps point into
}

// stale says whether the copy keeps nothing of file id: it has no head, or
// no retained checkpoint of it points at an object of id. A copy written
// over (its lineage still names id, its map no longer does) keeps nothing.
func (r *referrer) stale(id string) bool { return r.noHead || len(r.names[id]) == 0 }

func newReferrers(st staging.Store, files string, o Options) *referrers {
	return &referrers{st: st, files: files, o: o, byID: map[string]referrerRead{}}
}

// get returns what the copy copyID points at, read on first use.
func (rs *referrers) get(ctx context.Context, copyID string) (*referrer, error) {
	if c, ok := rs.byID[copyID]; ok {
		return c.r, c.err
	}
	if rs.files == "" {
		return nil, fmt.Errorf("copy %s: %w", copyID, volume.ErrNoFilesPrefix)
	}
	r, err := rs.read(ctx, copyID)
	if err != nil {
		err = fmt.Errorf("copy %s: %w", copyID, err)
		if ctx.Err() != nil {
			return nil, err // not kept: the run stops
		}
	}
	// A failure is kept too: every file the copy points into is kept
	// whole this run without asking again.
	rs.byID[copyID] = referrerRead{r, err}
	return r, err
}

type referrerRead struct {
	r   *referrer
	err error
}

func (rs *referrers) read(ctx context.Context, copyID string) (*referrer, error) {
	r := &referrer{names: map[string]map[segment.ObjectName]bool{}}
	prefix := volume.FilePrefixIn(rs.files, copyID)
	maps := newFileMaps(rs.st, rs.files, copyID, prefix)
	_, _, chain, err := maps.readChain(ctx, segment.FileTag(copyID), nil)
	if errors.Is(err, ErrNoHead) {
		r.noHead = true
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the chain of %s: %w", prefix, err)
	}
	// The copy's own objects its retained checkpoints point into: an
	// older checkpoint whose part 0 one of them points into is retained
	// too, as its cleaning retains it.
	own := map[segment.ObjectName]bool{}
	now := rs.o.now()
	for i, c := range chain {
		young := rs.o.KeepFor > 0 && (c.at.IsZero() || now.Sub(c.at) < rs.o.KeepFor)
		if !(rs.o.Keep <= 0 || i < rs.o.Keep || young || own[c.part]) {
			break // dropped, and every older one with it
		}
		own[c.part] = true
		err := maps.walk(ctx, c.ino, func(n segment.ObjectName) error {
			if c.ino.Lineage == 0 {
				own[n] = true
				return nil
			}
			id, mine, err := maps.space.Owner(ctx, c.ino.Lineage, n)
			if err != nil {
				return err
			}
			if mine {
				own[n] = true
				return nil
			}
			set := r.names[id]
			if set == nil {
				set = map[segment.ObjectName]bool{}
				r.names[id] = set
			}
			set[n] = true
			return nil
		})
		if err != nil {
			// Past the head, a checkpoint whose lineage or objects are gone
			// was dropped by the copy's own cleaning and is read by no one:
			// what it pointed at is not needed for it.
			if i > 0 && errors.Is(err, staging.ErrNotFound) {
				break
			}
			return nil, fmt.Errorf("checkpoint %d of %s: %w", c.ino.Cno, prefix, err)
		}
	}
	return r, nil
}
