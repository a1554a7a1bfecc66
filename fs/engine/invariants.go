package engine

import "fmt"

// checkInvariants returns an error describing the first broken invariant of
// the dirty accounting (the INVARIANT comments on File, dirtyBlock and
// sender), nil when they all hold. Tests call it between operations: it
// takes mu shared, so no change is half made, and a block being copied by a
// write is one the caller has not returned from.
func (f *File) checkInvariants() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.checkInvariantsLocked()
}

// checkInvariantsLocked is checkInvariants for a caller that holds mu (the
// tests' check at the end of every exclusive hold, testHooks.unlocking).
func (f *File) checkInvariantsLocked() error {
	if f.closed {
		if len(f.dirty) != 0 || f.dirtyB != 0 || f.dirtyUnmapped != 0 {
			return fmt.Errorf("closed file holds %d dirty blocks (%d bytes, %d unmapped)", len(f.dirty), f.dirtyB, f.dirtyUnmapped)
		}
		return nil
	}
	bs := int64(f.bs)
	var bufs, unmapped, busy int64
	for fbn, d := range f.dirty {
		if err := f.checkDirtyBlockLocked(fbn, d); err != nil {
			return err
		}
		if d.buf != nil {
			bufs++
		}
		if d.unmapped {
			unmapped++
		}
		if d.busy > 0 {
			busy++
		}
	}
	if f.dirtyB != bufs*bs {
		return fmt.Errorf("dirtyB is %d, want %d (%d blocks with a buffer of %d)", f.dirtyB, bufs*bs, bufs, bs)
	}
	if f.dirtyUnmapped != unmapped {
		return fmt.Errorf("dirtyUnmapped is %d, want %d", f.dirtyUnmapped, unmapped)
	}
	if len(f.dirty) > 0 && !f.changed && !f.w.overlay && busy < int64(len(f.dirty)) {
		return fmt.Errorf("%d dirty blocks (%d being copied) but the file is not changed", len(f.dirty), busy)
	}
	for fbn := range f.s.unsent {
		d := f.dirty[fbn]
		switch {
		case !f.sendAheadOn():
			return fmt.Errorf("block %d is unsent with sending ahead off", fbn)
		case d == nil:
			return fmt.Errorf("block %d is unsent but not dirty", fbn)
		case d.sent != nil:
			return fmt.Errorf("block %d is unsent but in object %s", fbn, d.sent.name)
		}
	}
	if f.s.unsentB != int64(len(f.s.unsent))*bs {
		return fmt.Errorf("unsentB is %d, want %d (%d unsent blocks)", f.s.unsentB, int64(len(f.s.unsent))*bs, len(f.s.unsent))
	}
	return nil
}

// checkDirtyBlockLocked checks the invariants of one dirty block.
func (f *File) checkDirtyBlockLocked(fbn uint64, d *dirtyBlock) error {
	switch {
	case d == nil:
		return fmt.Errorf("dirty block %d is nil", fbn)
	case d.buf != nil && d.ref != nil:
		return fmt.Errorf("dirty block %d holds both a buffer and a reference", fbn)
	case d.buf == nil && d.ref == nil:
		return fmt.Errorf("dirty block %d holds neither a buffer nor a reference", fbn)
	case d.buf != nil && len(d.buf) != f.bs:
		return fmt.Errorf("dirty block %d: buffer of %d bytes, want %d", fbn, len(d.buf), f.bs)
	case d.arena != nil && (d.buf == nil || fbn < d.arena.first || int(fbn-d.arena.first) >= d.arena.carved ||
		&d.buf[0] != &d.arena.buf[int(fbn-d.arena.first)*f.bs]):
		return fmt.Errorf("dirty block %d is not in its arena's slot %d", fbn, int64(fbn)-int64(d.arena.first))
	case d.arena != nil && d.arena.refs.Load() < 1:
		return fmt.Errorf("dirty block %d holds an arena that is freed", fbn)
	}
	if o := d.sent; o != nil {
		if _, ok := f.s.objs[o]; !ok {
			return fmt.Errorf("dirty block %d is sent in object %s, which is not in flight", fbn, o.name)
		}
		if int(d.slot) >= len(o.fbns) || o.fbns[d.slot] != fbn {
			return fmt.Errorf("dirty block %d is sent in object %s at slot %d, which holds another block", fbn, o.name, d.slot)
		}
	} else if _, ok := f.s.unsent[fbn]; f.sendAheadOn() && !ok {
		return fmt.Errorf("dirty block %d is neither sent nor unsent", fbn)
	}
	return nil
}
