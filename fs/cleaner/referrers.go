package cleaner

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// referrers reads, once per run, what each copy by reference points at: the
// files its lineages name and, by file, the names of that file's objects its
// checkpoints point into.
type referrers struct {
	st    staging.Store
	files string // the prefix of the volume's files ("" unknown)
	byID  map[string]referrerRead
}

// referrer is what one copy points at, over every checkpoint on its chain
// (those its own retention keeps and any older still on the chain: a
// superset, freed on a later run once its chain is shorter).
type referrer struct {
	noHead bool
	named  map[string]bool                        // files some lineage on the chain names
	names  map[string]map[segment.ObjectName]bool // by file: its objects the maps point into
}

// stale says whether the copy keeps nothing of file id: it has no head, or
// no checkpoint on its chain has a lineage naming id.
func (r *referrer) stale(id string) bool { return r.noHead || !r.named[id] }

func newReferrers(st staging.Store, files string) *referrers {
	return &referrers{st: st, files: files, byID: map[string]referrerRead{}}
}

// get returns what the copy copyID points at, read on first use.
func (rs *referrers) get(ctx context.Context, copyID string) (*referrer, error) {
	if c, ok := rs.byID[copyID]; ok {
		return c.r, c.err
	}
	if rs.files == "" {
		return nil, fmt.Errorf("copy %s: the prefix of the volume's files is not known: %w", copyID, engine.ErrInvalid)
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
	r := &referrer{named: map[string]bool{}, names: map[string]map[segment.ObjectName]bool{}}
	prefix := rs.files + copyID + "/"
	maps := newFileMaps(rs.st, rs.files, copyID, prefix)
	_, _, chain, err := maps.readChain(ctx, segment.FileTag(copyID), nil)
	if errors.Is(err, ErrNoHead) {
		r.noHead = true
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the chain of %s: %w", prefix, err)
	}
	for i, c := range chain {
		if c.ino.Lineage == 0 {
			continue
		}
		lin, err := maps.space.Lineage(ctx, c.ino.Lineage)
		if err != nil {
			// Past the head, a checkpoint whose lineage or objects are gone
			// was dropped by the copy's own cleaning (its lineage object
			// goes once no retained checkpoint names it) and is read by
			// no one: what it pointed at is not needed for it.
			if i > 0 && errors.Is(err, staging.ErrNotFound) {
				continue
			}
			return nil, fmt.Errorf("checkpoint %d of %s: %w", c.ino.Cno, prefix, err)
		}
		for _, e := range lin.Entries {
			r.named[e.FileID] = true
		}
		err = maps.walk(ctx, c.ino, func(n segment.ObjectName) error {
			id, own, err := maps.space.Owner(ctx, c.ino.Lineage, n)
			if err != nil || own {
				return err
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
			if i > 0 && errors.Is(err, staging.ErrNotFound) {
				continue // as above; what was seen is kept (a superset)
			}
			return nil, fmt.Errorf("checkpoint %d of %s: %w", c.ino.Cno, prefix, err)
		}
	}
	return r, nil
}
