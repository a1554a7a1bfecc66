package engine

import "math/bits"

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
