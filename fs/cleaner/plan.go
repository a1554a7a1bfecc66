package cleaner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// Plan is what a run will do: made by PlanVolume or PlanFile from one
// listing, done by Execute, which checks again what may have changed since
// (writer markers, reference markers, heads) right before each deletion.
// A plan of a dry run is only read: Report says what Execute would do.
type Plan struct {
	st   staging.Store
	root string // "" with PlanFile: no orphans, records under the file's volume
	o    Options
	ns   names // v1's log or v2's names (nsv2.go)
	view *writerView
	refs *referrers
	rng  idRange // the files of this pass (PlanVolume)
	// otherOrphans are the orphans of other passes: a copy among them
	// that holds an orphan of this pass keeps it this pass without
	// starting its grace again (it is no file with a name).
	otherOrphans map[string]bool

	rep      Report // what planning found; Deleted, Aborted and Orphans empty
	files    []*filePlan
	orphans  []*orphanPlan
	orphRec  pending // the orphans' record as it stands once the reaping is done
	orphOld  pending // the orphans' record as read
	orphKey  string  // "" when the plan keeps no orphans' record
	orphHad  bool    // the bucket holds an orphans' record
	oldFiles []string
	uploads  []staging.Upload
}

// filePlan is the part of a plan for one file that is not an orphan.
type filePlan struct {
	id, prefix string
	head       staging.ObjectInfo // as read when planning
	del        []doomedObject     // in order: part 0s first
	rec        pending            // the file's record once del is done
	recOld     pending            // the record as read
	recKey     string
	recHad     bool
	refs       map[string]time.Time // reference markers listed: key -> LastModified
}

// Close lets go of what the plan holds (the namespace it read).
func (p *Plan) Close() error {
	if p.ns != nil {
		return p.ns.Close()
	}
	return nil
}

// Report says what the plan would do if executed now.
func (p *Plan) Report() *Report {
	r := p.rep
	for _, f := range p.files {
		for _, d := range f.del {
			r.Deleted = append(r.Deleted, d.Object)
		}
	}
	for _, or := range p.orphans {
		for _, obj := range or.objs {
			r.Deleted = append(r.Deleted, Object{Key: obj.Key, Size: obj.Size, Reason: orphanReason})
		}
		r.Orphans = append(r.Orphans, or.id)
	}
	r.Aborted = slices.Clone(p.uploads)
	return &r
}

// CleanVolume cleans every file of the volume at root and aborts multipart
// uploads under it that are older than the grace period: PlanVolume, then
// Execute unless o.DryRun.
func CleanVolume(ctx context.Context, st staging.Store, root string, o Options) (*Report, error) {
	p, err := PlanVolume(ctx, st, root, o)
	if err != nil {
		if p != nil {
			// What was found; nothing was done.
			p.Close()
			r := p.rep
			return &r, err
		}
		return &Report{}, err
	}
	defer p.Close()
	if o.DryRun {
		return p.Report(), nil
	}
	return p.Execute(ctx)
}

// CleanFile cleans one file: the objects under prefix of the file with id.
func CleanFile(ctx context.Context, st staging.Store, prefix, id string, o Options) (*Report, error) {
	p, err := PlanFile(ctx, st, prefix, id, o)
	if err != nil {
		return &Report{}, err
	}
	defer p.Close()
	if o.DryRun {
		return p.Report(), nil
	}
	return p.Execute(ctx)
}

// PlanVolume lists the volume at root once and decides what a run deletes,
// records and leaves. It writes nothing. The plan must be closed; on an
// error it may be nil, or hold what was found so far (close it too).
func PlanVolume(ctx context.Context, st staging.Store, root string, o Options) (*Plan, error) {
	// A namespace v2 volume's names are not in v1's log: its orphans come
	// from its orphan records (nsv2.go).
	v2 := false
	if d, err := volume.ReadDescriptor(ctx, st, root); err == nil && d.NamespaceVersion() == config.NamespaceV2 {
		v2 = true
	} else if err != nil && !errors.Is(err, volume.ErrNoVolume) {
		return nil, fmt.Errorf("plan the volume at %q: %w", root, err)
	}
	p := &Plan{st: st, root: root, o: o, view: newWriterView(st), orphKey: volume.PendingOrphansKey(root)}
	fp := volume.FilesPrefix(root)
	p.refs = newReferrers(st, fp, o)
	objs, end, err := listFiles(ctx, st, fp, o.After, o.MaxFiles)
	if err != nil {
		return nil, fmt.Errorf("list files under %q: %w", fp, err)
	}
	p.rng = idRange{after: o.After, end: end}
	p.rep.Next, p.rep.Listed = end, true
	p.rep.StoredFiles = map[string]Held{}
	byFile := map[string][]staging.ObjectInfo{}
	var ids []string
	for _, obj := range objs {
		p.rep.StoredObjects++
		p.rep.StoredBytes += obj.Size
		id, _, ok := volume.SplitFileKey(fp, obj.Key)
		if ok {
			h := p.rep.StoredFiles[id]
			h.Objects++
			h.Bytes += obj.Size
			p.rep.StoredFiles[id] = h
		}
		if !ok || id == "" {
			p.rep.Skipped = append(p.rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: "not under a file"})
			continue
		}
		if _, seen := byFile[id]; !seen {
			ids = append(ids, id)
		}
		byFile[id] = append(byFile[id], obj)
	}
	recs, err := p.rng.list(ctx, st, volume.PendingFilesPrefix(root))
	if err != nil {
		return nil, fmt.Errorf("list pending records: %w", err)
	}
	hasRec := map[string]bool{}
	for _, r := range recs {
		id := strings.TrimPrefix(r.Key, volume.PendingFilesPrefix(root))
		if _, ok := byFile[id]; ok {
			hasRec[id] = true
		} else {
			p.oldFiles = append(p.oldFiles, r.Key) // its file is gone
		}
	}
	var v2n *v2Names
	if v2 {
		// Every record is judged, not only this pass's: the orphans of
		// other passes count for the copies that hold this pass's
		// (otherOrphans), as v1's whole list of orphans does.
		x := nsv2.NewIndex(st, root)
		x.Resolve = !o.DryRun
		v2n = openV2Names(o, x, nil)
		p.ns = v2n
	} else if p.ns, err = namespace.Open(ctx, st, root, namespace.Options{}); err != nil {
		return nil, fmt.Errorf("read the namespace of %q: %w", root, err)
	}
	all, err := p.ns.Orphans(ctx)
	if err != nil {
		return p, fmt.Errorf("list the orphans of %q: %w", root, err)
	}
	if v2n != nil {
		if err := p.planV2(ctx, v2n); err != nil {
			return p, err
		}
	}
	orphans := map[string]bool{}
	p.otherOrphans = map[string]bool{}
	for _, or := range all {
		if p.rng.holds(or.FileID) {
			orphans[or.FileID] = true
		} else {
			p.otherOrphans[or.FileID] = true
		}
	}
	if err := p.planOrphans(ctx, orphans, byFile, hasRec); err != nil {
		return p, err
	}
	for _, id := range ids {
		if orphans[id] {
			continue
		}
		if err := p.planFile(ctx, volume.FilePrefixIn(fp, id), id, byFile[id], hasRec[id]); err != nil {
			return p, err
		}
	}
	if end == "" {
		if err := p.planUploads(ctx, fp); err != nil {
			return p, err
		}
	}
	return p, nil
}

// idRange is the files of one pass of a sweep: the ids after after and up
// to end ("" for either: from the first, to the last), in the order of the
// listing of the files' keys ("<id>/...").
type idRange struct{ after, end string }

// holds says whether the file id is in the range.
func (r idRange) holds(id string) bool {
	k := id + "/"
	return (r.after == "" || k > r.after+"/") && (r.end == "" || k <= r.end+"/")
}

// list lists the keys "<prefix><id>" of the ids the range holds (the
// pending records of its files).
func (r idRange) list(ctx context.Context, st staging.Store, prefix string) ([]staging.ObjectInfo, error) {
	var out []staging.ObjectInfo
	after := ""
	if r.after != "" {
		after = prefix + r.after
	}
	for {
		page, err := st.List(ctx, prefix, after, staging.MaxListKeys)
		if err != nil {
			return out, err
		}
		for _, obj := range page.Objects {
			if id := strings.TrimPrefix(obj.Key, prefix); r.holds(id) {
				out = append(out, obj)
			} else if r.end != "" && id+"/" > r.end+"/" {
				return out, nil
			}
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return out, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// listFiles lists the objects under files ("<root>f/") of the files after
// the id after, at most max files of them (0: all). end is the last id
// listed when more files follow, "" when the listing reached the end. A
// file is listed whole: its keys are contiguous, and the listing goes on
// until the next file's first key.
func listFiles(ctx context.Context, st staging.Store, files, after string, max int) (objs []staging.ObjectInfo, end string, err error) {
	start := ""
	if after != "" {
		// Past every key of "<after>/": '0' sorts right after '/'.
		start = files + after + "0"
	}
	last, n := "", 0
	for {
		page, err := st.List(ctx, files, start, staging.MaxListKeys)
		if err != nil {
			return objs, "", err
		}
		for _, obj := range page.Objects {
			id, _, ok := volume.SplitFileKey(files, obj.Key)
			if ok && id != "" && id != last {
				if max > 0 && n == max {
					return objs, last, nil
				}
				last = id
				n++
			}
			objs = append(objs, obj)
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return objs, "", nil
		}
		start = page.Objects[len(page.Objects)-1].Key
	}
}

// PlanFile plans the cleaning of one file, the one with id under prefix.
// Orphans are not its business (see PlanVolume).
func PlanFile(ctx context.Context, st staging.Store, prefix, id string, o Options) (*Plan, error) {
	objs, err := staging.ListAll(ctx, st, prefix)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	files, ok := volume.FilesOfPrefix(prefix, id)
	if !ok {
		files = ""
	}
	p := &Plan{st: st, o: o, view: newWriterView(st), refs: newReferrers(st, files, o)}
	hasRec := false
	if root, ok := volume.RootOfFiles(files); ok && files != "" {
		p.root = root
		if _, err := st.Head(ctx, volume.PendingFilesPrefix(root)+id); err == nil {
			hasRec = true
		} else if !errors.Is(err, staging.ErrNotFound) {
			return nil, fmt.Errorf("read the pending record of %s: %w", id, err)
		}
	}
	if err := p.planFile(ctx, prefix, id, objs, hasRec); err != nil {
		return nil, err
	}
	if err := p.planUploads(ctx, prefix); err != nil {
		return nil, err
	}
	return p, nil
}

// planUploads finds the open multipart uploads under prefix initiated more
// than the grace period ago, but none of an object a live writer marker of
// its file covers.
func (p *Plan) planUploads(ctx context.Context, prefix string) error {
	ups, err := p.st.ListMultipartUploads(ctx, prefix)
	if err != nil {
		return fmt.Errorf("list multipart uploads under %q: %w", prefix, err)
	}
	now := p.o.now()
	for _, u := range ups {
		if now.Sub(u.Initiated) <= p.o.Grace {
			continue
		}
		ok, err := p.uploadFree(ctx, u, now)
		if err != nil {
			return err
		}
		if ok {
			p.uploads = append(p.uploads, u)
		}
	}
	return nil
}

// uploadFree says whether no live writer marker covers the object of u.
func (p *Plan) uploadFree(ctx context.Context, u staging.Upload, now time.Time) (bool, error) {
	i := strings.LastIndexByte(u.Key, '/')
	if i < 0 {
		return true, nil
	}
	n, _, err := segment.ParseObjectName(u.Key[i+1:])
	if err != nil {
		return true, nil
	}
	ws, err := p.view.fresh(ctx, u.Key[:i+1])
	if err != nil {
		return false, fmt.Errorf("abort upload %s of %s: %w", u.UploadID, u.Key, err)
	}
	return !covered(ws, now, n.Cno), nil
}
