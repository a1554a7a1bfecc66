package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
)

// Reading ahead and sharing reads.
//
// A File follows the sequential streams of its readers (ReadStream) as it
// follows its writers': a read that starts within seqReadSlack of where a
// stream ended extends it, and once the stream is proved, one that the
// kernel's several READs in flight brought out of order, up to
// seqReorderSlack behind or as far ahead as it fetched (readStream.reach).
// Once a stream has read more than prefetchProve
// bytes in a row (so one read of 1 MiB never starts it), or from its first
// read when it begins at offset 0 (readStream.proved), the file fetches
// ahead of it twice as far as it has read in a row, from prefetchMinWindow up
// to prefetchMaxWindow: the window doubles each time the stream reads as much
// again, fast enough that the link is full after a few round trips. It is
// fetched in pieces of a prefetchPieces'th of the window (a power of two of
// blocks, at least prefetchMinPiece, at most min(read_get_max_bytes,
// prefetchMaxPiece)) cut on a grid of their size in the file, so that they
// meet objects' ends instead of straddling them; each piece is planned by the
// read planner (so a GET never crosses an object or read_get_max_bytes) and
// sent at once, at most prefetchInFlight of them in flight per file. The
// stretch a read extends the window by is planned and sent by a goroutine of
// its own, not by the read (planning may load index nodes from the store),
// and by that one only (the kernel has several reads of a stream in flight;
// two planning one stretch would split it into small GETs). Another
// goroutine loads the map of the stretch after the window (twice the window
// ahead, at most prefetchMaxWindow past it: warmMap), so that the planner
// never waits for the index of an object the window enters. A window stops
// where another sequential stream began ahead of it (readers each reading
// their part of a file), instead of fetching again what that one reads. A
// read that is not sequential reads exactly its blocks; a stream that stops
// wastes at most its window: twice what it read in a row, and nothing for
// reads of up to 1 MiB.
//
// Every GET the read path makes is a flight: the blocks it fetches are
// registered, by pointer and CRC (the block cache's key), before it is sent,
// and a read that needs one of them waits for that flight instead of sending
// its own (one GET per range, whoever asked first: readers of one checkpoint,
// or read-ahead and the reader itself). A reader's own flight is forgotten
// when it lands (its blocks go into the block cache); a flight fetched ahead
// is kept, its bytes drawn from the mount's budget (TryAcquireRead: a piece
// that does not fit is not fetched), until the stream that fetched it has
// read seqReadKeep past it, the stream is dropped, or the file is closed or
// rolled back. Because flights are keyed by where a block is stored and its
// CRC, a map that names other objects (a newer checkpoint of another writer,
// adopted by a rollback or an open) never finds the bytes of an older one: a
// read sees one checkpoint's blocks, those of the map it planned with. A
// read wholly inside one flight may be answered with the flight's own
// verified bytes instead of a copy (ReadStreamView, the FUSE layer's
// replies): a flight's buffer is the store's answer to its GET, never
// pooled, reused or written to, so the slice stays what it was verified to
// be for as long as the reply holds it, even after the flight is dropped and
// its budget returned (then it is memory of the reply's, at most one READ's
// worth per reply in progress).
const (
	seqReadSlack    = 1 << 20  // the kernel keeps several reads in flight, out of order
	seqReorderSlack = 16 << 20 // how far out of order a proved stream's reads may come (reach)
	// seqReadKeep is how far a stream reads past a flight ahead before it
	// drops it: a read that came late finds its blocks there instead of
	// fetching them again (reads came 2 to 4 MiB late).
	seqReadKeep       = 4 << 20
	prefetchProve     = 1 << 20 // sequential bytes before read-ahead starts (more than one read of 1 MiB)
	prefetchMinWindow = 1 << 20
	prefetchMaxWindow = 128 << 20
	prefetchMaxPiece  = 8 << 20
	// prefetchMinPiece keeps the pieces of a small window (a stream that
	// has just proved sequential) from costing a request's latency for a
	// few blocks each.
	prefetchMinPiece = 1 << 20
	// prefetchPieces is how many pieces a window is fetched in, and
	// prefetchInFlight how many GETs ahead one file has in flight at once:
	// each request pays the link's latency before its bytes move, so it
	// takes more requests than the link's total over one request's
	// bandwidth to keep it full (the general link, 450 over 90 MB/s with
	// 30 ms each, carries 348 MB/s with 8 GETs of 4 MiB in flight, 398
	// with 8 of 8 MiB and 443 with 16 of 4 MiB: BenchmarkLinkGets). The
	// window holds twice the pieces that may be in flight, so that pieces
	// landed and not yet read (the reader is not always waiting) do not
	// leave the link short of requests.
	prefetchPieces   = 32
	prefetchInFlight = 24
	maxReadStreams   = 16
	// prefetchFileCap bounds what one file holds fetched ahead without a
	// budget (the engine alone, in tests and tools).
	prefetchFileCap = 2 * prefetchMaxWindow
)

// flight is one ranged GET of the read path, shared by every read that needs
// one of its blocks.
type flight struct {
	g    PlannedGet
	done chan struct{} // closed when data or err is set
	data []byte        // the verified bytes of g (set before done closes)
	err  error

	ahead bool // fetched ahead: kept until dropped
	// hurry is closed (once, by hurryOnce) when a read waits for a flight
	// ahead: it goes at once, past the cap, instead of queueing behind
	// pieces fetched further ahead (another stream's).
	hurry     chan struct{}
	hurryOnce sync.Once
	held      int64 // budget drawn (ahead only)
	end       int64 // file offset past its last block
	// dropped, landed: GUARDED_BY(readers.mu); the budget is returned by
	// whichever of the two comes second.
	dropped, landed bool
}

// reach is where a read may start and still continue s: within seqReadSlack
// of where it ended, and once it is proved sequential (it fetches ahead),
// up to seqReorderSlack behind that, and ahead as far as it has fetched
// (at most seqReorderSlack). The kernel sends a stream's READs in order,
// several at once (up to the connection's max_background, 12 of up to
// 1 MiB), but the mount's goroutines take them up in any order, more so on
// a busy machine: reads came 2 to 4 MiB behind or 2 MiB ahead of the
// stream's end, and each started a stream of its own, which the reads that
// followed then continued, its window ramping up again from nothing while
// the link emptied (a cold cat of 1 GiB on the general link read at 281 MB/s
// where dd, fewer READs in flight, read at 383). A stream not proved keeps
// the narrow slack both ways: random reads must not join one another, and
// a reader that starts just behind another must prove its own stream.
func (s *readStream) reach() (lo, hi int64) {
	if !s.proved() {
		return s.next - seqReadSlack, s.next + seqReadSlack
	}
	return s.next - seqReorderSlack, s.next + max(seqReadSlack, min(s.ahead-s.next, seqReorderSlack))
}

// proved: s fetches ahead. A stream proves sequential by reading more than
// prefetchProve in a row, or at once when it begins at the start of the
// file: that is how cat, cp, tar and a program loading a checkpoint read,
// and the kernel sends the first READs of a file one at a time (256 KiB,
// then 512 KiB and 1 MiB), each a round trip to the store before the
// window would start (45 ms of the general link each). A reader of the
// start alone (file(1), a format's magic) wastes at most the smallest
// window, prefetchMinWindow.
func (s *readStream) proved() bool { return s.start == 0 || s.bytes > prefetchProve }

// slot is one block of a flight.
type slot struct {
	fl *flight
	j  int // index of the block in fl.g.refs
}

// readStream is one sequential reader followed by ReadStream.
type readStream struct {
	start   int64 // where it began
	next    int64 // where the next sequential read starts
	bytes   int64 // bytes read in a row
	ahead   int64 // end of what was fetched ahead
	warmed  int64 // end of what of the map was loaded ahead (warmMap)
	window  int64 // how far ahead of next it fetches
	last    uint64
	flights []*flight // fetched ahead, by offset
	gone    bool      // dropped: what is fetched for it now is dropped too
}

// ReadStats count the read path's work since the file was opened.
type ReadStats struct {
	GetsAhead    int64 // GETs sent ahead of a sequential reader
	BytesAhead   int64 // bytes they fetched
	SharedBlocks int64 // blocks a read took from a flight another read sent
	HeldAhead    int64 // bytes fetched ahead held now
	MaxHeldAhead int64 // the most ever held
	// ViewReads: reads (ReadStreamView) answered with a flight's bytes,
	// not copied.
	ViewReads int64
}

// readers is the read-ahead and flight part of one File: it follows
// sequential readers, fetches ahead of them and shares GETs between reads.
// Its lock is taken inside f.mu (shared or not) and never held across a
// request. Lock rules: followLocked, fetchAheadLocked and pieceBytes are
// called with f.mu held (shared is enough: they read f's map and size);
// reset with f.mu held exclusively; planAhead and warmMap are goroutines
// that take f.mu shared themselves; runAhead holds neither lock across its
// GET; holdAheadLocked is called with r.mu held.
type readers struct {
	f       *File // set once by init
	mu      sync.Mutex
	blocks  map[cacheKey]slot // GUARDED_BY(mu)
	streams []*readStream     // GUARDED_BY(mu)
	tick    uint64            // GUARDED_BY(mu)
	held    int64             // budget drawn for flights ahead; GUARDED_BY(mu)
	stats   ReadStats         // GUARDED_BY(mu)

	// ctx ends the flights ahead (reset); the goroutines that run them are
	// counted by wg, which Close waits for.
	ctx    context.Context    // GUARDED_BY(mu)
	cancel context.CancelFunc // GUARDED_BY(mu)
	wg     sync.WaitGroup
	sem    chan struct{} // flights ahead sending at once
	budget *Budget       // the mount's; may be nil
}

func (r *readers) init(f *File, budget *Budget) {
	r.f = f
	r.budget = budget
	r.blocks = make(map[cacheKey]slot)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.sem = make(chan struct{}, prefetchInFlight)
}

// ReadStats returns the read path's counters.
func (f *File) ReadStats() ReadStats {
	f.rd.mu.Lock()
	defer f.rd.mu.Unlock()
	s := f.rd.stats
	s.HeldAhead = f.rd.held
	return s
}

// ReadStream is ReadAt for a reader that may be sequential (the FUSE layer's
// reads): it follows the reader's stream and fetches ahead of it once it
// proves sequential, so that its next reads find their blocks in memory or
// in flight.
func (f *File) ReadStream(ctx context.Context, p []byte, off int64) (int, error) {
	b, err := f.read(ctx, p, off, true, false)
	return len(b), err
}

// ReadStreamView is ReadStream for a caller that only passes the bytes on
// (the FUSE layer's replies): it returns the bytes read, which are p[:n], or,
// when the whole read lies in one GET of the read path (a piece fetched
// ahead of a sequential reader, as its reads are), a slice of that GET's
// verified bytes, not copied into p. The caller must not change them; they
// stay valid as long as it keeps them, for a flight's buffer is the store's
// answer, never reused nor written to (the block cache keeps copies).
func (f *File) ReadStreamView(ctx context.Context, p []byte, off int64) ([]byte, error) {
	return f.read(ctx, p, off, true, true)
}

// readAt is ReadAt, following streams when stream is set.
func (f *File) readAt(ctx context.Context, p []byte, off int64, stream bool) (int, error) {
	b, err := f.read(ctx, p, off, stream, false)
	return len(b), err
}

// read reads at off into p, following streams when stream is set, and
// returns what it read: p[:n], or with view, possibly a flight's bytes
// (ReadStreamView).
func (f *File) read(ctx context.Context, p []byte, off int64, stream, view bool) ([]byte, error) {
	if off < 0 {
		return nil, fmt.Errorf("read %s at %d: %w", f.prefix, off, ErrInvalid)
	}
	bs := int64(f.bs)
	release, err := f.ranges.lockCtx(ctx, uint64(off/bs), uint64((off+int64(len(p))+bs-1)/bs), false)
	if err != nil {
		return nil, fmt.Errorf("read %s at %d: waiting for the blocks: %w", f.prefix, off, err)
	}
	defer release()
	b, plan, bs, eof, err := f.readStart(ctx, p, off, stream, view)
	if err != nil || plan == nil {
		return b, err
	}
	// The GETs go without mu: the range lock keeps the blocks as planned
	// (a write, truncate, merge or rollback of them waits; a flush only
	// shares them), and the objects they name are not deleted while a map
	// names them.
	if err := f.readPlanned(ctx, plan, b, off, bs); err != nil {
		return nil, err
	}
	return b, eof
}

// readStart is the part of a read made under mu (shared): it serves what
// memory holds and plans the rest. It returns the bytes to fill
// (p[:n]) and their plan, or the bytes read (plan nil, err the read's
// end: io.EOF or an error); bs is the file's block size then.
func (f *File) readStart(ctx context.Context, p []byte, off int64, stream, view bool) (b []byte, plan *ReadPlan, bs int64, eof, err error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return nil, nil, 0, nil, fmt.Errorf("read %s: %w", f.prefix, ErrClosed)
	}
	if off >= f.size {
		return p[:0], nil, 0, nil, io.EOF
	}
	n := int64(len(p))
	if off+n > f.size {
		n = f.size - off
		eof = io.EOF
	}
	if n == 0 {
		return p[:0], nil, 0, nil, eof
	}
	if stream {
		f.rd.followLocked(ctx, off, n)
	}
	if view {
		if b := f.viewLocked(ctx, off, n); b != nil {
			return b, nil, 0, nil, eof
		}
	}
	pl, err := f.readPlanLocked(ctx, p[:n], off)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	if pl == nil {
		return p[:n], nil, 0, nil, eof
	}
	return p[:n], pl, int64(f.bs), eof, nil
}

// errNoView stops viewLocked's scan at a block it cannot serve.
var errNoView = errors.New("not one flight")

// viewLocked returns file[off, off+n) as a slice of one flight's verified
// bytes, when every block of it is in that flight, in order, and the flight
// lands without error; else nil, and the caller reads as usual (it also
// meets any error there). It takes blocks from where planLocked would: a
// block that is dirty, a hole, pinned or embedded is served from elsewhere,
// so there is no view. The caller holds mu shared and the blocks' range
// lock.
//
// On a sequential reader's path this saves copying every byte once more
// (from the flight into the read's buffer): an eighth of the mount's CPU on
// the directory link, where the CPU is the cap.
func (f *File) viewLocked(ctx context.Context, off, n int64) []byte {
	bs := int64(f.bs)
	first := uint64(off / bs)
	end := uint64((off + n + bs - 1) / bs)
	for fbn := first; fbn < end; fbn++ {
		if f.dirty[fbn] != nil {
			return nil
		}
	}
	var fl *flight
	j0 := 0
	next := first
	err := f.tree.Scan(ctx, first, end, func(fbn uint64, v blockmap.Value) error {
		if fbn != next || f.w.pinnedBlock(v.Ptr) != nil {
			return errNoView
		}
		if b, err := f.embedBlock(v); err != nil || b != nil {
			return errNoView
		}
		sl, ok := f.rd.lookup(keyOf(v))
		switch {
		case !ok:
			return errNoView
		case fl == nil:
			fl, j0 = sl.fl, sl.j
		case sl.fl != fl || sl.j != j0+int(fbn-first):
			return errNoView
		}
		next++
		return nil
	})
	if err != nil || next != end || fl == nil {
		return nil
	}
	fl.wanted()
	select {
	case <-fl.done:
	case <-ctx.Done():
		return nil
	}
	if fl.err != nil {
		return nil
	}
	f.rd.mu.Lock()
	f.rd.stats.SharedBlocks += int64(end - first)
	f.rd.stats.ViewReads++
	f.rd.mu.Unlock()
	lo := int64(j0)*bs + off - int64(first)*bs
	return fl.data[lo : lo+n : lo+n]
}

// followLocked extends (or starts) the stream a read of [off, off+n) belongs
// to and fetches ahead of it when it is due. The caller holds mu shared.
func (r *readers) followLocked(ctx context.Context, off, n int64) {
	f := r.f
	r.mu.Lock()
	r.tick++
	var s *readStream
	for _, c := range r.streams {
		lo, hi := c.reach()
		if off >= lo && off <= hi && (s == nil || abs64(off-c.next) < abs64(off-s.next)) {
			s = c
		}
	}
	if s == nil {
		if len(r.streams) >= maxReadStreams {
			oldest := 0
			for i, c := range r.streams {
				if c.last < r.streams[oldest].last {
					oldest = i
				}
			}
			r.dropStreamLocked(r.streams[oldest])
			r.streams = append(r.streams[:oldest], r.streams[oldest+1:]...)
		}
		s = &readStream{start: off, next: off + n, bytes: n, ahead: off + n, last: r.tick}
		r.streams = append(r.streams, s)
		if !s.proved() {
			r.mu.Unlock()
			return
		}
	}
	s.last = r.tick
	if off+n > s.next {
		s.bytes += off + n - max(off, s.next)
		s.next = off + n
	}
	// What the stream has read past is of no more use to it, but to a read
	// the kernel sent before the last ones, which may still come.
	keep := s.flights[:0]
	for _, fl := range s.flights {
		if fl.end <= s.next-seqReadKeep {
			r.dropLocked(fl)
			continue
		}
		keep = append(keep, fl)
	}
	clear(s.flights[len(keep):])
	s.flights = keep
	if !s.proved() {
		r.mu.Unlock()
		return
	}
	s.window = min(max(2*s.bytes, prefetchMinWindow), prefetchMaxWindow)
	piece := r.pieceBytes(s.window)
	start := max(s.ahead, off)
	end := min(s.next+s.window, f.size)
	// Another stream that began ahead of this one reads what follows its
	// start (readers each reading their part of one file): this one's
	// window stops there instead of fetching, again, what that one reads.
	// Only a stream proved sequential counts: random reads ahead (each
	// starts a stream) must not cut a sequential reader's window.
	stop := f.size
	for _, c := range r.streams {
		if c != s && c.proved() && c.start >= s.next && c.start < stop {
			stop = c.start
		}
	}
	if end >= stop {
		end = stop
	} else {
		end = end / piece * piece // whole pieces of the grid only, but the last
	}
	fctx := r.ctx
	// The map of the stretch the window enters next is loaded now, by a
	// goroutine of its own, so that planning the window never waits for
	// it: the first block of every object needs that object's header and
	// then its index region, two round trips (60 ms on the general link),
	// and the pieces planned behind it wait as long. It is twice the window
	// ahead (the window doubles while it grows), at most prefetchMaxWindow
	// past the window's end, and costs two small GETs an object.
	if wlo, whi := max(s.warmed, end), min(s.next+s.window+min(2*s.window, prefetchMaxWindow), stop); whi > wlo {
		s.warmed = whi
		r.wg.Add(1)
		go r.warmMap(fctx, wlo, whi)
	}
	if end <= start {
		r.mu.Unlock()
		return
	}
	// [start, end) is this read's to fetch: the kernel has several reads of
	// a stream in flight at once, and two planning the same stretch would
	// split it between them block by block (their claims interleave) into
	// many small GETs.
	s.ahead = end
	r.wg.Add(1)
	r.mu.Unlock()
	go r.planAhead(fctx, s, start, end, piece)
}

// planAhead plans and sends the pieces of [start, end) ahead of stream s (its
// goroutine, counted by rd.wg; ctx is the readers', which a reset ends). It
// runs off the read's path: planning blocks far ahead may load index nodes
// and resolve objects, a round trip to the store each, and a read that
// needs none of those blocks must not wait for them (on the general link a
// read stalled 70 ms at every object the window entered).
func (r *readers) planAhead(ctx context.Context, s *readStream, start, end, piece int64) {
	f := r.f
	defer r.wg.Done()
	got := start
	f.mu.RLock()
	if !f.closed && ctx.Err() == nil {
		got = r.fetchAheadLocked(ctx, s, start, min(end, f.size), piece)
	}
	f.mu.RUnlock()
	r.mu.Lock()
	if got < end && s.ahead == end {
		// Stopped short (the budget): a later read tries again from there.
		s.ahead = got
	}
	r.mu.Unlock()
}

// warmMap loads the map of file[lo, hi) and resolves its objects, ahead of
// the planner (its goroutine, counted by rd.wg; ctx is the readers'). What
// fails here is met again, and reported, by the read that needs it.
func (r *readers) warmMap(ctx context.Context, lo, hi int64) {
	f := r.f
	defer r.wg.Done()
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed || ctx.Err() != nil {
		return
	}
	bs := int64(f.bs)
	var last segment.ObjectName
	seen := false
	_ = f.tree.Scan(ctx, uint64(lo/bs), uint64((hi+bs-1)/bs), func(_ uint64, v blockmap.Value) error {
		if obj := v.Ptr.Object(); !seen || obj != last {
			seen, last = true, obj
			_, _ = f.readKey(ctx, obj)
		}
		return nil
	})
}

// pieceBytes is the size of the pieces a window is fetched in: a
// prefetchPieces'th of it, so that several GETs are in flight, in a power of
// two of whole blocks. Pieces are cut on a grid of their size in the file,
// so that a stream's pieces meet the objects' ends where those are on the
// grid too (objects sent ahead in a power of two of blocks, as by default)
// instead of each object's end splitting a piece in two short GETs; a
// smaller piece, while the window grows, divides a larger one.
func (r *readers) pieceBytes(window int64) int64 {
	f := r.f
	bs := int64(f.bs)
	blocks := min(max(window/prefetchPieces, prefetchMinPiece), prefetchMaxPiece) / bs
	p := bs
	for p*2 <= blocks*bs {
		p *= 2
	}
	if cap := f.p.ReadGetMaxBytes / bs * bs; p > cap {
		p = cap
	}
	return max(p, bs)
}

// fetchAheadLocked sends the GETs the planner plans for [start, end), piece
// by piece, for the blocks neither in memory nor in flight, as far as the
// budget allows, and returns where it stopped. The caller holds mu shared.
func (r *readers) fetchAheadLocked(ctx context.Context, s *readStream, start, end, piece int64) int64 {
	f := r.f
	for a := start; a < end; {
		b := min((a/piece+1)*piece, end) // the grid's next cut
		plan, err := f.planLocked(ctx, a, b-a, false, nil, claimAhead)
		if err != nil {
			// The read itself will meet the error, or not need the blocks.
			return a
		}
		for i, fl := range plan.flights {
			r.mu.Lock()
			if !r.holdAheadLocked(fl.g.Len) {
				r.mu.Unlock()
				r.abandon(plan.flights[i:], errNoRoom)
				return a
			}
			fl.held = fl.g.Len
			if s.gone {
				// Another read dropped the stream since it planned: the
				// flight goes (a read may wait for it), and is dropped.
				r.dropLocked(fl)
			} else {
				s.flights = append(s.flights, fl)
			}
			r.stats.GetsAhead++
			r.stats.BytesAhead += fl.g.Len
			fctx := r.ctx
			r.wg.Add(1)
			r.mu.Unlock()
			go r.runAhead(fctx, fl)
		}
		a = b
	}
	return end
}

// errNoRoom ends a flight ahead the budget had no room for; a read waiting
// for it fetches its blocks itself.
var errNoRoom = errors.New("no room in the memory budget to read ahead")

// holdAheadLocked draws n bytes for a flight ahead: from the budget's read
// share, and within the file's own cap when there is no budget. The caller
// holds r.mu.
func (r *readers) holdAheadLocked(n int64) bool {
	if r.budget != nil {
		if !r.budget.TryAcquireRead(n) {
			return false
		}
	} else if r.held+n > prefetchFileCap {
		return false
	}
	r.held += n
	r.stats.MaxHeldAhead = max(r.stats.MaxHeldAhead, r.held)
	return true
}

// runAhead sends one flight ahead (its goroutine, counted by rd.wg).
func (r *readers) runAhead(ctx context.Context, fl *flight) {
	f := r.f
	defer r.wg.Done()
	select {
	case r.sem <- struct{}{}:
		fl.data, fl.err = f.fetchVerified(ctx, &fl.g)
		<-r.sem
	case <-fl.hurry:
		// A reader waits for it: at most one such GET per read at a time
		// goes past the cap.
		fl.data, fl.err = f.fetchVerified(ctx, &fl.g)
	case <-ctx.Done():
		fl.err = ctx.Err()
	}
	r.mu.Lock()
	fl.landed = true
	if fl.err != nil {
		// Readers waiting for it read for themselves; later ones send their own.
		r.unregisterLocked(fl)
		r.releaseLocked(fl)
	} else if fl.dropped {
		r.releaseLocked(fl)
	}
	r.mu.Unlock()
	close(fl.done)
}

// wanted tells a flight ahead that a read waits for it.
func (fl *flight) wanted() {
	if fl.hurry != nil {
		fl.hurryOnce.Do(func() { close(fl.hurry) })
	}
}

// claim makes sl the flight of block k, unless another flight has it: then
// it returns that one.
func (r *readers) claim(k cacheKey, sl slot) (slot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if theirs, ok := r.blocks[k]; ok {
		return theirs, false
	}
	r.blocks[k] = sl
	return sl, true
}

// abandon ends flights claimed and never sent: reads waiting for them fetch
// for themselves.
func (r *readers) abandon(fls []*flight, err error) {
	r.mu.Lock()
	for _, fl := range fls {
		fl.err = err
		fl.landed = true
		r.unregisterLocked(fl)
	}
	r.mu.Unlock()
	for _, fl := range fls {
		close(fl.done)
	}
}

func (r *readers) unregisterLocked(fl *flight) {
	for _, ref := range fl.g.refs {
		k := keyOf(ref.v)
		if sl, ok := r.blocks[k]; ok && sl.fl == fl {
			delete(r.blocks, k)
		}
	}
}

// dropLocked forgets a flight ahead; its budget is returned now if it has
// landed, else when it does.
func (r *readers) dropLocked(fl *flight) {
	if fl.dropped {
		return
	}
	fl.dropped = true
	r.unregisterLocked(fl)
	if fl.landed {
		r.releaseLocked(fl)
	}
}

func (r *readers) releaseLocked(fl *flight) {
	if fl.held == 0 {
		return
	}
	r.held -= fl.held
	if r.budget != nil {
		r.budget.ReleaseRead(fl.held)
	}
	fl.held = 0
}

func (r *readers) dropStreamLocked(s *readStream) {
	s.gone = true
	for _, fl := range s.flights {
		r.dropLocked(fl)
	}
	s.flights = nil
}

// lookup returns the flight holding block v, if any.
func (r *readers) lookup(v cacheKey) (slot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sl, ok := r.blocks[v]
	return sl, ok
}

// reset drops every stream and flight ahead and ends the flights still
// sending (they return their budget as they end): for a close, and for a
// rollback, after which the map may name objects whose names this file saw
// with other bytes.
func (r *readers) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancel()
	for _, s := range r.streams {
		r.dropStreamLocked(s)
	}
	r.streams = nil
	for k, sl := range r.blocks {
		if sl.fl.ahead {
			r.dropLocked(sl.fl)
		}
		delete(r.blocks, k)
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
