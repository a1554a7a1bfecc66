// Package cleaner owns the deletion of objects no retained checkpoint needs:
// the logic behind `ckptfs gc`. It reads heads, part 0 headers, block-map
// nodes, lineage objects and the namespace; it writes deletions, multipart
// aborts, the namespace's forget entries and its own pending records
// (pending.go).
//
// # A plan, then its execution
//
// PlanVolume lists the volume once, reads what it needs and decides; it
// writes nothing (a dry run prints it: Plan.Report). Plan.Execute then does
// it, file by file, checking right before a file's deletions what may have
// changed since the plan: the head is read again and a file whose head moved
// is left as it is this run (a head published since may name a part 0 the
// plan judged abandoned), the reference markers are listed again and a file
// with a marker not in the plan keeps its unreferenced objects (a copy made
// since may point at a checkpoint the plan dropped), and the writer markers
// are read again (below).
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
// marker, "writers/<id>" under the file's prefix (package writermark, see
// fs/writermark/doc.go), renewed while it holds them. A marker is live while
// its LastModified is within its TTL; no object whose cno is at or above a
// live marker's lo is deleted, whatever its age, and no multipart upload of
// such an object is aborted. The markers of a file are read again right
// before that file's objects are deleted, and again whenever more than
// writermark.Recheck passed since they were last read. A marker dead for
// longer than its TTL plus Grace is deleted; one that does not decode is
// reported and protects the whole file for writermark.MaxTTL.
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
// deleted once MinAge has passed since a run first found them unreferenced,
// whatever their age: a run records what it finds, with the time, in the
// file's pending record, and a later run deletes it only if it is still
// unreferenced then. So an old checkpoint that Keep drops stays readable for
// MinAge after the run that dropped it, and one a copy made after the
// listing points at is found referenced by the next run. MinAge covers a
// reader or writer of another mount whose view of the head is stale (it may
// still read, or build on, objects of a checkpoint this cleaner just
// dropped) and may be zero for a volume with one mount: then the run that
// finds an object unreferenced deletes it.
//
// Part 0 of a dropped checkpoint is deleted before anything else it
// references, newest first, so a run cut short leaves a chain that ends at a
// retained checkpoint rather than one that names half-deleted checkpoints;
// so is a failed flush's part 0 (a checkpoint a reader may open by number).
// A reader of an old checkpoint that finds an object missing then tells the
// cleaner's deletion (part 0 gone: the checkpoint was dropped) from a loss.
// That holds across files: a run deletes every file's part 0s first, copies
// before the files they point into, then the rest (Plan.Execute).
//
// A file the namespace holds as an orphan (no name left; fs/namespace
// Orphans) is deleted whole, head last, and then forgotten by the namespace,
// once max(Grace, NSLag) has passed since a run first found it orphaned (the
// orphans' pending record), it has no live writer marker and no copy by
// reference keeps it (below). Orphans are taken from the namespace, not from
// the listing: one with no objects (created and removed without data) is
// forgotten all the same. The cleaner cannot see another mount's open
// handles, so Grace is also how long a handle may read an unlinked file that
// no one writes; NSLag is how long another mount's view of the namespace
// (ns_refresh_max, the kernel's caches) may still name it. A forget that
// fails leaves the orphan in the record, and the next run forgets it.
//
// On a namespace v2 volume (nsv2.go) the orphans are the files of its
// orphan records (ns2/orphan/) whose unlink's tombstone landed, judged by
// nsv2.Index; forgetting one deletes its record. A record whose name still
// binds its file once older than Grace (at least nsv2.TxGrace) is of an
// unlink that never landed, and is deleted. The pass that ends a sweep then
// trims the namespace's history older than TrimGrace (nsv2.Trim). Every
// other rule is the one above, over the same listing of the files.
//
// # Copies by reference
//
// A file D copied by reference from X (engine File.CloneFrom) reuses X's
// block map: its pointers name X's objects "<cno>.<part>", and its inode's
// Lineage L names the lineage object "lineage/<L>" under D's prefix
// (segment.Lineage) that says, by cno, which file owns each name; D's own
// objects are numbered above the lineage's entries. A copy stores, in this
// order, a reference marker "refs/<D>" under the prefix of every file the
// new lineage names (volume.RefKey), the lineage object, then its part 0 and
// head.
//
// Cleaning a file, the map of a retained checkpoint whose inode has Lineage
// L ≠ 0 is walked through the file's volume.ObjectSpace, and only the names
// the lineage leaves to the file itself are marked live: the others are
// objects of other files, kept by those files' cleaning. The lineage object
// of a retained checkpoint is live. One no retained checkpoint names goes by
// the rules of a checkpoint object of its cno: above the head's cno after
// Grace (a copy in progress stores it before its head), at or below after
// MinAge, and never under a live writer marker.
//
// Cleaning X, every marker "refs/<D>" in X's listing makes the cleaner read
// D's head and the checkpoints D's own retention keeps (the same rule:
// Keep, KeepFor, pinned), and every object of X that the map of one of them
// points at through its lineage is live (Report.ForCopies: kept for a
// copy). A checkpoint of D that its retention drops keeps nothing: the
// objects of X only it named are unreferenced from then on, and MinAge
// counts from then. What each copy points at is read once per run. Past D's
// head, a checkpoint whose lineage object or objects are gone was dropped
// by D's cleaning and is read by no one, so it keeps nothing. Any other failure to read what a copy
// points at (at its head, a missing object or a corrupt lineage) keeps the
// file whole this run, reported in Report.Skipped under the marker, and the
// run goes on: a copy that an earlier run began to reap (head last) is then
// reaped, and no longer keeps the file. A marker is stale when D has no head
// or no retained checkpoint of D points at an object of X (a copy written
// over whole keeps nothing, though its lineage still names X). A stale marker is
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
// or the next run. A marker of a copy that is itself an orphan going in the
// same run keeps nothing: orphans that hold only each other (cp X D, cp D
// X, rm X D) are reaped together. The grace of an orphan that a file with a
// name keeps starts again once it no longer does.
//
// Write-ahead log records ("wal/<seq>", package wal) that the head's
// checkpoint holds (seq at most the head's wal.HeadApplied) are deleted once
// older than MinAge; a live writer deletes its own, so these are what a
// crash or a failed delete left. Later records are acknowledged changes not
// yet published and are never deleted; nor is the lease ("wal/owner").
//
// Objects whose name is none of "<cno>.<part>", "inode", "writers/<id>",
// "wal/...", "lineage/<cno>" and "refs/<id>" are left alone and reported. A
// file with no head is left alone and reported, whatever the age of its
// objects, and the run goes on (a first flush that died after its data
// objects, before its head, leaves one; its writer may still store the
// head), unless the namespace no longer knows it (reaped and forgotten): a lineage names every file its
// copy was ever copied from, so a copy of a copy may store its marker under
// such a file (cp X D, rm X, D written over, X reaped, cp D E); that marker
// goes by the rule of stale markers. Part 0 headers are read with
// segment.DetectHeader, which looks at the end of the object first, so
// objects of either layout are handled without knowing it.
package cleaner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/fs/writermark"
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
	// head's cno, multipart uploads) must be before it is deleted, and how
	// long a file must have been found orphaned before it is reaped (with
	// NSLag).
	Grace time.Duration
	// MinAge is how long an object at or below the head's cno must have
	// been unreferenced before it is deleted: counted from the run that
	// first found it so (see Pending records), not from its age. Zero
	// deletes it in the run that finds it.
	MinAge time.Duration
	// NSLag is how long an orphaned file must have been found orphaned
	// before it is reaped, on top of Grace: another mount's view of the
	// namespace may still name it that long (DefaultNSLag).
	NSLag time.Duration
	// DryRun deletes and records nothing; the report says what would be
	// deleted.
	DryRun bool
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Progress, when set, is told of each object examined, possibly from
	// several goroutines at once.
	Progress func(n int64)

	// After and MaxFiles make a run of PlanVolume one pass of an
	// incremental sweep: it takes the files whose ids come after After in
	// the listing's order ("" from the first), at most MaxFiles of them (0:
	// every one), and the orphans and pending records of those ids; the
	// report's Next says where the next pass starts. The rules are those of
	// a whole run: a file is planned and executed whole, from one listing
	// of it. Multipart uploads are looked at by the pass that ends a sweep.
	After    string
	MaxFiles int
	// Fence, when set, is called right before each batch of writes of an
	// execution (a file's deletions, an orphan's, a record stored, the
	// namespace's forgets, uploads aborted); an error stops the execution
	// there, and is returned. A background cleaner checks there that its
	// lease is still its own (Lease.Check): a holder slow enough that its
	// lease was taken stops before its next batch.
	Fence func(ctx context.Context) error
	// Open, when set, says whether a file is open in this process (a
	// mount's own cleaner: its open handles): an orphan open here is not
	// reaped while it is, whatever its grace, and goes at the first run
	// after it is closed once its grace has passed.
	Open func(fileID string) bool
	// TrimGrace is how old a namespace v2 volume's tombstones, decisions
	// of changes and idle leases must be before they are deleted (0:
	// nsv2.TrimGrace); see nsv2.Trim.
	TrimGrace time.Duration
	// Workers bounds the orphans reaped (and forgotten) at once; 0: 16
	// reaped and 64 forgotten. A background cleaner keeps it low, beside
	// the mount's own requests.
	Workers int
}

// workers is o.Workers, or n when it is not set.
func (o *Options) workers(n int) int {
	if o.Workers > 0 {
		return o.Workers
	}
	return n
}

// ErrFenced: an execution stopped because its fence (Options.Fence)
// failed.
var ErrFenced = errors.New("cleaner stopped by its fence")

// fence calls o.Fence, if any; its error is ErrFenced.
func (o *Options) fence(ctx context.Context) error {
	if o.Fence == nil {
		return nil
	}
	if err := o.Fence(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return nil
}

// DefaultGrace is the default of Options.Grace for the command line.
const DefaultGrace = time.Hour

// DefaultNSLag is the default of Options.NSLag for the command line: the
// longest ns_refresh_max a mount accepts (10 min), plus a minute for the
// kernel's entry and attribute caches (1 s) and a re-read that meets
// retries. A mount whose view lags no more than that no longer names a file
// the cleaner reaps.
const DefaultNSLag = 11 * time.Minute

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
	// Pending are objects found unreferenced whose MinAge has not passed
	// since a run first found them so: recorded, deleted by a later run.
	Pending []Object
	// PendingOrphans are ids of orphaned files found orphaned whose Grace
	// and NSLag have not passed since.
	PendingOrphans []string
	// Next is where the next pass of a sweep starts (Options.After): the
	// last file id this pass took, or "" when it reached the end of the
	// volume.
	Next string
	// StoredObjects and StoredBytes count the objects under the files of
	// the run (or pass) as listed, less what it deleted: what the files
	// hold in the bucket once it is done.
	StoredObjects int64
	StoredBytes   int64
	// StoredFiles are the same counts by file id (PlanVolume): what each
	// file of the pass holds once it is done.
	StoredFiles map[string]Held
	// Listed: the listing of the run's files succeeded, so the Stored
	// counts are whole whatever failed after it.
	Listed bool
	// Names are the namespace v2 objects deleted (or that would be): stale
	// orphan records, and what the trim of ns2/ took (tombstones,
	// decisions, leases older than TrimGrace). NamesRewritten are dentries
	// whose op list went.
	Names          []Object
	NamesRewritten []Object
}

// Held counts the objects of one file and their bytes.
type Held struct{ Objects, Bytes int64 }

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

// CleanVolume cleans every file of the volume at root and aborts multipart
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
	space   *volume.ObjectSpace
	loaders map[loaderKey]*blockmap.ObjectLoader
}

func newFileMaps(st staging.Store, files, id, prefix string) *fileMaps {
	return &fileMaps{st: st, prefix: prefix, space: volume.NewObjectSpace(st, files, id, prefix),
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
	hd, hinfo, err := segment.ReadHead(ctx, m.st, volume.HeadKey(m.prefix), tag)
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

// is checked against the writer markers once more before it goes.
type doomedObject struct {
	Object
	cno    uint64
	isCkpt bool
	marker bool      // a dead writer marker
	ref    time.Time // a stale reference marker: its LastModified as listed
	rel    string    // its name under the file's prefix (pending records)
	cut    bool      // a part 0 (of a dropped checkpoint, a failed flush): deleted in the first pass
}

// deadLong says whether the marker at key, as read in ws, is still dead for
// longer than its TTL plus grace (a marker gone since is not deleted again).
func deadLong(ws []writermark.Stored, key string, now time.Time, grace time.Duration) bool {
	for _, w := range ws {
		if w.Key == key {
			return w.Err == nil && now.Sub(w.Modified) > w.Marker.TTL+grace
		}
	}
	return false
}

// covered says whether a live marker among ws protects objects of cno.
func covered(ws []writermark.Stored, now time.Time, cno uint64) bool {
	for _, w := range ws {
		if w.Live(now) && w.Covers(cno) {
			return true
		}
	}
	return false
}

func anyLive(ws []writermark.Stored, now time.Time) bool {
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
	ws []writermark.Stored
	at time.Time
}

func newWriterView(st staging.Store) *writerView {
	return &writerView{st: st, files: map[string]writersRead{}}
}

// read reads the markers of the file at prefix that the listing objs holds.
func (v *writerView) read(ctx context.Context, prefix string, objs []staging.ObjectInfo) ([]writermark.Stored, error) {
	at := time.Now()
	var ws []writermark.Stored
	for _, obj := range objs {
		if !volume.IsWriterKey(strings.TrimPrefix(obj.Key, prefix)) {
			continue
		}
		w, err := writermark.Read(ctx, v.st, obj.Key)
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
// read) unless the last reading began less than writermark.Recheck ago.
func (v *writerView) fresh(ctx context.Context, prefix string) ([]writermark.Stored, error) {
	if r, ok := v.files[prefix]; ok && time.Since(r.at) < writermark.Recheck {
		return r.ws, nil
	}
	at := time.Now()
	ws, err := writermark.ReadAll(ctx, v.st, prefix)
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
	seq, ok := wal.ParseRecordName(strings.TrimPrefix(rel, volume.WALDir))
	return ok && seq <= applied && oldEnough
}
