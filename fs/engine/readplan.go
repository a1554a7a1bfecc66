package engine

import (
	"context"
	"fmt"

	"github.com/ckptfs/ckptfs/blockmap"
)

// planLocked plans a read of [off, off+n). With fill, it also copies what does
// not need the store (dirty, cached, holes) into p. With a claim, every block
// it plans to GET is claimed as a flight of its GET, as it is planned, so that
// reads planning at once never both GET it; the caller sends the flights (or
// abandons them). The caller holds mu (shared is enough).
func (f *File) planLocked(ctx context.Context, off, n int64, fill bool, p []byte, claim claimKind) (ReadPlan, error) {
	bs := int64(f.bs)
	first := uint64(off / bs)
	end := uint64((off + n + bs - 1) / bs)
	pl := &readPlanner{f: f, off: off, bs: bs, fill: fill, p: p, claim: claim, next: first}
	err := f.tree.Scan(ctx, first, end, func(fbn uint64, v blockmap.Value) error {
		return pl.block(ctx, fbn, v)
	})
	if err != nil {
		return pl.finish(fmt.Errorf("plan read of %s at %d: %w", f.prefix, off, err))
	}
	pl.holes(end)
	if pl.refErr != nil {
		return pl.finish(fmt.Errorf("read %s at %d: %w", f.prefix, off, pl.refErr))
	}
	return pl.finish(nil)
}

// readPlanner is one read's plan being made: it takes the blocks in order,
// the map's (block) and the holes between them (holes), says where each
// comes from (the dirty tier, a pinned or embedded part 0, a flight, the
// cache, or a GET of its own, merged with the previous block's when they
// lie one after the other in one object), and with fill copies what needs
// no GET into p. It runs under its planLocked call (f.mu held).
type readPlanner struct {
	f     *File
	off   int64 // where the read starts in the file
	bs    int64
	fill  bool
	p     []byte
	claim claimKind

	plan   ReadPlan
	next   uint64      // the next block not yet accounted for
	cur    *PlannedGet // the GET the next block may extend
	curFl  *flight     // cur's flight, when claimed
	tmp    []byte      // a block by reference, read from its source
	refErr error       // the first block by reference that could not be read
}

// finish gives each flight its GET and, on err, abandons them (reads
// waiting for them fetch for themselves).
func (pl *readPlanner) finish(err error) (ReadPlan, error) {
	plan := pl.plan
	// plan.flights and plan.Gets are appended together.
	for i, fl := range plan.flights {
		fl.g = plan.Gets[i]
		fl.end = int64(fl.g.First+uint64(fl.g.Blocks)) * pl.bs
	}
	if err != nil {
		pl.f.rd.abandon(plan.flights, err)
		plan.flights = nil
	}
	return plan, err
}

// fromDirty takes block fbn from the dirty tier.
func (pl *readPlanner) fromDirty(fbn uint64, d *dirtyBlock) {
	pl.plan.Dirty++
	if !pl.fill {
		return
	}
	if d.ref != nil && pl.tmp == nil {
		pl.tmp = make([]byte, pl.bs)
	}
	b, err := d.bytes(pl.tmp)
	if err != nil {
		pl.refErr = fmt.Errorf("block %d by reference: %w", fbn, err)
		return
	}
	copyBlockInto(pl.p, pl.off, fbn, pl.bs, b)
}

// holes accounts for the blocks from next up to upto, which the map does
// not hold: dirty, or holes.
func (pl *readPlanner) holes(upto uint64) {
	for ; pl.next < upto; pl.next++ {
		if d := pl.f.dirty[pl.next]; d != nil {
			pl.fromDirty(pl.next, d)
			continue
		}
		pl.plan.Holes++
		if pl.fill {
			zeroBlockIn(pl.p, pl.off, pl.next, pl.bs)
		}
	}
}

// block accounts for block fbn, which the map holds as v (and for the
// holes before it).
func (pl *readPlanner) block(ctx context.Context, fbn uint64, v blockmap.Value) error {
	f, bs, plan := pl.f, pl.bs, &pl.plan
	pl.holes(fbn)
	pl.next = fbn + 1
	if d := f.dirty[fbn]; d != nil {
		pl.fromDirty(fbn, d)
		return nil
	}
	if b := f.w.pinnedBlock(v.Ptr); b != nil {
		plan.Pinned++
		if pl.fill {
			copyBlockInto(pl.p, pl.off, fbn, bs, b)
		}
		return nil
	}
	if b, err := f.embedBlock(v); err != nil {
		return fmt.Errorf("block %d: %w", fbn, err)
	} else if b != nil {
		plan.Embedded++
		if pl.fill {
			copyBlockInto(pl.p, pl.off, fbn, bs, b)
		}
		return nil
	}
	// Flights first: one landing puts its blocks in the cache before it
	// is forgotten, so a block is never missed in both.
	if sl, ok := f.rd.lookup(keyOf(v)); ok {
		plan.Shared++
		if pl.fill {
			plan.waits = append(plan.waits, flightWait{fbn, sl})
		}
		return nil
	}
	if pl.fill {
		if f.cache.copyInto(v, func(blk []byte) { copyBlockInto(pl.p, pl.off, fbn, bs, blk) }) {
			plan.Cached++
			return nil
		}
	} else if f.cache.has(v) {
		plan.Cached++
		return nil
	}
	return pl.get(ctx, fbn, v)
}

// get plans a GET of block fbn: the current GET extended when the block
// follows it in its object, else a new one; with a claim, the block is
// claimed as a flight of it, unless another read claimed it first.
func (pl *readPlanner) get(ctx context.Context, fbn uint64, v blockmap.Value) error {
	f, bs, plan, cur := pl.f, pl.bs, &pl.plan, pl.cur
	obj := v.Ptr.Object()
	o := dataOffset(f.format, bs, v.Ptr.Slot)
	// Resolved before anything is claimed: a claim is always fetched.
	key, err := f.readKey(ctx, obj)
	if err != nil {
		return err
	}
	merge := cur != nil && cur.Object == obj && cur.Off+cur.Len == o && cur.First+uint64(cur.Blocks) == fbn &&
		cur.Len+bs <= f.p.ReadGetMaxBytes
	var fl *flight
	if pl.claim != claimNone {
		sl := slot{fl: pl.curFl, j: 0}
		if merge {
			sl.j = cur.Blocks
		} else {
			sl.fl = &flight{done: make(chan struct{})}
			if pl.claim == claimAhead {
				sl.fl.ahead, sl.fl.hurry = true, make(chan struct{})
			}
		}
		if theirs, ok := f.rd.claim(keyOf(v), sl); !ok {
			// Another read claimed it since the lookup above.
			plan.Shared++
			if pl.fill {
				plan.waits = append(plan.waits, flightWait{fbn, theirs})
			}
			pl.cur = nil
			return nil
		}
		fl = sl.fl
	}
	if merge {
		cur.Len += bs
		cur.Blocks++
		cur.refs = append(cur.refs, blockRef{fbn, v})
		return nil
	}
	plan.Gets = append(plan.Gets, PlannedGet{
		Key: key, Object: obj, Off: o, Len: bs, First: fbn, Blocks: 1,
		refs: []blockRef{{fbn, v}},
	})
	pl.cur = &plan.Gets[len(plan.Gets)-1]
	if fl != nil {
		plan.flights = append(plan.flights, fl)
		pl.curFl = fl
	}
	return nil
}
