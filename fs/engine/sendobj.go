package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/fs/upload"
	"github.com/ckptfs/ckptfs/segment"
)

// The objects sent ahead (sendahead.go): how blocks are placed in one, how
// its pieces and tail are built and sent, and how it closes.

// fitLocked returns how many of blocks (a prefix) fit in o under limit bytes
// with the leaves they add, one leaf in sixteen spare, and those leaves.
// The blocks are inserted in the map with a placeholder first, which fixes
// the map's structure (it depends on keys only), so the leaves counted are
// the real ones; unsent blocks are dirty, and reads take them from the dirty
// tier whatever their pointer.
func (s *sender) fitLocked(ctx context.Context, o *streamObj, blocks []uint64, limit int64) (int, []uint64, error) {
	f := s.f
	for _, fbn := range blocks {
		added, err := f.tree.Put(ctx, fbn, blockmap.Value{Ptr: segment.Ptr{Cno: o.name.Cno, Part: placeholderPart}})
		if err != nil {
			return 0, nil, fmt.Errorf("place block %d: %w", fbn, err)
		}
		f.placedLocked(fbn, added)
	}
	leaves, err := f.tree.LeavesFor(ctx, blocks)
	if err != nil {
		return 0, nil, err
	}
	have := len(o.leafLos)
	var added []uint64
	n, li := 0, 0
	for n < len(blocks) {
		fbn := blocks[n]
		for li < len(leaves) && fbn >= leaves[li].Hi {
			li++
		}
		extra := 0
		lo := leaves[li].Lo
		if _, ok := o.leafLos[lo]; !ok && (len(added) == 0 || added[len(added)-1] != lo) {
			extra = 1
		}
		if s.objSize(o.n()+n+1, withSpare(have+len(added)+extra)) > limit {
			break
		}
		if extra == 1 {
			added = append(added, lo)
		}
		n++
	}
	return n, added, nil
}

// objSize is the size of an object with n data blocks and m leaves.
func (s *sender) objSize(n, m int) int64 {
	f := s.f
	return int64(n)*(int64(f.bs)+segment.SummaryEntrySize) + int64(m)*int64(f.mbs) + segment.HeaderSize
}

// tailRoom is the room to leave after n data blocks for the tail of an
// object with about m leaves (and the spare).
func (s *sender) tailRoom(n, m int) int {
	f := s.f
	return withSpare(m+1)*f.mbs + n*segment.SummaryEntrySize + segment.HeaderSize
}

// wholeBlocks is how many blocks an arena of whole objects holds (n), and
// the room it leaves after them for the tail: as many consecutive blocks as
// surely fit the target with their leaves. Leaves of blocks appended in
// order are at least half full; a run may straddle a leaf at either end,
// and a spare is kept as fitLocked keeps one. When fitLocked finds fewer
// fit after all, the object is copied as before.
func (s *sender) wholeBlocks() (n, tail int) {
	f := s.f
	target := s.target()
	per := max(blockmap.LeafCapacity(f.mbs)/2, 1)
	leaves := func(n int) int { return withSpare(n/per + 3) }
	most := int((target - segment.HeaderSize) / (int64(f.bs) + segment.SummaryEntrySize))
	n = int((target - segment.HeaderSize - int64(leaves(most))*int64(f.mbs)) / (int64(f.bs) + segment.SummaryEntrySize))
	if n < 1 {
		return 0, 0
	}
	return n, leaves(n)*f.mbs + n*segment.SummaryEntrySize + segment.HeaderSize
}

// withSpare adds the spare leaves: one in sixteen.
func withSpare(m int) int { return m + (m+15)/16 }

// placeLocked puts blocks into o at its next slots: copies them into buf,
// checksums them, notes their gens and sets their pointers.
func (s *sender) placeLocked(ctx context.Context, o *streamObj, blocks []uint64, buf []byte, readRefs bool) ([]pieceRef, error) {
	f := s.f
	bs := int64(f.bs)
	var later []pieceRef
	for i, fbn := range blocks {
		d := f.dirty[fbn]
		slot := uint32(o.n())
		blk := buf[int64(i)*bs : int64(i+1)*bs]
		var crc uint32
		switch {
		case d.ref == nil:
			if &blk[0] != &d.buf[0] { // else the piece is the block's arena slot
				copy(blk, d.buf)
				f.stats.PieceCopyBytes += bs
			}
			if crc = d.crc; !d.crcValid {
				crc = segment.Checksum(blk)
			}
		case readRefs:
			if err := d.ref.read(blk); err != nil {
				return later, fmt.Errorf("place block %d by reference: %w", fbn, err)
			}
			crc = segment.Checksum(blk)
		default:
			// Read by the upload task; its checksum follows with the result.
			later = append(later, pieceRef{idx: i, slot: slot, fbn: fbn, ref: d.ref})
		}
		if d.ref != nil {
			if o.refs == nil {
				o.refs = make(map[uint32]*refSrc)
			}
			o.refs[slot] = d.ref
		}
		o.fbns = append(o.fbns, fbn)
		o.gens = append(o.gens, d.gen)
		o.summary = append(o.summary, segment.SummaryEntry{FBN: fbn, CRC: crc})
		v := blockmap.Value{Ptr: segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: slot}, CRC: crc}
		if err := f.tree.Set(ctx, fbn, v); err != nil {
			return later, fmt.Errorf("place block %d in %s: %w", fbn, f.key(o.name), err)
		}
		d.sent, d.slot = o, slot
		s.clearUnsent(fbn)
	}
	o.dataSent += int64(len(blocks)) * bs
	o.refPending += len(later)
	return later, nil
}

// pieceRef is a block by reference in a piece, read by the upload task.
type pieceRef struct {
	idx  int // block index in the piece
	slot uint32
	fbn  uint64
	ref  *refSrc
}

// readRefs fills a piece's referenced blocks from their sources (in the
// upload task) and returns their checksums.
func readRefs(buf []byte, bs int64, refs []pieceRef) ([]uint32, error) {
	crcs := make([]uint32, len(refs))
	for i, r := range refs {
		blk := buf[int64(r.idx)*bs : int64(r.idx+1)*bs]
		if err := r.ref.read(blk); err != nil {
			return nil, fmt.Errorf("block %d by reference: %w", r.fbn, err)
		}
		crcs[i] = segment.Checksum(blk)
	}
	return crcs, nil
}

// refsReadLocked records the checksums of blocks by reference that an
// upload task read: in the summary, and in the map while the block still
// points where it was sent.
func (s *sender) refsReadLocked(o *streamObj, refs []pieceRef, crcs []uint32) {
	f := s.f
	o.refPending -= len(refs)
	if crcs == nil {
		return
	}
	for i, r := range refs {
		o.summary[r.slot].CRC = crcs[i]
		ptr := segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: r.slot}
		if v, ok, err := f.tree.Get(s.ctx, r.fbn); err == nil && ok && v.Ptr == ptr {
			if err := f.tree.Set(s.ctx, r.fbn, blockmap.Value{Ptr: ptr, CRC: crcs[i]}); err != nil {
				o.ob.Fail(err)
			}
		}
	}
}

// waitRefsLocked waits until every block by reference placed in o has been
// read, so that o's leaves and summary carry their checksums.
func (s *sender) waitRefsLocked(ctx context.Context, o *streamObj) error {

	for o.refPending > 0 {
		if err := s.takeInLocked(ctx, true); err != nil {
			return err
		}
	}
	return nil
}

func (s *sender) newStreamObj(c class) *streamObj {
	f := s.f
	cno := f.takeCno()
	o := &streamObj{name: segment.ObjectName{Cno: cno, Part: f.nextPart}, cls: c,
		leafLos: make(map[uint64]struct{})}
	o.ob = s.tasks.NewObject(sendResult{obj: o})
	f.nextPart++
	s.objs[o] = struct{}{}
	return o
}

// leavesLocked returns the leaves over o's live blocks, as they are now.
func (s *sender) leavesLocked(ctx context.Context, o *streamObj) ([][]byte, error) {
	f := s.f
	var live []uint64
	for i, fbn := range o.fbns {
		if !o.summary[i].Dead {
			live = append(live, fbn)
		}
	}
	slices.Sort(live)
	live = slices.Compact(live)
	imgs, err := f.tree.LeavesFor(ctx, live)
	if err != nil {
		return nil, err
	}
	metas := make([][]byte, len(imgs))
	for i, img := range imgs {
		metas[i] = img.Encoded
	}
	return metas, nil
}

// tailLocked encodes [meta blocks][summary][header] of an object sent
// ahead (a Parted one's header then moves to its front).
func (s *sender) tailLocked(o *streamObj) ([]byte, error) {
	f := s.f
	l := segment.Layout{Format: f.format, DataBlockSize: uint32(f.bs), MetaBlockSize: uint32(f.mbs),
		DataBlocks: uint32(o.n()), MetaBlocks: uint32(len(o.metas))}
	h, err := segment.NewHeader(o.name, f.tag, l, nil, nil)
	if err != nil {
		return nil, err
	}
	hdr, err := segment.EncodeHeader(h)
	if err != nil {
		return nil, err
	}
	tail := make([]byte, 0, len(o.metas)*f.mbs+len(o.summary)*segment.SummaryEntrySize+len(hdr))
	for _, m := range o.metas {
		tail = append(tail, m...)
	}
	tail = append(tail, segment.EncodeSummary(o.summary)...)
	return append(tail, hdr...), nil
}

// sendWholeLocked sends one object holding as many of blocks as fit the
// target, in one request.
func (s *sender) sendWholeLocked(ctx context.Context, c class, blocks []uint64) (int, error) {
	f := s.f
	if err := f.holdWritersLocked(ctx); err != nil {
		return 0, err // nothing placed: the blocks stay unsent
	}
	o := s.newStreamObj(c)
	// An object that is one arena's blocks, in order, is sent as they lie
	// there, its header and tail in the arena's room; one that begins
	// inside an arena ends at its end, so that the next begins with the
	// next arena.
	a, cut := s.wholeArenaLocked(blocks)
	n, added, err := s.fitLocked(ctx, o, blocks[:cut], s.target())
	if err != nil {
		return 0, err
	}
	if n == 0 {
		n = 1 // a target below one block still sends one
	}
	front := 0
	if f.format == segment.FormatParted {
		front = segment.HeaderSize // a Parted object's header comes first
	}
	if a != nil && (n != cut || a.front != front) {
		a = nil
	}
	held := int64(n) * int64(f.bs)
	if a != nil {
		held = 0 // no copy to hold
	} else if s.settling {
		f.forceCopy(held)
	} else if !f.holdCopy(held) {
		delete(s.objs, o)
		return 0, nil // the limits come first: no room for a copy now
	}
	var buf, data []byte
	if a != nil {
		a.refs.Add(1) // the object in flight
		buf, data = a.raw[:a.front+n*f.bs], a.buf
	} else {
		buf = allocPiece(front+int(held), s.tailRoom(n, len(added)))
		data = buf[front:]
	}
	// free gives buf (or the object built on it) back: to the arena, or
	// to the pool unless a store keeps it.
	free := func(body []byte, kept bool) {
		if a != nil {
			if kept && &body[0] == &a.raw[0] {
				a.kept.Store(true)
			}
			a.release()
			return
		}
		if !kept {
			freePiece(body)
		}
	}
	if _, err := s.placeLocked(ctx, o, blocks[:n], data, true); err != nil {
		f.releaseCopy(held)
		free(buf, false)
		s.abandonLocked(ctx, o, err)
		return 0, err
	}
	if s.settling {
		o.flushData = int64(n) * int64(f.bs)
	}
	metas, err := s.leavesLocked(ctx, o)
	if err != nil {
		f.releaseCopy(held)
		free(buf, false)
		s.abandonLocked(ctx, o, err)
		return 0, err
	}
	o.metas = metas
	o.ob.Close()
	if s.objSize(o.n(), len(metas)) > f.p.MaxObjectBytes {
		f.releaseCopy(held)
		free(buf, false)
		o.ob.Fail(fmt.Errorf("object %s given up: its leaves outgrew the spare", f.key(o.name)))
		s.advanceLocked(o)
		return 0, nil // nothing went; stop sending until something changes
	}
	tail, err := s.tailLocked(o)
	if err != nil {
		f.releaseCopy(held)
		free(buf, false)
		return 0, err
	}
	if front > 0 {
		hdr := tail[len(tail)-segment.HeaderSize:]
		copy(buf, hdr)
		tail = tail[:len(tail)-segment.HeaderSize]
	}
	body := append(buf, tail...) // within buf's capacity: no copy
	if a != nil && &body[0] != &a.raw[0] {
		// The leaves outgrew the arena's room: body is a copy, buf is
		// done with.
		free(buf, false)
		a = nil
	}
	key := f.key(o.name)
	s.spawn(o, upload.Whole, func(ctx context.Context) sendResult {
		defer f.releaseCopy(held)
		// One request, the body given up: a store that keeps bodies
		// (memory) keeps it instead of copying it.
		kept, err := f.up.PutGiven(ctx, key, body, &s.requests)
		free(body, kept)
		return sendResult{err: err}
	})
	return n, nil
}

// wholeArenaLocked returns the arena whose slots hold blocks' first ones,
// in order, from its slot 0 to its end (nil if none), and how many of
// blocks the object may take: that arena's, or those up to the end of the
// arena the first block is in (so that the next object begins an arena),
// or all.
func (s *sender) wholeArenaLocked(blocks []uint64) (*arena, int) {
	f := s.f
	if len(blocks) == 0 {
		return nil, 0
	}
	a := f.dirty[blocks[0]].arena
	if a == nil {
		return nil, len(blocks)
	}
	slots := len(a.buf) / a.bs
	i := int(blocks[0] - a.first)
	cut := min(len(blocks), slots-i)
	if i != 0 || cut != slots {
		return nil, cut
	}
	if r, j := s.arenaRunLocked(blocks[:cut], false); r != a || j != 0 {
		return nil, cut
	}
	return a, cut
}

// sendPieceLocked places one piece's worth of blocks into the open object
// of class c (opening one, or closing a full one first). With last, the
// piece may be short and also carries the object's tail: the object closes.
func (s *sender) sendPieceLocked(ctx context.Context, c class, blocks []uint64, last bool) (int, error) {
	f := s.f
	chunk := f.p.ChunkSize
	perPiece := int(chunk / int64(f.bs))
	o := s.open[c]
	n := min(len(blocks), perPiece)
	var added []uint64
	if o != nil {
		// Room for the piece and its leaves, one leaf in sixteen spare; at
		// the flush, as many as fit the object's limit.
		limit := s.target()
		if last {
			limit = f.p.MaxObjectBytes
		}
		fit, add, err := s.fitLocked(ctx, o, blocks[:n], limit)
		if err != nil {
			return 0, err
		}
		if last {
			n, added = fit, add
		} else if fit < n {
			if err := s.closeOpenLocked(ctx, c); err != nil {
				return 0, err
			}
			o = nil
		} else {
			added = add
		}
	}
	if last && o == nil {
		return 0, nil
	}
	if o == nil {
		if err := f.holdWritersLocked(ctx); err != nil {
			return 0, err // nothing placed: the blocks stay unsent
		}
		// The object's first piece (which creates the upload) waits for
		// room as any piece does.
		if err := s.roomLocked(ctx); err != nil {
			return 0, err
		}
		o = s.newStreamObj(c)
		fit, add, err := s.fitLocked(ctx, o, blocks[:n], s.target())
		if err != nil {
			return 0, err
		}
		if fit == 0 {
			delete(s.objs, o)
			return 0, nil
		}
		if fit < n {
			// Even an empty object holds no more than this (scattered blocks
			// bring many leaves): it is sent as one object, closing at once,
			// because a part short of a piece can only be the last.
			last = true
		}
		n, added = fit, add
		// No request under mu: the store's upload is created by the first
		// piece's task; if that fails, the object fails as when a piece
		// does (its blocks go back to unsent).
		o.ob.SetUpload(f.up.Create(f.key(o.name)))
		s.open[c] = o
	}
	held := int64(n) * int64(f.bs)
	var buf []byte
	var free func(kept bool) // kept: the store holds buf, which is never reused
	if a, i := s.arenaRunLocked(blocks[:n], last); a != nil {
		// The blocks as they lie in their arena: no copy to hold.
		buf, held = a.slots(i, n), 0
		free = func(kept bool) {
			if kept {
				a.kept.Store(true)
			}
			a.release()
		}
	} else {
		if last || s.settling {
			// A flush must make progress: its pieces are the stated
			// overhead above the budget.
			f.forceCopy(held)
		} else if !f.holdCopy(held) {
			// The limits come first: no room for a copy, nothing sent now.
			return 0, nil
		}
		extra := 0
		if last {
			extra = s.tailRoom(o.n()+n, len(o.leafLos)+len(added))
		}
		buf = allocPiece(int(held), extra)
		free = func(kept bool) {
			if !kept {
				freePiece(buf)
			}
		}
	}
	later, err := s.placeLocked(ctx, o, blocks[:n], buf, last)
	if err != nil {
		// Blocks of this piece may be placed already, with no bytes sent:
		// the object cannot complete as it is, and is given up.
		f.releaseCopy(held)
		free(false)
		s.abandonLocked(ctx, o, err)
		return 0, err
	}
	for _, lo := range added {
		o.leafLos[lo] = struct{}{}
	}
	if s.settling {
		o.flushData += int64(n) * int64(f.bs)
	}
	if last {
		return n, s.finishLocked(ctx, o, buf, held)
	}
	up := o.ob.Upload()
	part := up.Reserve()
	bs := int64(f.bs)
	s.spawn(o, upload.Piece, func(ctx context.Context) sendResult {
		defer f.releaseCopy(held)
		kept := false
		defer func() { free(kept) }()
		r := sendResult{refs: later}
		if len(later) > 0 {
			if r.crcs, r.err = readRefs(buf, bs, later); r.err != nil {
				return r
			}
		}
		// The piece is given up: a store that keeps bodies (memory) keeps
		// it instead of copying it.
		kept, r.err = up.PartGiven(ctx, part, buf, &s.requests)
		return r
	})
	if o.n() >= int((s.target()-segment.HeaderSize)/int64(f.bs)) {
		return n, s.closeOpenLocked(ctx, c)
	}
	return n, nil
}

// abandonLocked gives up o after a failure while blocks were being placed
// in it: it closes as failed, is aborted once its tasks are in, and every
// block placed in it goes back to the unsent (it is still dirty).
func (s *sender) abandonLocked(ctx context.Context, o *streamObj, err error) {
	f := s.f
	if s.open[o.cls] == o {
		s.open[o.cls] = nil
	}
	o.ob.Fail(fmt.Errorf("object %s given up: %w", f.key(o.name), err))
	o.ob.Close()
	s.advanceLocked(o)
}

// closeOpenLocked closes the open object of class c with its tail.
func (s *sender) closeOpenLocked(ctx context.Context, c class) error {

	o := s.open[c]
	if o == nil {
		return nil
	}
	return s.finishLocked(ctx, o, nil, 0)
}

// finishLocked closes o: its last part is data (may be empty) followed by
// the tail. An object whose leaves outgrew the spare is given up.
func (s *sender) finishLocked(ctx context.Context, o *streamObj, data []byte, held int64) error {
	f := s.f
	s.open[o.cls] = nil
	// Blocks rewritten while o was open may go into the next object.
	for slot, fbn := range o.fbns {
		if o.summary[slot].Dead {
			if d := f.dirty[fbn]; d != nil && d.sent == o && d.slot == uint32(slot) {
				d.sent = nil
				s.markUnsent(fbn)
			}
		}
	}
	// giveUp closes o as failed: it is aborted once its tasks are in, and
	// its blocks stay dirty.
	giveUp := func(err error) {
		f.releaseCopy(held)
		o.ob.Fail(err)
		o.ob.Close()
		s.advanceLocked(o)
	}
	if err := s.waitRefsLocked(ctx, o); err != nil {
		giveUp(err)
		return err
	}
	if err := o.ob.Failed(); err != nil {
		giveUp(err) // a piece failed while we waited
		return nil
	}
	metas, err := s.leavesLocked(ctx, o)
	if err != nil {
		giveUp(err)
		return err
	}
	o.metas = metas
	if s.objSize(o.n(), len(metas)) > f.p.MaxObjectBytes {
		giveUp(fmt.Errorf("object %s given up: its leaves outgrew the spare", f.key(o.name)))
		return nil
	}
	tail, err := s.tailLocked(o)
	if err != nil {
		giveUp(err)
		return err
	}
	body := append(data, tail...) // within data's capacity when data has blocks
	up := o.ob.Upload()
	part := up.Reserve()
	s.spawn(o, upload.Piece, func(ctx context.Context) sendResult {
		defer f.releaseCopy(held)
		defer freePiece(body)
		return sendResult{err: up.Part(ctx, part, body, &s.requests)}
	})
	// Closed only now: the completion must wait for the tail part, which is
	// in flight from here on.
	o.ob.Close()
	return nil
}
