package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/fs/upload"
	"github.com/ckptfs/ckptfs/segment"
)

// flushAttempt is one attempt at publishing a checkpoint on the direct path,
// in steps: plan (pack the dirty blocks into a snapshot of the map, commit
// it, build the inode and the head), send (the writer marker, the data
// parts, part 0, the head), and adopt the published state. Planning and
// adopting run with f.mu held. Sending runs without it when the attempt is
// unlocked (Flush: its caller holds every block shared, so no write, truncate
// or zero changes what is published while reads go on; what the requests
// need of f is taken under mu first), else with mu held throughout (callers
// that hold every block exclusively: a WAL publish, a replay, a copy).
type flushAttempt struct {
	f *File
	t *FlushTiming
	c *flushCounters

	unlocked bool
	// tree is the snapshot of f.tree the blocks are placed in: f.tree
	// stays as it was for reads until the attempt adopts committed.
	tree      *blockmap.Tree
	fbns      []uint64         // the dirty blocks it publishes
	objs      []*plannedObject // the last is part 0
	part0     *plannedObject
	cno       uint64
	committed *blockmap.Tree
	base, ino segment.Inode
	hd        segment.Head
	blocks    int64 // the blocks the checkpoint stores

	// embed is the copy of part 0 the head carries (nil: none); p0wait
	// waits for part 0's own PUT, made meanwhile from that copy, and p0err
	// is what it returned.
	embed   *embedObj
	p0wait  func() error
	p0err   error
	p0Start time.Time
	p0tried bool // part 0 was sent: its name is spent

	// Taken under mu for the requests made without it.
	holdMark   bool   // the writer marker covers the data parts first
	markCno    uint64 // the number it covers
	etag       string // the head this attempt replaces
	mark       walMark
	named      []string     // the keys a lapsed marker checks
	mtime      time.Time    // the mtime the inode records
	ensured    *embedObj    // an embedded part 0 being stored (startEnsure)
	ensureWait func() error // waits for it
	ensureErr  error        // what it returned
}

// flushAttemptLocked makes one attempt at publishing a checkpoint; with h,
// its store requests go without mu (the caller holds flushMu, the blocks h
// says, covering every dirty block, and mu; flushgate.go).
func (f *File) flushAttemptLocked(ctx context.Context, t *FlushTiming, c *flushCounters, h *flushHold) error {
	planStart := time.Now()
	unlocked := h != nil
	var sums map[uint64]uint32
	if unlocked {
		sums = f.precomputeLocked(ctx, h)
	}
	fbns := f.sortedDirty()
	a := &flushAttempt{f: f, t: t, c: c, unlocked: unlocked, tree: f.tree.Snapshot(), fbns: fbns}
	objs, err := f.packIntoLocked(ctx, a.tree, fbns, true, false, sums)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	defer f.releasePlanned(objs)
	a.objs = objs
	if err := a.planLocked(ctx); err != nil {
		return err
	}
	t.Plan = time.Since(planStart)

	// An embedded part 0 this checkpoint builds on is stored first, in
	// parallel with the objects below, before the head (embed.go).
	a.ensured, a.ensureWait = f.startEnsure(ctx, c)

	spent := a.cno
	var g *pubGate
	var aside sinceRecords
	if a.unlocked {
		// Writes past the blocks held go on meanwhile, recording what a
		// merge replays apart (flushgate.go).
		aside = f.takeSinceLocked()
		g = f.openGateLocked(true, h.hi)
	}
	etag, err := a.send(ctx)
	if g != nil {
		f.closeGate(g)
		if err != nil {
			f.putBackSinceLocked(aside, h.hi)
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

// blockSum is a dirty block's checksum computed without mu, valid while the
// block is the same (d) at the same gen.
type blockSum struct {
	fbn uint64
	d   *dirtyBlock
	buf []byte
	gen uint64
	crc uint32
}

// precomputeLocked does without mu what packing would do under it at the
// cost of the checkpoint's size: the checksums of the dirty blocks, and the
// loads of the map's nodes their placement walks (and of every leaf, when
// the map's count is not known; nodes once loaded stay loaded, in f.tree
// too, and a failure is met again under mu). The caller holds mu and blocks
// [0, h.hi), which cover every dirty block: none changes meanwhile, and a
// write past them goes on. Such writes are taken into the hold afterwards
// (their blocks are summed under mu), and a block found changed (another
// dirty block, or its gen moved, while the hold was taken again) is summed
// again. It returns the checksums by block, with mu held.
func (f *File) precomputeLocked(ctx context.Context, h *flushHold) map[uint64]uint32 {
	var todo []blockSum
	var cold []uint64
	for fbn, d := range f.dirty {
		if d.buf != nil {
			todo = append(todo, blockSum{fbn: fbn, d: d, buf: d.buf, gen: d.gen})
		}
		if _, known := f.tree.Peek(fbn); !known {
			cold = append(cold, fbn)
		}
	}
	_, counted := f.tree.Len()
	var snap *blockmap.Tree
	if len(cold) > 0 || !counted {
		snap = f.tree.Snapshot()
	}
	g := f.openGateLocked(true, h.hi)
	for i := range todo {
		todo[i].crc = segment.Checksum(todo[i].buf)
	}
	if f.precomputeHook != nil {
		f.precomputeHook()
	}
	if snap != nil {
		slices.Sort(cold)
		for _, fbn := range cold {
			if _, _, err := snap.Get(ctx, fbn); err != nil {
				break
			}
		}
		if !counted {
			_, _ = snap.CountLen(ctx)
		}
	}
	f.closeGate(g)
	h.sharedLocked(f)
	sums := make(map[uint64]uint32, len(todo))
	for _, b := range todo {
		if d := f.dirty[b.fbn]; d == b.d && d.gen == b.gen && d.buf != nil {
			sums[b.fbn] = b.crc
		}
	}
	return sums
}

// planLocked commits the map into the packed objects and builds the
// checkpoint's inode and head, and takes what sending needs.
func (a *flushAttempt) planLocked(ctx context.Context) error {
	f, objs := a.f, a.objs
	// Data parts come before part 0 and the head: a writer marker covers
	// them (a lone part 0 is followed by its head at once).
	a.holdMark, a.markCno = len(objs) > 1, f.markCnoLocked()
	part0 := objs[len(objs)-1]
	a.part0, a.cno = part0, part0.name.Cno
	a.t.Cno = a.cno
	committed, err := f.commitTreeLocked(ctx, a.tree, objs)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	a.committed = committed
	if part0.size(f.bs, f.mbs, 0) > f.p.MaxObjectBytes {
		return fmt.Errorf("flush %s: %w: part 0 would be %d bytes (%d index nodes), over segment_max_object_bytes %d",
			f.prefix, ErrObjectTooLarge, part0.size(f.bs, f.mbs, 0), len(part0.metas), f.p.MaxObjectBytes)
	}
	a.ino = f.inodeLocked(a.cno, committed)
	a.mtime = f.mtime
	a.base = f.head
	// The head records the blocks the checkpoint stores; a map opened from
	// a head that did not record them is counted once, here (CountLen
	// remembers it in committed).
	blocks, err := committed.CountLen(ctx)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	a.blocks = blocks
	a.hd = segment.Head{FileTag: f.tag, Inode: a.ino, BlocksKnown: true, Blocks: uint64(blocks)}
	e, err := f.embedPart0Locked(part0, &a.base, &a.ino)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	a.embed = e
	// Never a head naming an object that may be gone (writers.go); an
	// embedded part 0 is in the head itself.
	named := objs
	if e != nil {
		named = objs[:len(objs)-1]
	}
	a.named = f.namedKeysLocked(named)
	a.etag = f.headETag
	a.mark = walMark{f.w.tracked, f.w.seq}
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
	if err := f.verifyWriters(ctx, func() []string { return a.named }); err != nil {
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
// the caller frees.
func (a *flushAttempt) adoptLocked(etag string) []*dirtyBlock {
	f := a.f
	a.t.StreamSentBytes, a.t.StreamDeadBytes, a.t.StreamFlushBytes = f.s.sentB, f.s.deadB, f.s.flushB
	for _, o := range a.objs {
		f.stats.BytesUploaded += o.size(f.bs, f.mbs, 0)
		f.stats.ObjectsWritten++
	}
	free := make([]*dirtyBlock, 0, len(a.fbns))
	if len(a.fbns) == len(f.dirty) {
		for _, d := range f.dirty {
			free = append(free, d)
		}
		f.dirty = make(map[uint64]*dirtyBlock)
		f.dirtyB = 0
		f.dirtyUnmapped = 0
		f.s.unsent = make(map[uint64]struct{})
		f.s.unsentB = 0
	} else {
		// Writes past the blocks held made blocks dirty meanwhile: they
		// stay, for the next checkpoint. Those published leave.
		for _, fbn := range a.fbns {
			d := f.dirty[fbn]
			if d.buf != nil {
				f.dirtyB -= int64(f.bs)
			}
			free = append(free, d)
			f.undirtyLocked(d)
			f.s.clearUnsent(fbn)
			delete(f.dirty, fbn)
		}
	}
	f.endFillsLocked()
	f.tree = a.committed
	f.head = a.ino
	f.headETag = etag
	f.headCount = blockCount{cno: a.ino.Cno, n: a.blocks, known: true}
	f.setEmbedLocked(a.embed)
	// What changed while the requests were out (writes past the blocks
	// held, SetMtime) is still to publish, and its records are the only
	// changes since the new head.
	f.changed = !f.mtime.Equal(a.mtime) || len(f.dirty) > 0 || f.size != int64(a.ino.Size)
	if a.unlocked {
		f.resetPending()
	} else {
		f.resetSince()
	}
	f.wm.Release(a.cno) // the head names what the marker protected
	return free
}
