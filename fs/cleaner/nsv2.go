package cleaner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
)

// names is what the cleaner asks of a volume's namespace: v1's log
// (namespace.Names) or v2's names and orphan records (v2Names). The set of
// files comes from the listing of the files' objects either way; the
// namespace says which of them lost their last name, and forgets them once
// reaped. Everything else, the rules of each file's cleaning, is the same.
type names interface {
	Orphans(ctx context.Context) ([]namespace.Orphan, error)
	Named(ctx context.Context, fileID string) (bool, error)
	Orphaned(ctx context.Context, fileID string) (bool, error)
	Forget(ctx context.Context, fileID string) error
	Close() error
}

var _ names = namespace.Names(nil)

// v2Names is a namespace v2 volume's names as the cleaner reads them
// (docs/namespace-v2.md §5): the orphan records under ns2/orphan/ (a
// bounded prefix: files unlinked and not yet reaped), each judged by the
// dentry it names (nsv2.Index): an orphan once its unlink's tombstone
// landed; stale (its name still binds the file: the unlink never landed)
// once older than staleAfter, and then deleted by the run. Named lists
// every dentry, once a run, only when a file without a head or a record
// whose name says nothing of its change asks it: one LIST per 1,000 names
// and a GET of each.
type v2Names struct {
	x          *nsv2.Index
	holds      func(fileID string) bool // the records judged (nil: all)
	staleAfter time.Duration
	now        time.Time
	recs       map[string]nsv2.Record // judged by Orphans
	stale      []nsv2.Record          // to delete (Execute)
	damaged    []nsv2.Record          // reported
}

// staleRecordAge is the least age of a record whose name still binds its
// file before the cleaner takes its unlink for one that never landed: an
// unlink stores its tombstone right after its record, within a request's
// time, which Grace exceeds; TxGrace is the floor when Grace is 0.
func staleRecordAge(o Options) time.Duration { return max(o.Grace, nsv2.TxGrace) }

func openV2Names(o Options, x *nsv2.Index, holds func(fileID string) bool) *v2Names {
	return &v2Names{x: x, holds: holds, staleAfter: staleRecordAge(o), now: o.now(), recs: map[string]nsv2.Record{}}
}

// Orphans judges the orphan records (those holds takes) and returns the
// files with no name.
func (v *v2Names) Orphans(ctx context.Context) ([]namespace.Orphan, error) {
	recs, err := v.x.Records(ctx, v.staleAfter, v.now, v.holds)
	if err != nil {
		return nil, err
	}
	var out []namespace.Orphan
	for _, r := range recs {
		switch r.State {
		case nsv2.RecordDamaged:
			v.damaged = append(v.damaged, r)
			continue
		case nsv2.RecordStale:
			v.stale = append(v.stale, r)
		case nsv2.RecordOrphan:
			out = append(out, namespace.Orphan{Ino: r.Orphan.Ino, FileID: r.FileID})
		}
		v.recs[r.FileID] = r
	}
	return out, nil
}

// Named says whether a dentry binds the file; when the listing of names
// cannot tell (a damaged dentry), it answers yes: the file is kept.
func (v *v2Names) Named(ctx context.Context, fileID string) (bool, error) {
	named, err := v.x.Named(ctx, fileID)
	if errors.Is(err, nsv2.ErrIncomplete) {
		return true, nil
	}
	return named, err
}

// Orphaned says whether the file's record is an orphan's.
func (v *v2Names) Orphaned(ctx context.Context, fileID string) (bool, error) {
	if r, ok := v.recs[fileID]; ok {
		return r.State == nsv2.RecordOrphan, nil
	}
	r, ok, err := v.x.Record(ctx, fileID, v.staleAfter, v.now)
	return ok && r.State == nsv2.RecordOrphan, err
}

// Forget deletes the orphan record of a reaped file, and the inode object
// of its node when it had several names, judged again first: a file named
// since keeps them (ErrInvalid), as v1's Forget refuses a named file.
func (v *v2Names) Forget(ctx context.Context, fileID string) error {
	r, ok, err := v.x.Record(ctx, fileID, v.staleAfter, v.now)
	switch {
	case err != nil:
		return fmt.Errorf("forget file %s: %w", fileID, err)
	case !ok:
		return fmt.Errorf("forget file %s: %w", fileID, namespace.ErrNotExist)
	case r.State != nsv2.RecordOrphan:
		return fmt.Errorf("forget file %s, not an orphan now: %w", fileID, namespace.ErrInvalid)
	}
	// The inode object of a node of several names whose last name went
	// goes with it (nsv2.Index.Forget).
	return v.x.Forget(ctx, fileID, r.Orphan.Change, r.Orphan.Ino)
}

func (v *v2Names) Close() error { return nil }

const staleRecordReason = "orphan record of an unlink that never landed: its name still binds the file"

// planV2 adds to the plan what only a v2 volume has: its damaged orphan
// records are reported; its stale ones are deleted by Execute, and so is
// the namespace's history (trimV2). A dry run lists both here.
func (p *Plan) planV2(ctx context.Context, v *v2Names) error {
	for _, r := range v.damaged {
		p.rep.Skipped = append(p.rep.Skipped, Object{Key: r.Key, Reason: "orphan record: " + r.Err.Error()})
	}
	if !p.o.DryRun {
		return nil
	}
	for _, r := range v.stale {
		if p.rng.holds(r.FileID) {
			p.rep.Names = append(p.rep.Names, Object{Key: r.Key, Reason: staleRecordReason})
		}
	}
	if p.rng.end == "" {
		tr, err := p.trimV2(ctx)
		if tr != nil {
			addTrim(&p.rep, tr)
		}
		return err
	}
	return nil
}

// executeV2 deletes the stale orphan records and, in the pass that ends a
// sweep, trims ns2/ (nsv2.Trim).
func (p *Plan) executeV2(ctx context.Context, rep *Report) error {
	v, ok := p.ns.(*v2Names)
	if !ok {
		return nil
	}
	if len(v.stale) > 0 {
		if err := p.o.fence(ctx); err != nil {
			return err
		}
	}
	var errs []error
	for _, r := range v.stale {
		if !p.rng.holds(r.FileID) {
			continue
		}
		if err := v.x.DeleteRecord(ctx, r.FileID, r.Orphan.Change); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Names = append(rep.Names, Object{Key: r.Key, Reason: staleRecordReason})
	}
	if p.rng.end == "" {
		tr, err := p.trimV2(ctx)
		if tr != nil {
			addTrim(rep, tr)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// trimV2 trims the namespace's history (nsv2.Trim), or says what it would
// trim in a dry run.
func (p *Plan) trimV2(ctx context.Context) (*nsv2.TrimReport, error) {
	tr, err := nsv2.Trim(ctx, p.st, p.root, nsv2.TrimOptions{Grace: p.o.TrimGrace, Now: p.o.now, DryRun: p.o.DryRun,
		Fence: func(ctx context.Context) error { return p.o.fence(ctx) }})
	if err != nil {
		err = fmt.Errorf("trim the names of %q: %w", p.root, err)
	}
	return tr, err
}

func addTrim(rep *Report, tr *nsv2.TrimReport) {
	for _, d := range tr.Deleted {
		rep.Names = append(rep.Names, Object(d))
	}
	for _, d := range tr.Rewritten {
		rep.NamesRewritten = append(rep.NamesRewritten, Object(d))
	}
	for _, d := range tr.Damaged {
		rep.Skipped = append(rep.Skipped, Object(d))
	}
}
