package engine

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
)

// What this writer set since its head, for a merge (see rebaseLocked).
//
// A block that is dirty, stored since the head (File.written) or turned into
// a hole (File.zeroed) is wholly this writer's unless File.partial has an
// entry for it: then only the bytes that entry records are, and the others
// are the head's bytes a read-modify-write (or a truncate's zeroing) copied
// in. A merge takes those other bytes from the winner's block. An entry may
// be empty (a block made dirty by a truncate's zeroing alone), and may exist
// for a block that is none of the three (part of a hole zeroed).
//
// Paths that make a block dirty and do not record it leave the block wholly
// this writer's: the merge then keeps the whole block, as it did before
// this record existed.

// maxZeroAfter bounds the ranges zeroed past this writer's end that it keeps
// for a merge (File.zeroAfter); past it only the lowest offset they reached
// is kept (File.zeroPast), and a merge onto a winner with bytes there gives
// way.
const maxZeroAfter = 16

// interval is bytes [lo, hi): of one block (span) or of the file
// (byteRange).
type interval[T int32 | int64] struct{ lo, hi T }

// byteRange is bytes [lo, hi) of the file.
type byteRange = interval[int64]

// insertInterval returns a new slice of rs (ascending, disjoint, not
// adjoining) with n added: merged with every interval it overlaps or
// adjoins.
func insertInterval[T int32 | int64](rs []interval[T], n interval[T]) []interval[T] {
	out := make([]interval[T], 0, len(rs)+1)
	placed := false
	for _, r := range rs {
		switch {
		case r.hi < n.lo:
			out = append(out, r)
		case n.hi < r.lo:
			if !placed {
				out = append(out, n)
				placed = true
			}
			out = append(out, r)
		default:
			n.lo, n.hi = min(n.lo, r.lo), max(n.hi, r.hi)
		}
	}
	if !placed {
		out = append(out, n)
	}
	return out
}

// noteZeroAfterLocked records that [lo, hi), past this writer's end when it
// was zeroed, reads as zeros: nothing of this writer's is there, but a
// winner of a merge may have bytes there, which zeroing after it clears.
// In serial order this writer's later writes there come after the zeros,
// and a merge lays them over (its bytes set win); its earlier ones cannot
// be there (the range was past its end), unless a truncate since cut them,
// and then the cut goes lower still.
func (f *File) noteZeroAfterLocked(lo, hi int64) {
	if lo >= hi {
		return
	}
	f.edits++
	if f.zeroPast != noTruncate {
		f.zeroPast = min(f.zeroPast, lo) // too many ranges already
		return
	}
	out := insertInterval(f.zeroAfter, byteRange{lo, hi})
	if len(out) > maxZeroAfter {
		f.zeroPast = out[0].lo
		f.zeroAfter = nil
		return
	}
	f.zeroAfter = out
}

// zeroAfterIn returns the parts of the ranges zeroed past this writer's end
// that lie below cut (the winner's bytes past it are gone anyway).
func (f *File) zeroAfterIn(cut int64) []byteRange {
	var out []byteRange
	for _, r := range f.zeroAfter {
		if hi := min(r.hi, cut); r.lo < hi {
			out = append(out, byteRange{r.lo, hi})
		}
	}
	return out
}

// maxSetSpans bounds the spans one block's record keeps; past it the record
// becomes a bitmap of the block's bytes, one bit a byte (a 4 KiB block's is
// 512 bytes), so a block set in many small pieces costs at most that.
const maxSetSpans = 16

// span is bytes [lo, hi) of one block.
type span = interval[int32]

// setBytes is which bytes of one block this writer set since its head.
type setBytes struct {
	spans []span   // ascending, disjoint, not adjoining; unused with bits
	bits  []uint64 // non-nil: bit i is byte i
}

// add records bytes [lo, hi) as set.
func (s *setBytes) add(lo, hi, bs int) {
	if lo >= hi {
		return
	}
	if s.bits != nil {
		setBits(s.bits, lo, hi)
		return
	}
	out := insertInterval(s.spans, span{int32(lo), int32(hi)})
	if len(out) <= maxSetSpans {
		s.spans = out
		return
	}
	s.bits = make([]uint64, (bs+63)/64)
	for _, sp := range out {
		setBits(s.bits, int(sp.lo), int(sp.hi))
	}
	s.spans = nil
}

// cut forgets what is set at or past from (a truncate there).
func (s *setBytes) cut(from int) {
	if s.bits != nil {
		for i := from; i < len(s.bits)*64; {
			if i%64 == 0 {
				s.bits[i/64] = 0
				i += 64
				continue
			}
			s.bits[i/64] &^= 1 << (i % 64)
			i++
		}
		return
	}
	k := 0
	for _, sp := range s.spans {
		if int(sp.lo) >= from {
			break
		}
		sp.hi = min(sp.hi, int32(from))
		s.spans[k] = sp
		k++
	}
	s.spans = s.spans[:k]
}

// empty says whether no byte is set.
func (s *setBytes) empty() bool {
	if s.bits == nil {
		return len(s.spans) == 0
	}
	for _, w := range s.bits {
		if w != 0 {
			return false
		}
	}
	return true
}

// each calls fn for every run of set bytes, ascending.
func (s *setBytes) each(bs int, fn func(lo, hi int)) {
	if s.bits == nil {
		for _, sp := range s.spans {
			fn(int(sp.lo), int(sp.hi))
		}
		return
	}
	for i := 0; i < bs; {
		w := s.bits[i/64] >> (i % 64)
		if w == 0 {
			i += 64 - i%64
			continue
		}
		i += bits.TrailingZeros64(w)
		j := i
		for j < bs && s.bits[j/64]&(1<<(j%64)) != 0 {
			j++
		}
		fn(i, min(j, bs))
		i = j
	}
}

// full says whether every byte of a block of bs bytes is set.
func (s *setBytes) full(bs int) bool {
	if s.bits == nil {
		return len(s.spans) == 1 && s.spans[0].lo == 0 && int(s.spans[0].hi) == bs
	}
	for i := 0; i < bs; i++ {
		if s.bits[i/64]&(1<<(i%64)) == 0 {
			return false
		}
	}
	return true
}

func (s *setBytes) clone() *setBytes {
	c := &setBytes{}
	if s.bits != nil {
		c.bits = append([]uint64(nil), s.bits...)
	} else {
		c.spans = append([]span(nil), s.spans...)
	}
	return c
}

func setBits(b []uint64, lo, hi int) {
	for i := lo; i < hi; {
		if i%64 == 0 && hi-i >= 64 {
			b[i/64] = ^uint64(0)
			i += 64
			continue
		}
		b[i/64] |= 1 << (i % 64)
		i++
	}
}

// ownedLocked says whether block fbn is wholly this writer's since its head.
func (f *File) ownedLocked(fbn uint64) bool {
	if _, ok := f.partial[fbn]; ok {
		return false
	}
	if f.dirty[fbn] != nil {
		return true
	}
	if _, ok := f.written[fbn]; ok {
		return true
	}
	_, ok := f.zeroed[fbn]
	return ok
}

// setUndo is what noteSetLocked changed, for a write that is not applied.
type setUndo struct {
	changed bool
	prev    *setBytes // nil: there was no entry
}

// noteSetLocked records that this writer sets bytes [lo, hi) of block fbn.
// The caller calls it before the change makes the block dirty.
func (f *File) noteSetLocked(fbn uint64, lo, hi int) setUndo {
	f.edits++
	s, part := f.partial[fbn]
	if lo == 0 && hi == f.bs {
		// Wholly ours from now on (the block becomes dirty, or a hole).
		if !part {
			return setUndo{}
		}
		delete(f.partial, fbn)
		return setUndo{changed: true, prev: s}
	}
	if !part && f.ownedLocked(fbn) {
		return setUndo{} // wholly ours already
	}
	u := setUndo{changed: true}
	if part {
		u.prev = s.clone()
	}
	if !part {
		s = &setBytes{}
		if f.partial == nil {
			f.partial = make(map[uint64]*setBytes)
		}
		f.partial[fbn] = s
	}
	s.add(lo, hi, f.bs)
	return u
}

// undoSetLocked puts back what noteSetLocked changed.
func (f *File) undoSetLocked(fbn uint64, u setUndo) {
	if !u.changed {
		return
	}
	if u.prev == nil {
		delete(f.partial, fbn)
		return
	}
	f.partial[fbn] = u.prev
}

// noteTruncateLocked records a truncate to size, whatever the size was: in
// the serial order a merge gives ("their checkpoint, then this writer's
// changes"), it cuts the winner's bytes past size, also when this writer's
// file was that size already or shorter.
// owned is whether the block holding size was wholly ours before the
// truncate zeroed its tail.
func (f *File) noteTruncateLocked(size int64, owned bool) {
	f.edits++
	f.minSize = min(f.minSize, size)
	bs := int64(f.bs)
	keep := uint64((size + bs - 1) / bs)
	for fbn := range f.partial {
		if fbn >= keep {
			delete(f.partial, fbn)
		}
	}
	if in := int(size % bs); in != 0 {
		fbn := uint64(size / bs)
		if s, ok := f.partial[fbn]; ok {
			s.cut(in)
		} else if !owned {
			// The truncate zeroes the block's tail: the rest is not ours.
			if f.partial == nil {
				f.partial = make(map[uint64]*setBytes)
			}
			f.partial[fbn] = &setBytes{}
		}
	}
}

// appendRun is bytes [from, end) of this writer's file: what its appends
// (O_APPEND writes, File.Append) wrote, in order, each at the end the file
// had, with no other change of this writer since the first of them
// (File.edits has not moved since the last: edits). In the serial order a
// merge gives, the appends come after the winner's checkpoint and this
// writer's changes before them, so they land at the end of that file, not
// at from: a merge moves the run there (rebaseLocked).
//
// A change other than an append after the run (a write at an offset, a
// truncate, a zeroed range, a grown size) ends it: its bytes become writes
// at the offsets they have, as every write is, since where the later change
// falls was chosen against them there.
type appendRun struct {
	ok        bool
	from, end int64
	before    int64  // writeEnd before the first append of the run
	edits     uint64 // File.edits after the last append of the run
}

// noteAppendLocked records an append of bytes [off, end), off being the
// file's size (the caller holds mu since it read it and prepared the
// write, which moved edits).
func (f *File) noteAppendLocked(off, end int64, prevEdits uint64, prevWriteEnd int64) {
	a := &f.appends
	if a.ok && a.edits == prevEdits && a.end == off {
		a.end, a.edits = end, f.edits
		return
	}
	*a = appendRun{ok: true, from: off, end: end, before: prevWriteEnd, edits: f.edits}
}

// appendShiftLocked says where a merge onto a winner of size theirs puts
// the run of appends (to), when it moves it: it is kept, it is the last of
// this writer's changes, and the file this writer's changes before it give
// over the winner's ends elsewhere. With a truncate of this writer's among
// those changes the file's size is its own (the run is where it was); else
// it is the larger of the winner's and the furthest end this writer wrote
// before the run.
func (f *File) appendShiftLocked(theirs int64) (to int64, ok bool) {
	a := f.appends
	if !a.ok || a.edits != f.edits || a.end != f.size || f.minSize != noTruncate {
		return 0, false
	}
	to = max(theirs, a.before)
	return to, to != a.from
}

// rebaseLocked merges what this writer did since its head onto the winner's
// checkpoint, as if its changes came after the winner's, in order (see the
// top of this file and docs/design.md, "What a merge gives"): the winner's
// bytes past the lowest size a truncate of this writer gave are cut; a block
// this writer set wholly is its own (dirty blocks stay dirty, blocks already
// stored keep their pointers); a block it set in part takes its other bytes
// from the winner's block, never from the head it started from; the size is
// this writer's when it truncated, otherwise the larger of the winner's and
// the furthest end this writer wrote; the appends this writer made last go
// to that end (appendRun). A failed rebase leaves f as it was.
//
// The steps: the winner's map, cut (cutTheirs); the blocks to look at
// (visitChanged); the run of appends read where it is (readRun); the blocks
// this writer has only in part composed into new buffers (composeBlocks);
// the blocks wholly its own set in the winner's map (applyToTree); and,
// once nothing can fail, f takes it all (adoptLocked).
func (f *File) rebaseLocked(ctx context.Context, theirsHead segment.Head, etag string, w walMark) error {
	r := f.newRebaseLocked(theirsHead)
	err := r.cutTheirs(ctx)
	if err == nil {
		r.visitChanged()
		err = r.readRun(ctx)
	}
	if err == nil {
		err = r.composeBlocks(ctx)
	}
	if err == nil {
		err = r.applyToTree(ctx)
	}
	if err != nil {
		r.free()
		return err
	}
	r.adoptLocked(etag, w)
	return nil
}

// rebase is one rebaseLocked in progress: the winner's map being changed and
// what is composed for it. f changes only in adoptLocked. Its methods are
// called with f.mu held, as rebaseLocked is.
type rebase struct {
	f      *File
	theirs segment.Inode
	count  blockCount
	their  *embedObj // the winner's part 0 in its head, or nil
	t      *blockmap.Tree
	bs     int64
	// cut: their bytes past it do not survive this writer's changes.
	cut int64
	// zeroAfter: the ranges this writer zeroed past its end (zeroAfterIn).
	zeroAfter []byteRange
	// visit: the blocks this writer changed, and those the cut, the ranges
	// zeroed and the run of appends touch.
	visit map[uint64]struct{}

	// The run of appends this writer made last (appendRun): [from, end)
	// goes to [to, newEnd) when shift; runBlocks are its blocks' bytes,
	// read from where it is.
	shift                 bool
	from, end, to, newEnd int64
	runBlocks             map[uint64][]byte

	merged []mergedBlock
}

// mergedBlock is a block that is this writer's only in part (or not at all,
// the cut's), composed into a new buffer before f changes.
type mergedBlock struct {
	fbn  uint64
	buf  []byte // nil: the block is the winner's as it stands, or a hole
	hole bool
	set  *setBytes // this writer's bytes of the block
	run  bool      // a block of the run of appends (inRun)
	ours []byte    // this writer's bytes to lay over buf (set's), or nil
}

// newRebaseLocked opens the winner's map and pins the winner's part 0 if
// its head carries it: the replay may read its nodes and blocks, and ours
// builds on it. (Pinning it leaves reads of this writer's own tree
// unchanged: other names.)
func (f *File) newRebaseLocked(theirsHead segment.Head) *rebase {
	theirs := theirsHead.Inode
	r := &rebase{f: f, theirs: theirs, bs: int64(f.bs),
		count: blockCount{cno: theirs.Cno, n: int64(theirsHead.Blocks), known: theirsHead.BlocksKnown}}
	bo := blockmap.Options{MetaBlockSize: f.mbs}
	if theirs.Height == 0 {
		r.t = blockmap.New(bo, f.loader)
	} else {
		r.t = blockmap.Open(bo, f.loader, theirs.Root, int(theirs.Height))
		if r.count.known {
			r.t.SetLen(r.count.n)
		}
	}
	r.their = embedOf(theirsHead)
	if their := r.their; their != nil {
		meta := their.obj[their.hdr.MetaOffset(0) : their.hdr.MetaOffset(0)+their.hdr.MetaBytes()]
		_ = f.loader.Pin(their.name, their.hdr, meta)
	}
	r.cut = min(int64(theirs.Size), f.minSize)
	return r
}

// cutTheirs drops the winner's blocks past the cut.
func (r *rebase) cutTheirs(ctx context.Context) error {
	if r.cut < int64(r.theirs.Size) {
		if err := r.t.Truncate(ctx, uint64((r.cut+r.bs-1)/r.bs)); err != nil {
			return err
		}
	}
	return nil
}

// visitChanged collects the blocks this writer changed, the one the cut
// falls inside, and the blocks of the ranges this writer zeroed past its
// end: the winner's bytes there are zeroed, then this writer's later ones
// laid over. A block wholly inside one range is a hole.
func (r *rebase) visitChanged() {
	f, bs := r.f, r.bs
	visit := make(map[uint64]struct{}, len(f.dirty)+len(f.written)+len(f.zeroed)+len(f.partial)+1)
	for fbn := range f.dirty {
		visit[fbn] = struct{}{}
	}
	for fbn := range f.written {
		visit[fbn] = struct{}{}
	}
	for fbn := range f.zeroed {
		visit[fbn] = struct{}{}
	}
	for fbn := range f.partial {
		visit[fbn] = struct{}{}
	}
	cutBlock := uint64(r.cut / bs)
	if r.cut < int64(r.theirs.Size) && r.cut%bs != 0 {
		visit[cutBlock] = struct{}{}
	}
	r.zeroAfter = f.zeroAfterIn(r.cut)
	for _, z := range r.zeroAfter {
		for fbn := uint64(z.lo / bs); fbn <= uint64((z.hi-1)/bs); fbn++ {
			visit[fbn] = struct{}{}
		}
	}
	r.visit = visit
}

// readRun places the run of appends this writer made last at the end of the
// file its earlier changes give over the winner's (appendRun): the blocks
// where it is and where it goes are composed anew, its bytes read from
// where it is first.
func (r *rebase) readRun(ctx context.Context) error {
	f, bs := r.f, r.bs
	r.to, r.shift = f.appendShiftLocked(int64(r.theirs.Size))
	r.from, r.end = f.appends.from, f.appends.end
	r.newEnd = r.to + (r.end - r.from)
	if !r.shift {
		return nil
	}
	r.runBlocks = make(map[uint64][]byte)
	var rrefs []blockRef
	var rbufs [][]byte
	for fbn := uint64(r.from / bs); fbn <= uint64((r.end-1)/bs); fbn++ {
		b := make([]byte, f.bs)
		r.runBlocks[fbn] = b
		if d := f.dirty[fbn]; d != nil {
			got, err := d.bytes(b)
			if err != nil {
				return fmt.Errorf("appended block %d: %w", fbn, err)
			}
			copy(b, got)
		} else if w, ok := f.written[fbn]; ok {
			rrefs = append(rrefs, blockRef{fbn: fbn, v: w})
			rbufs = append(rbufs, b)
		} else {
			return fmt.Errorf("appended block %d is neither dirty nor stored", fbn)
		}
		r.visit[fbn] = struct{}{}
	}
	if len(rrefs) > 0 {
		if err := f.fetchBlocks(ctx, rrefs, rbufs); err != nil {
			return fmt.Errorf("appended blocks: %w", err)
		}
	}
	for fbn := uint64(r.to / bs); fbn <= uint64((r.newEnd-1)/bs); fbn++ {
		r.visit[fbn] = struct{}{}
	}
	return nil
}

// inRun says whether block fbn holds bytes of the run of appends where it
// is or where it goes.
func (r *rebase) inRun(fbn uint64) bool {
	lo, hi := int64(fbn)*r.bs, int64(fbn+1)*r.bs
	return r.shift && (lo < r.end && r.from < hi || lo < r.newEnd && r.to < hi)
}

// runSet is what of block fbn, of the run's, is this writer's: its bytes
// before the run, and the run's new place.
func (r *rebase) runSet(fbn uint64) *setBytes {
	f, bs := r.f, r.bs
	start := int64(fbn) * bs
	s := &setBytes{}
	if start < r.from {
		lim := int(min(bs, r.from-start))
		if p, ok := f.partial[fbn]; ok {
			s = p.clone()
			s.cut(lim)
		} else if f.ownedLocked(fbn) {
			s.add(0, lim, f.bs)
		}
	}
	if lo, hi := max(r.to, start), min(r.newEnd, start+bs); lo < hi {
		s.add(int(lo-start), int(hi-start), f.bs)
	}
	return s
}

// placeRun copies the run's bytes that go to block fbn into b.
func (r *rebase) placeRun(fbn uint64, b []byte) {
	bs := r.bs
	start := int64(fbn) * bs
	for pos := max(r.to, start); pos < min(r.newEnd, start+bs); {
		src := pos - r.to + r.from
		n := min(start+bs-pos, bs-src%bs, r.newEnd-pos)
		copy(b[pos-start:pos-start+n], r.runBlocks[uint64(src/bs)][src%bs:])
		pos += n
	}
}

// zeroedIn says whether a range this writer zeroed past its end touches
// block fbn, and whether one covers it whole.
func (r *rebase) zeroedIn(fbn uint64) (touched, whole bool) {
	lo, hi := int64(fbn)*r.bs, int64(fbn+1)*r.bs
	for _, z := range r.zeroAfter {
		if z.lo < hi && lo < z.hi {
			touched = true
			whole = whole || z.lo <= lo && hi <= z.hi
		}
	}
	return touched, whole
}

// composeBlocks composes the blocks that are this writer's only in part (or
// not at all, the cut's) into new buffers: the winner's bytes, cut and
// zeroed where this writer's changes say, with this writer's laid over.
func (r *rebase) composeBlocks(ctx context.Context) error {
	refs, bufs, err := r.collect(ctx)
	if err != nil {
		return err
	}
	if len(refs) > 0 {
		// Their blocks may be in their head's copy of part 0; ours are in
		// objects of the pending checkpoint, never in a head's copy.
		f := r.f
		saved := f.embed
		f.embed = r.their
		err := f.fetchBlocks(ctx, refs, bufs)
		f.embed = saved
		if err != nil {
			return fmt.Errorf("merge onto checkpoint %d: %w", r.theirs.Cno, err)
		}
	}
	r.fill()
	return nil
}

// collect decides, for every block visited that is not wholly this
// writer's, whether it is a hole, the winner's as it stands or composed, and
// returns the reads that composing needs: the winner's block, and this
// writer's stored one.
func (r *rebase) collect(ctx context.Context) ([]blockRef, [][]byte, error) {
	f, bs := r.f, r.bs
	var refs []blockRef
	var bufs [][]byte
	for fbn := range r.visit {
		run := r.inRun(fbn)
		if !run && f.ownedLocked(fbn) {
			continue
		}
		set := f.partial[fbn] // nil for the cut's block untouched here
		if run {
			set = r.runSet(fbn)
		}
		m := mergedBlock{fbn: fbn, set: set, run: run}
		start := int64(fbn) * bs
		var v blockmap.Value
		present := false
		if start < r.cut {
			var err error
			if v, present, err = r.t.Get(ctx, fbn); err != nil {
				return nil, nil, err
			}
		}
		empty := set == nil || set.empty()
		touched, whole := r.zeroedIn(fbn)
		switch {
		case empty && (!present || whole):
			m.hole = true
		case empty && start+bs <= r.cut && !touched:
			// The winner's block as it stands.
		default:
			m.buf = getBlockBuf(f.bs)
			f.forceCopy(bs)
			clear(m.buf)
			if present {
				refs = append(refs, blockRef{fbn: fbn, v: v})
				bufs = append(bufs, m.buf)
			}
			if !empty {
				ob := make([]byte, f.bs)
				if d := f.dirty[fbn]; d != nil {
					b, err := d.bytes(ob)
					if err != nil {
						r.merged = append(r.merged, m)
						return nil, nil, fmt.Errorf("block %d: %w", fbn, err)
					}
					copy(ob, b)
				} else if w, ok := f.written[fbn]; ok {
					refs = append(refs, blockRef{fbn: fbn, v: w})
					bufs = append(bufs, ob)
				}
				m.ours = ob
			}
		}
		r.merged = append(r.merged, m)
	}
	return refs, bufs, nil
}

// fill cuts and zeroes the winner's bytes read into each composed block and
// lays this writer's over them.
func (r *rebase) fill() {
	bs := r.bs
	for _, m := range r.merged {
		if m.buf == nil {
			continue
		}
		start := int64(m.fbn) * bs
		if in := r.cut - start; in > 0 && in < bs {
			clear(m.buf[in:]) // cut
		}
		for _, z := range r.zeroAfter {
			if lo, hi := max(z.lo, start), min(z.hi, start+bs); lo < hi {
				clear(m.buf[lo-start : hi-start])
			}
		}
		if ob := m.ours; ob != nil {
			if m.run {
				r.placeRun(m.fbn, ob)
			}
			m.set.each(r.f.bs, func(lo, hi int) { copy(m.buf[lo:hi], ob[lo:hi]) })
		}
	}
}

// applyToTree sets in the winner's map the blocks wholly this writer's
// (stored blocks keep their pointers, holes stay holes) and the holes
// composing found.
func (r *rebase) applyToTree(ctx context.Context) error {
	f, t := r.f, r.t
	for fbn := range f.zeroed {
		if r.inRun(fbn) {
			continue // merged
		}
		if err := t.Delete(ctx, fbn); err != nil {
			return err
		}
	}
	for fbn, v := range f.written {
		if !f.ownedLocked(fbn) || r.inRun(fbn) {
			continue
		}
		if err := t.Set(ctx, fbn, v); err != nil {
			return err
		}
	}
	for _, m := range r.merged {
		if m.hole {
			if err := t.Delete(ctx, m.fbn); err != nil {
				return err
			}
		}
	}
	return nil
}

// free gives back the buffers composed, after a step failed.
func (r *rebase) free() {
	for _, m := range r.merged {
		if m.buf != nil {
			r.f.freeBlock(m.buf)
		}
	}
}

// adoptLocked makes the merge f's: the composed blocks dirty, the winner's
// map, head and size. Nothing fails here.
func (r *rebase) adoptLocked(etag string, w walMark) {
	f, bs, theirs := r.f, r.bs, r.theirs
	for _, m := range r.merged {
		d := f.dirty[m.fbn]
		delete(f.written, m.fbn)
		if m.run {
			delete(f.zeroed, m.fbn)
			delete(f.partial, m.fbn)
			if m.buf != nil && !m.set.full(f.bs) {
				if f.partial == nil {
					f.partial = map[uint64]*setBytes{}
				}
				f.partial[m.fbn] = m.set
			}
		}
		if m.buf == nil {
			if d != nil {
				f.dropDirtyLocked(m.fbn, d)
			}
			continue
		}
		if d == nil {
			d = &dirtyBlock{}
			f.dirty[m.fbn] = d
			f.dirtyB += bs
		} else {
			f.s.touchLocked(d)
			f.freeDirtyBuf(d)
			if d.buf == nil {
				f.dirtyB += bs
			}
		}
		d.buf, d.ref = m.buf, nil
		if f.sendAheadOn() {
			f.s.markUnsent(m.fbn)
		}
		if _, ok := f.partial[m.fbn]; !ok && !m.run {
			// A block of a range zeroed past this writer's end that it
			// set nothing of: an empty record keeps it the winner's but
			// for the zeros, should another merge come.
			if f.partial == nil {
				f.partial = map[uint64]*setBytes{}
			}
			f.partial[m.fbn] = &setBytes{}
		}
	}
	if r.shift {
		f.writeEnd = max(f.appends.before, r.newEnd)
		f.appends.from, f.appends.end = r.to, r.newEnd
	}
	if f.minSize == noTruncate {
		f.size = max(int64(theirs.Size), f.writeEnd)
	}
	f.foreign.Add(1) // their blocks, where this writer wrote none
	f.tree = r.t
	f.head = theirs
	f.headETag = etag
	f.headCount = r.count
	f.setEmbedLocked(r.their)
	f.adoptWALMarkLocked(w)
	f.pendingCno = max(f.pendingCno, theirs.Cno+1)
	f.changed = true
	// Which dirty blocks the new map lacks (Stat's count of blocks).
	for fbn, d := range f.dirty {
		f.undirtyLocked(d)
		f.markDirtyLocked(fbn, d)
	}
}
