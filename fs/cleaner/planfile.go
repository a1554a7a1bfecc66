package cleaner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/fs/writermark"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

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
		// What was pending stays so: nothing is decided without a head.
		fpl.rec = old
		gone, ferr := p.forgotten(ctx, id)
		if ferr != nil {
			return fmt.Errorf("clean %s: %w", prefix, ferr)
		}
		// A named file is left alone and reported, and the pass goes on:
		// a first flush that died before its head leaves one, and its
		// writer may still store the head.
		err = nil
		if gone {
			err = p.planForgotten(ctx, fpl, objs)
		} else {
			for _, obj := range objs {
				rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: ErrNoHead.Error()})
			}
		}
		p.files = append(p.files, fpl)
		return err
	}
	if err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	fpl.head = hinfo
	d := &fileDecision{o: o, rep: rep, fpl: fpl, headCno: hd.Inode.Cno, old: old}
	if d.walApplied, _, err = wal.HeadApplied(hinfo.Metadata); err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	rep.Checkpoints += len(chain)

	d.now = o.now()
	if d.writers, err = p.view.read(ctx, prefix, objs); err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	d.byKey = map[string]writermark.Stored{}
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

// forgotten says whether the namespace knows file id no more: neither named
// nor an orphan (a run reaped it and made the namespace forget it). Without
// the namespace (PlanFile) nothing is.
func (p *Plan) forgotten(ctx context.Context, id string) (bool, error) {
	if p.ns == nil {
		return false, nil
	}
	named, err := p.ns.Named(ctx, id)
	if err != nil || named {
		return false, err
	}
	orphaned, err := p.ns.Orphaned(ctx, id)
	return !orphaned, err
}

// planForgotten plans a file the namespace forgot, whose objects were
// reaped: what is under it since is reference markers of copies of copies
// (a lineage names every file its source was ever copied from, even one the
// source no longer points into: cp X D, rm X, D written over, X reaped, cp
// D E stores E's marker under X). Such a marker goes by the rule of any
// marker: once older than Grace and its copy keeps nothing of the file.
// Anything else is left alone and reported.
func (p *Plan) planForgotten(ctx context.Context, fpl *filePlan, objs []staging.ObjectInfo) error {
	rep, now := &p.rep, p.o.now()
	for _, obj := range objs {
		copyID, ok := volume.IsRefKey(strings.TrimPrefix(obj.Key, fpl.prefix))
		if !ok {
			rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: "under a file the namespace no longer knows"})
			continue
		}
		fpl.refs[obj.Key] = obj.LastModified
		if now.Sub(obj.LastModified) <= p.o.Grace {
			rep.Kept++
			rep.KeptBytes += obj.Size
			continue
		}
		r, err := p.refs.get(ctx, copyID)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("clean %s: %w", fpl.prefix, err)
		}
		if err != nil || !r.stale(fpl.id) {
			// A copy that points into objects reaped already has lost
			// them: nothing to keep, but not ours to hide either.
			reason := "reference marker under a file the namespace no longer knows, of a copy that points into it"
			if err != nil {
				reason = "reference marker under a file the namespace no longer knows: " + err.Error()
			}
			rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: reason})
			continue
		}
		fpl.del = append(fpl.del, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size,
			Reason: "reference marker under a file the namespace forgot, of a copy that does not point into it, older than the grace period"}, ref: obj.LastModified})
	}
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
	writers     []writermark.Stored
	byKey       map[string]writermark.Stored  // writers by marker key
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
// order: the part 0s first, newest first (the chain is cut at the retained
// end; a checkpoint is gone before anything it points into), then the rest.
func (d *fileDecision) decide(objs []staging.ObjectInfo) []doomedObject {
	o, rep, now, prefix := d.o, d.rep, d.now, d.fpl.prefix
	var doomed []doomedObject
	var first []doomedObject // part 0s, deleted first
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
			doomed = append(doomed, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size, Reason: "lineage " + reason}, cno: lcno, isCkpt: true, rel: rel})
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
			first = append(first, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size, Reason: "part 0 of a dropped checkpoint"}, cno: n.Cno, isCkpt: true, rel: rel, cut: true})
			continue
		}
		if n.Part == 0 {
			// A failed flush's part 0 is a checkpoint a reader may have
			// opened by number: it goes before what it points into too.
			first = append(first, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size, Reason: reason}, cno: n.Cno, isCkpt: true, rel: rel, cut: true})
			continue
		}
		doomed = append(doomed, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size, Reason: reason}, cno: n.Cno, isCkpt: true, rel: rel})
	}
	// Newest checkpoint first: the chain is cut at the retained end.
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
