// Package cleaner owns the deletion of objects no retained checkpoint needs:
// the logic behind `ckptfs gc`. It reads heads, part 0 headers, block-map
// nodes and lineage objects; it writes nothing but deletions and multipart
// aborts.
//
// # What is retained
//
// The checkpoints of a file form a chain from its head through each part 0's
// base inode. A checkpoint is retained when it is one of the newest Keep
// along that chain (Keep 0: all of them) or when its part 0 was stored less
// than KeepFor ago. The newest checkpoint, the head's, is always retained.
// The chain ends at the first checkpoint whose part 0 is gone, so the
// retained checkpoints are a run from the head, and Keep is a floor: an older
// checkpoint whose part 0 a retained one still points into (its data blocks
// live there) stays on the chain, so it is retained whole, or it would be
// listed without being readable. The first one that is not pinned so cuts
// the chain, and everything older is dropped.
// An object of the file is live when a retained checkpoint references it:
// its part 0 and every object of the file its block map points into (nodes
// and data blocks), or when a copy by reference points at it (see Copies by
// reference). The head object ("inode") is never deleted.
//
// # What a live writer may still publish
//
// Age alone never decides for a live writer. A writer that holds objects no
// published head names yet (sent ahead, partial segments, the data parts of a
// flush in progress; after losing a race to another mount, even objects below
// that mount's head, which it rebases onto and then publishes) keeps a writer
// marker, "writers/<id>" under the file's prefix (engine.WriterMarker, see
// fs/engine/writers.go), renewed while it holds them. A marker is live while
// its LastModified is within its TTL; no object whose cno is at or above a
// live marker's lo is deleted, whatever its age, and no multipart upload of
// such an object is aborted. The markers of a file are read again right
// before that file's objects are deleted, and again whenever more than
// engine.WriterRecheck passed since they were last read. A marker dead for
// longer than its TTL plus Grace is deleted; one that does not decode is
// reported and protects the whole file for engine.MaxWriterTTL.
//
// Without a live marker, objects with a cno greater than the head's cno are
// deleted once their LastModified is older than Grace (default one hour): a
// writer that died left them. The one thing a writer stores above the head
// without a marker is a flush's lone part 0, which its head follows at once,
// so Grace must exceed the time of one request. Open multipart uploads are
// aborted only when initiated more than Grace ago. The listing is taken
// before the head is read, so an object listed is either below a head the
// cleaner sees or protected by these rules; objects written after the listing
// are not seen.
//
// Unreferenced objects with cno not above the head's (a failed flush's part 0
// and parts, the objects of dropped checkpoints) not under a live marker are
// deleted once older than MinAge. MinAge covers a reader or writer of another
// mount whose view of the head is stale (it may still build on objects of a
// checkpoint this cleaner just dropped) and may be zero for a volume with one
// mount.
//
// Part 0 of a dropped checkpoint is deleted before anything else it
// references, newest first, so a run cut short leaves a chain that ends at a
// retained checkpoint rather than one that names half-deleted checkpoints.
//
// A file the namespace holds as an orphan (no name left; fs/namespace
// Orphans) is deleted whole, head last, and then forgotten by the namespace,
// once its newest object is older than Grace, it has no live writer marker
// and no copy by reference keeps it (below). A mount deletes its own
// unlinked files when their last handle closes; this rule is for files a
// mount that died left behind. The cleaner cannot see another mount's open
// handles, so Grace is also how long a handle may read an unlinked file that
// no one writes.
//
// # Copies by reference
//
// A file D copied by reference from X (engine File.CloneFrom) reuses X's
// block map: its pointers name X's objects "<cno>.<part>", and its inode's
// Lineage L names the lineage object "lineage/<L>" under D's prefix
// (segment.Lineage) that says, by cno, which file owns each name; D's own
// objects are numbered above the lineage's entries. A copy stores, in this
// order, a reference marker "refs/<D>" under the prefix of every file the
// new lineage names (engine.RefKey), the lineage object, then its part 0 and
// head.
//
// Cleaning a file, the map of a retained checkpoint whose inode has Lineage
// L ≠ 0 is walked through the file's engine.ObjectSpace, and only the names
// the lineage leaves to the file itself are marked live: the others are
// objects of other files, kept by those files' cleaning. The lineage object
// of a retained checkpoint is live. One no retained checkpoint names goes by
// the rules of a checkpoint object of its cno: above the head's cno after
// Grace (a copy in progress stores it before its head), at or below after
// MinAge, and never under a live writer marker.
//
// Cleaning X, every marker "refs/<D>" in X's listing makes the cleaner read
// D's head and D's whole chain (every checkpoint on it, not only those D's
// own retention keeps: a superset, freed on a later run once D's chain is
// shorter), and every object of X that the map of a checkpoint whose lineage
// names X points at is live (Report.ForCopies: kept for a copy). What each
// copy points at is read once per run. Past D's head, a checkpoint whose
// lineage object or objects are gone was dropped by D's cleaning and is read
// by no one, so it keeps nothing. Any other failure to read what a copy
// points at (at its head, a missing object or a corrupt lineage) keeps the
// file whole this run, reported in Report.Skipped under the marker, and the
// run goes on: a copy that an earlier run began to reap (head last) is then
// reaped, and no longer keeps the file. A marker is stale when D has no head
// or no checkpoint on D's chain has a lineage naming X. A stale marker is
// deleted once older than Grace, and only if it was not stored again since
// the listing (a copy that starts again stores it anew); a young one is kept,
// since its copy may be in progress. Such a copy, whose head is not published
// yet, points at objects of X's head as the copy read it: X's retention keeps
// the newest, and MinAge covers one it dropped since, as it covers a reader
// with a stale head.
//
// An orphan that a marker keeps (one not stale, or younger than Grace) is
// not reaped: it is kept whole and reported (Report.Referenced). Once no
// marker keeps it, it is reaped as any orphan, its stale markers with it;
// the markers it holds under the files it was copied from become stale in
// turn. A copy reaped in a run lets the file it points into go in the same
// or the next run.
//
// Write-ahead log records ("wal/<seq>", package wal) that the head's
// checkpoint holds (seq at most the head's engine.HeadWAL) are deleted once
// older than MinAge; a live writer deletes its own, so these are what a
// crash or a failed delete left. Later records are acknowledged changes not
// yet published and are never deleted; nor is the lease ("wal/owner").
//
// Objects whose name is none of "<cno>.<part>", "inode", "writers/<id>",
// "wal/...", "lineage/<cno>" and "refs/<id>" are left alone and reported. A
// file with no head is left alone and reported. Part 0 headers are read with
// segment.DetectHeader, which looks at the end of the object first, so
// objects of either layout are handled without knowing it.
package cleaner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// Options of a run.
type Options struct {
	// Keep is how many of the newest checkpoints of each file are retained;
	// 0 retains all of them (nothing but failed and abandoned work goes).
	Keep int
	// KeepFor retains every checkpoint whose part 0 is younger than this.
	KeepFor time.Duration
	// Grace is how old work a writer may still publish (objects above the
	// head's cno, multipart uploads) must be before it is deleted.
	Grace time.Duration
	// MinAge is how old an unreferenced object at or below the head's cno
	// must be before it is deleted.
	MinAge time.Duration
	// DryRun deletes nothing; the report says what would be deleted.
	DryRun bool
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Progress, when set, is told of each object examined.
	Progress func(n int64)
}

// DefaultGrace is the default of Options.Grace for the command line.
const DefaultGrace = time.Hour

// Object is one object the cleaner deleted, would delete or left alone.
type Object struct {
	Key    string
	Size   int64
	Reason string
}

// Report says what a run did.
type Report struct {
	Files       int
	Checkpoints int // checkpoints seen along the chains
	Retained    int // checkpoints retained
	Deleted     []Object
	Kept        int
	KeptBytes   int64
	Aborted     []staging.Upload
	Orphans     []string // ids of orphaned files deleted (or that would be)
	Skipped     []Object // left alone: unknown names, files without a head, markers of copies that could not be read
	// Writers counts live writer markers seen: files being written.
	Writers int
	// ForCopies are objects kept only because a copy by reference of their
	// file points at them.
	ForCopies []Object
	// Referenced are ids of orphaned files kept whole because a copy by
	// reference points into them (or may: a young reference marker).
	Referenced []string
}

// DeletedBytes sums the sizes of the deleted objects.
func (r *Report) DeletedBytes() int64 {
	var n int64
	for _, o := range r.Deleted {
		n += o.Size
	}
	return n
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// ErrNoHead is reported (in Report.Skipped) for a file without a head.
var ErrNoHead = errors.New("file has no head")

// FilesPrefix is where a volume at root keeps its files (fs/fusefs).
func FilesPrefix(root string) string { return root + "f/" }

// CleanVolume cleans every file of the volume at root and aborts multipart
// uploads under it that are older than the grace period.
func CleanVolume(ctx context.Context, st staging.Store, root string, o Options) (*Report, error) {
	rep := &Report{}
	fp := FilesPrefix(root)
	objs, err := staging.ListAll(ctx, st, fp)
	if err != nil {
		return rep, fmt.Errorf("list files under %q: %w", fp, err)
	}
	byFile := map[string][]staging.ObjectInfo{}
	var ids []string
	for _, obj := range objs {
		id, _, ok := strings.Cut(strings.TrimPrefix(obj.Key, fp), "/")
		if !ok || id == "" {
			rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: "not under a file"})
			continue
		}
		if _, seen := byFile[id]; !seen {
			ids = append(ids, id)
		}
		byFile[id] = append(byFile[id], obj)
	}
	ns, err := namespace.Open(ctx, st, root, namespace.Options{})
	if err != nil {
		return rep, fmt.Errorf("read the namespace of %q: %w", root, err)
	}
	orphans := map[string]bool{}
	for _, or := range ns.Orphans() {
		orphans[or.FileID] = true
	}
	now := o.now()
	view := newWriterView(st)
	refs := newReferrers(st, fp)
	for _, id := range ids {
		if orphans[id] {
			if err := reapOrphan(ctx, st, ns, fp+id+"/", id, byFile[id], now, o, rep, view, refs); err != nil {
				return rep, err
			}
			continue
		}
		if err := cleanFile(ctx, st, fp+id+"/", id, byFile[id], o, rep, view, refs); err != nil {
			return rep, err
		}
	}
	if err := abortUploads(ctx, st, fp, o, rep, view); err != nil {
		return rep, err
	}
	return rep, nil
}

// reapOrphan deletes an orphaned file whose newest object is older than the
// grace period (head last, so a run cut short leaves a file that opens) and
// makes the namespace forget it.
func reapOrphan(ctx context.Context, st staging.Store, ns *namespace.Namespace, prefix, id string, objs []staging.ObjectInfo, now time.Time, o Options, rep *Report, view *writerView, refs *referrers) error {
	rep.Files++
	// A copy by reference that still points into the file keeps it whole,
	// and so does a young marker (a copy in progress). Stale markers older
	// than the grace period go with the rest.
	for _, obj := range objs {
		copyID, ok := engine.IsRefKey(strings.TrimPrefix(obj.Key, prefix))
		if !ok {
			continue
		}
		stale := false
		if now.Sub(obj.LastModified) > o.Grace {
			r, err := refs.get(ctx, copyID)
			if err != nil && ctx.Err() != nil {
				return fmt.Errorf("orphaned file %s: %w", id, err)
			}
			if err != nil {
				rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size,
					Reason: "file kept whole: " + err.Error()})
			}
			stale = err == nil && r.stale(id)
		}
		if !stale {
			for _, obj := range objs {
				rep.Kept++
				rep.KeptBytes += obj.Size
			}
			rep.Referenced = append(rep.Referenced, id)
			return nil
		}
	}
	var newest time.Time
	for _, obj := range objs {
		if obj.LastModified.After(newest) {
			newest = obj.LastModified
		}
	}
	// A mount still writing the file (an open handle) keeps a live marker.
	ws, err := view.read(ctx, prefix, objs)
	if err != nil {
		return fmt.Errorf("orphaned file %s: %w", id, err)
	}
	if now.Sub(newest) <= o.Grace || anyLive(ws, now) {
		for _, obj := range objs {
			rep.Kept++
			rep.KeptBytes += obj.Size
		}
		return nil
	}
	head := prefix + "inode"
	order := slices.Clone(objs)
	sort.SliceStable(order, func(i, j int) bool { return order[j].Key == head && order[i].Key != head })
	for _, obj := range order {
		if o.Progress != nil {
			o.Progress(1)
		}
		if !o.DryRun {
			if err := st.Delete(ctx, obj.Key); err != nil {
				return fmt.Errorf("delete %s of orphaned file %s: %w", obj.Key, id, err)
			}
		}
		rep.Deleted = append(rep.Deleted, Object{Key: obj.Key, Size: obj.Size, Reason: "orphaned file (no name) older than the grace period"})
	}
	if !o.DryRun {
		if err := ns.Forget(ctx, id); err != nil {
			return fmt.Errorf("orphaned file %s: %w", id, err)
		}
	}
	rep.Orphans = append(rep.Orphans, id)
	return nil
}

// CleanFile cleans one file: the objects under prefix of the file with id.
func CleanFile(ctx context.Context, st staging.Store, prefix, id string, o Options) (*Report, error) {
	rep := &Report{}
	objs, err := staging.ListAll(ctx, st, prefix)
	if err != nil {
		return rep, fmt.Errorf("list %s: %w", prefix, err)
	}
	view := newWriterView(st)
	files, ok := strings.CutSuffix(prefix, id+"/")
	if !ok {
		files = ""
	}
	if err := cleanFile(ctx, st, prefix, id, objs, o, rep, view, newReferrers(st, files)); err != nil {
		return rep, err
	}
	return rep, abortUploads(ctx, st, prefix, o, rep, view)
}

// abortUploads aborts open multipart uploads under prefix initiated more
// than the grace period ago, but none of an object a live writer marker of
// its file covers.
func abortUploads(ctx context.Context, st staging.Store, prefix string, o Options, rep *Report, view *writerView) error {
	ups, err := st.ListMultipartUploads(ctx, prefix)
	if err != nil {
		return fmt.Errorf("list multipart uploads under %q: %w", prefix, err)
	}
	now := o.now()
	for _, u := range ups {
		if now.Sub(u.Initiated) <= o.Grace {
			continue
		}
		if i := strings.LastIndexByte(u.Key, '/'); i >= 0 {
			if n, _, err := segment.ParseObjectName(u.Key[i+1:]); err == nil {
				ws, err := view.fresh(ctx, u.Key[:i+1])
				if err != nil {
					return fmt.Errorf("abort upload %s of %s: %w", u.UploadID, u.Key, err)
				}
				if covered(ws, now, n.Cno) {
					continue
				}
			}
		}
		if !o.DryRun {
			if err := st.AbortMultipart(ctx, u.Key, u.UploadID); err != nil && !errors.Is(err, staging.ErrNotFound) {
				return fmt.Errorf("abort upload %s of %s: %w", u.UploadID, u.Key, err)
			}
		}
		rep.Aborted = append(rep.Aborted, u)
	}
	return nil
}

type checkpoint struct {
	ino  segment.Inode
	part segment.ObjectName
	at   time.Time // LastModified of part 0 (zero if not listed)
}

// loaderKey names one node loader of a file: the maps of one format whose
// names resolve through one lineage (0: all the file's own).
type loaderKey struct {
	format  segment.Format
	lineage uint64
}

// fileMaps reads the block maps of one file: its object space and one node
// loader per (format, lineage).
type fileMaps struct {
	st      staging.Store
	prefix  string
	space   *engine.ObjectSpace
	loaders map[loaderKey]*blockmap.ObjectLoader
}

func newFileMaps(st staging.Store, files, id, prefix string) *fileMaps {
	return &fileMaps{st: st, prefix: prefix, space: engine.NewObjectSpace(st, files, id, prefix),
		loaders: map[loaderKey]*blockmap.ObjectLoader{}}
}

// loader returns the node loader for the maps of ino, made once.
func (m *fileMaps) loader(ino segment.Inode) *blockmap.ObjectLoader {
	k := loaderKey{ino.Format, ino.Lineage}
	l := m.loaders[k]
	if l == nil {
		l = m.space.Loader(ino.Lineage, ino.Format, 64<<20)
		m.loaders[k] = l
	}
	return l
}

// readChain reads the head of the file and its chain of checkpoints, newest
// first. A head may carry its part 0 (a small checkpoint), whose object may
// not be stored yet: the head's copy stands for it, and serves its index
// nodes to later walks. The chain ends at the first part 0 that is gone (an
// earlier run dropped it) after the first. The error is ErrNoHead when the
// file has no head.
func (m *fileMaps) readChain(ctx context.Context, tag uint64, listed map[segment.ObjectName]staging.ObjectInfo) (segment.Head, staging.ObjectInfo, []checkpoint, error) {
	hd, hinfo, err := segment.ReadHead(ctx, m.st, m.prefix+"inode", tag)
	if errors.Is(err, staging.ErrNotFound) {
		return hd, hinfo, nil, ErrNoHead
	}
	if err != nil {
		return hd, hinfo, nil, err
	}
	var chain []checkpoint
	for ino := hd.Inode; ino.Cno != 0; {
		name := segment.ObjectName{Cno: ino.Cno}
		if len(hd.Embed) > 0 && ino.Cno == hd.Inode.Cno {
			meta := hd.Embed[hd.Part0.MetaOffset(0) : hd.Part0.MetaOffset(0)+hd.Part0.MetaBytes()]
			// The walk of this checkpoint uses the loader of its part 0's
			// inode; the head's inode is the same checkpoint.
			for _, in := range []segment.Inode{hd.Part0.Inode, hd.Inode} {
				if err := m.loader(in).Pin(name, hd.Part0, meta); err != nil {
					return hd, hinfo, nil, fmt.Errorf("the head's part 0: %w", err)
				}
			}
			chain = append(chain, checkpoint{ino: hd.Part0.Inode, part: name, at: listed[name].LastModified})
			ino = hd.Part0.Base
			continue
		}
		h, err := segment.DetectHeader(ctx, m.st, m.prefix+name.String(), name, tag)
		if errors.Is(err, staging.ErrNotFound) && len(chain) > 0 {
			break // an earlier run dropped it: the chain ends here
		}
		if err != nil {
			return hd, hinfo, nil, fmt.Errorf("read checkpoint %d: %w", ino.Cno, err)
		}
		chain = append(chain, checkpoint{ino: h.Inode, part: name, at: listed[name].LastModified})
		ino = h.Base
	}
	return hd, hinfo, chain, nil
}

// walk calls visit with the name of every object the block map of ino
// points into (its nodes and the data blocks of its leaves), resolved or
// not: names in a map of a lineage may be other files' objects.
func (m *fileMaps) walk(ctx context.Context, ino segment.Inode, visit func(segment.ObjectName) error) error {
	if ino.Height == 0 {
		return nil
	}
	mbs := int(ino.MetaBlockSize)
	t := blockmap.Open(blockmap.Options{MetaBlockSize: mbs}, m.loader(ino), ino.Root, int(ino.Height))
	return t.Walk(ctx, func(ref segment.Ptr, level int, img blockmap.NodeImage) error {
		if !ref.IsZero() {
			if err := visit(ref.Object()); err != nil {
				return err
			}
		}
		if level != 0 {
			return nil
		}
		n, err := blockmap.DecodeNode(mbs, ref, img.Encoded)
		if err != nil {
			return err
		}
		for _, v := range n.Values {
			if !v.Ptr.IsZero() {
				if err := visit(v.Ptr.Object()); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// markOwn marks live every object of the file itself that the block map of
// ino points into; names a lineage gives to other files are theirs.
func (m *fileMaps) markOwn(ctx context.Context, ino segment.Inode, live map[segment.ObjectName]bool) error {
	return m.walk(ctx, ino, func(n segment.ObjectName) error {
		if ino.Lineage == 0 {
			live[n] = true
			return nil
		}
		_, own, err := m.space.Owner(ctx, ino.Lineage, n)
		if err != nil {
			return err
		}
		if own {
			live[n] = true
		}
		return nil
	})
}

// cleanFile cleans one file given its objects as listed (before the head is
// read: see the package doc).
func cleanFile(ctx context.Context, st staging.Store, prefix, id string, objs []staging.ObjectInfo, o Options, rep *Report, view *writerView, refs *referrers) error {
	rep.Files++
	tag := segment.FileTag(id)
	listed := make(map[segment.ObjectName]staging.ObjectInfo, len(objs))
	for _, obj := range objs {
		if n, _, err := segment.ParseObjectName(strings.TrimPrefix(obj.Key, prefix)); err == nil {
			listed[n] = obj
		}
	}
	maps := newFileMaps(st, refs.files, id, prefix)
	hd, hinfo, chain, err := maps.readChain(ctx, tag, listed)
	if errors.Is(err, ErrNoHead) {
		for _, obj := range objs {
			rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: ErrNoHead.Error()})
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	walApplied, _, err := engine.HeadWAL(hinfo)
	if err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	rep.Checkpoints += len(chain)

	now := o.now()
	writers, err := view.read(ctx, prefix, objs)
	if err != nil {
		return fmt.Errorf("clean %s: %w", prefix, err)
	}
	byKey := map[string]engine.Writer{}
	for _, w := range writers {
		byKey[w.Key] = w
		if w.Live(now) {
			rep.Writers++
		}
	}
	live := map[segment.ObjectName]bool{}
	liveLineage := map[uint64]bool{}
	var dropped []segment.ObjectName // part 0s of dropped checkpoints, newest first
	cut := false
	for i, c := range chain {
		retain := !cut && (o.Keep <= 0 || i < o.Keep ||
			(!c.at.IsZero() && now.Sub(c.at) < o.KeepFor) || live[c.part])
		if !retain {
			cut = true
			dropped = append(dropped, c.part)
			continue
		}
		rep.Retained++
		live[c.part] = true
		if c.ino.Lineage != 0 {
			liveLineage[c.ino.Lineage] = true
		}
		if err := maps.markOwn(ctx, c.ino, live); err != nil {
			return fmt.Errorf("clean %s: checkpoint %d: %w", prefix, c.ino.Cno, err)
		}
	}

	// What copies by reference point at: each marker refs/<copy> names a
	// file whose checkpoints may point into this one.
	forCopies := map[segment.ObjectName]string{} // name -> a copy pointing at it
	staleRefs := map[string]bool{}
	for _, obj := range objs {
		copyID, ok := engine.IsRefKey(strings.TrimPrefix(obj.Key, prefix))
		if !ok {
			continue
		}
		r, err := refs.get(ctx, copyID)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("clean %s: %w", prefix, err)
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
			return nil
		}
		if r.stale(id) {
			staleRefs[obj.Key] = true
			continue
		}
		for n := range r.names[id] {
			if _, ok := forCopies[n]; !ok {
				forCopies[n] = copyID
			}
		}
	}

	// Decide.
	var doomed []doomedObject
	droppedSet := map[string]bool{}
	for _, n := range dropped {
		droppedSet[prefix+n.String()] = true
	}
	var first []doomedObject // dropped part 0s, deleted first
	keep := func(obj staging.ObjectInfo) {
		rep.Kept++
		rep.KeptBytes += obj.Size
	}
	// checkpointRule is what becomes of an unreferenced object that a
	// checkpoint of cno made: "" keeps it.
	checkpointRule := func(cno uint64, age time.Duration) string {
		switch {
		case covered(writers, now, cno):
		case cno > hd.Inode.Cno:
			if age > o.Grace {
				return "abandoned: above the head's checkpoint and older than the grace period"
			}
		case age >= o.MinAge:
			return "referenced by no retained checkpoint"
		}
		return ""
	}
	for _, obj := range objs {
		if o.Progress != nil {
			o.Progress(1)
		}
		rel := strings.TrimPrefix(obj.Key, prefix)
		age := now.Sub(obj.LastModified)
		if rel == "inode" {
			keep(obj)
			continue
		}
		if engine.IsWriterKey(rel) {
			w, ok := byKey[obj.Key]
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
			keep(obj)
			continue
		}
		if strings.HasPrefix(rel, wal.Dir) {
			if walCovered(rel, walApplied, age >= o.MinAge) {
				doomed = append(doomed, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size, Reason: "write-ahead log record the head's checkpoint holds"}})
			} else {
				keep(obj)
			}
			continue
		}
		if _, ok := engine.IsRefKey(rel); ok {
			// A young marker may be a copy in progress (its head not yet
			// published): only an old one that keeps nothing goes.
			if staleRefs[obj.Key] && age > o.Grace {
				doomed = append(doomed, doomedObject{Object: Object{Key: obj.Key, Size: obj.Size,
					Reason: "reference marker of a copy that no longer points here, older than the grace period"}, ref: obj.LastModified})
			} else {
				keep(obj)
			}
			continue
		}
		if lcno, ok := engine.IsLineageKey(rel); ok {
			reason := ""
			if !liveLineage[lcno] {
				reason = checkpointRule(lcno, age)
			}
			if reason == "" {
				keep(obj)
				continue
			}
			doomed = append(doomed, doomedObject{Object{Key: obj.Key, Size: obj.Size, Reason: "lineage " + reason}, lcno, true, false, time.Time{}})
			continue
		}
		n, _, err := segment.ParseObjectName(rel)
		if err != nil {
			rep.Skipped = append(rep.Skipped, Object{Key: obj.Key, Size: obj.Size, Reason: "not a checkpoint object name"})
			continue
		}
		if live[n] {
			keep(obj)
			continue
		}
		if copyID, ok := forCopies[n]; ok {
			keep(obj)
			rep.ForCopies = append(rep.ForCopies, Object{Key: obj.Key, Size: obj.Size, Reason: "kept for a copy: file " + copyID + " points at it"})
			continue
		}
		reason := checkpointRule(n.Cno, age)
		if reason == "" {
			keep(obj)
			continue
		}
		if droppedSet[obj.Key] && n.Cno <= hd.Inode.Cno {
			first = append(first, doomedObject{Object{Key: obj.Key, Size: obj.Size, Reason: "part 0 of a dropped checkpoint"}, n.Cno, true, false, time.Time{}})
			continue
		}
		doomed = append(doomed, doomedObject{Object{Key: obj.Key, Size: obj.Size, Reason: reason}, n.Cno, true, false, time.Time{}})
	}
	// Newest dropped checkpoint first: the chain is cut at the retained end.
	sort.SliceStable(first, func(i, j int) bool { return first[i].Key > first[j].Key })
	all := slices.Concat(first, doomed)
	if len(all) == 0 {
		return nil
	}
	// A writer may have started, or rebased onto objects listed here, since
	// the listing: its markers are read again right before deleting, and
	// again whenever the last reading is older than engine.WriterRecheck.
	view.forget(prefix)
	for _, d := range all {
		ws, err := view.fresh(ctx, prefix)
		if err != nil {
			return fmt.Errorf("clean %s: %w", prefix, err)
		}
		if d.isCkpt && covered(ws, o.now(), d.cno) || d.marker && !deadLong(ws, d.Key, o.now(), o.Grace) {
			keep(staging.ObjectInfo{Size: d.Size})
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
				return fmt.Errorf("clean %s: %w", prefix, err)
			}
			if !info.LastModified.Equal(d.ref) {
				keep(staging.ObjectInfo{Size: d.Size})
				continue
			}
		}
		if !o.DryRun {
			if err := st.Delete(ctx, d.Key); err != nil {
				return fmt.Errorf("delete %s: %w", d.Key, err)
			}
		}
		rep.Deleted = append(rep.Deleted, d.Object)
	}
	return nil
}

// doomedObject is an object decided for deletion; a checkpoint object's cno
// is checked against the writer markers once more before it goes.
type doomedObject struct {
	Object
	cno    uint64
	isCkpt bool
	marker bool      // a dead writer marker
	ref    time.Time // a stale reference marker: its LastModified as listed
}

// deadLong says whether the marker at key, as read in ws, is still dead for
// longer than its TTL plus grace (a marker gone since is not deleted again).
func deadLong(ws []engine.Writer, key string, now time.Time, grace time.Duration) bool {
	for _, w := range ws {
		if w.Key == key {
			return w.Err == nil && now.Sub(w.Modified) > w.Marker.TTL+grace
		}
	}
	return false
}

// covered says whether a live marker among ws protects objects of cno.
func covered(ws []engine.Writer, now time.Time, cno uint64) bool {
	for _, w := range ws {
		if w.Live(now) && w.Covers(cno) {
			return true
		}
	}
	return false
}

func anyLive(ws []engine.Writer, now time.Time) bool {
	for _, w := range ws {
		if w.Live(now) {
			return true
		}
	}
	return false
}

// writerView holds the writer markers read per file, and when (on this
// machine's monotonic clock) each reading began.
type writerView struct {
	st    staging.Store
	files map[string]writersRead
}

type writersRead struct {
	ws []engine.Writer
	at time.Time
}

func newWriterView(st staging.Store) *writerView {
	return &writerView{st: st, files: map[string]writersRead{}}
}

// read reads the markers of the file at prefix that the listing objs holds.
func (v *writerView) read(ctx context.Context, prefix string, objs []staging.ObjectInfo) ([]engine.Writer, error) {
	at := time.Now()
	var ws []engine.Writer
	for _, obj := range objs {
		if !engine.IsWriterKey(strings.TrimPrefix(obj.Key, prefix)) {
			continue
		}
		w, err := engine.ReadWriter(ctx, v.st, obj.Key)
		if errors.Is(err, staging.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	v.files[prefix] = writersRead{ws, at}
	return ws, nil
}

// fresh returns the markers of the file at prefix, read again (listed and
// read) unless the last reading began less than engine.WriterRecheck ago.
func (v *writerView) fresh(ctx context.Context, prefix string) ([]engine.Writer, error) {
	if r, ok := v.files[prefix]; ok && time.Since(r.at) < engine.WriterRecheck {
		return r.ws, nil
	}
	at := time.Now()
	ws, err := engine.ReadWriters(ctx, v.st, prefix)
	if err != nil {
		return nil, err
	}
	v.files[prefix] = writersRead{ws, at}
	return ws, nil
}

// forget drops what was read of the file at prefix: the next fresh reads.
func (v *writerView) forget(prefix string) { delete(v.files, prefix) }

// walCovered says whether the WAL object rel (under the file's prefix) is a
// record the head's checkpoint holds, old enough to delete.
func walCovered(rel string, applied uint64, oldEnough bool) bool {
	seq, ok := wal.ParseRecordName(strings.TrimPrefix(rel, wal.Dir))
	return ok && seq <= applied && oldEnough
}
