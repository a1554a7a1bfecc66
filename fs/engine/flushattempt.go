package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
)

// flushAttempt is one attempt at publishing a checkpoint on the direct path,
// in steps: plan (pack the dirty blocks, commit the map, build the inode and
// the head), upload the data parts, store part 0, publish the head, and
// adopt the published state. Every step runs with f.mu held (the flush
// holds every block and mu throughout).
type flushAttempt struct {
	f *File
	t *FlushTiming
	c *flushCounters

	objs      []*plannedObject // the last is part 0
	part0     *plannedObject
	cno       uint64
	committed *blockmap.Tree
	base, ino segment.Inode
	hd        segment.Head
	blocks    int64 // the blocks the checkpoint stores

	// embed is the copy of part 0 the head carries (nil: none); p0wait
	// waits for part 0's own PUT, made meanwhile from that copy.
	embed   *embedObj
	p0wait  func() error
	p0Start time.Time
}

// flushAttemptLocked makes one attempt at publishing a checkpoint.
func (f *File) flushAttemptLocked(ctx context.Context, t *FlushTiming, c *flushCounters) error {
	planStart := time.Now()
	objs, err := f.packLocked(ctx, f.sortedDirty(), true, false)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	defer f.releasePlanned(objs)
	a := &flushAttempt{f: f, t: t, c: c, objs: objs}
	if err := a.planLocked(ctx); err != nil {
		return err
	}
	t.Plan = time.Since(planStart)

	// An embedded part 0 this checkpoint builds on is stored first, in
	// parallel with the objects below, before the head (embed.go).
	ensured := f.startEnsureLocked(ctx, c)
	defer ensured()

	// Data parts first, several at once; then part 0; then the head. A
	// small checkpoint of one object sends part 0 and the head at once,
	// the head carrying a copy of part 0.
	if err := a.uploadDataLocked(ctx); err != nil {
		return err
	}
	a.p0Start = time.Now()
	// Whatever happened to part 0, its name is spent.
	spent := a.cno
	defer func() {
		if f.pendingCno == spent {
			f.bumpCno()
		}
	}()
	if err := a.sendPart0Locked(ctx); err != nil {
		return err
	}
	if a.p0wait != nil {
		defer a.p0wait()
	}
	etag, err := a.publishLocked(ctx, ensured)
	if err != nil {
		return err
	}
	a.adoptLocked(etag)
	return nil
}

// planLocked commits the map into the packed objects and builds the
// checkpoint's inode and head.
func (a *flushAttempt) planLocked(ctx context.Context) error {
	f, objs := a.f, a.objs
	if len(objs) > 1 {
		// Data parts come before part 0 and the head: a writer marker
		// covers them (a lone part 0 is followed by its head at once).
		if err := f.holdWritersLocked(ctx); err != nil {
			return fmt.Errorf("flush %s: %w", f.prefix, err)
		}
	}
	part0 := objs[len(objs)-1]
	a.part0, a.cno = part0, part0.name.Cno
	a.t.Cno = a.cno
	committed, err := f.commitLocked(ctx, objs)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	a.committed = committed
	if part0.size(f.bs, f.mbs, 0) > f.p.MaxObjectBytes {
		return fmt.Errorf("flush %s: %w: part 0 would be %d bytes (%d index nodes), over segment_max_object_bytes %d",
			f.prefix, ErrObjectTooLarge, part0.size(f.bs, f.mbs, 0), len(part0.metas), f.p.MaxObjectBytes)
	}
	a.ino = f.inodeLocked(a.cno, committed)
	a.base = f.head
	// The head records the blocks the checkpoint stores; a map opened from
	// a head that did not record them is counted once, here.
	blocks, known := committed.Len()
	if !known {
		if blocks, err = committed.CountLen(ctx); err != nil {
			return fmt.Errorf("flush %s: %w", f.prefix, err)
		}
		f.tree.SetLen(blocks)
	}
	a.blocks = blocks
	a.hd = segment.Head{FileTag: f.tag, Inode: a.ino, BlocksKnown: true, Blocks: uint64(blocks)}
	return nil
}

// uploadDataLocked stores the data parts (every object but part 0), several
// at once.
func (a *flushAttempt) uploadDataLocked(ctx context.Context) error {
	f := a.f
	dataStart := time.Now()
	errs := f.uploadAll(ctx, a.objs[:len(a.objs)-1], nil, nil, a.c)
	a.t.Data = time.Since(dataStart)
	for _, err := range errs {
		if err != nil {
			if errors.Is(err, errNameTaken) {
				f.bumpCno()
			}
			return fmt.Errorf("flush %s: %w", f.prefix, err)
		}
	}
	return nil
}

// sendPart0Locked stores part 0: at once, or, when the head carries a copy
// of it, starts its PUT and leaves it running while the head goes
// (p0wait waits for it).
func (a *flushAttempt) sendPart0Locked(ctx context.Context) error {
	f, c, part0 := a.f, a.c, a.part0
	e, err := f.embedPart0Locked(part0, &a.base, &a.ino)
	if err != nil {
		return fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	if e == nil {
		errs := f.uploadAll(ctx, []*plannedObject{part0}, &a.base, &a.ino, c)
		a.t.Part0 = time.Since(a.p0Start)
		if errs[0] != nil {
			return fmt.Errorf("flush %s: %w", f.prefix, errs[0])
		}
		return nil
	}
	a.embed = e
	a.hd.Embed = e.obj
	c.metaBytes.Add(int64(len(e.obj)) - part0.dataBytes(f.bs))
	body := &objectBody{front: e.obj, size: int64(len(e.obj))}
	done := make(chan error, 1)
	sem := make(chan struct{}, f.p.Concurrency)
	go func() { done <- f.putObject(ctx, f.key(e.name), body, sem, c) }()
	a.p0wait = sync.OnceValue(func() error { return <-done })
	return nil
}

// publishLocked puts the head, once the embedded part 0 this checkpoint
// builds on is stored (ensured) and the writer markers allow it, and
// returns its ETag.
func (a *flushAttempt) publishLocked(ctx context.Context, ensured func() error) (string, error) {
	f, c, t := a.f, a.c, a.t
	if err := ensured(); err != nil {
		return "", fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	// Never a head naming an object that may be gone (writers.go); an
	// embedded part 0 is in the head itself.
	named := a.objs
	if a.embed != nil {
		named = a.objs[:len(a.objs)-1]
	}
	if err := f.verifyWritersLocked(ctx, named); err != nil {
		return "", fmt.Errorf("flush %s: %w", f.prefix, err)
	}
	headStart := time.Now()
	applied := f.w.seq
	etag, err := f.putHead(ctx, a.hd, f.headETag, walMark{f.w.tracked, applied}, c)
	t.Head = time.Since(headStart)
	if a.embed != nil {
		// The head decides; part 0's own PUT only says whether its object
		// must still be stored from the copy before the next head.
		p0err := a.p0wait()
		t.Part0 = time.Since(a.p0Start)
		a.embed.landed = p0err == nil
		if p0err == nil {
			c.dataBytes.Add(a.part0.dataBytes(f.bs))
			c.objects.Add(1)
		} else if err == nil {
			f.log.Warn("checkpoint published in its head; its part 0 is stored before the next one",
				zap.String("file", f.prefix), zap.Uint64("cno", a.cno), zap.Error(p0err))
		}
	}
	if err != nil {
		return "", err
	}
	f.w.applied = applied
	if f.w.log != nil {
		f.w.log.Covered(applied)
	}
	return etag, nil
}

// adoptLocked makes the published checkpoint (its head's ETag etag) the
// state of f: nothing dirty.
func (a *flushAttempt) adoptLocked(etag string) {
	f := a.f
	a.t.StreamSentBytes, a.t.StreamDeadBytes, a.t.StreamFlushBytes = f.s.sentB, f.s.deadB, f.s.flushB
	for _, o := range a.objs {
		f.stats.BytesUploaded += o.size(f.bs, f.mbs, 0)
		f.stats.ObjectsWritten++
	}
	for _, d := range f.dirty {
		f.freeDirtyBuf(d)
	}
	f.endFillsLocked()
	f.dirty = make(map[uint64]*dirtyBlock)
	f.dirtyB = 0
	f.dirtyUnmapped = 0
	f.tree = a.committed
	f.head = a.ino
	f.headETag = etag
	f.headCount = blockCount{cno: a.ino.Cno, n: a.blocks, known: true}
	f.setEmbedLocked(a.embed)
	f.changed = false
	f.resetSince()
	f.wm.Release(a.cno) // the head names what the marker protected
}
