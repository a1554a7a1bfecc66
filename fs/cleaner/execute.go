package cleaner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// Execute does what the plan says, checking again right before each file's
// deletions what may have changed since the plan: a head published since or
// a reference marker stored since (a copy made after the listing) makes it
// plan that file again from a new listing, and leave it as it is this run
// if it moved again; the writer markers are read again too. It then stores
// each file's pending record, with only what is still pending, and the
// orphans' record. A plan of a dry run does nothing here.
func (p *Plan) Execute(ctx context.Context) (*Report, error) {
	rep := p.rep
	if p.o.DryRun {
		return p.Report(), nil
	}
	var errs []error
	errs = append(errs, p.reapOrphans(ctx, &rep))
	if ctx.Err() == nil {
		errs = append(errs, p.forgetOrphans(ctx, &rep))
	}
	if p.orphKey != "" && ctx.Err() == nil && (p.orphHad || len(p.orphRec) > 0) && !samePending(p.orphRec, p.orphOld) {
		errs = append(errs, writePending(ctx, p.st, p.orphKey, p.orphRec))
	}
	for _, f := range p.files {
		if ctx.Err() != nil {
			break
		}
		if err := p.executeFile(ctx, f, &rep); err != nil {
			errs = append(errs, err)
			continue
		}
	}
	for _, key := range p.oldFiles {
		if ctx.Err() != nil {
			break
		}
		if err := p.st.Delete(ctx, key); err != nil {
			errs = append(errs, fmt.Errorf("delete pending record %s: %w", key, err))
		}
	}
	if ctx.Err() == nil {
		errs = append(errs, p.abortUploads(ctx, &rep))
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return &rep, errors.Join(errs...)
}

// executeFile deletes what the plan of one file dooms, then stores its
// pending record.
func (p *Plan) executeFile(ctx context.Context, f *filePlan, rep *Report) error {
	st, o := p.st, p.o
	keepAll := func() {
		for _, d := range f.del {
			rep.Kept++
			rep.KeptBytes += d.Size
		}
	}
	done := map[string]bool{}
	if len(f.del) > 0 {
		ok, err := p.unchanged(ctx, f)
		if err != nil {
			return err
		}
		if !ok {
			// Planned afresh, now: a file flushed often would otherwise
			// move between every plan and its execution and never be
			// cleaned. If it moved again, it is left as it is this run.
			g, err := p.replan(ctx, f)
			if err != nil {
				return err
			}
			if ok, err = p.unchanged(ctx, g); err != nil {
				return err
			}
			if ok {
				f = g
			} else {
				keepAll()
				f.del = nil
			}
		}
	}
	if len(f.del) > 0 {
		// A writer may have started, or rebased onto objects listed here,
		// since the listing: its markers are read again right before
		// deleting, and again whenever the last reading is older than
		// engine.WriterRecheck.
		p.view.forget(f.prefix)
	}
	for _, d := range f.del {
		ws, err := p.view.fresh(ctx, f.prefix)
		if err != nil {
			return fmt.Errorf("clean %s: %w", f.prefix, err)
		}
		if d.isCkpt && covered(ws, o.now(), d.cno) || d.marker && !deadLong(ws, d.Key, o.now(), o.Grace) {
			rep.Kept++
			rep.KeptBytes += d.Size
			continue
		}
		if !d.ref.IsZero() {
			// A copy starting again since the listing stores its marker
			// anew: that one is not the marker judged stale.
			info, err := st.Head(ctx, d.Key)
			if errors.Is(err, staging.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("clean %s: %w", f.prefix, err)
			}
			if !info.LastModified.Equal(d.ref) {
				rep.Kept++
				rep.KeptBytes += d.Size
				continue
			}
		}
		if err := st.Delete(ctx, d.Key); err != nil {
			return fmt.Errorf("delete %s: %w", d.Key, err)
		}
		done[d.rel] = true
		rep.Deleted = append(rep.Deleted, d.Object)
	}
	if f.recKey == "" {
		return nil
	}
	for rel := range done {
		delete(f.rec, rel)
	}
	if !f.recHad && len(f.rec) == 0 || f.recHad && samePending(f.rec, f.recOld) {
		return nil // nothing to store, or no change
	}
	return writePending(ctx, st, f.recKey, f.rec)
}

// replan plans the file of f again from a new listing.
func (p *Plan) replan(ctx context.Context, f *filePlan) (*filePlan, error) {
	objs, err := staging.ListAll(ctx, p.st, f.prefix)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", f.prefix, err)
	}
	q := &Plan{st: p.st, root: p.root, o: p.o, view: p.view, refs: p.refs}
	q.o.Progress = nil
	if err := q.planFile(ctx, f.prefix, f.id, objs, f.recHad); err != nil {
		return nil, err
	}
	return q.files[0], nil
}

// unchanged says whether the file is as planned: the same head, and no
// reference marker stored since the listing. A head published since may
// name objects the plan judged abandoned (a part 0 above the old head); a
// copy made since may point at a checkpoint the plan dropped.
func (p *Plan) unchanged(ctx context.Context, f *filePlan) (bool, error) {
	info, err := p.st.Head(ctx, volume.HeadKey(f.prefix))
	if errors.Is(err, staging.ErrNotFound) {
		return f.head.ETag == "", nil
	}
	if err != nil {
		return false, fmt.Errorf("clean %s: read the head again: %w", f.prefix, err)
	}
	if info.ETag != f.head.ETag || !info.LastModified.Equal(f.head.LastModified) {
		return false, nil
	}
	refs, err := staging.ListAll(ctx, p.st, f.prefix+volume.RefsDir)
	if err != nil {
		return false, fmt.Errorf("clean %s: list reference markers again: %w", f.prefix, err)
	}
	for _, r := range refs {
		at, ok := f.refs[r.Key]
		if !ok || !at.Equal(r.LastModified) {
			return false, nil
		}
	}
	return true, nil
}

// abortUploads aborts the uploads of the plan, unless a live writer marker
// of its file now covers its object.
func (p *Plan) abortUploads(ctx context.Context, rep *Report) error {
	for _, u := range p.uploads {
		ok, err := p.uploadFree(ctx, u, p.o.now())
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := p.st.AbortMultipart(ctx, u.Key, u.UploadID); err != nil && !errors.Is(err, staging.ErrNotFound) {
			return fmt.Errorf("abort upload %s of %s: %w", u.UploadID, u.Key, err)
		}
		rep.Aborted = append(rep.Aborted, u)
	}
	return nil
}

// samePending says whether two records hold the same entries (a nil old
// record, one that did not decode, is never the same).
func samePending(a, b pending) bool {
	return b != nil && maps.EqualFunc(a, b, time.Time.Equal)
}
