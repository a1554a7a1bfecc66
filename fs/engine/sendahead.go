package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/fs/upload"
	"github.com/ckptfs/ckptfs/segment"
)

// Sending ahead: data leaves for the store while it is written, so that a
// flush is left with what has not been sent yet.
//
//   - stream_segment_bytes = 0: nothing is sent ahead.
//   - up to one segment_mpu_chunk_size piece, or a Parted file (its header,
//     first, is known only once the object is): each object is sent whole,
//     in one request, once there is one object's worth of unsent blocks.
//   - larger (StreamSegment): one object is filled a piece at a time through
//     a multipart upload and closed once it holds the target.
//
// The target is a ceiling, not a floor: before a piece is placed, the object
// is checked for room for it and its leaves (one leaf in sixteen kept spare
// for leaves that split before it closes); without room it closes early and
// the piece starts the next object. At close the object is measured again:
// if its leaves split past the spare it is given up (aborted, its blocks stay
// dirty, counted dead).
//
// Large runs and scattered small blocks go to objects of their own
// (isolation), so that reading the small ones never fetches the large ones.
//
// The writer does the choosing, copying and hashing and sets the pointers;
// upload tasks only move bytes. Their results are taken in by the next call
// that holds the file (a write, a flush, a rollback), which also re-raises a
// task's panic there. A block leaves the dirty tier when its object is
// complete, if its pointer is still where it was sent and it has not changed
// since it was placed (its gen: every change goes through touchLocked).
//
// The tasks (pieces, tails, completions, aborts) run in the goroutines of
// the file's uploader (package fs/upload: upload.Tasks), each holding one
// of its segment_mpu_max_concurrency slots, the cap the flush's own uploads
// share; more wait for a slot, in order. Their requests are the uploader's
// (the multipart calls, the check of a completion whose answer was lost,
// the aborts). The uploader follows each object (upload.Object: its tasks
// in flight, closed, failed, stored): once its tasks are in it completes a
// closed one, aborts a failed one, and reports it finished, stored or not;
// the sender then applies that under mu, slot by slot (completedLocked:
// each block that still points there at the gen it was placed with leaves
// the dirty tier; failedLocked: they go back to the unsent). A failure
// while blocks are placed in an object (a source by reference that fails)
// gives the object up: blocks placed with no bytes sent must never
// complete it.

// class separates scattered small blocks from long runs (isolation).
type class int

const (
	classSmall class = iota
	classRun
	nClasses
)

// streamObj is an object sent ahead.
type streamObj struct {
	name segment.ObjectName
	cls  class
	// ob is its upload: its multipart upload (none: sent whole), its
	// tasks in flight, closed, failed, stored (package fs/upload).
	ob         *upload.Object[sendResult]
	fbns       []uint64
	gens       []uint64 // each slot's block's gen when placed
	summary    []segment.SummaryEntry
	metas      [][]byte
	leafLos    map[uint64]struct{} // leaves (by Lo) over the blocks placed, as counted when placed
	refs       map[uint32]*refSrc  // slots holding blocks by reference
	refPending int                 // of those, not read yet by their task
	dataSent   int64               // data bytes handed to tasks
	flushData  int64               // of which placed by a flush
}

func (o *streamObj) n() int { return len(o.fbns) }

// sendResult is what an upload task of obj leaves (an upload.Result's
// Value; the tasks the uploader starts itself, completions and aborts,
// leave only obj).
type sendResult struct {
	obj   *streamObj
	refs  []pieceRef // blocks by reference the task read
	crcs  []uint32   // their checksums (nil if the read failed)
	err   error      // the task's error (the Result's Err)
	panic any        // set when taken in, for rethrowLocked
	stack []byte
}

// sender is the send-ahead part of a File: it chooses the unsent dirty
// blocks, places them in objects, runs the upload tasks and takes their
// results in. Fields are GUARDED_BY(f.mu) except f, ctx, cancel and tasks,
// which are set once, and requests, which is atomic. Its methods are called
// with f.mu held exclusively (they change f's dirty tier and map, which are
// File's); the upload tasks it starts run without it, in the uploader's
// goroutines (upload.Tasks), and touch only what their closures captured.
type sender struct {
	f      *File
	ctx    context.Context // uploads outlive the call that started them
	cancel context.CancelFunc
	tasks  *upload.Tasks[sendResult]

	requests atomic.Int64 // requests made by tasks, for FlushTiming

	// The tasks started and not taken in are tasks.Pending(). Each holds
	// one of the uploader's segment_mpu_max_concurrency slots while it
	// runs (those beyond wait for one); a writer places no more while
	// they are at the cap (roomLocked).
	open [nClasses]*streamObj
	objs map[*streamObj]struct{} // started, not finished
	// unsent are the dirty blocks no object in flight holds.
	// INVARIANT: a block is in unsent if and only if it is dirty, its sent
	// is nil and sending ahead is on (sendAheadOn).
	unsent map[uint64]struct{}
	// INVARIANT: unsentB == bs * len(unsent).
	unsentB  int64
	sentB    int64 // data in send-ahead objects that completed, since the head
	deadB    int64 // data that died before its object counted, since the head
	flushB   int64 // data the flush itself put into objects sent ahead
	settling bool  // a flush is sending the last pieces
	// letGo: the settling flush waits for tasks without File.mu
	// (takeInWaitLocked).
	letGo    bool
	panicked *sendResult
}

func (f *File) sendAheadOn() bool {
	return f.p.StreamSegmentBytes > 0 && !f.readOnly && !f.p.WAL
}

// target is the effective stream_segment_bytes.
func (s *sender) target() int64 {
	f := s.f
	return min(f.p.StreamSegmentBytes, f.p.MaxObjectBytes)
}

// newSender makes f's sender; nothing runs until a block is sent.
func newSender(f *File) *sender {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sender{
		f:      f,
		ctx:    ctx,
		cancel: cancel,
		objs:   make(map[*streamObj]struct{}),
		unsent: make(map[uint64]struct{}),
	}
	s.tasks = upload.NewTasks[sendResult](f.up, ctx, &s.requests)
	return s
}

// markUnsent records a dirty block that no object in flight holds.
func (s *sender) markUnsent(fbn uint64) {
	f := s.f
	if _, ok := s.unsent[fbn]; !ok {
		s.unsent[fbn] = struct{}{}
		s.unsentB += int64(f.bs)
	}
}

func (s *sender) clearUnsent(fbn uint64) {
	f := s.f
	if _, ok := s.unsent[fbn]; ok {
		delete(s.unsent, fbn)
		s.unsentB -= int64(f.bs)
	}
}

// touchLocked is called for every block a write, zero or truncate changes or
// drops: its gen moves on (a copy of it sent ahead is no longer its bytes),
// and a copy of it in an open object becomes a dead slot.
func (s *sender) touchLocked(d *dirtyBlock) {
	if d == nil {
		return
	}
	d.gen++
	d.crcValid = false
	if o := d.sent; o != nil && !o.ob.Closed() {
		o.summary[d.slot].Dead = true
	}
}

// spawn runs one upload task of o, once a slot of the uploader's is free:
// every piece, tail, completion and abort counts against the cap. Its
// result comes back to takeInLocked, with o (also after a panic).
func (s *sender) spawn(o *streamObj, kind upload.Kind, run func(ctx context.Context) sendResult) {
	s.tasks.GoFor(o.ob, kind, func(ctx context.Context, r *sendResult) error {
		v := run(ctx)
		v.obj = r.obj
		*r = v
		return v.err
	})
}

// roomLocked waits until a request may start under the cap.
func (s *sender) roomLocked(ctx context.Context) error {
	f := s.f
	for s.tasks.Pending() >= f.p.Concurrency {
		if err := s.takeInLocked(ctx, true); err != nil {
			return err
		}
	}
	return nil
}

// takeInLocked handles finished tasks: without wait, those already done;
// with wait, at least one (if any is in flight).
func (s *sender) takeInLocked(ctx context.Context, wait bool) error {
	for s.tasks.Pending() > 0 {
		res, ok, err := s.tasks.Next(ctx, wait)
		if err != nil || !ok {
			return err
		}
		wait = false
		s.handleResultLocked(ctx, res)
	}
	return nil
}

// drainLocked waits for every task in flight and takes it in.
func (s *sender) drainLocked(ctx context.Context) error {
	for s.tasks.Pending() > 0 {
		if err := s.takeInWaitLocked(ctx); err != nil {
			return err
		}
	}
	return nil
}

// takeInWaitLocked takes in the results of the tasks that finished,
// waiting for one if none has. While a Flush settles (letGo) it waits
// without File.mu, behind a gate that holds every write (the flush holds
// flushMu and its blocks, so nothing else changes what it settles): reads
// of the file go on while the uploads sent ahead complete, where they
// waited for every one of them.
func (s *sender) takeInWaitLocked(ctx context.Context) error {
	if !s.letGo {
		return s.takeInLocked(ctx, true)
	}
	f := s.f
	landed := s.tasks.Landed()
	select {
	case <-landed:
	default:
		g := f.openGateLocked(false, 0)
		select {
		case <-landed:
		case <-ctx.Done():
		}
		f.closeGate(g)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.takeInLocked(ctx, false)
}

// rethrow re-raises a task's panic in the calling goroutine: it is a bug, and
// it surfaces in the call that takes the object in, as if it happened there.
func (s *sender) rethrowLocked() {
	f := s.f
	if r := s.panicked; r != nil {
		s.panicked = nil
		panic(fmt.Sprintf("ckptfs: upload task for %s panicked: %v\n%s", f.key(r.obj.name), r.panic, r.stack))
	}
}

// handleResultLocked applies a task's result (the uploader counted it for
// its object already: failed, or stored) and moves the object along.
func (s *sender) handleResultLocked(ctx context.Context, res upload.Result[sendResult]) {
	f := s.f
	r := res.Value
	o := r.obj
	if res.Panic != nil {
		r.panic, r.stack = res.Panic, res.Stack
		s.panicked = &r
	} else if errors.Is(res.Err, errNameTaken) && o.name.Cno == f.pendingCno {
		// Another writer has names of this number: later objects move on.
		f.bumpCno()
	}
	if len(r.refs) > 0 {
		s.refsReadLocked(o, r.refs, r.crcs)
	}
	s.advanceLocked(o)
}

// advanceLocked moves an object along once its tasks are in: the uploader
// completes or aborts it, and says when it is finished, stored or not.
func (s *sender) advanceLocked(o *streamObj) {
	switch s.tasks.Advance(o.ob) {
	case upload.Stored:
		s.completedLocked(o)
	case upload.Failed:
		s.failedLocked(o)
	}
}

// completedLocked cleans the blocks of a completed object that still hold:
// each slot's block, if it still points there and is at the gen it was
// placed with.
func (s *sender) completedLocked(o *streamObj) {
	f := s.f
	delete(s.objs, o)
	s.sentB += int64(o.n())*int64(f.bs) - o.flushData
	s.flushB += o.flushData
	f.stats.BytesUploaded += o.dataSent
	f.stats.ObjectsWritten++
	for slot, fbn := range o.fbns {
		d := f.dirty[fbn]
		if d == nil || d.sent != o || d.slot != uint32(slot) {
			s.deadB += int64(f.bs)
			continue
		}
		d.sent = nil
		want := segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: uint32(slot)}
		v, ok, err := f.tree.Get(s.ctx, fbn)
		same := d.busy == 0 && (d.ref != nil && o.refs[uint32(slot)] == d.ref ||
			d.ref == nil && o.refs[uint32(slot)] == nil && d.gen == o.gens[slot])
		if o.summary[slot].Dead || err != nil || !ok || v.Ptr != want || !same {
			s.deadB += int64(f.bs)
			s.markUnsent(fbn)
			continue
		}
		if d.buf != nil {
			f.freeDirtyBuf(d)
			f.dirtyB -= int64(f.bs)
		}
		f.undirtyLocked(d)
		delete(f.dirty, fbn)
		f.written[fbn] = v
	}
	for m, enc := range o.metas {
		f.leafImages[xxh3.Hash(enc)] = segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: uint32(m)}
	}
}

// failedLocked returns the blocks of a failed or given-up object to the
// unsent: they are still dirty, and a later object or the flush sends them.
func (s *sender) failedLocked(o *streamObj) {
	f := s.f
	delete(s.objs, o)
	s.deadB += int64(o.n()) * int64(f.bs)
	for slot, fbn := range o.fbns {
		if d := f.dirty[fbn]; d != nil && d.sent == o && d.slot == uint32(slot) {
			d.sent = nil
			s.markUnsent(fbn)
		}
	}
	for i, op := range s.open {
		if op == o {
			s.open[i] = nil
		}
	}
	f.log.Debug("object sent ahead did not complete; its blocks stay dirty")
}

// pickLocked returns the unsent blocks of each class, ascending.
func (s *sender) pickLocked() [nClasses][]uint64 {
	f := s.f
	var out [nClasses][]uint64
	for fbn := range s.unsent {
		d := f.dirty[fbn]
		if d.busy > 0 {
			continue // being written: sent once the write is in
		}
		c := s.classOf(d)
		out[c] = append(out[c], fbn)
	}
	for c := range out {
		slices.Sort(out[c])
	}
	return out
}

// classOf puts a block written as part of a long sequential stream with
// runs, any other with scattered blocks.
func (s *sender) classOf(d *dirtyBlock) class {
	f := s.f
	if d != nil && d.seq != nil && d.seq.bytes >= int64(s.runBlocks())*int64(f.bs) {
		return classRun
	}
	return classSmall
}

// runBlocks is the length from which consecutive blocks count as a run: a
// leaf's worth, so that a run's leaves hold nothing else.
func (s *sender) runBlocks() int {
	f := s.f
	return blockmap.LeafCapacity(f.mbs)
}

// sendAheadLocked sends what is due. Called after a write, holding mu.
func (s *sender) sendAheadLocked(ctx context.Context) error {
	f := s.f
	if err := s.takeInLocked(ctx, false); err != nil {
		return err
	}
	s.rethrowLocked()
	target := s.target()
	chunk := f.p.ChunkSize
	whole := f.sendsWhole()
	due := chunk
	if whole {
		due = target
	}
	for s.unsentB >= due {
		picked := s.pickLocked()
		progressed := false
		for c := range nClasses {
			blocks := picked[c]
			for int64(len(blocks))*int64(f.bs) >= due {
				for s.tasks.Pending() >= f.p.Concurrency {
					if err := s.takeInLocked(ctx, true); err != nil {
						return err
					}
					s.rethrowLocked()
				}
				var n int
				var err error
				if whole {
					n, err = s.sendWholeLocked(ctx, class(c), blocks)
				} else {
					n, err = s.sendPieceLocked(ctx, class(c), blocks, false)
				}
				if err != nil {
					return err
				}
				if n == 0 {
					break
				}
				blocks = blocks[n:]
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
	return nil
}

// settleLocked is the flush's first step with sending ahead: what is still
// unsent goes into the open objects as their last pieces, the open objects
// close, and every object in flight completes (or fails: its blocks stay
// dirty and the flush writes them; not an error of the flush).
func (s *sender) settleLocked(ctx context.Context, letGo bool) error {
	f := s.f
	if err := s.takeInLocked(ctx, false); err != nil {
		return err
	}
	s.rethrowLocked()
	s.settling, s.letGo = true, letGo
	defer func() { s.settling, s.letGo = false, false }()
	if !f.sendsWhole() {
		picked := s.pickLocked()
		for c := range nClasses {
			blocks := picked[c]
			// Full pieces first, several at once, then the rest with the tail.
			for s.open[c] != nil && int64(len(blocks))*int64(f.bs) >= f.p.ChunkSize {
				if err := ctx.Err(); err != nil {
					return err
				}
				for s.tasks.Pending() >= f.p.Concurrency {
					if err := s.takeInWaitLocked(ctx); err != nil {
						return err
					}
				}
				n, err := s.sendPieceLocked(ctx, class(c), blocks, false)
				if err != nil {
					return err
				}
				if n == 0 {
					break // nothing placed: the flush's own objects take the rest
				}
				blocks = blocks[n:]
			}
			if s.open[c] != nil {
				if _, err := s.sendPieceLocked(ctx, class(c), blocks, true); err != nil {
					return err
				}
			}
		}
	}
	if err := s.drainLocked(ctx); err != nil {
		return err
	}
	s.rethrowLocked()
	return nil
}

// sendsWhole: objects are sent whole, in one request each, when the target
// fits one piece, and always for a Parted file, whose header comes first
// and is known only once the object is.
func (f *File) sendsWhole() bool {
	return f.format == segment.FormatParted || min(f.p.StreamSegmentBytes, f.p.MaxObjectBytes) <= f.p.ChunkSize
}

// stop cancels the tasks in flight and waits for them; open uploads
// are aborted (briefly, even though the tasks were cancelled).
func (s *sender) stop() {
	if s == nil {
		return
	}
	s.cancel()
	// Tasks waiting for a slot run too, with the cancelled context: they
	// fail at once and return the budget and buffers they hold.
	s.tasks.Stop()
	for o := range s.objs {
		if up := o.ob.Upload(); up != nil && !o.ob.Stored() {
			up.Abort(context.Background(), &s.requests) // once: not again if its task did
		}
	}
	s.objs = make(map[*streamObj]struct{})
	s.open = [nClasses]*streamObj{}
}

// relieveLocked brings the dirty tier back under its limit: the limits come
// first. Open objects close early at whatever size they have, objects in
// flight complete (their blocks leave the tier), and if that is not enough a
// partial segment takes the rest; the writer waits for all of it.
func (f *File) relieveLocked(ctx context.Context) error {
	if f.s.tasks.Pending() > 0 || f.s.open != [nClasses]*streamObj{} {
		if err := f.s.closeAllLocked(ctx); err != nil {
			return err
		}
	}
	if f.dirtyB > f.p.DirtyLimit {
		return f.writePartialLocked(ctx)
	}
	return nil
}

// relieveAllLocked empties the dirty tier as far as it can (the memory budget
// is full): like relieveLocked, whatever the limit.
func (f *File) relieveAllLocked(ctx context.Context) error {
	if err := f.s.closeAllLocked(ctx); err != nil {
		return err
	}
	return f.writePartialLocked(ctx)
}

// closeAllLocked closes the open objects early at whatever size they have
// and waits for every object in flight to complete or fail.
func (s *sender) closeAllLocked(ctx context.Context) error {
	for c := range nClasses {
		if err := s.closeOpenLocked(ctx, class(c)); err != nil {
			return err
		}
	}
	if err := s.drainLocked(ctx); err != nil {
		return err
	}
	s.rethrowLocked()
	return nil
}

// resetLocked forgets objects sent ahead (a rollback): tasks in flight
// are taken in (a panic re-raised), open uploads aborted.
func (s *sender) resetLocked(ctx context.Context) {
	if s == nil {
		return
	}
	_ = s.drainLocked(ctx)
	s.rethrowLocked()
	for c, o := range s.open {
		if o != nil && o.ob.Upload() != nil {
			o.ob.Upload().Abort(ctx, &s.requests)
		}
		s.open[c] = nil
	}
	s.objs = make(map[*streamObj]struct{})
	s.unsent = make(map[uint64]struct{})
	s.unsentB, s.sentB, s.deadB, s.flushB = 0, 0, 0, 0
}

// holdCopy draws n bytes of the budget for a copy of blocks in flight, if
// they fit; forceCopy draws them regardless (a flush must make progress: its
// pieces are the stated overhead above the budget); releaseCopy returns them.
func (f *File) holdCopy(n int64) bool { return f.budget == nil || f.budget.TryAcquire(n) }

func (f *File) forceCopy(n int64) {
	if f.budget != nil {
		f.budget.Force(n)
	}
}

func (f *File) releaseCopy(n int64) {
	if f.budget != nil {
		f.budget.Release(n)
	}
}
