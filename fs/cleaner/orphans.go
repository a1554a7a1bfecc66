package cleaner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// orphanPlan is an orphaned file to reap.
type orphanPlan struct {
	id, prefix string
	objs       []staging.ObjectInfo // head last
	recKey     string               // its file record, if any, to delete
}

const orphanReason = "orphaned file (no name) for longer than the grace period and the namespace lag"

// planOrphans decides which orphaned files go. The grace of an orphan
// counts from the run that first found it orphaned (recorded in the
// orphans' record) and lasts max(Grace, NSLag). A file the namespace holds
// as an orphan goes whether it has objects or not: one never written has
// none, and is forgotten all the same. An orphan that a copy by reference
// points into is kept, and its grace starts again once it no longer does;
// orphans that only other orphans going in the same run point into go
// together, so two that hold each other are reaped.
func (p *Plan) planOrphans(ctx context.Context, orphans map[string]bool, byFile map[string][]staging.ObjectInfo, hasRec map[string]bool) error {
	o, fp := p.o, volume.FilesPrefix(p.root)
	now := o.now()
	old, bad, err := readPending(ctx, p.st, p.orphKey)
	if err != nil {
		return err
	}
	if bad != nil {
		p.rep.Skipped = append(p.rep.Skipped, Object{Key: p.orphKey, Reason: bad.Error()})
	}
	p.orphHad = len(old) > 0 || bad != nil
	p.orphOld = old
	if bad != nil {
		p.orphOld = nil // rewritten
	}
	p.orphRec = pending{}
	for id, at := range old {
		if !p.rng.holds(id) {
			p.orphRec[id] = at // another pass's
		}
	}
	wait := max(o.Grace, o.NSLag)
	cand := map[string]bool{}
	ids := slices.Sorted(maps.Keys(orphans))
	for _, id := range ids {
		p.rep.Files++
		prefix := volume.FilePrefixIn(fp, id)
		since := old.since(id, now)
		p.orphRec[id] = since
		ws, err := p.view.read(ctx, prefix, byFile[id])
		if err != nil {
			return fmt.Errorf("orphaned file %s: %w", id, err)
		}
		// A mount still writing the file (an open handle) keeps a live marker.
		// A handle of this process on it keeps it (o.Open): a mount's own
		// cleaner does not cut its reader off.
		if now.Sub(since) >= wait && !anyLive(ws, now) && (o.Open == nil || !o.Open(id)) {
			cand[id] = true
		}
	}
	// Who holds each orphan: copies whose markers are under it. A holder
	// that is itself a candidate does not count (it goes too).
	type hold struct {
		copyID string
		always bool // a named file, a young marker or a copy that could not be read
	}
	holders := map[string][]hold{}
	for _, id := range ids {
		prefix := volume.FilePrefixIn(fp, id)
		for _, obj := range byFile[id] {
			copyID, ok := volume.IsRefKey(strings.TrimPrefix(obj.Key, prefix))
			if !ok || copyID == id {
				continue
			}
			if now.Sub(obj.LastModified) <= o.Grace {
				holders[id] = append(holders[id], hold{copyID, !orphans[copyID] && !p.otherOrphans[copyID]})
				continue
			}
			r, err := p.refs.get(ctx, copyID)
			if err != nil && ctx.Err() != nil {
				return fmt.Errorf("orphaned file %s: %w", id, err)
			}
			if err != nil {
				p.rep.Skipped = append(p.rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: "file kept whole: " + err.Error()})
				holders[id] = append(holders[id], hold{copyID, true})
				continue
			}
			if !r.stale(id) {
				holders[id] = append(holders[id], hold{copyID, !orphans[copyID] && !p.otherOrphans[copyID]})
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, id := range ids {
			if !cand[id] {
				continue
			}
			for _, h := range holders[id] {
				if h.always || !cand[h.copyID] {
					delete(cand, id)
					changed = true
					break
				}
			}
		}
	}
	for _, id := range ids {
		objs := byFile[id]
		held := false
		for _, h := range holders[id] {
			if h.always {
				held = true
			}
		}
		switch {
		case cand[id]:
			head := fp + id + "/inode"
			order := slices.Clone(objs)
			sort.SliceStable(order, func(i, j int) bool { return order[j].Key == head && order[i].Key != head })
			op := &orphanPlan{id: id, prefix: volume.FilePrefixIn(fp, id), objs: order}
			if hasRec[id] {
				op.recKey = volume.PendingFilesPrefix(p.root) + id
			}
			p.orphans = append(p.orphans, op)
			continue
		case len(holders[id]) > 0:
			p.rep.Referenced = append(p.rep.Referenced, id)
			if held {
				// Referenced by a file with a name: not unreferenced yet.
				delete(p.orphRec, id)
			}
		default:
			p.rep.PendingOrphans = append(p.rep.PendingOrphans, id)
		}
		for _, obj := range objs {
			p.rep.Kept++
			p.rep.KeptBytes += obj.Size
		}
	}
	return nil
}

// reapOrphans reaps the orphans of the plan, several at once: each costs a
// listing and its deletes, and a run may have thousands (empty files made
// and removed).
func (p *Plan) reapOrphans(ctx context.Context, rep *Report) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, p.o.workers(16))
	for _, or := range p.orphans {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var r Report
			err := p.o.fence(ctx)
			if err == nil {
				err = p.reap(ctx, or, &r)
			} else {
				or.id = "" // not forgotten: kept this run
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Deleted = append(rep.Deleted, r.Deleted...)
			rep.Kept += r.Kept
			rep.KeptBytes += r.KeptBytes
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// reap deletes an orphaned file's objects, head last (a run cut short
// leaves a file that opens), unless its objects changed since the plan: a
// handle still open on it that writes (a writer marker, stored or renewed)
// or copies it (a reference marker) keeps it this run. One listing of the
// file tells. Forgetting it is done for all at once (forgetOrphans).
func (p *Plan) reap(ctx context.Context, or *orphanPlan, rep *Report) error {
	objs, err := staging.ListAll(ctx, p.st, or.prefix)
	if err != nil {
		return fmt.Errorf("orphaned file %s: list it again: %w", or.id, err)
	}
	planned := make(map[string]time.Time, len(or.objs))
	for _, obj := range or.objs {
		planned[obj.Key] = obj.LastModified
	}
	moved := false
	for _, obj := range objs {
		if at, ok := planned[obj.Key]; !ok || !at.Equal(obj.LastModified) {
			moved = true
		}
	}
	if moved {
		for _, obj := range or.objs {
			rep.Kept++
			rep.KeptBytes += obj.Size
		}
		or.objs = nil
		or.id = "" // not forgotten: kept this run
		return nil
	}
	for i, obj := range or.objs {
		if p.o.Progress != nil {
			p.o.Progress(1)
		}
		if err := p.st.Delete(ctx, obj.Key); err != nil {
			or.objs = or.objs[i:]
			id := or.id
			or.id = "" // not forgotten: objects are left
			return fmt.Errorf("delete %s of orphaned file %s: %w", obj.Key, id, err)
		}
		rep.Deleted = append(rep.Deleted, Object{Key: obj.Key, Size: obj.Size, Reason: orphanReason})
	}
	if or.recKey != "" {
		if err := p.st.Delete(ctx, or.recKey); err != nil {
			return fmt.Errorf("orphaned file %s: delete its pending record: %w", or.id, err)
		}
	}
	return nil
}

// forgetOrphans makes the namespace forget the orphans whose objects are
// gone, several at once (the namespace puts changes made at once in one
// entry). One not forgotten stays in the orphans' record, and the next run
// forgets it.
func (p *Plan) forgetOrphans(ctx context.Context, rep *Report) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	if err := p.o.fence(ctx); err != nil {
		return err
	}
	sem := make(chan struct{}, p.o.workers(64))
	for _, or := range p.orphans {
		if or.id == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			err := p.ns.Forget(ctx, id)
			if errors.Is(err, namespace.ErrNotExist) {
				err = nil // forgotten since the plan (another run)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("orphaned file %s: %w", id, err))
				return
			}
			delete(p.orphRec, id)
			rep.Orphans = append(rep.Orphans, id)
		}(or.id)
	}
	wg.Wait()
	sort.Strings(rep.Orphans)
	return errors.Join(errs...)
}
