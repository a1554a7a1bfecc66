package test

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/test/campaign"
)

// The campaign's model of a driver's directory (docs/campaign.md, "The
// model"): what each file may hold, built from the driver's log, and the
// checks of what the driver read while it ran.

// mfile is the model of one file of a driver.
type mfile struct {
	states [][]byte // content after each change
	by     []*campaign.Op
	acked  int // index in states of the acknowledged state
	// uncertain: the op in flight at the end changed this file: its state
	// is the last one and may or may not have happened.
	uncertain bool
	// open: the home mount has it open (between an open and a close).
	open bool
	// mode is its permission bits (0: not known); modeAlt the ones a chmod
	// in flight at the end would have set.
	mode, modeAlt uint32
	// xattr is its attribute campaign.Xattr ("" when it has none);
	// xattrAlt the value an xattr change in flight at the end would have
	// left, when altXattr.
	xattr, xattrAlt string
	altXattr        bool
	// The other mount's engine of the file shows the version its last open
	// there showed: otherSeen when known, else one of states
	// otherFrom..otherTo (a held descriptor reads it).
	otherKnown         bool
	otherSeen          []byte
	otherFrom, otherTo int
	// cnos maps a checkpoint number logged after an fsync or close to the
	// state it holds; stale: the states were rewritten by a merge since.
	// unknown: numbers the driver logged whose state the model cannot say
	// (the home mount's number while it shows its own view of a file the
	// other mount changed): a read of one is not checked.
	cnos    map[int64]int
	stale   bool
	unknown map[int64]bool
	// byOther: a copy through the other mount made it. With the WAL that
	// mount holds the lease until its close's publish, in the background,
	// ends: the home mount's writes meanwhile wait, the lease saying it is
	// closing, and get EBUSY only when that mark came later than a second
	// (its write met the proxy's faults).
	byOther bool
	// copying: a copy in flight at the end made it; it may hold a prefix
	// of one of prefixOf (the kernel copies bytes in pieces).
	copying  bool
	prefixOf [][]byte
	// alt is the file's history if the other mount's change in flight at
	// the end happened (a merge rewrites the states after it).
	alt *mfile
	// choices are the other histories still possible after the other
	// mount changed a file the home mount had changes of: the home mount
	// may have published some of them before (memory pressure publishes
	// without being asked). The home mount's next read tells which.
	choices []*mfile
	// view, when viewSet, is what the home mount's descriptor shows while
	// its engine has not taken the other mount's checkpoint (it published
	// all it had before that change, so its fsync had nothing to merge);
	// viewDirty: it changed the file since, so its next flush merges.
	view               []byte
	viewSet, viewDirty bool
	// closedLag: the home mount closed the file while its view lagged the
	// other mount's checkpoint (viewSet): until the next open, a stat of
	// the closed file (user.ckptfs.cno) may answer from that view, cached
	// for the head cache's TTL (ns_refresh, 1 s at least).
	closedLag bool
	// anyOf are contents the file may also hold after the kill: those an
	// optional operation in flight at the end may have left.
	anyOf [][]byte
	// partialOf are writes in flight at the end that the file may hold a
	// part of (partialMatch): the kernel hands the mount a write through
	// its page cache a page at a time, and a kill between two leaves the
	// first.
	partialOf []partialWrite
	// mPending are the plain mount's changes not flushed yet (walmix): the
	// file may hold any state from the acknowledged one with them applied.
	mPending []*campaign.Op
}

func newMfile(first []byte, op *campaign.Op, mode uint32) *mfile {
	return &mfile{states: [][]byte{first}, by: []*campaign.Op{op}, mode: mode, cnos: map[int64]int{}}
}

func (f *mfile) cur() []byte { return f.states[len(f.states)-1] }

func (f *mfile) last() int { return len(f.states) - 1 }

func (f *mfile) push(b []byte, op *campaign.Op) {
	f.states = append(f.states, b)
	f.by = append(f.by, op)
}

// holder is a file that had a name, and the first state it may have shown
// under it (the acknowledged one when it lost the name).
type holder struct {
	f    *mfile
	from int
}

// nsView is a driver's directory: whether it exists and its names.
type nsView struct {
	dir   bool
	names map[string]*mfile
	// past lists, per name, the files that had it before (a mount whose
	// view lags may still lead there).
	past map[string][]holder
	// ghosts: per name, the files that had it in the last iteration,
	// where the read-only mount C's kernel entries may still lead.
	ghosts map[string][]holder
}

func (v nsView) clone() nsView {
	n := nsView{dir: v.dir, names: make(map[string]*mfile, len(v.names)), past: make(map[string][]holder, len(v.past)), ghosts: v.ghosts}
	for k, f := range v.names {
		n.names[k] = f
	}
	for k, h := range v.past {
		n.past[k] = append([]holder(nil), h...)
	}
	return n
}

// drop removes name, remembering its file.
func (v *nsView) drop(name string) {
	if f := v.names[name]; f != nil {
		if v.past == nil {
			v.past = map[string][]holder{}
		}
		v.past[name] = append(v.past[name], holder{f, f.acked})
		delete(v.names, name)
	}
}

func crc(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// cands calls yield with each content file f may show from state from to
// state to: those states and, when partial, a write among them applied in
// part (cut at a page boundary: the kernel hands a write to the mount in
// pieces of whole pages, and a periodic flush may fall between two).
func cands(f *mfile, from, to int, partial bool, wantLen int64, yield func([]byte) bool) {
	for k := from; k <= to; k++ {
		if wantLen >= 0 && int64(len(f.states[k])) != wantLen {
			continue
		}
		if !yield(f.states[k]) {
			return
		}
	}
	if !partial {
		return
	}
	for k := from + 1; k <= to; k++ {
		op := f.by[k]
		if op == nil || !isWrite(op.Kind) {
			continue
		}
		prev, next := f.states[k-1], f.states[k]
		off, n := op.Int(1), op.Int(2)
		for p := (off/4096 + 1) * 4096; p < off+n; p += 4096 {
			if wantLen >= 0 && max(int64(len(prev)), p) != wantLen {
				continue
			}
			b := make([]byte, max(int64(len(prev)), p))
			copy(b, prev)
			copy(b[:p], next[:p])
			if !yield(b) {
				return
			}
		}
	}
}

// find returns the content among cands(f, from, to, partial) for which
// want(content) is true; wantLen, when not negative, is the length it must
// have.
func find(f *mfile, from, to int, partial bool, wantLen int64, want func([]byte) bool) ([]byte, bool) {
	var got []byte
	ok := false
	cands(f, from, to, partial, wantLen, func(b []byte) bool {
		if want(b) {
			got, ok = b, true
			return false
		}
		return true
	})
	return got, ok
}

// sumIs reports whether b has length n and CRC-32C sum, as logged.
func sumIs(b []byte, n, sum string) bool {
	return strconv.Itoa(len(b)) == n && strconv.FormatUint(uint64(crc(b)), 10) == sum
}

// window is what a copy of n bytes from off of src to dstOff of a new file
// holds, and how many bytes it copied.
func window(src []byte, off, n, dstOff int64) ([]byte, int64) {
	if off >= int64(len(src)) {
		return nil, 0
	}
	k := min(n, int64(len(src))-off)
	b := make([]byte, dstOff+k)
	copy(b[dstOff:], src[off:off+k])
	return b, k
}

// applyChange returns b with the change op made (a write or a truncate,
// through either mount, or an open with O_TRUNC).
func (c *campaignRun) applyChange(b []byte, op *campaign.Op) []byte {
	switch op.Kind {
	case "set":
		return bytes.Clone(op.Data)
	case "write", "owrite", "mwrite", campaign.OpROCreat:
		off, n := op.Int(1), op.Int(2)
		nb := make([]byte, max(int64(len(b)), off+n))
		copy(nb, b)
		copy(nb[off:], campaign.Pattern(c.curDriver, op.Seq, off, int(n)))
		return nb
	case "trunc", "otrunc":
		nb := make([]byte, op.Int(1))
		copy(nb, b)
		return nb
	case "falloc", "ofalloc":
		return fallocated(b, uint32(op.Int(1)), op.Int(2), op.Int(3))
	case "open":
		return nil
	}
	return b
}

// fallocated returns b after fallocate(2) of mode over [off, off+n): the
// size grows to off+n unless the mode keeps it; a punched or zeroed range
// reads as zeros, a plain allocation leaves the bytes as they were.
func fallocated(b []byte, mode uint32, off, n int64) []byte {
	size := int64(len(b))
	if mode&unix.FALLOC_FL_KEEP_SIZE == 0 {
		size = max(size, off+n)
	}
	nb := make([]byte, size)
	copy(nb, b)
	if mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 && off < size {
		clear(nb[off:min(off+n, size)])
	}
	return nb
}

// rebased is f's history after the other mount's change op: the home mount
// had published state a (the acknowledged one, or a later one that memory
// pressure published), the other mount changed that and published, and the
// home mount's changes since state a follow in order at its next flush (a
// merge is serial: their checkpoint, then this writer's changes;
// docs/design.md, "What a merge gives"). When a is the current state the
// home mount has nothing to merge: its descriptor goes on showing its own
// state (view) until it changes the file and flushes.
func (c *campaignRun) rebased(f *mfile, op *campaign.Op, a int) *mfile {
	g := *f
	g.states = append([][]byte(nil), f.states[:a+1]...)
	g.by = append([]*campaign.Op(nil), f.by[:a+1]...)
	g.push(c.applyChange(f.states[a], op), op)
	for k := a + 1; k <= f.last(); k++ {
		g.push(c.applyChange(g.cur(), f.by[k]), f.by[k])
	}
	g.acked = a + 1
	g.otherKnown, g.otherSeen = true, g.states[a+1]
	g.stale = true
	g.alt, g.choices = nil, nil
	if a == f.last() {
		g.view, g.viewSet, g.viewDirty = f.cur(), true, false
	}
	return &g
}

// rebasings is the histories the other mount's change op may have given f
// (rebased, for each state the home mount may have published last); the
// first is the one where it published nothing since its acknowledged state.
func (c *campaignRun) rebasings(f *mfile, op *campaign.Op) *mfile {
	g := c.rebased(f, op, f.acked)
	for a := f.acked + 1; a <= f.last(); a++ {
		g.choices = append(g.choices, c.rebased(f, op, a))
	}
	return g
}

// narrow keeps, of f's histories still possible (f and its choices), those
// a result tells possible: f becomes the first, the others its choices
// (several may give the same result now and differ later). When none is,
// f stays as it was, for its check to report.
func narrow(f *mfile, possible func(*mfile) bool) {
	if len(f.choices) == 0 {
		return
	}
	var keep []mfile
	for _, g := range append([]*mfile{f}, f.choices...) {
		if possible(g) {
			keep = append(keep, *g)
		}
	}
	if len(keep) == 0 {
		return
	}
	*f = keep[0]
	f.choices = nil
	for i := range keep[1:] {
		g := keep[1+i]
		g.choices = nil
		f.choices = append(f.choices, &g)
	}
}

// homeView is what the home mount's descriptor of f shows.
func (f *mfile) homeView() []byte {
	if f.viewSet {
		return f.view
	}
	return f.cur()
}

// c2o is the range of states an open that starts now on another mount may
// show (close-to-open): from the acknowledged state on, with a write after
// it in part (a periodic flush); with the WAL, every change is
// acknowledged and its records are read: the current state.
func (c *campaignRun) c2o(f *mfile) (from, to int, partial bool) {
	if c.wal {
		return f.last(), f.last(), false
	}
	return f.acked, f.last(), true
}

// apply applies op to the view. uncertain: the op is the one in flight at
// the end (it may or may not have happened). It reports false when the log
// cannot be followed (a failure is reported).
func (c *campaignRun) apply(op *campaign.Op, v *nsView, uncertain bool, fail func(string, ...any)) bool {
	name := ""
	if len(op.Args) > 0 {
		name = op.Args[0]
	}
	f := v.names[name]
	needFile := func() bool {
		if f == nil {
			fail("%v: the model has no file %s", op, name)
			return false
		}
		return true
	}
	change := func(b []byte) {
		// A change in flight at the end is the file's last state, never
		// acknowledged: the file may hold it or the one before. It is
		// made in every history still possible (choices).
		for i, g := range append([]*mfile{f}, f.choices...) {
			if i > 0 {
				b = c.applyChange(g.cur(), op)
			}
			if g.viewSet {
				g.view, g.viewDirty = c.applyChange(g.view, op), true
			}
			g.push(b, op)
			g.uncertain = uncertain
			if c.wal && !uncertain {
				g.acked = g.last()
			}
		}
	}
	// result checks a logged <len> <crc32c> at result index i against the
	// contents in range; it returns the content matched.
	result := func(g *mfile, i int, from, to int, partial bool, what string) ([]byte, bool) {
		n, sum := op.Result[i], op.Result[i+1]
		b, ok := find(g, from, to, partial, parseInt(n), func(b []byte) bool { return sumIs(b, n, sum) })
		if !ok {
			fail("%v: %s gave %s bytes with crc32c %s, none of the states %d..%d (%s)", op, what, n, sum, from, to, g.history())
		}
		return b, ok
	}
	switch op.Kind {
	case "mkdir":
		v.dir = true
	case "open":
		create, trunc := op.Int(1) == 1, op.Int(2) == 1
		if create {
			if f != nil {
				fail("%v: created over an existing file of the model", op)
				return false
			}
			f = newMfile(nil, op, c.createMode)
			v.names[name] = f
		} else if !needFile() {
			return false
		}
		for _, g := range append([]*mfile{f}, f.choices...) {
			g.open = true
			g.closedLag = false
		}
		if trunc && !create {
			// A state even when the file was empty: a merge replays the
			// truncate over the other writer's checkpoint, cutting its
			// bytes. (A create's O_TRUNC truncates nothing: the file is
			// new.)
			change(nil)
		}
	case "write", "trunc", "falloc":
		if !needFile() {
			return false
		}
		change(c.applyChange(f.cur(), op))
		switch {
		case uncertain:
		case op.Kind == "write":
			c.stats.writes++
			c.stats.bytesWritten += op.Int(2)
		case op.Kind == "falloc":
			c.stats.fallocs++
		}
	case "fsync", "close":
		if !needFile() {
			return false
		}
		for _, g := range append([]*mfile{f}, f.choices...) {
			if uncertain {
				continue
			}
			if op.Kind == "close" && g.viewSet && !g.viewDirty {
				g.closedLag = true
			}
			if op.Kind == "close" || g.viewDirty {
				g.viewSet = false // merged, or the next open reads afresh
			}
			if op.Kind == "close" {
				g.open = false
			}
			g.acked = g.last()
		}
		if !uncertain {
			c.stats.fsyncs++
		}
	case "cno":
		if uncertain {
			return true
		}
		if !needFile() {
			return false
		}
		cno := parseInt(op.Result[0])
		if cno == 0 {
			return true // never published (not listed)
		}
		if f.viewSet || f.closedLag {
			// The home mount's own checkpoint under the other mount's
			// (or, closed since, its stat's cached answer from that view).
			if f.unknown == nil {
				f.unknown = map[int64]bool{}
			}
			f.unknown[cno] = true
			return true
		}
		if k, ok := f.cnos[cno]; ok && !bytes.Equal(f.states[k], f.cur()) {
			fail("%v: checkpoint %d was logged before for another state (%d, now %d): a checkpoint changed (%s)", op, cno, k, f.last(), f.history())
			return false
		}
		f.cnos[cno] = f.last()
	case "read":
		if uncertain {
			return true
		}
		if !needFile() {
			return false
		}
		n, sum := op.Result[0], op.Result[1]
		// The read tells which histories the merge may have taken.
		narrow(f, func(g *mfile) bool { return sumIs(g.homeView(), n, sum) })
		want := f.homeView()
		if !sumIs(want, n, sum) {
			fail("%v: read %s bytes with crc32c %s through the open file, want %d bytes with crc %d: a read gave bytes the file does not hold (%s)",
				op, n, sum, len(want), crc(want), f.history())
			return false
		}
	case "oread":
		if uncertain {
			return true
		}
		if !needFile() {
			return false
		}
		// Of the histories still possible, those this read can be a state of.
		narrow(f, func(g *mfile) bool {
			from, to, partial := c.c2o(g)
			_, ok := find(g, from, to, partial, parseInt(op.Result[0]), func(b []byte) bool { return sumIs(b, op.Result[0], op.Result[1]) })
			return ok
		})
		from, to, partial := c.c2o(f)
		b, ok := result(f, 0, from, to, partial, "an open through the other mount (close-to-open)")
		if !ok {
			f.otherKnown, f.otherFrom, f.otherTo = false, from, to
			return false
		}
		if op.Result[2] != op.Result[0] {
			fail("%v: fstat of the new descriptor says %s bytes, its read gave %s", op, op.Result[2], op.Result[0])
			return false
		}
		f.otherKnown, f.otherSeen = true, b
		c.stats.crossReads++
	case "hread":
		if uncertain {
			return true
		}
		if !needFile() {
			return false
		}
		// Of the histories still possible, those whose other mount's
		// engine can show this.
		narrow(f, func(g *mfile) bool {
			if g.otherKnown {
				return sumIs(g.otherSeen, op.Result[0], op.Result[1])
			}
			_, ok := find(g, g.otherFrom, g.otherTo, !c.wal, parseInt(op.Result[0]), func(b []byte) bool { return sumIs(b, op.Result[0], op.Result[1]) })
			return ok
		})
		if f.otherKnown {
			if !sumIs(f.otherSeen, op.Result[0], op.Result[1]) {
				fail("%v: a descriptor held on the other mount read %s bytes with crc32c %s, not the version its mount's last open showed (%d bytes, crc %d): %s",
					op, op.Result[0], op.Result[1], len(f.otherSeen), crc(f.otherSeen), f.history())
				return false
			}
		} else if _, ok := result(f, 0, f.otherFrom, f.otherTo, !c.wal, "a descriptor held on the other mount"); !ok {
			return false
		}
		c.stats.heldReads++
	case "hclose":
	case "ocreat":
		if uncertain {
			return true
		}
		if !needFile() {
			return false
		}
		if op.Result[0] != op.Result[1] {
			fail("%v: open(O_CREAT) without O_EXCL through the other mount opened inode %s, the home mount's file is inode %s", op, op.Result[0], op.Result[1])
			return false
		}
		f.otherKnown, f.otherFrom, f.otherTo = false, f.acked, f.last()
		if c.wal {
			f.otherFrom = f.last()
		}
		c.stats.crossCreates++
	case "ostale", "cread":
		if op.Kind == "ostale" {
			// The other mount's open may have reached a file that had
			// the name in its lagging view, and read its head again
			// before it answered (an ESTALE the kernel retried, on the
			// file the name leads to now, or on none: noent): a
			// descriptor held there on that file may show any of its
			// states since, in any history still possible.
			for _, h := range v.past[name] {
				for _, g := range append([]*mfile{h.f}, h.f.choices...) {
					g.otherKnown, g.otherFrom, g.otherTo = false, 0, g.last()
				}
			}
		}
		if uncertain || op.Result[0] == "noent" {
			return true
		}
		// The name may still lead to the file that has it now or to one
		// that had it: a lagging view. Never to bytes none of them held.
		var hs []holder
		if f != nil {
			from, _, _ := c.c2o(f)
			hs = append(hs, holder{f, from})
		}
		hs = append(hs, v.past[name]...)
		if op.Kind == "cread" {
			hs = append(hs, v.ghosts[name]...)
		}
		for _, h := range hs {
			// In any history of the file still possible (a merge's).
			for _, g := range append([]*mfile{h.f}, h.f.choices...) {
				if _, ok := find(g, min(h.from, g.last()), g.last(), true, parseInt(op.Result[0]), func(b []byte) bool { return sumIs(b, op.Result[0], op.Result[1]) }); ok {
					if op.Kind == "ostale" && h.f == f {
						f.otherKnown, f.otherFrom, f.otherTo = false, h.from, f.last()
					}
					c.stats.staleReads++
					return true
				}
			}
		}
		since := "the iteration began"
		if op.Kind == "cread" {
			since = "the iteration before began"
		}
		fail("%v: gave %s bytes with crc32c %s, a state of no file that had the name %s since %s", op, op.Result[0], op.Result[1], name, since)
		return false
	case "ckpt":
		if uncertain {
			return true
		}
		if !needFile() {
			return false
		}
		return c.checkCheckpoint(op, f, fail)
	case "chmod":
		if !needFile() {
			return false
		}
		m, err := strconv.ParseUint(op.Args[1], 8, 32)
		if err != nil {
			fail("%v: bad mode", op)
			return false
		}
		// In every history still possible: a read that tells them apart
		// later keeps one of them.
		for _, g := range append([]*mfile{f}, f.choices...) {
			if uncertain {
				g.modeAlt = uint32(m)
			} else {
				g.mode = uint32(m)
			}
		}
		if !uncertain {
			c.stats.chmods++
		}
	case "xattr":
		if !needFile() {
			return false
		}
		value := op.Args[1]
		if value == "-" {
			value = ""
		}
		for _, g := range append([]*mfile{f}, f.choices...) {
			if uncertain {
				g.xattrAlt, g.altXattr = value, true
			} else {
				g.xattr = value
			}
		}
		if !uncertain {
			c.stats.xattrs++
		}
	case "owrite", "otrunc", "ofalloc":
		if !needFile() {
			return false
		}
		if !f.open || f.acked == f.last() {
			// Nothing of the home mount's is pending: a change after the
			// current state, acknowledged by the other mount's close.
			change(c.applyChange(f.cur(), op))
			if !uncertain {
				f.acked = f.last()
				f.otherKnown, f.otherSeen = true, f.cur()
			}
		} else {
			// Each history still possible is rebased (the pending ones
			// are those of a read that could not tell them apart).
			g := c.rebasings(f, op)
			for _, h := range f.choices {
				r := c.rebasings(h, op)
				g.choices = append(append(g.choices, r), r.choices...)
				r.choices = nil
			}
			if uncertain {
				f.alt = g
			} else {
				*f = *g
			}
		}
		if !uncertain {
			c.stats.foreign++
		}
	case "rename":
		if !needFile() {
			return false
		}
		dst := op.Args[1]
		if v.names[dst] == f {
			return true // two names of one file: nothing happens
		}
		v.drop(dst)
		v.drop(name)
		v.names[dst] = f
	case "link":
		if !needFile() {
			return false
		}
		dst := op.Args[1]
		if v.names[dst] != nil {
			fail("%v: linked over an existing file of the model", op)
			return false
		}
		v.names[dst] = f
		if !uncertain {
			c.stats.links++
		}
	case "unlink":
		if !needFile() {
			return false
		}
		v.drop(name)
	case "copy", "pcopy", "toolcp":
		return c.applyCopy(op, v, f, uncertain, fail)
	case campaign.OpAppend, campaign.OpROCreat, campaign.OpCopyRewritten, campaign.OpReap,
		"mopen", "mwrite", "mflush", "mread", campaign.OpLease:
		return c.applyOptional(op, v, f, uncertain, fail)
	case "see":
	default:
		fail("%v: unknown operation", op)
		return false
	}
	return true
}

func parseInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// applyCopy follows a copy (copy_file_range whole or in part, through
// either mount, or ckptfs cp) of f to a new name: the copy holds what an
// open of the source would read (docs/design.md, "A copy copies what an
// open would read"): through the home mount the state it shows; through
// the other mount or the tool, what close-to-open allows.
func (c *campaignRun) applyCopy(op *campaign.Op, v *nsView, f *mfile, uncertain bool, fail func(string, ...any)) bool {
	if f == nil {
		fail("%v: the model has no file %s", op, op.Args[0])
		return false
	}
	dst := op.Args[1]
	if v.names[dst] != nil {
		fail("%v: copied over an existing file of the model", op)
		return false
	}
	from, to, partial := f.last(), f.last(), false
	if op.Mount == 1 || op.Kind == "toolcp" {
		from, to, partial = c.c2o(f)
	}
	off, n, dstOff := int64(0), int64(1)<<62, int64(0)
	if op.Kind == "pcopy" {
		off, n, dstOff = op.Int(2), op.Int(3), op.Int(4)
	}
	mode := c.createMode
	if op.Kind == "toolcp" {
		mode = f.mode // the copy has the source's mode
	}
	g := newMfile(nil, op, mode)
	g.byOther = op.Mount == 1
	v.names[dst] = g
	if uncertain {
		// Not there, there and empty, or holding a prefix of what it
		// would have held (the kernel copies bytes in pieces).
		g.uncertain, g.copying = true, true
		cands(f, from, to, partial, -1, func(b []byte) bool {
			w, _ := window(b, off, n, dstOff)
			g.prefixOf = append(g.prefixOf, w)
			return len(g.prefixOf) < 64
		})
		return true
	}
	var lenAt int
	var total string
	switch op.Kind {
	case "toolcp":
		lenAt = 0
	default:
		total, lenAt = op.Result[0], 1
	}
	var got []byte
	gives := func(b []byte) ([]byte, bool) {
		w, k := window(b, off, n, dstOff)
		if total != "" && strconv.FormatInt(k, 10) != total {
			return nil, false
		}
		return w, sumIs(w, op.Result[lenAt], op.Result[lenAt+1])
	}
	src, ok := find(f, from, to, partial, -1, func(b []byte) bool {
		w, ok := gives(b)
		if ok {
			got = w
		}
		return ok
	})
	if !ok {
		fail("%v: the copy holds %s bytes with crc32c %s (%s bytes copied), a copy of none of the source's states %d..%d (%s)",
			op, op.Result[lenAt], op.Result[lenAt+1], total, from, to, f.history())
		return false
	}
	if op.Mount == 1 {
		// The copy's open showed src, if no other state gives the same
		// copy (a window past the end of two states copies nothing of
		// either): else one of the range.
		distinct := map[uint32]bool{}
		cands(f, from, to, partial, -1, func(b []byte) bool {
			if _, ok := gives(b); ok {
				distinct[crc(b)] = true
			}
			return true
		})
		if len(distinct) == 1 {
			f.otherKnown, f.otherSeen = true, src
		} else {
			f.otherKnown, f.otherFrom, f.otherTo = false, from, to
		}
	}
	g.push(got, op)
	g.acked = 1
	c.stats.copies++
	return true
}

// checkCheckpoint checks a read of .checkpoints/<name>/<cno>: a checkpoint
// logged after an fsync or close holds exactly the state it was logged
// with, or is gone (ENOENT) once a newer one exists (the cleaner keeps one
// here); the newest listed is not older than one logged, and holds a
// state from there on.
func (c *campaignRun) checkCheckpoint(op *campaign.Op, f *mfile, fail func(string, ...any)) bool {
	cno := op.Int(1)
	res := op.Result
	newest := int64(-1)
	for n := range f.cnos {
		newest = max(newest, n)
	}
	unknownNewest := false
	for n := range f.unknown {
		if n > newest {
			newest, unknownNewest = n, true
		}
	}
	if cno >= 0 {
		k, ok := f.cnos[cno]
		if !ok && f.unknown[cno] {
			return true
		}
		if !ok {
			fail("%v: the model logged no checkpoint %d of this file", op, cno)
			return false
		}
		if res[0] == "noent" {
			if cno == newest && k == f.last() && !f.stale {
				fail("%v: the file's current checkpoint %d is not listed under .checkpoints (%s)", op, cno, f.history())
				return false
			}
			return true
		}
		if f.stale {
			return true // a merge rewrote the states this one was logged with
		}
		if !sumIs(f.states[k], res[0], res[1]) {
			fail("%v: checkpoint %d reads %s bytes with crc32c %s; it was logged holding state %d (%d bytes, crc %d): %s",
				op, cno, res[0], res[1], k, len(f.states[k]), crc(f.states[k]), f.history())
			return false
		}
		c.stats.ckptReads++
		return true
	}
	if res[0] == "noent" {
		if newest >= 0 {
			fail("%v: no checkpoint listed, though %d was logged", op, newest)
			return false
		}
		return true
	}
	got := parseInt(res[0])
	from := 0
	if newest >= 0 {
		if got < newest {
			fail("%v: the newest checkpoint listed is %d, older than %d, logged after an fsync or close", op, got, newest)
			return false
		}
		if !unknownNewest {
			from = f.cnos[newest]
		}
	}
	if f.stale {
		return true
	}
	if _, ok := find(f, from, f.last(), true, parseInt(res[1]), func(b []byte) bool { return sumIs(b, res[1], res[2]) }); !ok {
		fail("%v: the newest checkpoint %d reads %s bytes with crc32c %s, none of the states %d..%d (%s)", op, got, res[1], res[2], from, f.last(), f.history())
		return false
	}
	c.stats.ckptReads++
	return true
}

// matches says why content is none of the states f may be in, or "".
func (c *campaignRun) matches(f *mfile, content []byte) string {
	if f.alt != nil && c.matches(f.alt, content) == "" {
		return ""
	}
	for _, g := range f.choices {
		if c.matches(g, content) == "" {
			return ""
		}
	}
	for _, b := range f.anyOf {
		if bytes.Equal(content, b) {
			return ""
		}
	}
	for _, w := range f.partialOf {
		if partialMatch(content, w.prev, w.next, w.off, w.n) {
			return ""
		}
	}
	for k := f.acked; len(f.mPending) > 0 && k <= f.last(); k++ {
		b := f.states[k]
		for _, op := range f.mPending {
			b = c.applyChange(b, op)
		}
		if bytes.Equal(content, b) {
			return ""
		}
	}
	if f.copying {
		// A copy in flight at the end.
		if len(content) == 0 {
			return ""
		}
		for _, p := range f.prefixOf {
			if len(content) <= len(p) && bytes.Equal(content, p[:len(content)]) {
				return ""
			}
		}
		return fmt.Sprintf("a copy in flight at the kill holds %d bytes (crc %08x), a prefix of none of the %d contents it could copy", len(content), crc(content), len(f.prefixOf))
	}
	last := f.last()
	for k := f.acked; k <= last; k++ {
		if bytes.Equal(content, f.states[k]) {
			return ""
		}
		op := f.by[k]
		// A write after the acknowledged state may be there in part
		// (without the WAL; with it only the one in flight).
		partialOK := k > f.acked && op != nil && (op.Kind == "write" || op.Kind == campaign.OpROCreat) && (!c.wal || (f.uncertain && k == last))
		if partialOK && partialMatch(content, f.states[k-1], f.states[k], op.Int(1), op.Int(2)) {
			return ""
		}
	}
	// Say how it differs from the acknowledged state.
	ack := f.states[f.acked]
	i := 0
	for i < len(ack) && i < len(content) && ack[i] == content[i] {
		i++
	}
	var where string
	switch {
	case len(content) < len(ack) && i == len(content):
		where = fmt.Sprintf("it is %d bytes, the acknowledged state %d: acknowledged bytes from %d on are lost", len(content), len(ack), len(content))
	case i < len(content) && i < len(ack):
		where = fmt.Sprintf("byte %d is %#02x, the acknowledged state has %#02x (%s)", i, content[i], ack[i], c.whoWrote(f, content, int64(i)))
	default:
		where = fmt.Sprintf("it is %d bytes, the acknowledged state %d", len(content), len(ack))
	}
	return fmt.Sprintf("after the kill it holds %d bytes (crc %08x), none of the states from the acknowledged one (%d of %d) on: %s; %s",
		len(content), crc(content), f.acked, last, where, f.history())
}

func isCopy(kind string) bool {
	return kind == "copy" || kind == "pcopy" || kind == "toolcp" || kind == campaign.OpCopyRewritten
}

// isWrite: a write of Pattern(id, seq, off, len), args <name> <off> <len>.
func isWrite(kind string) bool {
	return kind == "write" || kind == "owrite" || kind == "mwrite" || kind == campaign.OpROCreat
}

// xattrOK reports whether value (of campaign.Xattr, "" for none) is one f may
// have after the kill.
func (f *mfile) xattrOK(value string) bool {
	return value == f.xattr || f.altXattr && value == f.xattrAlt || f.alt != nil && f.alt.xattrOK(value)
}

// modeOK reports whether perm is a mode f may have after the kill.
func (f *mfile) modeOK(perm uint32) bool {
	return f.mode == 0 || perm == f.mode || f.modeAlt != 0 && perm == f.modeAlt ||
		f.alt != nil && f.alt.modeOK(perm)
}

// whoWrote names the write of the model whose bytes content has at off.
func (c *campaignRun) whoWrote(f *mfile, content []byte, off int64) string {
	for k := len(f.by) - 1; k >= 1; k-- {
		op := f.by[k]
		if op == nil || !isWrite(op.Kind) {
			continue
		}
		wo, wn := op.Int(1), op.Int(2)
		if off < wo || off >= wo+wn {
			continue
		}
		end := min(wo+wn, int64(len(content)))
		if bytes.Equal(content[off:end], campaign.Pattern(c.curDriver, op.Seq, off, int(end-off))) {
			return fmt.Sprintf("the byte of write #%d, state %d", op.Seq, k)
		}
	}
	allZero := true
	for _, b := range content[off:min(int64(len(content)), off+64)] {
		allZero = allZero && b == 0
	}
	if allZero {
		return "zeros: a hole or a block never written"
	}
	return "written by no write of this file in this iteration"
}

// partialMatch: content is prev with a prefix of the write [off, off+n) that
// made next applied.
// partialWrite is a write of [off, off+n) that took prev to next, of which
// the file may hold a first part (partialMatch).
type partialWrite struct {
	prev, next []byte
	off, n     int64
}

func partialMatch(content, prev, next []byte, off, n int64) bool {
	p := 0
	for p < len(content) && p < len(next) && content[p] == next[p] {
		p++
	}
	if int64(p) < off || int64(p) > off+n {
		return false
	}
	want := make([]byte, max(len(prev), p))
	copy(want, prev)
	copy(want[:p], next[:p])
	return bytes.Equal(content, want)
}

func (f *mfile) history() string {
	var parts []string
	for k, op := range f.by {
		s := "base"
		if op != nil {
			s = op.String()
		}
		mark := ""
		if k == f.acked {
			mark = " [acknowledged]"
		}
		parts = append(parts, fmt.Sprintf("state %d: %d bytes crc %08x by %s%s", k, len(f.states[k]), crc(f.states[k]), s, mark))
	}
	return "history: " + strings.Join(parts, "; ")
}

// applyOptional follows the optional operations (campaign.Optional;
// docs/campaign.md, "Optional operations").
func (c *campaignRun) applyOptional(op *campaign.Op, v *nsView, f *mfile, uncertain bool, fail func(string, ...any)) bool {
	name := op.Args[0]
	if f == nil && op.Kind != campaign.OpReap {
		fail("%v: the model has no file %s", op, name)
		return false
	}
	// synth is a write the log names only through op: piece j of it.
	synth := func(j int, off, n int64) *campaign.Op {
		return &campaign.Op{Seq: op.Seq | int64(j+1)<<40, Kind: "write", Mount: op.Mount, Args: []string{name, strconv.FormatInt(off, 10), strconv.FormatInt(n, 10)}, Ended: true, OK: true}
	}
	// set makes b the file's next state in every history still possible
	// (acknowledged), as the result of op.
	set := func(b []byte) {
		for _, g := range append([]*mfile{f}, f.choices...) {
			g.push(b, &campaign.Op{Seq: op.Seq, Kind: "set", Mount: op.Mount, Args: op.Args, Ended: true, OK: true, Result: op.Result, Data: b})
			g.acked = g.last()
			g.viewSet, g.open = false, false
			g.otherKnown, g.otherFrom, g.otherTo = false, g.last(), g.last()
		}
	}
	switch op.Kind {
	case campaign.OpAppend:
		// The home mount's descriptor was closed first: the file holds
		// its current state on both mounts.
		var mounts []int
		var pieces [][]byte
		for j, a := range op.Args[1:] {
			m, n, _ := strings.Cut(a, ":")
			mounts = append(mounts, int(parseInt(m)))
			pieces = append(pieces, campaign.Pattern(c.curDriver, op.Seq|int64(j+1)<<40, 0, int(parseInt(n))))
		}
		if uncertain {
			for _, g := range append([]*mfile{f}, f.choices...) {
				g.anyOf = append(g.anyOf, appendOrders(g.cur(), mounts, pieces, true)...)
				g.open = false
			}
			return true
		}
		var got []byte
		narrow(f, func(g *mfile) bool {
			for _, b := range appendOrders(g.cur(), mounts, pieces, false) {
				if sumIs(b, op.Result[0], op.Result[1]) {
					return true
				}
			}
			return false
		})
		orders := appendOrders(f.cur(), mounts, pieces, false)
		for _, b := range orders {
			if sumIs(b, op.Result[0], op.Result[1]) {
				got = b
			}
		}
		if got == nil {
			holds := ""
			for _, b := range appendOrders(f.cur(), mounts, pieces, true) {
				if sumIs(b, op.Result[0], op.Result[1]) {
					holds = fmt.Sprintf("; it is an order of some of them, %d of their %d bytes: appends lost", len(b)-len(f.cur()), len(orders[0])-len(f.cur()))
				}
			}
			fail("%v: after O_APPEND writes through both mounts the file holds %s bytes with crc32c %s, none of the %d serial orders of the appends after its %d bytes (an append lost, or placed over another)%s: %s",
				op, op.Result[0], op.Result[1], len(orders), len(f.cur()), holds, f.history())
			return false
		}
		set(got)
		c.stats.appends++
	case campaign.OpROCreat:
		if !uncertain {
			home := op.Result[len(op.Result)-2]
			for _, ino := range op.Result[:len(op.Result)-2] {
				if ino != home {
					fail("%v: open(O_RDONLY|O_CREAT) through the other mount opened inode %s, the home mount's file is inode %s", op, ino, home)
					return false
				}
			}
			c.stats.roCreats++
		}
		// The appends are a write of the home mount.
		for i, g := range append([]*mfile{f}, f.choices...) {
			g.push(c.applyChange(g.cur(), op), op)
			g.uncertain = uncertain
			if c.wal && !uncertain {
				g.acked = g.last()
			}
			if i == 0 && !uncertain {
				c.stats.writes++
				c.stats.bytesWritten += op.Int(2)
			}
			g.otherKnown, g.otherFrom, g.otherTo = false, g.acked, g.last()
		}
	case campaign.OpCopyRewritten:
		return c.applyCopyRewritten(op, v, f, uncertain, synth, fail)
	case campaign.OpReap:
		if uncertain || op.Result[0] == "gone" {
			// ESTALE: the version the descriptor shows was removed.
			if !uncertain {
				c.stats.reapReads++
			}
			return true
		}
		hs := v.past[name]
		if len(hs) == 0 {
			fail("%v: the model has no file that had the name %s", op, name)
			return false
		}
		h := hs[len(hs)-1].f
		n, sum := op.Result[1], op.Result[2]
		if h.otherKnown {
			if !sumIs(h.otherSeen, n, sum) {
				fail("%v: a descriptor held on the other mount across the file's unlink and its reaping read %s bytes with crc32c %s, not the version its open showed (%d bytes, crc %d): %s",
					op, n, sum, len(h.otherSeen), crc(h.otherSeen), h.history())
				return false
			}
		} else if _, ok := find(h, h.otherFrom, h.otherTo, !c.wal, parseInt(n), func(b []byte) bool { return sumIs(b, n, sum) }); !ok {
			fail("%v: a descriptor held on the other mount across the file's unlink and its reaping read %s bytes with crc32c %s, none of the states %d..%d it may show: %s",
				op, n, sum, h.otherFrom, h.otherTo, h.history())
			return false
		}
		c.stats.reapReads++
	case "mopen":
		f.mPending = []*campaign.Op{}
	case "mwrite":
		f.mPending = append(f.mPending, op)
	case "mflush":
		// The plain mount's changes follow every acknowledged change of
		// the WAL writer (a merge is serial).
		for _, w := range f.mPending {
			for _, g := range append([]*mfile{f}, f.choices...) {
				g.push(c.applyChange(g.cur(), w), w)
				g.uncertain = uncertain
				if !uncertain {
					g.acked = g.last()
				}
			}
		}
		if !uncertain {
			for _, g := range append([]*mfile{f}, f.choices...) {
				g.mPending = nil
			}
		}
	case "mread":
		if uncertain {
			return true
		}
		if !sumIs(f.cur(), op.Result[0], op.Result[1]) {
			fail("%v: a new open through the plain mount reads %s bytes with crc32c %s, want the WAL writer's acknowledged changes and then the plain mount's (%d bytes, crc %d): %s",
				op, op.Result[0], op.Result[1], len(f.cur()), crc(f.cur()), f.history())
			return false
		}
		c.stats.walMixes++
	case campaign.OpLease:
		home := synth(0, op.Int(1), op.Int(2))
		other := synth(1, op.Int(3), op.Int(4))
		cur := f.cur()
		all := [][]byte{cur, c.applyChange(cur, home), c.applyChange(cur, other),
			c.applyChange(c.applyChange(cur, home), other), c.applyChange(c.applyChange(cur, other), home)}
		if uncertain {
			f.anyOf = append(f.anyOf, all...)
			// Either write may be cut by the kill after its first pages,
			// alone or after the other one whole.
			f.partialOf = append(f.partialOf,
				partialWrite{all[0], all[1], op.Int(1), op.Int(2)}, partialWrite{all[2], all[4], op.Int(1), op.Int(2)},
				partialWrite{all[0], all[2], op.Int(3), op.Int(4)}, partialWrite{all[1], all[3], op.Int(3), op.Int(4)})
			f.open = false
			return true
		}
		hw, ow := op.Result[0] == "ok", op.Result[1] == "ok"
		// What the file may hold: every serial order of the writes
		// acknowledged, and of those not, with or without them.
		var allowed [][]byte
		switch {
		case hw && ow:
			allowed = all[3:]
		case hw:
			allowed = all[1:2]
		case ow:
			allowed = [][]byte{all[2], all[3], all[4]}
		default:
			allowed = all[:2]
		}
		var got []byte
		for _, b := range allowed {
			if sumIs(b, op.Result[3], op.Result[4]) {
				got = b
			}
		}
		if got == nil {
			holds := "neither write's bytes where they went"
			for i, what := range []string{"neither write", "the home mount's write alone", "the other mount's write alone", "both writes", "both writes, the other's first"} {
				if sumIs(all[i], op.Result[3], op.Result[4]) {
					holds = what
				}
			}
			fail("%v: after the other mount wrote while the home mount's requests were held longer than the lease (home write %s, other %s), a new open reads %s bytes with crc32c %s, none of the serial orders of the acknowledged writes (it holds %s): %s",
				op, op.Result[0], op.Result[1], op.Result[3], op.Result[4], holds, f.history())
			return false
		}
		set(got)
		c.stats.leases++
		if ow {
			c.stats.leasesTaken++
		}
	}
	return true
}

// appendOrders is every content base may hold after the appends (pieces,
// piece j through mounts[j]): base followed by the pieces in an order that
// keeps each mount's own; with prefixes, of any prefix of each mount's.
func appendOrders(base []byte, mounts []int, pieces [][]byte, prefixes bool) [][]byte {
	var by [2][][]byte
	for j, p := range pieces {
		by[mounts[j]] = append(by[mounts[j]], p)
	}
	var out [][]byte
	var walk func(b []byte, i, j int)
	walk = func(b []byte, i, j int) {
		if prefixes || i == len(by[0]) && j == len(by[1]) {
			out = append(out, b)
		}
		if i < len(by[0]) {
			walk(append(bytes.Clone(b), by[0][i]...), i+1, j)
		}
		if j < len(by[1]) {
			walk(append(bytes.Clone(b), by[1][j]...), i, j+1)
		}
	}
	walk(bytes.Clone(base), 0, 0)
	return out
}

// applyCopyRewritten follows cprw: the copy holds exactly one version of
// the source, what it held or one of the other mount's rewrites, each of
// which is acknowledged by its close; or it failed with ESTALE and holds
// the start of one (an empty file is the start of every one).
func (c *campaignRun) applyCopyRewritten(op *campaign.Op, v *nsView, f *mfile, uncertain bool, synth func(int, int64, int64) *campaign.Op, fail func(string, ...any)) bool {
	dst := op.Args[1]
	if v.names[dst] != nil {
		fail("%v: copied over an existing file of the model", op)
		return false
	}
	trunc := op.Int(2) == 1
	var lens []int64
	for _, l := range strings.Split(op.Args[3], ":") {
		lens = append(lens, parseInt(l))
	}
	k := len(lens) // in flight at the kill: as many as it may have made
	if !uncertain {
		k = int(parseInt(op.Result[3]))
	}
	from, to, _ := c.c2o(f)
	if op.Mount == 0 {
		from = to
	}
	var versions [][]byte
	for s := from; s <= to; s++ {
		versions = append(versions, f.states[s])
	}
	// Each rewrite is a change (with O_TRUNC two: the empty file, which a
	// periodic flush may publish, then the write).
	var rewrites []*campaign.Op
	b := f.cur()
	for i := range k {
		if trunc {
			t := &campaign.Op{Seq: op.Seq, Kind: "trunc", Mount: op.Mount, Args: []string{op.Args[0], "0"}, Ended: true, OK: true}
			rewrites = append(rewrites, t)
			b = nil
			versions = append(versions, b)
		}
		w := synth(i, 0, lens[i])
		rewrites = append(rewrites, w)
		b = c.applyChange(b, w)
		versions = append(versions, b)
	}
	for _, g := range append([]*mfile{f}, f.choices...) {
		for _, w := range rewrites {
			g.push(c.applyChange(g.cur(), w), w)
		}
		g.uncertain = uncertain
		if !uncertain {
			g.acked = g.last()
		}
		g.otherKnown, g.otherFrom, g.otherTo = false, g.acked, g.last()
	}
	// With the WAL, the rewrites through the other mount leave it the
	// lease, let go once their last publish lands (see byOther).
	f.byOther = f.byOther || op.Mount == 0
	cp := newMfile(nil, op, c.createMode)
	cp.byOther = op.Mount == 1
	v.names[dst] = cp
	if uncertain {
		cp.uncertain, cp.copying, cp.prefixOf = true, true, versions
		return true
	}
	if op.Result[0] == "stale" {
		// The copy failed with ESTALE: the source showed another version
		// than the one the copy took. What it holds then is empty or the
		// start of one version, never a part of two.
		n := parseInt(op.Result[1])
		for _, b := range versions {
			if n >= 0 && int64(len(b)) >= n && sumIs(b[:n], op.Result[1], op.Result[2]) {
				cp.push(bytes.Clone(b[:n]), op)
				cp.acked = 1
				c.stats.copiesRewritten++
				c.stats.copiesStale++
				return true
			}
		}
		fail("%v: a copy that failed with ESTALE while the other mount rewrote the source holds %s bytes with crc32c %s, the start of none of the source's %d versions: %s",
			op, op.Result[1], op.Result[2], len(versions), f.history())
		return false
	}
	for _, b := range versions {
		if strconv.Itoa(len(b)) == op.Result[0] && sumIs(b, op.Result[1], op.Result[2]) {
			cp.push(b, op)
			cp.acked = 1
			c.stats.copies++
			c.stats.copiesRewritten++
			return true
		}
	}
	what := "a mix of two, or one it never had"
	n := parseInt(op.Result[1])
	for i, b := range versions {
		if n >= 0 && int64(len(b)) > n && sumIs(b[:n], op.Result[1], op.Result[2]) {
			what = fmt.Sprintf("version %d of %d bytes cut to another's size", i, len(b))
		}
	}
	fail("%v: a copy while the other mount rewrote the source holds %s bytes with crc32c %s (%s copied), none of the source's %d versions (%s): %s",
		op, op.Result[1], op.Result[2], op.Result[0], len(versions), what, f.history())
	return false
}
