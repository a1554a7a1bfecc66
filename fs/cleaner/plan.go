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

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
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
	ns   *namespace.Namespace
	view *writerView
	refs *referrers

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
	del        []doomedObject     // in order: dropped part 0s first
	rec        pending            // the file's record once del is done
	recOld     pending            // the record as read
	recKey     string
	recHad     bool
	refs       map[string]time.Time // reference markers listed: key -> LastModified
}

// orphanPlan is an orphaned file to reap.
type orphanPlan struct {
	id, prefix string
	objs       []staging.ObjectInfo // head last
	recKey     string               // its file record, if any, to delete
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

const orphanReason = "orphaned file (no name) for longer than the grace period and the namespace lag"

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
	p := &Plan{st: st, root: root, o: o, view: newWriterView(st), orphKey: volume.PendingOrphansKey(root)}
	fp := volume.FilesPrefix(root)
	p.refs = newReferrers(st, fp, o)
	objs, err := staging.ListAll(ctx, st, fp)
	if err != nil {
		return nil, fmt.Errorf("list files under %q: %w", fp, err)
	}
	byFile := map[string][]staging.ObjectInfo{}
	var ids []string
	for _, obj := range objs {
		id, _, ok := volume.SplitFileKey(fp, obj.Key)
		if !ok || id == "" {
			p.rep.Skipped = append(p.rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: "not under a file"})
			continue
		}
		if _, seen := byFile[id]; !seen {
			ids = append(ids, id)
		}
		byFile[id] = append(byFile[id], obj)
	}
	recs, err := staging.ListAll(ctx, st, volume.PendingFilesPrefix(root))
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
	p.ns, err = namespace.Open(ctx, st, root, namespace.Options{})
	if err != nil {
		return nil, fmt.Errorf("read the namespace of %q: %w", root, err)
	}
	orphans := map[string]bool{}
	for _, or := range p.ns.Orphans() {
		orphans[or.FileID] = true
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
	if err := p.planUploads(ctx, fp); err != nil {
		return p, err
	}
	return p, nil
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
		if now.Sub(since) >= wait && !anyLive(ws, now) {
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
				holders[id] = append(holders[id], hold{copyID, !orphans[copyID]})
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
				holders[id] = append(holders[id], hold{copyID, !orphans[copyID]})
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

// planFile plans the cleaning of one file given its objects as listed
// (before the head is read: see the package doc): it reads the file's
// pending record, its head and chain, its writers, what its retained
// checkpoints and the copies pointing into it keep, then decides object by
// object (fileDecision).
func (p *Plan) planFile(ctx context.Context, prefix, id string, objs []staging.ObjectInfo, hasRec bool) error {
	o, rep := p.o, &p.rep
	rep.Files++
	fpl := &filePlan{id: id, prefix: prefix, rec: pending{}, refs: map[string]time.Time{}}
	old, err := p.readFileRecord(ctx, fpl, hasRec)
	if err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	listed := make(map[segment.ObjectName]staging.ObjectInfo, len(objs))
	for _, obj := range objs {
		if n, _, err := segment.ParseObjectName(strings.TrimPrefix(obj.Key, prefix)); err == nil {
			listed[n] = obj
		}
	}
	maps := newFileMaps(p.st, p.refs.files, id, prefix)
	hd, hinfo, chain, err := maps.readChain(ctx, segment.FileTag(id), listed)
	if errors.Is(err, ErrNoHead) {
		for _, obj := range objs {
			rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: ErrNoHead.Error()})
		}
		// What was pending stays so: nothing is decided without a head.
		fpl.rec = old
		p.files = append(p.files, fpl)
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	fpl.head = hinfo
	d := &fileDecision{o: o, rep: rep, fpl: fpl, headCno: hd.Inode.Cno, old: old}
	if d.walApplied, _, err = engine.HeadWAL(hinfo); err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	rep.Checkpoints += len(chain)

	d.now = o.now()
	if d.writers, err = p.view.read(ctx, prefix, objs); err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	d.byKey = map[string]engine.Writer{}
	for _, w := range d.writers {
		d.byKey[w.Key] = w
		if w.Live(d.now) {
			rep.Writers++
		}
	}
	live, liveLineage, dropped, err := retained(ctx, maps, chain, o, d.now, func() { rep.Retained++ })
	if err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	d.live, d.liveLineage = live, liveLineage
	d.dropped = map[string]bool{}
	for _, n := range dropped {
		d.dropped[prefix+n.String()] = true
	}
	whole, err := p.copyReferences(ctx, d, objs)
	if err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	if whole {
		fpl.rec = old
		fpl.del = nil
		p.files = append(p.files, fpl)
		return nil
	}
	fpl.del = d.decide(objs)
	p.files = append(p.files, fpl)
	return nil
}

// readFileRecord finds the key of the pending record of fpl's file (none
// when the volume is not known) and reads the record when the listing had
// one (hasRec). It returns what was pending; a record that does not decode
// is reported, read as empty and rewritten.
func (p *Plan) readFileRecord(ctx context.Context, fpl *filePlan, hasRec bool) (pending, error) {
	if root, ok := volume.RootOfFiles(p.refs.files); ok && p.refs.files != "" {
		fpl.recKey = volume.PendingFilesPrefix(root) + fpl.id
	}
	old := pending{}
	if !hasRec || fpl.recKey == "" {
		return old, nil
	}
	rec, bad, err := readPending(ctx, p.st, fpl.recKey)
	if err != nil {
		return old, err
	}
	if bad != nil {
		p.rep.Skipped = append(p.rep.Skipped, Object{Key: fpl.recKey, Reason: bad.Error()})
	}
	fpl.recOld = rec
	fpl.recHad = true
	if bad != nil {
		fpl.recOld = nil // rewritten
	}
	return rec, nil
}

// copyReferences reads what copies by reference point at: each marker
// refs/<copy> among objs names a file whose checkpoints may point into this
// one. It fills d.forCopies and d.staleRefs and the markers of d.fpl. When
// what a copy points at cannot be read, nothing of the file goes this run:
// whole is true and the file's objects are counted as kept.
func (p *Plan) copyReferences(ctx context.Context, d *fileDecision, objs []staging.ObjectInfo) (whole bool, err error) {
	rep, fpl := &p.rep, d.fpl
	d.forCopies = map[segment.ObjectName]string{}
	d.staleRefs = map[string]bool{}
	for _, obj := range objs {
		copyID, ok := volume.IsRefKey(strings.TrimPrefix(obj.Key, fpl.prefix))
		if !ok {
			continue
		}
		fpl.refs[obj.Key] = obj.LastModified
		r, err := p.refs.get(ctx, copyID)
		if err != nil && ctx.Err() != nil {
			return false, err
		}
		if err != nil {
			// What the copy points at is not known: nothing of this file
			// goes this run. The rest of the volume is cleaned, so a copy
			// that an earlier run began to reap, which may be what failed
			// here, is reaped and stops keeping this file.
			rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size,
				Reason: "file kept whole: " + err.Error()})
			for _, o := range objs {
				if o.Key != obj.Key {
					rep.Kept++
					rep.KeptBytes += o.Size
				}
			}
			return true, nil
		}
		if r.stale(fpl.id) {
			d.staleRefs[obj.Key] = true
			continue
		}
		for n := range r.names[fpl.id] {
			if _, ok := d.forCopies[n]; !ok {
				d.forCopies[n] = copyID
			}
		}
	}
	return false, nil
}

// fileDecision is what planFile learnt of one file, from which it decides
// what becomes of each of its objects.
type fileDecision struct {
	o       Options
	rep     *Report
	fpl     *filePlan
	headCno uint64  // the cno of the file's head
	old     pending // the file's pending record as read
	now     time.Time

	walApplied  uint64 // the last WAL record the head's checkpoint holds
	writers     []engine.Writer
	byKey       map[string]engine.Writer      // writers by marker key
	live        map[segment.ObjectName]bool   // the retained checkpoints point into
	liveLineage map[uint64]bool               // the retained checkpoints name
	dropped     map[string]bool               // keys of the dropped checkpoints' part 0s
	forCopies   map[segment.ObjectName]string // name -> a copy pointing at it
	staleRefs   map[string]bool               // markers of copies that no longer point here
}

// keep counts obj as kept.
func (d *fileDecision) keep(obj staging.ObjectInfo) {
	d.rep.Kept++
	d.rep.KeptBytes += obj.Size
}

// checkpointRule is what becomes of an unreferenced object that a
// checkpoint of cno made: "" keeps it. One at or below the head's cno goes
// once MinAge has passed since a run first found it unreferenced.
func (d *fileDecision) checkpointRule(obj staging.ObjectInfo, rel string, cno uint64, age time.Duration) string {
	o, now := d.o, d.now
	switch {
	case covered(d.writers, now, cno):
	case cno > d.headCno:
		if age > o.Grace {
			return "abandoned: above the head's checkpoint and older than the grace period"
		}
	default:
		since := d.old.since(rel, now)
		if d.fpl.recKey == "" {
			// No place for a record (the volume is not known): the
			// object's age stands for it.
			since = obj.LastModified
		}
		d.fpl.rec[rel] = since
		if now.Sub(since) >= o.MinAge {
			return "referenced by no retained checkpoint for the minimum age"
		}
		d.rep.Pending = append(d.rep.Pending, Object{Key: obj.Key, Size: obj.Size,
			Reason: "unreferenced since " + since.UTC().Format(time.RFC3339)})
	}
	return ""
}

// decide goes through the file's objects and returns those to delete, in
// order: the dropped checkpoints' part 0s first, newest first (the chain is
// cut at the retained end), then the rest.
func (d *fileDecision) decide(objs []staging.ObjectInfo) []doomedObject {
	o, rep, now, prefix := d.o, d.rep, d.now, d.fpl.prefix
	var doomed []doomedObject
	var first []doomedObject // dropped part 0s, deleted first
	for _, obj := range objs {
		if o.Progress != nil {
			o.Progress(1)
		}
		rel := strings.TrimPrefix(obj.Key, prefix)
		age := now.Sub(obj.LastModified)
		if rel == volume.HeadName {
			d.keep(obj)
			continue
		}
		if volume.IsWriterKey(rel) {
			w, ok := d.byKey[obj.Key]
			switch {
			case !ok: // let go since the listing
			case w.Err != nil:
				rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: w.Err.Error()})
				continue
			case now.Sub(w.Modified) > w.Marker.TTL+o.Grace:
				doomed = append(doomed, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size,
					Reason: "writer marker dead for longer than the grace period"}, marker: true})
				continue
			}
			d.keep(obj)
			continue
		}
		if strings.HasPrefix(rel, volume.WALDir) {
			if walCovered(rel, d.walApplied, age >= o.MinAge) {
				doomed = append(doomed, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size, Reason: "write-ahead log record the head's checkpoint holds"}})
			} else {
				d.keep(obj)
			}
			continue
		}
		if _, ok := volume.IsRefKey(rel); ok {
			// A young marker may be a copy in progress (its head not yet
			// published): only an old one that keeps nothing goes.
			if d.staleRefs[obj.Key] && age > o.Grace {
				doomed = append(doomed, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size,
					Reason: "reference marker of a copy that no longer points here, older than the grace period"}, ref: obj.LastModified})
			} else {
				d.keep(obj)
			}
			continue
		}
		if lcno, ok := volume.IsLineageKey(rel); ok {
			reason := ""
			if !d.liveLineage[lcno] {
				reason = d.checkpointRule(obj, rel, lcno, age)
			}
			if reason == "" {
				d.keep(obj)
				continue
			}
			doomed = append(doomed, doomedObject{Object{Key: obj.Key, Size: obj.Size, Reason: "lineage " + reason}, lcno, true, false, time.Time{}, rel})
			continue
		}
		n, _, err := segment.ParseObjectName(rel)
		if err != nil {
			rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: "not a checkpoint object name"})
			continue
		}
		if d.live[n] {
			d.keep(obj)
			continue
		}
		if copyID, ok := d.forCopies[n]; ok {
			d.keep(obj)
			rep.ForCopies = append(rep.ForCopies, Object{Key: obj.Key, Size: obj.Size, Reason: "kept for a copy: file " + copyID + " points at it"})
			continue
		}
		reason := d.checkpointRule(obj, rel, n.Cno, age)
		if reason == "" {
			d.keep(obj)
			continue
		}
		if d.dropped[obj.Key] && n.Cno <= d.headCno {
			first = append(first, doomedObject{Object{Key: obj.Key, Size: obj.Size, Reason: "part 0 of a dropped checkpoint"}, n.Cno, true, false, time.Time{}, rel})
			continue
		}
		doomed = append(doomed, doomedObject{Object{Key: obj.Key, Size: obj.Size, Reason: reason}, n.Cno, true, false, time.Time{}, rel})
	}
	// Newest dropped checkpoint first: the chain is cut at the retained end.
	sort.SliceStable(first, func(i, j int) bool { return first[i].Key > first[j].Key })
	return slices.Concat(first, doomed)
}

// retained walks the chain (newest first) and returns the names of the
// file's own objects its retained checkpoints point into, the lineages they
// name and the part 0s of the dropped ones. A checkpoint is retained when
// it is one of the newest Keep (Keep 0: all), younger than KeepFor, or
// pinned: a retained one points into its part 0. The first one that is not
// cuts the chain. at says when a part 0 was stored (zero: not known, and
// then KeepFor retains it).
func retained(ctx context.Context, maps *fileMaps, chain []checkpoint, o Options, now time.Time, count func()) (map[segment.ObjectName]bool, map[uint64]bool, []segment.ObjectName, error) {
	live := map[segment.ObjectName]bool{}
	liveLineage := map[uint64]bool{}
	var dropped []segment.ObjectName
	cut := false
	for i, c := range chain {
		young := o.KeepFor > 0 && (c.at.IsZero() || now.Sub(c.at) < o.KeepFor)
		if cut || !(o.Keep <= 0 || i < o.Keep || young || live[c.part]) {
			cut = true
			dropped = append(dropped, c.part)
			continue
		}
		if count != nil {
			count()
		}
		live[c.part] = true
		if c.ino.Lineage != 0 {
			liveLineage[c.ino.Lineage] = true
		}
		if err := maps.markOwn(ctx, c.ino, live); err != nil {
			return nil, nil, nil, fmt.Errorf("checkpoint %d: %w", c.ino.Cno, err)
		}
	}
	return live, liveLineage, dropped, nil
}

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

// reapOrphans reaps the orphans of the plan, several at once: each costs a
// listing and its deletes, and a run may have thousands (empty files made
// and removed).
func (p *Plan) reapOrphans(ctx context.Context, rep *Report) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 16)
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
			err := p.reap(ctx, or, &r)
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
	sem := make(chan struct{}, 64)
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
