package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/fs/upload"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// placeholderPart marks a block inserted in the map only to fix its structure
// before it is placed; it never reaches an object (Commit runs after every
// placeholder is replaced).
const placeholderPart = math.MaxUint32

// noLeaf marks a group of blocks that is not its leaf's only group.
const noLeaf = math.MaxUint64

// errNameTaken: an object name this writer chose was created by someone else
// (another writer on the same file). The attempt is planned again under new
// names.
var errNameTaken = upload.ErrNameTaken

// plannedObject is one object being built: its data blocks (in slot order),
// its leaves, and for part 0 the nodes above the leaves and the inode.
type plannedObject struct {
	name    segment.ObjectName
	blocks  []packBlock // while packing: the blocks, in slot order
	fbns    []uint64
	bufs    [][]byte
	summary []segment.SummaryEntry
	metas   [][]byte
	leafLos []uint64 // the leaves (by their Lo) whose data is here
	held    int64    // budget drawn for blocks by reference read into bufs
}

// releasePlanned returns the budget drawn for blocks read by reference.
func (f *File) releasePlanned(objs []*plannedObject) {
	for _, o := range objs {
		f.releaseCopy(o.held)
		o.held = 0
	}
}

func (o *plannedObject) dataBytes(bs int) int64 { return int64(len(o.fbns)) * int64(bs) }

// size of the object with extra meta blocks beyond those it has.
func (o *plannedObject) size(bs, mbs, extraMetas int) int64 {
	n := int64(len(o.fbns) + len(o.blocks)) // blocks while packing, fbns after
	m := int64(len(o.metas) + extraMetas)
	return n*int64(bs) + m*int64(mbs) + n*segment.SummaryEntrySize + segment.HeaderSize
}

// flushCounters collects what one flush or partial segment did.
type flushCounters struct {
	taskBase  int64 // upload tasks' requests before the flush began
	requests  atomic.Int64
	dataBytes atomic.Int64
	metaBytes atomic.Int64
	objects   atomic.Int64
}

// Flush publishes a checkpoint of everything written so far, if anything
// changed. It returns when the head names the new checkpoint.
//
// With the WAL on, every acknowledged write is durable already: Flush starts
// a WAL publish (see wal.go) and returns without waiting for it to land.
func (f *File) Flush(ctx context.Context) (FlushTiming, error) {
	if f.walOn() {
		return f.walFlush(ctx)
	}
	// One Flush at a time, holding the file's blocks shared: what it
	// publishes does not change under it, reads go on, and its requests go
	// without mu (flushgate.go says what else goes on meanwhile).
	f.flushMu.Lock()
	defer f.flushMu.Unlock()
	h := &flushHold{}
	h.take(f)
	defer func() {
		f.mu.Unlock()
		h.release()
	}()
	if err := f.writable(); err != nil {
		return FlushTiming{}, err
	}
	f.walUnderLocked(ctx)
	return f.flushMaybeUnlocked(ctx, h)
}

// flushLocked publishes a checkpoint on the direct path: in parts when it is
// larger than one object, returning when the head names it. The caller holds
// every block and mu.
func (f *File) flushLocked(ctx context.Context) (FlushTiming, error) {
	return f.flushMaybeUnlocked(ctx, nil)
}

// flushMaybeUnlocked is flushLocked, or with h (Flush: it holds flushMu,
// and the blocks h says) its attempts send without mu (flushAttempt), its
// backoff waits without mu, and it holds every block exclusively only to
// merge or roll back.
func (f *File) flushMaybeUnlocked(ctx context.Context, h *flushHold) (FlushTiming, error) {
	unlocked := h != nil
	if !f.changed {
		return FlushTiming{Cno: f.head.Cno}, nil
	}
	start := time.Now()
	var t FlushTiming
	var c flushCounters
	// The requests of upload tasks the flush waits for or starts count too.
	c.taskBase = f.s.requests.Load()
	// Objects sent ahead: the last pieces go up, open objects close, and
	// everything in flight completes (or fails, leaving its blocks dirty).
	if err := f.s.settleLocked(ctx, unlocked); err != nil {
		return t, fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	backoff := 10 * time.Millisecond
	for {
		if unlocked {
			// Writes past the blocks held may have come since the last
			// attempt: hold them too (or let go of every block).
			h.sharedLocked(f)
			if err := f.writable(); err != nil {
				t.fill(&c, start, f.s.requests.Load())
				return t, err
			}
		}
		t.Attempts++
		err := f.flushAttemptLocked(ctx, &t, &c, h)
		if err == nil {
			break
		}
		if errors.Is(err, errNameTaken) && t.Attempts < f.p.MaxRetries {
			// New names were reserved; plan again at once. A writer many
			// checkpoints behind would spend an attempt on every number
			// the other writer took since: it moves past the head's.
			f.skipPastHeadLocked(ctx, &c)
			continue
		}
		var ce *ConflictError
		if !errors.As(err, &ce) {
			t.fill(&c, start, f.s.requests.Load())
			return t, err
		}
		if unlocked {
			// A merge or a rollback changes blocks anywhere.
			h.allLocked(f)
			if err := f.writable(); err != nil {
				t.fill(&c, start, f.s.requests.Load())
				return t, err
			}
		}
		f.stats.Conflicts++
		if f.p.ConflictPolicy == ConflictFailFast {
			f.rollbackLocked(ce.theirsHead(), ce.theirsETag(), ce.walMark())
			if err := f.discardWALLocked(ctx); err != nil {
				t.fill(&c, start, f.s.requests.Load())
				return t, fmt.Errorf("%w (and %w)", ce, err)
			}
			t.fill(&c, start, f.s.requests.Load())
			return t, ce
		}
		if t.Attempts >= f.p.MaxRetries {
			t.fill(&c, start, f.s.requests.Load())
			return t, fmt.Errorf("flush %s: gave up after %d attempts: %w", f.prefix, t.Attempts, ce)
		}
		if ce.Theirs.Lineage != f.linCno.Load() {
			// The winner made the file a copy of another (or a file again):
			// its names mean other objects than ours, so nothing of ours
			// can be laid over it. The whole file was replaced: it wins.
			f.rollbackLocked(ce.theirsHead(), ce.theirsETag(), ce.walMark())
			t.fill(&c, start, f.s.requests.Load())
			return t, fmt.Errorf("flush %s: replaced by a copy on another mount: %w", f.prefix, ce)
		}
		if f.zeroPast < min(int64(ce.Theirs.Size), f.minSize) {
			// This writer zeroed more ranges past its end than it keeps
			// (maxZeroAfter) and the winner has bytes there: no merge
			// gives what zeroing after the winner would, so it gives way.
			f.rollbackLocked(ce.theirsHead(), ce.theirsETag(), ce.walMark())
			t.fill(&c, start, f.s.requests.Load())
			return t, fmt.Errorf("flush %s: a range zeroed past this writer's end has bytes of checkpoint %d: %w", f.prefix, ce.Theirs.Cno, ce)
		}
		if err := f.rebaseLocked(ctx, ce.theirsHead(), ce.theirsETag(), ce.walMark()); err != nil {
			t.fill(&c, start, f.s.requests.Load())
			return t, fmt.Errorf("flush %s: rebase on checkpoint %d: %w", f.prefix, ce.Theirs.Cno, err)
		}
		if !f.walOn() && f.w.log == nil {
			// Records this writer showed (an overlay) are the winner's to
			// hold now: its blocks replaced theirs (overlayIsBaseLocked).
			f.w.seq, f.w.overlay = f.w.applied, false
		}
		if ce.walTracked {
			// The winner may be a WAL writer's marked head with records
			// after it (its first change marks the head): they go under
			// this writer's changes too.
			f.walUnderLocked(ctx)
		}
		// Back off while holding the blocks: writers would only add to a
		// flush that is about to retry, and the other writer needs no lock
		// of ours. Reads go on (an unlocked flush lets go of mu meanwhile).
		sleep := backoff/2 + rand.N(backoff)
		var g *pubGate
		if unlocked {
			g = f.openGateLocked(false, h.hi)
		}
		var waitErr error
		select {
		case <-ctx.Done():
			waitErr = ctx.Err()
		case <-time.After(sleep):
		}
		if g != nil {
			f.closeGate(g)
		}
		if waitErr != nil {
			t.fill(&c, start, f.s.requests.Load())
			return t, fmt.Errorf("flush %s: %w", f.prefix, waitErr)
		}
		backoff = min(backoff*2, time.Second)
	}
	t.fill(&c, start, f.s.requests.Load())
	f.stats.Flushes++
	f.stats.LastFlush = t
	return t, nil
}

func (t *FlushTiming) fill(c *flushCounters, start time.Time, tasks int64) {
	t.Requests = int(c.requests.Load() + tasks - c.taskBase)
	t.StreamFlushBytes += c.dataBytes.Load()
	t.StreamMetaBytes = c.metaBytes.Load()
	t.Objects = int(c.objects.Load())
	t.Total = time.Since(start)
}

// takeCno returns the checkpoint number objects are named with now: a
// number past the head's and past every number this writer named an object
// with, so that after a rollback (which forgets the checkpoint being built)
// no name already taken is used again.
func (f *File) takeCno() uint64 {
	if f.pendingCno == 0 {
		f.pendingCno = max(f.head.Cno, f.usedCno) + 1
		f.nextPart = 1
	}
	f.usedCno = max(f.usedCno, f.pendingCno)
	return f.pendingCno
}

// bumpCno moves to a fresh checkpoint number: after a part 0 was attempted
// (its name is spent) or a name was found taken. Objects already stored keep
// their names; pointers carry them.
func (f *File) bumpCno() {
	f.pendingCno = max(f.pendingCno, f.head.Cno, f.usedCno) + 1
	f.usedCno = f.pendingCno
	f.nextPart = 1
}

// skipPastHeadLocked moves the checkpoint being built past the number the
// head names now, if that is not past it already (a name was taken: another
// writer published). Failing to read the head only leaves the number as it
// is; the next attempt finds out more.
func (f *File) skipPastHeadLocked(ctx context.Context, c *flushCounters) {
	c.requests.Add(1)
	hd, _, err := segment.ReadHead(ctx, f.st, volume.HeadKey(f.prefix), f.tag)
	if err != nil || hd.Inode.Cno < f.pendingCno {
		return
	}
	f.usedCno = max(f.usedCno, hd.Inode.Cno)
	f.bumpCno()
}

// sortedDirty returns the dirty block numbers, ascending.
func (f *File) sortedDirty() []uint64 {
	fbns := make([]uint64, 0, len(f.dirty))
	for fbn := range f.dirty {
		fbns = append(fbns, fbn)
	}
	slices.Sort(fbns)
	return fbns
}

// packBlock is what packing needs of one dirty block, taken under mu
// (packBlockLocked). Packing runs while the block cannot change: its caller
// holds the block's range, shared by a flush (which lets go of mu
// meanwhile), or every block and mu.
type packBlock struct {
	fbn uint64
	d   *dirtyBlock
	buf []byte  // the block's bytes; nil for a block by reference
	ref *refSrc // where a block by reference reads from
	crc uint32  // the checksum of buf, when summed
	// summed: the write that filled buf whole summed it (dirtyBlock.crc).
	summed bool
	// run: a block of a run (classRun); runs and scattered blocks go to
	// objects of their own unless mixed.
	run bool
}

func (f *File) packBlockLocked(fbn uint64, d *dirtyBlock) packBlock {
	return packBlock{fbn: fbn, d: d, buf: d.buf, ref: d.ref, crc: d.crc,
		summed: d.crcValid && d.buf != nil && d.ref == nil, run: f.s.classOf(d) == classRun}
}

// packLocked places the given dirty blocks into objects, leaf by leaf, and
// sets their pointers in the map. With final, the last object is part 0 when
// it has room for the index nodes too (reserve metas), otherwise part 0 is
// an object of its own and is returned last with no data. With mixed, runs
// and scattered blocks share objects (a WAL publish is one object, whatever
// it holds); otherwise each class goes to objects of its own.
func (f *File) packLocked(ctx context.Context, fbns []uint64, final, mixed bool) ([]*plannedObject, error) {
	blocks := make([]packBlock, len(fbns))
	for i, fbn := range fbns {
		blocks[i] = f.packBlockLocked(fbn, f.dirty[fbn])
	}
	cno := f.takeCno()
	objs, err := f.layOut(ctx, f.tree, blocks, cno, final, mixed, f.placedLocked)
	if err != nil {
		return nil, err
	}
	f.nameLocked(objs, cno, final)
	if err := f.fill(ctx, f.tree, objs); err != nil {
		return nil, err
	}
	return objs, nil
}

// layOut is packing's first two steps, which need nothing of f guarded by
// mu: blocks (ascending) are inserted in tree with a placeholder, which
// fixes the map's structure (it depends on keys only), and grouped into
// objects leaf by leaf (see packLocked for final and mixed). placed, when
// set, is told of every block the map did not hold before (f.placedLocked,
// when tree is f.tree). The objects are not named yet (nameLocked).
func (f *File) layOut(ctx context.Context, tree *blockmap.Tree, blocks []packBlock, cno uint64, final, mixed bool, placed func(uint64, bool)) ([]*plannedObject, error) {
	// 1. Fix the map's structure.
	fbns := make([]uint64, len(blocks))
	for i, b := range blocks {
		fbns[i] = b.fbn
		added, err := tree.Put(ctx, b.fbn, blockmap.Value{Ptr: segment.Ptr{Cno: cno, Part: placeholderPart}})
		if err != nil {
			return nil, fmt.Errorf("place block %d: %w", b.fbn, err)
		}
		if placed != nil {
			placed(b.fbn, added)
		}
	}
	leaves, err := tree.LeavesFor(ctx, fbns)
	if err != nil {
		return nil, fmt.Errorf("leaves of dirty blocks: %w", err)
	}
	// 2. Group blocks by leaf; scattered groups and runs go to objects of
	// their own (isolation); pack groups into objects.
	type group struct {
		blocks []packBlock
		lo     uint64
		run    bool
	}
	var groups []group
	li := 0
	for i := 0; i < len(blocks); {
		for li+1 < len(leaves) && leaves[li+1].Lo <= blocks[i].fbn {
			li++
		}
		j := i + 1
		for j < len(blocks) && blocks[j].fbn < leaves[li].Hi {
			j++
		}
		// A leaf's blocks split by class only where a run meets scattered
		// blocks; such a leaf then goes into part 0.
		g := blocks[i:j]
		k := 0
		for k < len(g) {
			c := g[k].run
			m := k + 1
			for m < len(g) && g[m].run == c {
				m++
			}
			lo := leaves[li].Lo
			if m-k != len(g) {
				lo = noLeaf
			}
			groups = append(groups, group{blocks: g[k:m], lo: lo, run: c})
			k = m
		}
		i = j
	}
	slices.SortStableFunc(groups, func(a, b group) int {
		switch {
		case a.run == b.run:
			return 0
		case !a.run:
			return -1
		}
		return 1
	})
	maxObj := f.p.MaxObjectBytes
	var objs []*plannedObject
	cur := &plannedObject{}
	for gi, g := range groups {
		groupBytes := int64(len(g.blocks))*(int64(f.bs)+segment.SummaryEntrySize) + int64(f.mbs)
		classBreak := gi > 0 && groups[gi-1].run != g.run && !mixed
		if len(cur.blocks) > 0 && (classBreak || cur.size(f.bs, f.mbs, len(cur.leafLos))+groupBytes > maxObj) {
			objs = append(objs, cur)
			cur = &plannedObject{}
		}
		// A leaf whose data alone is larger than an object is split across
		// objects; its leaf then goes into part 0.
		rest := g.blocks
		for len(rest) > 0 {
			room := (maxObj - cur.size(f.bs, f.mbs, len(cur.leafLos)+1)) / (int64(f.bs) + segment.SummaryEntrySize)
			if room <= 0 {
				objs = append(objs, cur)
				cur = &plannedObject{}
				continue
			}
			take := min(int64(len(rest)), room)
			cur.blocks = append(cur.blocks, rest[:take]...)
			if take == int64(len(rest)) && len(rest) == len(g.blocks) && g.lo != noLeaf {
				cur.leafLos = append(cur.leafLos, g.lo)
			}
			rest = rest[take:]
			if len(rest) > 0 {
				objs = append(objs, cur)
				cur = &plannedObject{}
			}
		}
	}
	if len(cur.blocks) > 0 || final {
		objs = append(objs, cur)
	}
	if final {
		last := objs[len(objs)-1]
		reserve := tree.DirtyNodes() + 1
		if len(last.blocks) > 0 && last.size(f.bs, f.mbs, len(last.leafLos)+reserve) > maxObj {
			objs = append(objs, &plannedObject{})
		}
	}
	return objs, nil
}

// nameLocked names the objects layOut made in checkpoint cno: data parts
// take the next part numbers; with final, the last is part 0.
func (f *File) nameLocked(objs []*plannedObject, cno uint64, final bool) {
	for k, o := range objs {
		if final && k == len(objs)-1 {
			o.name = segment.ObjectName{Cno: cno, Part: 0}
		} else {
			o.name = segment.ObjectName{Cno: cno, Part: f.nextPart}
			f.nextPart++
		}
	}
}

// fill is packing's last step, which needs nothing of f guarded by mu: each
// object takes its blocks' bytes (a block by reference read from its
// source, drawing on the budget), sums those its write did not, and the
// blocks' pointers are set in tree. On an error it returns what it drew.
func (f *File) fill(ctx context.Context, tree *blockmap.Tree, objs []*plannedObject) error {
	for _, o := range objs {
		o.fbns = make([]uint64, len(o.blocks))
		o.bufs = make([][]byte, len(o.blocks))
		o.summary = make([]segment.SummaryEntry, len(o.blocks))
		for s, b := range o.blocks {
			buf, crc := b.buf, b.crc
			if b.ref != nil {
				// A block by reference: the flush reads it from its source.
				f.forceCopy(int64(f.bs))
				o.held += int64(f.bs)
				buf = make([]byte, f.bs)
				if err := b.ref.read(buf); err != nil {
					f.releasePlanned(objs)
					return fmt.Errorf("block %d by reference: %w", b.fbn, err)
				}
			}
			if !b.summed {
				crc = segment.Checksum(buf)
			}
			o.fbns[s] = b.fbn
			o.bufs[s] = buf
			o.summary[s] = segment.SummaryEntry{FBN: b.fbn, CRC: crc}
			v := blockmap.Value{Ptr: segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: uint32(s)}, CRC: crc}
			if err := tree.Set(ctx, b.fbn, v); err != nil {
				f.releasePlanned(objs)
				return fmt.Errorf("place block %d: %w", b.fbn, err)
			}
		}
		o.blocks = nil
	}
	return nil
}

// writePartialLocked writes every dirty block into objects that are not a
// checkpoint (a partial segment), so the dirty tier empties; the writer that
// crossed the limit waits for it. Blocks of objects that fail stay dirty.
func (f *File) writePartialLocked(ctx context.Context) error {
	// Blocks by reference hold no memory: the limits do not apply to them.
	// Busy blocks are being written: they stay dirty for a later segment.
	fbns := slices.DeleteFunc(f.sortedDirty(), func(fbn uint64) bool {
		d := f.dirty[fbn]
		return d.ref != nil || d.busy > 0
	})
	if len(fbns) == 0 {
		return nil
	}
	var c flushCounters
	// The head will name these objects later: a writer marker covers them.
	if err := f.holdWritersLocked(ctx); err != nil {
		return fmt.Errorf("partial segment of %s: %w", f.prefix, err)
	}
	objs, err := f.packLocked(ctx, fbns, false, false)
	if err != nil {
		return fmt.Errorf("partial segment of %s: %w", f.prefix, err)
	}
	// Leaves go with their data, as they are now: if unchanged at the flush,
	// they are reused from here instead of written again.
	for _, o := range objs {
		imgs, err := f.tree.LeavesFor(ctx, o.fbns)
		if err != nil {
			return fmt.Errorf("partial segment of %s: %w", f.prefix, err)
		}
		for _, img := range imgs {
			if slices.Contains(o.leafLos, img.Lo) {
				o.metas = append(o.metas, img.Encoded)
			}
		}
	}
	errs := f.uploadAll(ctx, objs, nil, nil, &c)
	f.releasePlanned(objs)
	var firstErr error
	for k, o := range objs {
		if errs[k] != nil {
			if firstErr == nil {
				firstErr = errs[k]
			}
			continue
		}
		for s, fbn := range o.fbns {
			d := f.dirty[fbn]
			f.s.clearUnsent(fbn)
			f.freeDirtyBuf(d)
			f.undirtyLocked(d)
			delete(f.dirty, fbn)
			f.dirtyB -= int64(f.bs)
			f.written[fbn] = blockmap.Value{Ptr: segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: uint32(s)}, CRC: o.summary[s].CRC}
		}
		for m, enc := range o.metas {
			f.leafImages[xxh3.Hash(enc)] = segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: uint32(m)}
		}
		f.stats.BytesUploaded += o.size(f.bs, f.mbs, 0)
		f.stats.ObjectsWritten++
	}
	f.stats.Partials++
	if errors.Is(firstErr, errNameTaken) {
		f.bumpCno()
		f.skipPastHeadLocked(ctx, &c)
	}
	return firstErr
}

// commitLocked commits the block map into objs, the last of which is part 0:
// leaves go with their data, unchanged leaves are reused from objects
// already stored, the rest and the nodes above the leaves go into part 0.
func (f *File) commitLocked(ctx context.Context, objs []*plannedObject) (*blockmap.Tree, error) {
	return commitTree(ctx, f.tree, objs, f.leafImages)
}

// commitTree is commitLocked of tree (f.tree or the snapshot a flush
// packed into), leaves whose bytes are in leafImages (File.leafImages, or a
// flush's copy of it) being reused from there; it needs nothing of f.
func commitTree(ctx context.Context, tree *blockmap.Tree, objs []*plannedObject, leafImages map[uint64]segment.Ptr) (*blockmap.Tree, error) {
	part0 := objs[len(objs)-1]
	cno := part0.name.Cno
	leafHome := make(map[uint64]*plannedObject)
	for _, o := range objs {
		for _, lo := range o.leafLos {
			leafHome[lo] = o
		}
	}
	place := func(n blockmap.NodeImage) (segment.Ptr, error) {
		if n.Level == 0 {
			if p, ok := leafImages[xxh3.Hash(n.Encoded)]; ok {
				return p, nil
			}
			if o := leafHome[n.Lo]; o != nil {
				o.metas = append(o.metas, n.Encoded)
				return segment.Ptr{Cno: cno, Part: o.name.Part, Slot: uint32(len(o.metas) - 1)}, nil
			}
		}
		part0.metas = append(part0.metas, n.Encoded)
		return segment.Ptr{Cno: cno, Part: 0, Slot: uint32(len(part0.metas) - 1)}, nil
	}
	committed, err := tree.Commit(ctx, place)
	if err != nil {
		return nil, fmt.Errorf("commit block map: %w", err)
	}
	return committed, nil
}

// inodeLocked is the inode of checkpoint cno: the file as it is now, with
// the committed block map.
func (f *File) inodeLocked(cno uint64, committed *blockmap.Tree) segment.Inode {
	return f.inode(inodeOf{cno: cno, size: f.size, format: f.format, parts: f.nextPart, mtime: f.mtime, lineage: f.linCno.Load()}, committed)
}

// inodeOf is what an inode records of the file, taken under mu.
type inodeOf struct {
	cno, lineage uint64
	size         int64
	format       segment.Format
	parts        uint32
	mtime        time.Time
}

// inode is the inode of checkpoint i.cno with the committed block map.
func (f *File) inode(i inodeOf, committed *blockmap.Tree) segment.Inode {
	ino := segment.Inode{
		Cno:           i.cno,
		Size:          uint64(i.size),
		Format:        i.format,
		Height:        uint8(committed.Height()),
		DataBlockSize: uint32(f.bs),
		MetaBlockSize: uint32(f.mbs),
		Parts:         i.parts,
		MtimeNs:       i.mtime.UnixNano(),
		// Built on the head's map, it names the same objects.
		Lineage: i.lineage,
	}
	if committed.Height() > 0 {
		ino.Root = committed.Root()
	}
	return ino
}

// putHead replaces the head with ino, conditionally on etag (the head last
// seen; "" creates it). A precondition failure is checked against the write
// id now on the head before it is called a conflict. A file written with the
// WAL carries in the head's metadata the last WAL record the checkpoint holds
// (wal.HeadMeta); a writer without the WAL carries it forward, so that records a
// checkpoint holds are never replayed over it.
func (f *File) putHead(ctx context.Context, hd segment.Head, etag string, w walMark, c *flushCounters) (string, error) {
	ino := hd.Inode
	hd.FileTag = f.tag
	body, err := segment.EncodeHead(hd)
	if err != nil {
		return "", fmt.Errorf("flush %s: encode head: %w", f.prefix, err)
	}
	id := newWriteID()
	cond := staging.Conditions{IfMatch: etag}
	if etag == "" {
		cond = staging.Conditions{IfNoneMatch: true}
	}
	meta := map[string]string{writeIDMeta: id}
	if w.tracked {
		wal.MarkHead(meta, w.applied)
	}
	c.requests.Add(1)
	info, err := f.st.Put(ctx, volume.HeadKey(f.prefix), body, staging.PutOptions{Conditions: cond, Metadata: meta})
	if err == nil {
		return info.ETag, nil
	}
	// Did it land? A lost answer (resent or not) leaves our id on the head.
	c.requests.Add(1)
	theirs, hinfo, herr := segment.ReadHead(ctx, f.st, volume.HeadKey(f.prefix), f.tag)
	if herr == nil && hinfo.Metadata[writeIDMeta] == id {
		return hinfo.ETag, nil
	}
	if !errors.Is(err, staging.ErrPrecondition) {
		return "", fmt.Errorf("flush %s: write head: %w", f.prefix, err)
	}
	if herr != nil {
		return "", fmt.Errorf("flush %s: write head: %w (and reading it back: %v)", f.prefix, err, herr)
	}
	applied, tracked, _ := wal.HeadApplied(hinfo.Metadata)
	return "", &ConflictError{Prefix: f.prefix, Ours: ino.Cno, Theirs: theirs.Inode, head: theirs, etag: hinfo.ETag, walApplied: applied, walTracked: tracked}
}

// rollbackLocked returns to the winner's checkpoint: what this writer did
// since its head is dropped, so a read shows the winner. A rollback that
// drops changes counts a loss (see Losses).
func (f *File) rollbackLocked(theirs segment.Head, etag string, w walMark) {
	if f.changed || len(f.dirty) > 0 || f.w.failed != nil {
		f.losses.Add(1)
	}
	f.adoptHead(theirs, etag)
	f.wm.Release(math.MaxUint64) // given up
	f.adoptWALMarkLocked(w)
}

// adoptWALMarkLocked takes what the head this writer now builds on says of
// the WAL. A file once written with the WAL stays so: a head that dropped
// the mark would leave the records after it, acknowledged writes of a WAL
// writer whose publish lost to this one, to no opener.
func (f *File) adoptWALMarkLocked(w walMark) {
	f.w.applied = w.applied
	f.w.tracked = f.w.tracked || w.tracked
	f.w.seq = max(f.w.seq, w.applied)
}

// Rollback drops everything written since the last checkpoint this writer
// saw, and reloads the head: reads then show the file as last published.
func (f *File) Rollback(ctx context.Context) error {
	unlock, err := f.lockAll(ctx)
	if err != nil {
		return fmt.Errorf("rollback %s: %w", f.prefix, err)
	}
	defer unlock()
	if err := f.writable(); err != nil {
		return err
	}
	if err := f.s.takeInLocked(ctx, false); err != nil {
		return err
	}
	f.s.rethrowLocked()
	hd, info, err := segment.ReadHead(ctx, f.st, volume.HeadKey(f.prefix), f.tag)
	if errors.Is(err, staging.ErrNotFound) && f.headETag == "" && f.head.Cno == 0 {
		// Created and never published: the file is empty.
		hd, info, err = segment.Head{FileTag: f.tag, Inode: f.head, BlocksKnown: true}, staging.ObjectInfo{}, nil
	}
	if err != nil {
		return fmt.Errorf("rollback %s: %w", f.prefix, err)
	}
	applied, tracked, err := wal.HeadApplied(info.Metadata)
	if err != nil {
		return fmt.Errorf("rollback %s: %w", f.prefix, err)
	}
	f.rollbackLocked(hd, info.ETag, walMark{tracked, applied})
	if err := f.discardWALLocked(ctx); err != nil {
		return fmt.Errorf("rollback %s: %w", f.prefix, err)
	}
	return nil
}

func (e *ConflictError) theirsETag() string { return e.etag }

// walMark is what the winner's head says of the WAL.
func (e *ConflictError) walMark() walMark { return walMark{e.walTracked, e.walApplied} }

// theirsHead is the winner's head as read (its count, its copy of part 0).
func (e *ConflictError) theirsHead() segment.Head {
	if e.head.Inode != e.Theirs {
		return segment.Head{Inode: e.Theirs}
	}
	return e.head
}

// embedPart0 returns part 0 laid out whole for its head to carry, when
// the checkpoint is that one object and small enough (and not a WAL
// publish, whose path stays as it is); nil otherwise. It needs nothing of f
// guarded by mu.
func (f *File) embedPart0(part0 *plannedObject, base, ino *segment.Inode) (*embedObj, error) {
	if f.p.WAL || ino.Parts != 1 || part0.size(f.bs, f.mbs, 0) > f.embedLimit() {
		return nil, nil
	}
	body, err := f.encode(part0, base, ino)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", f.key(part0.name), err)
	}
	obj := make([]byte, body.size)
	body.ReadAt(obj, 0)
	h, err := segment.DecodeObject(f.key(part0.name), obj, part0.name, f.tag, f.format)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", f.key(part0.name), err)
	}
	return &embedObj{name: part0.name, obj: obj, hdr: h}, nil
}

func newWriteID() string { return upload.NewWriteID() }
