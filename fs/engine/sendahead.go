package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// Sending ahead (StreamSegment only): data leaves for the store while it is
// written, so that a flush is left with what has not been sent yet.
//
//   - stream_segment_bytes = 0: nothing is sent ahead.
//   - up to one segment_mpu_chunk_size piece: each object is sent whole, in
//     one request, once there is one object's worth of unsent blocks.
//   - larger: one object is filled a piece at a time through a multipart
//     upload and closed once it holds the target.
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
// complete, if its pointer is still where it was sent and an xxh3 of its bytes
// matches what was sent.
//
// At most segment_mpu_max_concurrency tasks run (pieces, tails, completions,
// aborts); more wait in a queue. A completion whose answer was lost is
// checked as the flush checks its own (checkLanded). A failure while blocks
// are placed in an object (a source by reference that fails) gives the
// object up: blocks placed with no bytes sent must never complete it.

// class separates scattered small blocks from long runs (isolation).
type class int

const (
	classSmall class = iota
	classRun
	nClasses
)

// streamObj is an object sent ahead.
type streamObj struct {
	name       segment.ObjectName
	cls        class
	whole      bool // sent in one request
	uploadID   string
	writeID    string // the write id the multipart upload was created with
	bytes      int64  // bytes handed to its parts so far
	fbns       []uint64
	hashes     []uint64
	summary    []segment.SummaryEntry
	metas      [][]byte
	parts      []staging.CompletedPart
	leafLos    map[uint64]struct{} // leaves (by Lo) over the blocks placed, as counted when placed
	pending    int                 // tasks of this object in flight
	closed     bool                // no more pieces
	failed     error               // first failure; the object will be aborted
	aborting   bool
	finished   bool // completed, failed or given up: taken in for good
	complete   bool
	refs       map[uint32]*refSrc // slots holding blocks by reference
	refPending int                // of those, not read yet by their task
	dataSent   int64              // data bytes handed to tasks
	flushData  int64              // of which placed by a flush
}

func (o *streamObj) n() int { return len(o.fbns) }

type taskKind int

const (
	taskPiece taskKind = iota
	taskWhole
	taskComplete
	taskAbort
)

type sendResult struct {
	obj   *streamObj
	kind  taskKind
	refs  []pieceRef // blocks by reference the task read
	crcs  []uint32   // their checksums (nil if the read failed)
	part  int32
	etag  string
	err   error
	panic any
	stack []byte
}

// sender is the send-ahead state of a File. Fields are GUARDED_BY(File.mu)
// except ctx, cancel, wg and done, which are set once.
type sender struct {
	ctx    context.Context // uploads outlive the call that started them
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan sendResult

	requests atomic.Int64 // requests started by tasks, for FlushTiming

	// inflight counts tasks running (each makes one request at a time): at
	// most segment_mpu_max_concurrency; tasks spawned beyond it wait in
	// queued, and start as running ones are taken in.
	inflight int
	queued   []queuedTask
	open     [nClasses]*streamObj
	objs     map[*streamObj]struct{} // started, not finished
	unsent   map[uint64]struct{}
	unsentB  int64
	sentB    int64 // data in send-ahead objects that completed, since the head
	deadB    int64 // data that died before its object counted, since the head
	flushB   int64 // data the flush itself put into objects sent ahead
	settling bool  // a flush is sending the last pieces
	panicked *sendResult
}

func (f *File) sendAheadOn() bool {
	return f.format == segment.FormatStream && f.p.StreamSegmentBytes > 0 && !f.readOnly && !f.p.WAL
}

// target is the effective stream_segment_bytes.
func (f *File) target() int64 { return min(f.p.StreamSegmentBytes, f.p.MaxObjectBytes) }

func (f *File) initSender() {
	ctx, cancel := context.WithCancel(context.Background())
	f.s = &sender{
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan sendResult, 4*f.p.Concurrency+8),
		objs:   make(map[*streamObj]struct{}),
		unsent: make(map[uint64]struct{}),
	}
}

// markUnsent records a dirty block that no object in flight holds.
func (f *File) markUnsent(fbn uint64) {
	if _, ok := f.s.unsent[fbn]; !ok {
		f.s.unsent[fbn] = struct{}{}
		f.s.unsentB += int64(f.bs)
	}
}

func (f *File) clearUnsent(fbn uint64) {
	if _, ok := f.s.unsent[fbn]; ok {
		delete(f.s.unsent, fbn)
		f.s.unsentB -= int64(f.bs)
	}
}

// touchLocked is called for every block a write, zero or truncate changes or
// drops: a copy of it in an open object becomes a dead slot.
func (f *File) touchLocked(d *dirtyBlock) {
	if d == nil {
		return
	}
	if o := d.sent; o != nil && !o.closed {
		o.summary[d.slot].Dead = true
	}
}

// queuedTask is a task waiting for room under the concurrency cap.
type queuedTask struct {
	o    *streamObj
	kind taskKind
	run  func(ctx context.Context) sendResult
}

// spawn runs one upload task, owned by the sender, once fewer than
// segment_mpu_max_concurrency run: every piece, tail, completion and abort
// counts against the cap.
func (f *File) spawn(o *streamObj, kind taskKind, run func(ctx context.Context) sendResult) {
	f.s.requests.Add(1) // every task makes one request (more only when it fails)
	o.pending++
	if f.s.inflight >= f.p.Concurrency {
		f.s.queued = append(f.s.queued, queuedTask{o: o, kind: kind, run: run})
		return
	}
	f.start(o, kind, run)
}

// startQueuedLocked starts waiting tasks while there is room.
func (f *File) startQueuedLocked() {
	for len(f.s.queued) > 0 && f.s.inflight < f.p.Concurrency {
		q := f.s.queued[0]
		f.s.queued = f.s.queued[1:]
		f.start(q.o, q.kind, q.run)
	}
}

// roomLocked waits until a request may start under the cap.
func (f *File) roomLocked(ctx context.Context) error {
	for f.s.inflight >= f.p.Concurrency {
		if err := f.takeInLocked(ctx, true); err != nil {
			return err
		}
	}
	return nil
}

func (f *File) start(o *streamObj, kind taskKind, run func(ctx context.Context) sendResult) {
	f.s.inflight++
	f.s.wg.Add(1)
	go func() {
		defer f.s.wg.Done()
		var r sendResult
		func() {
			defer func() {
				if p := recover(); p != nil {
					r = sendResult{panic: p, stack: debug.Stack()}
				}
			}()
			r = run(f.s.ctx)
		}()
		r.obj, r.kind = o, kind
		f.s.done <- r
	}()
}

// takeInLocked handles finished tasks: without wait, those already done;
// with wait, at least one (if any is in flight).
func (f *File) takeInLocked(ctx context.Context, wait bool) error {
	for f.s.inflight > 0 {
		var r sendResult
		if wait {
			select {
			case r = <-f.s.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			wait = false
		} else {
			select {
			case r = <-f.s.done:
			default:
				return nil
			}
		}
		f.s.inflight--
		f.startQueuedLocked()
		f.handleResultLocked(ctx, r)
	}
	return nil
}

// drainLocked waits for every task in flight and takes it in.
func (f *File) drainLocked(ctx context.Context) error {
	for f.s.inflight > 0 {
		if err := f.takeInLocked(ctx, true); err != nil {
			return err
		}
	}
	return nil
}

// rethrow re-raises a task's panic in the calling goroutine: it is a bug, and
// it surfaces in the call that takes the object in, as if it happened there.
func (f *File) rethrowLocked() {
	if r := f.s.panicked; r != nil {
		f.s.panicked = nil
		panic(fmt.Sprintf("ckptfs: upload task for %s panicked: %v\n%s", f.key(r.obj.name), r.panic, r.stack))
	}
}

func (f *File) handleResultLocked(ctx context.Context, r sendResult) {
	o := r.obj
	o.pending--
	if r.panic != nil {
		f.s.panicked = &r
		if o.failed == nil {
			o.failed = fmt.Errorf("upload task panicked: %v", r.panic)
		}
	} else if r.err != nil && o.failed == nil && r.kind != taskAbort {
		o.failed = r.err
		if errors.Is(r.err, errNameTaken) && o.name.Cno == f.pendingCno {
			// Another writer has names of this number: later objects move on.
			f.bumpCno()
		}
	}
	if len(r.refs) > 0 {
		f.refsReadLocked(o, r.refs, r.crcs)
	}
	switch r.kind {
	case taskPiece:
		if r.err == nil && r.panic == nil {
			o.parts[r.part-1] = staging.CompletedPart{Number: r.part, ETag: r.etag}
		}
	case taskWhole, taskComplete:
		if r.err == nil && r.panic == nil {
			o.complete = true
		}
	}
	f.advanceLocked(ctx, o)
}

// advanceLocked moves an object along once its tasks are in.
func (f *File) advanceLocked(ctx context.Context, o *streamObj) {
	if o.finished || o.pending > 0 {
		return
	}
	switch {
	case o.complete:
		f.completedLocked(o)
	case o.failed != nil:
		if !o.whole && o.uploadID != "" && !o.aborting {
			o.aborting = true
			key, id := f.key(o.name), o.uploadID
			f.spawn(o, taskAbort, func(ctx context.Context) sendResult {
				return sendResult{err: f.st.AbortMultipart(ctx, key, id)}
			})
			return
		}
		f.failedLocked(o)
	case o.closed && !o.whole:
		key, id := f.key(o.name), o.uploadID
		parts := slices.Clone(o.parts)
		wid, size := o.writeID, o.bytes
		f.spawn(o, taskComplete, func(ctx context.Context) sendResult {
			_, err := f.st.CompleteMultipart(ctx, key, id, parts, staging.Conditions{IfNoneMatch: true})
			if err != nil {
				// A lost answer is resolved as the flush resolves its own.
				var c flushCounters
				err = f.checkLanded(ctx, key, wid, size, fmt.Errorf("complete upload of %s: %w", key, err), &c)
				f.s.requests.Add(c.requests.Load())
			}
			return sendResult{err: err}
		})
	}
}

// completedLocked cleans the blocks of a completed object that still hold.
func (f *File) completedLocked(o *streamObj) {
	o.finished = true
	delete(f.s.objs, o)
	f.s.sentB += int64(o.n())*int64(f.bs) - o.flushData
	f.s.flushB += o.flushData
	f.stats.BytesUploaded += o.dataSent
	f.stats.ObjectsWritten++
	for slot, fbn := range o.fbns {
		d := f.dirty[fbn]
		if d == nil || d.sent != o || d.slot != uint32(slot) {
			f.s.deadB += int64(f.bs)
			continue
		}
		d.sent = nil
		want := segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: uint32(slot)}
		v, ok, err := f.tree.Get(f.s.ctx, fbn)
		same := d.busy == 0 && (d.ref != nil && o.refs[uint32(slot)] == d.ref ||
			d.ref == nil && o.refs[uint32(slot)] == nil && xxh3.Hash(d.buf) == o.hashes[slot])
		if o.summary[slot].Dead || err != nil || !ok || v.Ptr != want || !same {
			f.s.deadB += int64(f.bs)
			f.markUnsent(fbn)
			continue
		}
		if d.buf != nil {
			f.freeBlock(d.buf)
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
func (f *File) failedLocked(o *streamObj) {
	o.finished = true
	delete(f.s.objs, o)
	f.s.deadB += int64(o.n()) * int64(f.bs)
	for slot, fbn := range o.fbns {
		if d := f.dirty[fbn]; d != nil && d.sent == o && d.slot == uint32(slot) {
			d.sent = nil
			f.markUnsent(fbn)
		}
	}
	for i, op := range f.s.open {
		if op == o {
			f.s.open[i] = nil
		}
	}
	f.log.Debug("object sent ahead did not complete; its blocks stay dirty")
}

// pickLocked returns the unsent blocks of each class, ascending.
func (f *File) pickLocked() [nClasses][]uint64 {
	var out [nClasses][]uint64
	for fbn := range f.s.unsent {
		d := f.dirty[fbn]
		if d.busy > 0 {
			continue // being written: sent once the write is in
		}
		c := f.classOf(d)
		out[c] = append(out[c], fbn)
	}
	for c := range out {
		slices.Sort(out[c])
	}
	return out
}

// classOf puts a block written as part of a long sequential stream with
// runs, any other with scattered blocks.
func (f *File) classOf(d *dirtyBlock) class {
	if d != nil && d.seq != nil && d.seq.bytes >= int64(f.runBlocks())*int64(f.bs) {
		return classRun
	}
	return classSmall
}

// runBlocks is the length from which consecutive blocks count as a run: a
// leaf's worth, so that a run's leaves hold nothing else.
func (f *File) runBlocks() int { return blockmap.LeafCapacity(f.mbs) }

// fitLocked returns how many of blocks (a prefix) fit in o under limit bytes
// with the leaves they add, one leaf in sixteen spare, and those leaves.
// The blocks are inserted in the map with a placeholder first, which fixes
// the map's structure (it depends on keys only), so the leaves counted are
// the real ones; unsent blocks are dirty, and reads take them from the dirty
// tier whatever their pointer.
func (f *File) fitLocked(ctx context.Context, o *streamObj, blocks []uint64, limit int64) (int, []uint64, error) {
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
		if f.objSize(o.n()+n+1, withSpare(have+len(added)+extra)) > limit {
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
func (f *File) objSize(n, m int) int64 {
	return int64(n)*(int64(f.bs)+segment.SummaryEntrySize) + int64(m)*int64(f.mbs) + segment.HeaderSize
}

// tailRoom is the room to leave after n data blocks for the tail of an
// object with about m leaves (and the spare).
func (f *File) tailRoom(n, m int) int {
	return withSpare(m+1)*f.mbs + n*segment.SummaryEntrySize + segment.HeaderSize
}

// withSpare adds the spare leaves: one in sixteen.
func withSpare(m int) int { return m + (m+15)/16 }

// sendAheadLocked sends what is due. Called after a write, holding mu.
func (f *File) sendAheadLocked(ctx context.Context) error {
	if err := f.takeInLocked(ctx, false); err != nil {
		return err
	}
	f.rethrowLocked()
	target := f.target()
	chunk := f.p.ChunkSize
	whole := target <= chunk
	due := chunk
	if whole {
		due = target
	}
	for f.s.unsentB >= due {
		picked := f.pickLocked()
		progressed := false
		for c := range nClasses {
			blocks := picked[c]
			for int64(len(blocks))*int64(f.bs) >= due {
				for f.s.inflight >= f.p.Concurrency {
					if err := f.takeInLocked(ctx, true); err != nil {
						return err
					}
					f.rethrowLocked()
				}
				var n int
				var err error
				if whole {
					n, err = f.sendWholeLocked(ctx, class(c), blocks)
				} else {
					n, err = f.sendPieceLocked(ctx, class(c), blocks, false)
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

// placeLocked puts blocks into o at its next slots: copies them into buf,
// hashes them and sets their pointers.
func (f *File) placeLocked(ctx context.Context, o *streamObj, blocks []uint64, buf []byte, readRefs bool) ([]pieceRef, error) {
	bs := int64(f.bs)
	var later []pieceRef
	for i, fbn := range blocks {
		d := f.dirty[fbn]
		slot := uint32(o.n())
		blk := buf[int64(i)*bs : int64(i+1)*bs]
		var crc uint32
		var h uint64
		switch {
		case d.ref == nil:
			copy(blk, d.buf)
			crc, h = segment.Checksum(blk), xxh3.Hash(blk)
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
		o.hashes = append(o.hashes, h)
		o.summary = append(o.summary, segment.SummaryEntry{FBN: fbn, CRC: crc})
		v := blockmap.Value{Ptr: segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: slot}, CRC: crc}
		if err := f.tree.Set(ctx, fbn, v); err != nil {
			return later, fmt.Errorf("place block %d in %s: %w", fbn, f.key(o.name), err)
		}
		d.sent, d.slot = o, slot
		f.clearUnsent(fbn)
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
func (f *File) refsReadLocked(o *streamObj, refs []pieceRef, crcs []uint32) {
	o.refPending -= len(refs)
	if crcs == nil {
		return
	}
	for i, r := range refs {
		o.summary[r.slot].CRC = crcs[i]
		ptr := segment.Ptr{Cno: o.name.Cno, Part: o.name.Part, Slot: r.slot}
		if v, ok, err := f.tree.Get(f.s.ctx, r.fbn); err == nil && ok && v.Ptr == ptr {
			if err := f.tree.Set(f.s.ctx, r.fbn, blockmap.Value{Ptr: ptr, CRC: crcs[i]}); err != nil && o.failed == nil {
				o.failed = err
			}
		}
	}
}

// waitRefsLocked waits until every block by reference placed in o has been
// read, so that o's leaves and summary carry their checksums.
func (f *File) waitRefsLocked(ctx context.Context, o *streamObj) error {
	for o.refPending > 0 {
		if err := f.takeInLocked(ctx, true); err != nil {
			return err
		}
	}
	return nil
}

func (f *File) newStreamObj(c class, whole bool) *streamObj {
	cno := f.takeCno()
	o := &streamObj{name: segment.ObjectName{Cno: cno, Part: f.nextPart}, cls: c, whole: whole,
		leafLos: make(map[uint64]struct{})}
	f.nextPart++
	f.s.objs[o] = struct{}{}
	return o
}

// leavesLocked returns the leaves over o's live blocks, as they are now.
func (f *File) leavesLocked(ctx context.Context, o *streamObj) ([][]byte, error) {
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

// tailLocked encodes [meta blocks][summary][header] of a stream object.
func (f *File) tailLocked(o *streamObj) ([]byte, error) {
	l := segment.Layout{Format: segment.FormatStream, DataBlockSize: uint32(f.bs), MetaBlockSize: uint32(f.mbs),
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
func (f *File) sendWholeLocked(ctx context.Context, c class, blocks []uint64) (int, error) {
	if err := f.holdWritersLocked(ctx); err != nil {
		return 0, err // nothing placed: the blocks stay unsent
	}
	o := f.newStreamObj(c, true)
	n, added, err := f.fitLocked(ctx, o, blocks, f.target())
	if err != nil {
		return 0, err
	}
	if n == 0 {
		n = 1 // a target below one block still sends one
	}
	held := int64(n) * int64(f.bs)
	if f.s.settling {
		f.forceCopy(held)
	} else if !f.holdCopy(held) {
		delete(f.s.objs, o)
		return 0, nil // the limits come first: no room for a copy now
	}
	data := allocPiece(int(held), f.tailRoom(n, len(added)))
	if _, err := f.placeLocked(ctx, o, blocks[:n], data, true); err != nil {
		f.releaseCopy(held)
		freePiece(data)
		f.abandonLocked(ctx, o, err)
		return 0, err
	}
	if f.s.settling {
		o.flushData = int64(n) * int64(f.bs)
	}
	metas, err := f.leavesLocked(ctx, o)
	if err != nil {
		f.releaseCopy(held)
		freePiece(data)
		f.abandonLocked(ctx, o, err)
		return 0, err
	}
	o.metas = metas
	o.closed = true
	if f.objSize(o.n(), len(metas)) > f.p.MaxObjectBytes {
		f.releaseCopy(held)
		o.failed = fmt.Errorf("object %s given up: its leaves outgrew the spare", f.key(o.name))
		f.advanceLocked(ctx, o)
		return 0, nil // nothing went; stop sending until something changes
	}
	tail, err := f.tailLocked(o)
	if err != nil {
		f.releaseCopy(held)
		return 0, err
	}
	body := append(data, tail...) // within data's capacity: no copy
	key := f.key(o.name)
	f.spawn(o, taskWhole, func(ctx context.Context) sendResult {
		defer f.releaseCopy(held)
		defer freePiece(body)
		return sendResult{err: f.createObject(ctx, key, body)}
	})
	return n, nil
}

// createObject stores a whole object with If-None-Match, telling a lost
// answer from a name taken by another writer.
func (f *File) createObject(ctx context.Context, key string, body []byte) error {
	id := newWriteID()
	_, err := f.st.Put(ctx, key, body, staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true},
		Metadata: map[string]string{writeIDMeta: id}})
	if err == nil {
		return nil
	}
	var c flushCounters
	err = f.checkLanded(ctx, key, id, int64(len(body)), fmt.Errorf("put %s: %w", key, err), &c)
	f.s.requests.Add(c.requests.Load())
	return err
}

// sendPieceLocked places one piece's worth of blocks into the open object
// of class c (opening one, or closing a full one first). With last, the
// piece may be short and also carries the object's tail: the object closes.
func (f *File) sendPieceLocked(ctx context.Context, c class, blocks []uint64, last bool) (int, error) {
	chunk := f.p.ChunkSize
	perPiece := int(chunk / int64(f.bs))
	o := f.s.open[c]
	n := min(len(blocks), perPiece)
	var added []uint64
	if o != nil {
		// Room for the piece and its leaves, one leaf in sixteen spare; at
		// the flush, as many as fit the object's limit.
		limit := f.target()
		if last {
			limit = f.p.MaxObjectBytes
		}
		fit, add, err := f.fitLocked(ctx, o, blocks[:n], limit)
		if err != nil {
			return 0, err
		}
		if last {
			n, added = fit, add
		} else if fit < n {
			if err := f.closeOpenLocked(ctx, c); err != nil {
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
		// Creating the upload is a request too: it waits for room.
		if err := f.roomLocked(ctx); err != nil {
			return 0, err
		}
		o = f.newStreamObj(c, false)
		fit, add, err := f.fitLocked(ctx, o, blocks[:n], f.target())
		if err != nil {
			return 0, err
		}
		if fit == 0 {
			delete(f.s.objs, o)
			return 0, nil
		}
		if fit < n {
			// Even an empty object holds no more than this (scattered blocks
			// bring many leaves): it is sent as one object, closing at once,
			// because a part short of a piece can only be the last.
			last = true
		}
		n, added = fit, add
		o.writeID = newWriteID()
		id, err := f.st.CreateMultipart(ctx, f.key(o.name), staging.PutOptions{
			Metadata: map[string]string{writeIDMeta: o.writeID}})
		if err != nil {
			// Nothing was placed: the blocks stay unsent, and the flush or
			// the dirty limit takes them.
			delete(f.s.objs, o)
			return 0, fmt.Errorf("send ahead %s: %w", f.key(o.name), err)
		}
		o.uploadID = id
		f.s.open[c] = o
	}
	held := int64(n) * int64(f.bs)
	if last || f.s.settling {
		// A flush must make progress: its pieces are the stated overhead
		// above the budget.
		f.forceCopy(held)
	} else if !f.holdCopy(held) {
		// The limits come first: no room for a copy, nothing sent now.
		return 0, nil
	}
	extra := 0
	if last {
		extra = f.tailRoom(o.n()+n, len(o.leafLos)+len(added))
	}
	buf := allocPiece(int(held), extra)
	later, err := f.placeLocked(ctx, o, blocks[:n], buf, last)
	if err != nil {
		// Blocks of this piece may be placed already, with no bytes sent:
		// the object cannot complete as it is, and is given up.
		f.releaseCopy(held)
		freePiece(buf)
		f.abandonLocked(ctx, o, err)
		return 0, err
	}
	for _, lo := range added {
		o.leafLos[lo] = struct{}{}
	}
	if f.s.settling {
		o.flushData += int64(n) * int64(f.bs)
	}
	if last {
		return n, f.finishLocked(ctx, o, buf, held)
	}
	o.parts = append(o.parts, staging.CompletedPart{})
	o.bytes += int64(len(buf))
	part := int32(len(o.parts))
	key, id := f.key(o.name), o.uploadID
	bs := int64(f.bs)
	f.spawn(o, taskPiece, func(ctx context.Context) sendResult {
		defer f.releaseCopy(held)
		defer freePiece(buf)
		r := sendResult{part: part, refs: later}
		if len(later) > 0 {
			if r.crcs, r.err = readRefs(buf, bs, later); r.err != nil {
				return r
			}
		}
		r.etag, r.err = f.st.UploadPart(ctx, key, id, part, buf)
		return r
	})
	if o.n() >= int((f.target()-segment.HeaderSize)/int64(f.bs)) {
		return n, f.closeOpenLocked(ctx, c)
	}
	return n, nil
}

// abandonLocked gives up o after a failure while blocks were being placed
// in it: it closes as failed, is aborted once its tasks are in, and every
// block placed in it goes back to the unsent (it is still dirty).
func (f *File) abandonLocked(ctx context.Context, o *streamObj, err error) {
	if f.s.open[o.cls] == o {
		f.s.open[o.cls] = nil
	}
	if o.failed == nil {
		o.failed = fmt.Errorf("object %s given up: %w", f.key(o.name), err)
	}
	o.closed = true
	f.advanceLocked(ctx, o)
}

// closeOpenLocked closes the open object of class c with its tail.
func (f *File) closeOpenLocked(ctx context.Context, c class) error {
	o := f.s.open[c]
	if o == nil {
		return nil
	}
	return f.finishLocked(ctx, o, nil, 0)
}

// finishLocked closes o: its last part is data (may be empty) followed by
// the tail. An object whose leaves outgrew the spare is given up.
func (f *File) finishLocked(ctx context.Context, o *streamObj, data []byte, held int64) error {
	f.s.open[o.cls] = nil
	// Blocks rewritten while o was open may go into the next object.
	for slot, fbn := range o.fbns {
		if o.summary[slot].Dead {
			if d := f.dirty[fbn]; d != nil && d.sent == o && d.slot == uint32(slot) {
				d.sent = nil
				f.markUnsent(fbn)
			}
		}
	}
	// giveUp closes o as failed: it is aborted once its tasks are in, and
	// its blocks stay dirty.
	giveUp := func(err error) {
		f.releaseCopy(held)
		if o.failed == nil {
			o.failed = err
		}
		o.closed = true
		f.advanceLocked(ctx, o)
	}
	if err := f.waitRefsLocked(ctx, o); err != nil {
		giveUp(err)
		return err
	}
	if o.failed != nil {
		giveUp(o.failed) // a piece failed while we waited
		return nil
	}
	metas, err := f.leavesLocked(ctx, o)
	if err != nil {
		giveUp(err)
		return err
	}
	o.metas = metas
	if f.objSize(o.n(), len(metas)) > f.p.MaxObjectBytes {
		giveUp(fmt.Errorf("object %s given up: its leaves outgrew the spare", f.key(o.name)))
		return nil
	}
	tail, err := f.tailLocked(o)
	if err != nil {
		giveUp(err)
		return err
	}
	body := append(data, tail...) // within data's capacity when data has blocks
	o.parts = append(o.parts, staging.CompletedPart{})
	o.bytes += int64(len(body))
	part := int32(len(o.parts))
	key, id := f.key(o.name), o.uploadID
	f.spawn(o, taskPiece, func(ctx context.Context) sendResult {
		defer f.releaseCopy(held)
		defer freePiece(body)
		etag, err := f.st.UploadPart(ctx, key, id, part, body)
		return sendResult{part: part, etag: etag, err: err}
	})
	// Closed only now: the completion must wait for the tail part, which is
	// in flight from here on.
	o.closed = true
	return nil
}

// settleLocked is the flush's first step with sending ahead: what is still
// unsent goes into the open objects as their last pieces, the open objects
// close, and every object in flight completes (or fails: its blocks stay
// dirty and the flush writes them; not an error of the flush).
func (f *File) settleLocked(ctx context.Context) error {
	if err := f.takeInLocked(ctx, false); err != nil {
		return err
	}
	f.rethrowLocked()
	f.s.settling = true
	defer func() { f.s.settling = false }()
	if !f.p.sendsWhole() {
		picked := f.pickLocked()
		for c := range nClasses {
			blocks := picked[c]
			// Full pieces first, several at once, then the rest with the tail.
			for f.s.open[c] != nil && int64(len(blocks))*int64(f.bs) >= f.p.ChunkSize {
				if err := ctx.Err(); err != nil {
					return err
				}
				for f.s.inflight >= f.p.Concurrency {
					if err := f.takeInLocked(ctx, true); err != nil {
						return err
					}
				}
				n, err := f.sendPieceLocked(ctx, class(c), blocks, false)
				if err != nil {
					return err
				}
				if n == 0 {
					break // nothing placed: the flush's own objects take the rest
				}
				blocks = blocks[n:]
			}
			if f.s.open[c] != nil {
				if _, err := f.sendPieceLocked(ctx, class(c), blocks, true); err != nil {
					return err
				}
			}
		}
	}
	if err := f.drainLocked(ctx); err != nil {
		return err
	}
	f.rethrowLocked()
	return nil
}

func (p Params) sendsWhole() bool { return min(p.StreamSegmentBytes, p.MaxObjectBytes) <= p.ChunkSize }

// stopSender cancels the tasks in flight and waits for them; open uploads
// are aborted (briefly, even though the tasks were cancelled).
func (f *File) stopSender() {
	if f.s == nil {
		return
	}
	f.s.cancel()
	// Queued tasks run too, with the cancelled context: they fail at once
	// and return the budget and buffers they hold. Their results are taken
	// while waiting, so none blocks on a full channel.
	for _, q := range f.s.queued {
		f.start(q.o, q.kind, q.run)
	}
	f.s.queued = nil
	waited := make(chan struct{})
	go func() {
		f.s.wg.Wait()
		close(waited)
	}()
	for {
		select {
		case r := <-f.s.done:
			r.obj.pending--
			continue
		case <-waited:
		}
		break
	}
	// Every task sent its result before it was done: take in the rest.
	for len(f.s.done) > 0 {
		r := <-f.s.done
		r.obj.pending--
	}
	f.s.inflight = 0
	for o := range f.s.objs {
		if !o.whole && o.uploadID != "" && !o.complete {
			var c flushCounters
			f.abort(f.key(o.name), o.uploadID, &c)
		}
	}
	f.s.objs = make(map[*streamObj]struct{})
	f.s.open = [nClasses]*streamObj{}
}

// relieveLocked brings the dirty tier back under its limit: the limits come
// first. Open objects close early at whatever size they have, objects in
// flight complete (their blocks leave the tier), and if that is not enough a
// partial segment takes the rest; the writer waits for all of it.
func (f *File) relieveLocked(ctx context.Context) error {
	if f.s.inflight > 0 || f.s.open != [nClasses]*streamObj{} {
		for c := range nClasses {
			if err := f.closeOpenLocked(ctx, class(c)); err != nil {
				return err
			}
		}
		if err := f.drainLocked(ctx); err != nil {
			return err
		}
		f.rethrowLocked()
	}
	if f.dirtyB > f.p.DirtyLimit {
		return f.writePartialLocked(ctx)
	}
	return nil
}

// relieveAllLocked empties the dirty tier as far as it can (the memory budget
// is full): like relieveLocked, whatever the limit.
func (f *File) relieveAllLocked(ctx context.Context) error {
	for c := range nClasses {
		if err := f.closeOpenLocked(ctx, class(c)); err != nil {
			return err
		}
	}
	if err := f.drainLocked(ctx); err != nil {
		return err
	}
	f.rethrowLocked()
	return f.writePartialLocked(ctx)
}

// resetSenderLocked forgets objects sent ahead (a rollback): tasks in flight
// are taken in (a panic re-raised), open uploads aborted.
func (f *File) resetSenderLocked(ctx context.Context) {
	if f.s == nil {
		return
	}
	_ = f.drainLocked(ctx)
	f.rethrowLocked()
	for c, o := range f.s.open {
		if o != nil && o.uploadID != "" {
			var fc flushCounters
			f.abort(f.key(o.name), o.uploadID, &fc)
		}
		f.s.open[c] = nil
	}
	f.s.objs = make(map[*streamObj]struct{})
	f.s.unsent = make(map[uint64]struct{})
	f.s.unsentB, f.s.sentB, f.s.deadB, f.s.flushB = 0, 0, 0, 0
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
