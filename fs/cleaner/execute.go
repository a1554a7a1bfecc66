package cleaner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	defer func() {
		// What the files hold once the run is done.
		for _, d := range rep.Deleted {
			rep.StoredObjects--
			rep.StoredBytes -= d.Size
			if id, _, ok := volume.SplitFileKey(volume.FilesPrefix(p.root), d.Key); ok && rep.StoredFiles != nil {
				if h, ok := rep.StoredFiles[id]; ok {
					h.Objects--
					h.Bytes -= d.Size
					rep.StoredFiles[id] = h
				}
			}
		}
	}()
	// A fence that fails stops the run where it is: the lease it guards is
	// another cleaner's now.
	fenced := func(err error) bool { return err != nil && errors.Is(err, ErrFenced) }
	var err error
	if err = p.reapOrphans(ctx, &rep); err != nil {
		errs = append(errs, err)
	}
	if ctx.Err() == nil && !fenced(err) {
		if err = p.forgetOrphans(ctx, &rep); err != nil {
			errs = append(errs, err)
		}
	}
	if p.orphKey != "" && ctx.Err() == nil && !fenced(err) && (p.orphHad || len(p.orphRec) > 0) && !samePending(p.orphRec, p.orphOld) {
		if err = p.o.fence(ctx); err == nil {
			err = writePending(ctx, p.st, p.orphKey, p.orphRec)
		}
		errs = append(errs, err)
	}
	if fenced(err) {
		return &rep, errors.Join(errs...)
	}
	// Two passes over the files: first every file's part 0s (of dropped
	// checkpoints, of failed flushes), then the rest. A checkpoint of a
	// copy D names objects of the file X it was copied from; once D's
	// retention drops it, X's cleaning deletes those objects, and D's its
	// part 0. A reader holding that checkpoint open (fusefs, .checkpoints)
	// tells "dropped" from "lost" by its part 0: gone means dropped. So no
	// object a dropped checkpoint names goes before its part 0 does,
	// whichever file the object belongs to: the first pass takes copies
	// before the files they point into (a dropped part 0 of X may be what
	// D's dropped checkpoint names). When a first pass failed, the files
	// copies point into keep the rest this run.
	runs := make([]*fileRun, 0, len(p.files))
	cutFailed := false
	for _, f := range p.copiesFirst() {
		if ctx.Err() != nil {
			break
		}
		r, err := p.cutChain(ctx, f, &rep)
		if fenced(err) {
			return &rep, errors.Join(append(errs, err)...)
		}
		if err != nil {
			errs = append(errs, err)
			cutFailed = true
			continue
		}
		runs = append(runs, r)
	}
	for _, r := range runs {
		if ctx.Err() != nil {
			break
		}
		if err := p.finishFile(ctx, r, cutFailed && len(r.f.refs) > 0, &rep); err != nil {
			errs = append(errs, err)
			if fenced(err) {
				return &rep, errors.Join(errs...)
			}
		}
	}
	if len(p.oldFiles) > 0 {
		if err := p.o.fence(ctx); err != nil {
			return &rep, errors.Join(append(errs, err)...)
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
	if ctx.Err() == nil && len(p.uploads) > 0 {
		if err := p.o.fence(ctx); err != nil {
			return &rep, errors.Join(append(errs, err)...)
		}
		errs = append(errs, p.abortUploads(ctx, &rep))
	}
	if ctx.Err() == nil {
		// A namespace v2 volume's stale orphan records and history.
		if err := p.executeV2(ctx, &rep); err != nil {
			errs = append(errs, err)
			if fenced(err) {
				return &rep, errors.Join(errs...)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return &rep, errors.Join(errs...)
}

// copiesFirst orders the files of the plan so that each comes after the
// copies whose reference markers it holds: a copy's dropped part 0s go
// before the objects of the file it points into that they name. Copies that
// point into each other (cp X D, write, cp D X) form a cycle, which is
// broken anywhere: the order is the listing's there.
func (p *Plan) copiesFirst() []*filePlan {
	byID := make(map[string]*filePlan, len(p.files))
	for _, f := range p.files {
		byID[f.id] = f
	}
	out := make([]*filePlan, 0, len(p.files))
	seen := make(map[*filePlan]bool, len(p.files))
	// An explicit stack, not recursion: a chain of copies of copies may
	// be as long as the volume has files.
	type frame struct {
		f    *filePlan
		deps []*filePlan
	}
	var stack []frame
	push := func(f *filePlan) {
		seen[f] = true
		var deps []*filePlan
		for key := range f.refs {
			if id, ok := volume.IsRefKey(strings.TrimPrefix(key, f.prefix)); ok && byID[id] != nil {
				deps = append(deps, byID[id])
			}
		}
		slices.SortFunc(deps, func(a, b *filePlan) int { return strings.Compare(a.id, b.id) })
		stack = append(stack, frame{f, deps})
	}
	for _, f := range p.files {
		if seen[f] {
			continue
		}
		push(f)
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if len(top.deps) == 0 {
				out = append(out, top.f)
				stack = stack[:len(stack)-1]
				continue
			}
			d := top.deps[0]
			top.deps = top.deps[1:]
			if !seen[d] {
				push(d)
			}
		}
	}
	return out
}

// fileRun is one file's execution between the two passes.
type fileRun struct {
	f    *filePlan
	rest []doomedObject  // what the second pass deletes
	done map[string]bool // names deleted, for the pending record
}

// cutChain checks that the file is as planned (planning it afresh if not)
// and deletes the part 0s the plan dooms, newest first.
func (p *Plan) cutChain(ctx context.Context, f *filePlan, rep *Report) (*fileRun, error) {
	r := &fileRun{f: f, done: map[string]bool{}}
	if len(f.del) == 0 {
		return r, nil
	}
	g, err := p.settle(ctx, f, f.del, rep)
	if err != nil {
		return nil, err
	}
	r.f = g
	cut := 0
	for cut < len(g.del) && g.del[cut].cut {
		cut++
	}
	r.rest = g.del[cut:]
	if cut == 0 {
		return r, nil
	}
	// A writer may have started, or rebased onto objects listed here,
	// since the listing: its markers are read again right before
	// deleting, and again whenever the last reading is older than
	// writermark.Recheck.
	p.view.forget(g.prefix)
	if err := p.remove(ctx, g, g.del[:cut], r.done, rep); err != nil {
		return nil, err
	}
	return r, nil
}

// finishFile deletes the rest of what the plan of one file dooms (all of
// it kept when keep is set), then stores its pending record. The file is
// checked again first: the first pass of the other files ran since its own,
// and a copy made meanwhile may point at what the plan dropped.
func (p *Plan) finishFile(ctx context.Context, r *fileRun, keep bool, rep *Report) error {
	f := r.f
	if keep {
		for _, d := range r.rest {
			rep.Kept++
			rep.KeptBytes += d.Size
		}
		r.rest = nil
	}
	if len(r.rest) > 0 {
		g, err := p.settle(ctx, f, r.rest, rep)
		if err != nil {
			return err
		}
		if g != f {
			// Planned afresh (its own part 0s first, then the rest), or
			// left alone this run.
			f, r.rest = g, g.del
		}
	}
	if len(r.rest) > 0 {
		p.view.forget(f.prefix)
		if err := p.remove(ctx, f, r.rest, r.done, rep); err != nil {
			return err
		}
	}
	if f.recKey == "" {
		return nil
	}
	for rel := range r.done {
		delete(f.rec, rel)
	}
	if !f.recHad && len(f.rec) == 0 || f.recHad && samePending(f.rec, f.recOld) {
		return nil // nothing to store, or no change
	}
	if err := p.o.fence(ctx); err != nil {
		return err
	}
	return writePending(ctx, p.st, f.recKey, f.rec)
}

// settle returns the plan of the file as it is now: f itself when its head
// and reference markers are as planned, else a plan made afresh from a new
// listing, or, if the file moved again meanwhile, a copy of f with nothing
// to delete (what was still to delete, left, counted kept).
func (p *Plan) settle(ctx context.Context, f *filePlan, left []doomedObject, rep *Report) (*filePlan, error) {
	ok, err := p.unchanged(ctx, f)
	if err != nil || ok {
		return f, err
	}
	// Planned afresh, now: a file flushed often would otherwise move
	// between every plan and its execution and never be cleaned. If it
	// moved again, it is left as it is this run.
	g, err := p.replan(ctx, f)
	if err != nil {
		return nil, err
	}
	if ok, err = p.unchanged(ctx, g); err != nil {
		return nil, err
	}
	if ok {
		return g, nil
	}
	for _, d := range left {
		rep.Kept++
		rep.KeptBytes += d.Size
	}
	k := *f
	k.del = nil
	return &k, nil
}

// remove deletes ds, objects of file f in order, unless what its writer
// markers say now keeps them; names deleted are added to done.
func (p *Plan) remove(ctx context.Context, f *filePlan, ds []doomedObject, done map[string]bool, rep *Report) error {
	st, o := p.st, p.o
	if err := o.fence(ctx); err != nil {
		return err
	}
	for _, d := range ds {
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
	return nil
}

// replan plans the file of f again from a new listing.
func (p *Plan) replan(ctx context.Context, f *filePlan) (*filePlan, error) {
	objs, err := staging.ListAll(ctx, p.st, f.prefix)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", f.prefix, err)
	}
	q := &Plan{st: p.st, root: p.root, o: p.o, ns: p.ns, view: p.view, refs: p.refs}
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
