package namespace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ckptfs/ckptfs/staging"
)

// newestSnapshot returns the seq of the newest snapshot, 0 if none. There
// are few: the older ones are trimmed.
func (ns *Namespace) newestSnapshot(ctx context.Context) (uint64, error) {
	objs, err := staging.ListAll(ctx, ns.store, ns.snapPrefix())
	if err != nil {
		return 0, fmt.Errorf("list namespace snapshots: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		seq, ok := parseSeq(o.Key, ns.snapPrefix())
		if !ok {
			return 0, corruptf(o.Key, "not a snapshot name")
		}
		newest = max(newest, seq)
	}
	return newest, nil
}

// snapshotAttempts bounds the reads of a newest snapshot that is trimmed
// between listing and reading it (a newer one was written meanwhile).
const snapshotAttempts = 3

// loadSnapshot reads the newest snapshot; with none, or none newer than
// after, it returns a fresh state (after == 0) or nil.
func (ns *Namespace) loadSnapshot(ctx context.Context, after uint64) (*state, error) {
	for attempt := 1; ; attempt++ {
		seq, err := ns.newestSnapshot(ctx)
		if err != nil {
			return nil, err
		}
		if seq == 0 || seq <= after {
			if after == 0 {
				return newState(), nil
			}
			return nil, nil
		}
		key := SnapKey(ns.root, seq)
		data, _, err := staging.GetLimited(ctx, ns.store, key, envHeaderLen+maxObjectBody)
		if errors.Is(err, staging.ErrNotFound) && attempt < snapshotAttempts {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read namespace snapshot %s: %w", key, err)
		}
		return decodeSnapshot(key, seq, data)
	}
}

// writeSnapshot stores the snapshot as of seq, then trims in the background
// what it covers. Another writer may have stored it already; failing is
// harmless (the log still has everything), so it is only logged.
func (ns *Namespace) writeSnapshot(ctx context.Context, seq uint64, data []byte) {
	if err := ns.putSnapshot(ctx, seq, data); err != nil {
		ns.log.Warn("write namespace snapshot", zap.Error(err))
		return
	}
	ns.requestTrim(seq)
}

func (ns *Namespace) putSnapshot(ctx context.Context, seq uint64, data []byte) error {
	key := SnapKey(ns.root, seq)
	_, err := ns.store.Put(ctx, key, data, staging.PutOptions{
		Conditions: staging.Conditions{IfNoneMatch: true},
	})
	if err != nil && !errors.Is(err, staging.ErrPrecondition) {
		return fmt.Errorf("write namespace snapshot %s: %w", key, err)
	}
	return nil
}

// Compact writes a snapshot of the state as of the newest entry now (if no
// snapshot of that seq exists), and trims in the background what it covers.
func (ns *Namespace) Compact(ctx context.Context) error {
	ns.appendMu.Lock()
	err := ns.refreshLocked(ctx)
	seq, data := ns.st.seq, []byte(nil)
	if err == nil && seq > 0 {
		data = encodeSnapshot(ns.st)
		ns.sinceSnap = 0
	}
	ns.appendMu.Unlock()
	if err != nil || data == nil {
		return err
	}
	if err := ns.putSnapshot(ctx, seq, data); err != nil {
		return err
	}
	ns.requestTrim(seq)
	return nil
}

// Trimming bounds: deletes in flight, deletes per pass (a pass that
// reaches it is followed by another), and the page of a listing.
const (
	trimParallelism = 8
	maxTrimPerPass  = 10000
	trimPage        = 1000
)

// requestTrim asks the trimmer, a goroutine owned by the namespace (Wait
// waits for it, Close stops it), to trim what the snapshot at seq covers.
func (ns *Namespace) requestTrim(seq uint64) {
	ns.trimMu.Lock()
	defer ns.trimMu.Unlock()
	ns.trimAt = max(ns.trimAt, seq)
	if ns.trimming || ns.ctx.Err() != nil {
		return
	}
	ns.trimming = true
	ns.bg.Add(1)
	go func() {
		defer ns.bg.Done()
		for {
			ns.trimMu.Lock()
			seq := ns.trimAt
			ns.trimAt = 0
			if seq == 0 || ns.ctx.Err() != nil {
				ns.trimming = false
				ns.trimMu.Unlock()
				return
			}
			ns.trimMu.Unlock()
			if more := ns.trim(ns.ctx, seq); more {
				ns.trimMu.Lock()
				ns.trimAt = max(ns.trimAt, seq)
				ns.trimMu.Unlock()
			}
		}
	}()
}

// trim deletes the log entries below snap (the rule of Compactable: entry
// snap itself stays, so that a lagging mount finds an entry past the gap)
// and the snapshots below snap, but only those the store last modified more
// than TrimGrace ago: the safety of appends without reading the log first
// rests on it (see the package doc). Errors end the pass and are logged; the
// next snapshot's pass tries again. It reports whether the pass stopped at
// its bound with more to delete.
func (ns *Namespace) trim(ctx context.Context, snap uint64) (more bool) {
	now := ns.opts.Clock()
	n, more, err := ns.trimDir(ctx, ns.logPrefix(), snap, now)
	if err == nil && !more {
		var m int
		m, more, err = ns.trimDir(ctx, ns.snapPrefix(), snap, now)
		n += m
	}
	if err != nil {
		if ctx.Err() == nil {
			ns.log.Warn("trim namespace log", zap.Uint64("snapshot", snap), zap.Int("deleted", n), zap.Error(err))
		}
		return false
	}
	return more
}

// trimDir deletes the objects of dir (log or snapshots) below seq snap and
// older than TrimGrace at clock reading now, page by page. It stops at the
// first too young: objects are written in seq order, so the rest are
// younger still.
func (ns *Namespace) trimDir(ctx context.Context, dir string, snap uint64, now time.Time) (deleted int, more bool, err error) {
	after := ""
	for {
		lctx, cancel := context.WithTimeout(ctx, ns.opts.FinishTimeout)
		page, err := ns.store.List(lctx, dir, after, trimPage)
		cancel()
		if err != nil {
			return deleted, false, fmt.Errorf("list %s after %q: %w", dir, after, err)
		}
		var keys []string
		done := !page.Truncated
		for _, o := range page.Objects {
			seq, ok := parseSeq(o.Key, dir)
			if !ok {
				continue // not ours to delete
			}
			if seq >= snap || o.LastModified.IsZero() || now.Sub(o.LastModified) <= ns.opts.TrimGrace {
				done = true
				break
			}
			if deleted+len(keys) >= maxTrimPerPass {
				done, more = true, true
				break
			}
			keys = append(keys, o.Key)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(trimParallelism)
		for _, k := range keys {
			g.Go(func() error {
				dctx, cancel := context.WithTimeout(gctx, ns.opts.FinishTimeout)
				defer cancel()
				if err := ns.store.Delete(dctx, k); err != nil && !errors.Is(err, staging.ErrNotFound) {
					return fmt.Errorf("delete %s: %w", k, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return deleted, false, err
		}
		deleted += len(keys)
		if done || len(page.Objects) == 0 {
			return deleted, more, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// Compactable returns the seq up to which log entries may be deleted: the
// newest snapshot covers them. It is one below that snapshot's seq: the
// entry the snapshot is at stays, so that a mount lagging behind always
// finds an entry past the gap (and reloads the snapshot) rather than an
// empty log it would append to at a seq already used. Snapshots older than
// the newest may go too. Mounts trim this themselves; anyone else deleting
// must also spare what the store modified less than Options.TrimGrace ago
// (the safety of appends without reading the log rests on it). 0 means
// nothing is compactable.
func (ns *Namespace) Compactable(ctx context.Context) (upTo uint64, err error) {
	seq, err := ns.newestSnapshot(ctx)
	if seq == 0 || err != nil {
		return 0, err
	}
	return seq - 1, nil
}
