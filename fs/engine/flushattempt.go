package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/fs/upload"
	"github.com/ckptfs/ckptfs/segment"
)

// flushAttempt is one attempt at publishing a checkpoint on the direct path,
// in steps: take what it publishes (the dirty blocks, a snapshot of the map,
// the size and mtime), plan (pack the blocks into the snapshot, commit it,
// build the inode and the head), send (the writer marker, the data parts,
// part 0, the head), and adopt the published state.
//
// An unlocked attempt (Flush) holds mu only to take, and again to adopt:
// its caller holds flushMu and blocks [0, hi) shared, which cover every
// dirty block, so nothing it publishes changes while reads go on and writes
// past hi go on (flushgate.go). It takes the dirty blocks under mu shared,
// in slices of dirtySlice (dirtySliceShared), names its objects in one short
// exclusive hold, and plans and sends without mu. Other attempts hold mu
// throughout (callers that hold every block exclusively: a WAL publish, a
// replay, a copy).
type flushAttempt struct {
	f *File
	t *FlushTiming
	c *flushCounters

	unlocked bool
	// hi: the blocks held; those at hi and past it were written meanwhile
	// and stay dirty.
	hi uint64
	// tree is the snapshot of f.tree the blocks are placed in: f.tree
	// stays as it was for reads until the attempt adopts committed.
	tree      *blockmap.Tree
	blocks    []packBlock      // the dirty blocks it publishes, ascending
	objs      []*plannedObject // the last is part 0
	part0     *plannedObject
	cno       uint64
	committed *blockmap.Tree
	base, ino segment.Inode
	hd        segment.Head
	nblocks   int64 // the blocks the checkpoint stores

	// embed is the copy of part 0 the head carries (nil: none); p0wait
	// waits for part 0's own PUT, made meanwhile from that copy, and p0err
	// is what it returned.
	embed   *embedObj
	p0wait  func() error
	p0err   error
	p0Start time.Time
	p0tried bool // part 0 was sent: its name is spent

	// Taken under mu for the work done without it.
	holdMark   bool   // the writer marker covers the data parts first
	markCno    uint64 // the number it covers
	etag       string // the head this attempt replaces
	mark       walMark
	of         inodeOf                   // what the inode records of the file
	written    map[uint64]blockmap.Value // the records since the head (File.written)
	leafImages map[uint64]segment.Ptr    // File.leafImages
	named      []*plannedObject          // with written and leafImages: what a lapsed marker checks
	ensured    *embedObj                 // an embedded part 0 being stored (startEnsure)
	ensureWait func() error              // waits for it
	ensureErr  error                     // what it returned
}

// dirtySlice is how many dirty blocks an unlocked flush walks per hold of
// mu (shared), letting go of it between slices so that a write waits for
// one slice at most, not for the walk of every dirty block.
const dirtySlice = 4096

// flushAttemptLocked makes one attempt at publishing a checkpoint; with h,
// it holds mu only to take what it publishes and to adopt the result (the
// caller holds flushMu, the blocks h says, covering every dirty block, and
// mu; flushgate.go).
func (f *File) flushAttemptLocked(ctx context.Context, t *FlushTiming, c *flushCounters, h *flushHold) error {
	planStart := time.Now()
	a := &flushAttempt{f: f, t: t, c: c, unlocked: h != nil, hi: math.MaxUint64}
	a.takeLocked()
	var g *pubGate
	var aside sinceRecords
	if a.unlocked {
		// From here writes past the blocks held go on, recording what a
		// merge replays apart (flushgate.go): the checkpoint is the file
		// as it is now, and they stay for the next one.
		a.hi = h.hi
		aside = f.takeSinceLocked()
		a.written = aside.written
		g = f.openGateLocked(true, h.hi)
	}
	spent := a.cno
	defer func() { f.releasePlanned(a.objs) }()
	err := a.plan(ctx)
	var etag string
	if err == nil {
		t.Plan = time.Since(planStart)
		etag, err = a.send(ctx)
	} else if a.ensureWait != nil {
		a.ensureErr = a.ensureWait()
	}
	if g != nil {
		f.closeGate(g)
		if err != nil {
			f.putBackSinceLocked(aside, h.hi, len(f.dirty)-len(a.blocks))
		}
	}
	if a.ensured != nil && a.ensureErr == nil {
		a.ensured.landed = true
	}
	if err != nil {
		// Whatever happened to part 0, its name is spent; a name found
		// taken spends the number too. (Published, the next checkpoint
		// is past the head's.)
		if (a.p0tried || errors.Is(err, errNameTaken)) && f.pendingCno == spent {
			f.bumpCno()
		}
		return err
	}
	f.w.applied = a.mark.applied
	if f.w.log != nil {
		f.w.log.Covered(a.mark.applied)
	}
	free := a.adoptLocked(etag)
	if a.unlocked {
		// The published blocks' buffers go back without mu.
		g := f.openGateLocked(true, h.hi)
		for _, d := range free {
			f.freeDirtyBuf(d)
		}
		f.closeGate(g)
	} else {
		for _, d := range free {
			f.freeDirtyBuf(d)
		}
	}
	return nil
}

// takeLocked takes under mu what the attempt publishes and what planning
// and sending need of f, but the dirty blocks (collect).
func (a *flushAttempt) takeLocked() {
	f := a.f
	a.cno = f.takeCno()
	a.t.Cno = a.cno
	a.markCno = f.markCnoLocked()
	a.tree = f.tree.Snapshot()
	a.base = f.head
	a.of = inodeOf{cno: a.cno, size: f.size, format: f.format, mtime: f.mtime, lineage: f.linCno.Load()}
	a.etag = f.headETag
	a.mark = walMark{f.w.tracked, f.w.seq}
	a.written = f.written
	// Only a partial segment or an object sent ahead adds to it, and
	// neither runs during a flush; a copy keeps that so without mu.
	a.leafImages = f.leafImages
	if a.unlocked {
		a.leafImages = maps.Clone(f.leafImages)
	}
}

// collect returns the dirty blocks the attempt publishes (every dirty block
// when it began), ascending. Unlocked, it holds mu shared a slice at a time
// (dirtySliceShared): blocks made dirty meanwhile are past hi, and those
// below it do not change.
func (a *flushAttempt) collect() []packBlock {
	f := a.f
	var blocks []packBlock
	if !a.unlocked {
		blocks = make([]packBlock, 0, len(f.dirty))
		for fbn, d := range f.dirty {
			blocks = append(blocks, f.packBlockLocked(fbn, d))
		}
	} else {
		f.dirtySliceShared(func(n int) { blocks = make([]packBlock, 0, n) }, func(fbn uint64, d *dirtyBlock) {
			if fbn < a.hi {
				blocks = append(blocks, f.packBlockLocked(fbn, d))
			}
		})
	}
	slices.SortFunc(blocks, func(x, y packBlock) int {
		switch {
		case x.fbn < y.fbn:
			return -1
		case x.fbn > y.fbn:
			return 1
		}
		return 0
	})
	return blocks
}

// plan packs the dirty blocks into objects on the snapshot, commits the
// map into them, and builds the checkpoint's inode and head. Unlocked, it
// runs without mu but to take the blocks (collect) and to name the objects.
func (a *flushAttempt) plan(ctx context.Context) error {
	f := a.f
	a.blocks = a.collect()
	if f.planHook != nil {
		f.planHook()
	}
	objs, err := f.layOut(ctx, a.tree, a.blocks, a.cno, true, false, nil)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	if a.unlocked {
		f.mu.Lock()
	}
	f.nameLocked(objs, a.cno, true)
	a.of.parts = f.nextPart
	// An embedded part 0 this checkpoint builds on is stored first, in
	// parallel with the objects below, before the head (embed.go).
	a.ensured, a.ensureWait = f.startEnsure(ctx, a.c)
	if a.unlocked {
		f.mu.Unlock()
	}
	a.objs = objs
	if err := f.fill(ctx, a.tree, objs); err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	// Data parts come before part 0 and the head: a writer marker covers
	// them (a lone part 0 is followed by its head at once).
	a.holdMark = len(objs) > 1
	part0 := objs[len(objs)-1]
	a.part0 = part0
	committed, err := commitTree(ctx, a.tree, objs, a.leafImages)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	a.committed = committed
	if part0.size(f.bs, f.mbs, 0) > f.p.MaxObjectBytes {
		return fmt.Errorf("flush %s: %w: part 0 would be %d bytes (%d index nodes), over segment_max_object_bytes %d",
			f.prefix, ErrObjectTooLarge, part0.size(f.bs, f.mbs, 0), len(part0.metas), f.p.MaxObjectBytes)
	}
	a.ino = f.inode(a.of, committed)
	// The head records the blocks the checkpoint stores; a map opened from
	// a head that did not record them is counted once, here (CountLen
	// remembers it in committed).
	nblocks, err := committed.CountLen(ctx)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	a.nblocks = nblocks
	a.hd = segment.Head{FileTag: f.tag, Inode: a.ino, BlocksKnown: true, Blocks: uint64(nblocks)}
	e, err := f.embedPart0(part0, &a.base, &a.ino)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	a.embed = e
	// Never a head naming an object that may be gone (writers.go); an
	// embedded part 0 is in the head itself.
	a.named = objs
	if e != nil {
		a.named = objs[:len(objs)-1]
	}
	return nil
}

// send makes the attempt's requests: the writer marker, the data parts
// (several at once), part 0, and the head, which it returns the ETag of. A
// small checkpoint of one object sends part 0 and the head at once, the
// head carrying a copy of part 0. It touches nothing of f guarded by mu, so
// an unlocked attempt calls it without mu; it returns once every request
// it started is done.
func (a *flushAttempt) send(ctx context.Context) (string, error) {
	f, c, t := a.f, a.c, a.t
	defer func() { a.ensureErr = a.ensureWait() }()
	if a.holdMark {
		if err := f.holdWriters(ctx, a.markCno); err != nil {
			return "", fmt.Errorf("flush %s: %w", f.prefix, err)
		}
	}
	dataStart := time.Now()
	errs := f.uploadAll(ctx, a.objs[:len(a.objs)-1], nil, nil, c)
	t.Data = time.Since(dataStart)
	for _, err := range errs {
		if err != nil {
			return "", fmt.Errorf("flush %s: %w", f.prefix, err)
		}
	}
	a.p0Start, a.p0tried = time.Now(), true
	if a.embed == nil {
		errs := f.uploadAll(ctx, []*plannedObject{a.part0}, &a.base, &a.ino, c)
		t.Part0 = time.Since(a.p0Start)
		if errs[0] != nil {
			return "", fmt.Errorf("flush %s: %w", f.prefix, errs[0])
		}
	} else {
		// Part 0's own PUT runs while the head goes.
		e := a.embed
		a.hd.Embed = e.obj
		c.metaBytes.Add(int64(len(e.obj)) - a.part0.dataBytes(f.bs))
		a.p0wait = sync.OnceValue(f.up.Start(ctx, f.key(e.name), upload.Bytes(e.obj), &c.requests))
		defer a.p0wait()
	}
	if err := a.ensureWait(); err != nil {
		return "", fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	if err := f.verifyWriters(ctx, func() []string { return f.namedKeys(a.written, a.leafImages, a.named) }); err != nil {
		return "", fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	headStart := time.Now()
	etag, err := f.putHead(ctx, a.hd, a.etag, a.mark, c)
	t.Head = time.Since(headStart)
	if a.embed != nil {
		// The head decides; part 0's own PUT only says whether its object
		// must still be stored from the copy before the next head.
		a.p0err = a.p0wait()
		t.Part0 = time.Since(a.p0Start)
		a.embed.landed = a.p0err == nil
		if a.p0err == nil {
			c.dataBytes.Add(a.part0.dataBytes(f.bs))
			c.objects.Add(1)
		} else if err == nil {
			f.log.Warn("checkpoint published in its head; its part 0 is stored before the next one",
				zap.String("file", f.prefix), zap.Uint64("cno", a.cno), zap.Error(a.p0err))
		}
	}
	if err != nil {
		return "", err
	}
	return etag, nil
}

// adoptLocked makes the published checkpoint (its head's ETag etag) the
// state of f: the blocks it published are no longer dirty (those written
// past them meanwhile are). It returns the published blocks, whose buffers
// the caller frees. It does not walk the published blocks: the dirty tier
// becomes the blocks written past them, found below the file's end.
func (a *flushAttempt) adoptLocked(etag string) []*dirtyBlock {
	f := a.f
	a.t.StreamSentBytes, a.t.StreamDeadBytes, a.t.StreamFlushBytes = f.s.sentB, f.s.deadB, f.s.flushB
	for _, o := range a.objs {
		f.stats.BytesUploaded += o.size(f.bs, f.mbs, 0)
		f.stats.ObjectsWritten++
	}
	free := make([]*dirtyBlock, len(a.blocks))
	for i, b := range a.blocks {
		free[i] = b.d
	}
	if len(a.blocks) == len(f.dirty) {
		f.dirty = make(map[uint64]*dirtyBlock)
		f.dirtyB = 0
		f.dirtyUnmapped = 0
		f.s.unsent = make(map[uint64]struct{})
		f.s.unsentB = 0
	} else {
		// Writes past the blocks held made blocks dirty meanwhile: they
		// stay, for the next checkpoint. Those published leave.
		f.keepDirtyPastLocked(a.hi, len(f.dirty)-len(a.blocks))
	}
	f.endFillsLocked()
	f.tree = a.committed
	f.head = a.ino
	f.headETag = etag
	f.headCount = blockCount{cno: a.ino.Cno, n: a.nblocks, known: true}
	f.setEmbedLocked(a.embed)
	// What changed while the requests were out (writes past the blocks
	// held, SetMtime) is still to publish, and its records are the only
	// changes since the new head.
	f.changed = !f.mtime.Equal(a.of.mtime) || len(f.dirty) > 0 || f.size != int64(a.ino.Size)
	if a.unlocked {
		f.resetPending()
	} else {
		f.resetSince()
	}
	f.wm.Release(a.cno) // the head names what the marker protected
	return free
}

// keepDirtyPastLocked makes the dirty tier the n dirty blocks at hi and
// past it (dirtyPastLocked), and the accounting theirs: the blocks below hi
// were published.
func (f *File) keepDirtyPastLocked(hi uint64, n int) {
	bs := int64(f.bs)
	past := f.dirtyPastLocked(hi, n)
	unsent := make(map[uint64]struct{})
	f.dirtyB, f.dirtyUnmapped = 0, 0
	for fbn, d := range past {
		if d.buf != nil {
			f.dirtyB += bs
		}
		if d.unmapped {
			f.dirtyUnmapped++
		}
		if _, ok := f.s.unsent[fbn]; ok {
			unsent[fbn] = struct{}{}
		}
	}
	f.dirty = past
	f.s.unsent, f.s.unsentB = unsent, int64(len(unsent))*bs
}

// dirtyPastLocked returns the dirty blocks at hi and past it, n of them
// when the flush holding [0, hi) found the others below hi: blocks written
// past a flush's blocks, each by a write that moved the file's end past it.
// They are looked up below the end when that is not much more than n
// blocks, and found by walking every dirty block otherwise (a write far
// past the end: a sparse file grown meanwhile) or when n was not right.
func (f *File) dirtyPastLocked(hi uint64, n int) map[uint64]*dirtyBlock {
	n = max(n, 0)
	bs := int64(f.bs)
	past := make(map[uint64]*dirtyBlock, n)
	end := uint64((f.size + bs - 1) / bs)
	if end > hi && end-hi <= uint64(4*n+1024) {
		for fbn := hi; fbn < end; fbn++ {
			if d, ok := f.dirty[fbn]; ok {
				past[fbn] = d
			}
		}
	}
	if len(past) != n {
		clear(past)
		for fbn, d := range f.dirty {
			if fbn >= hi {
				past[fbn] = d
			}
		}
	}
	return past
}
