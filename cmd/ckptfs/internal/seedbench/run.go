package seedbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/link"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// Sizes of the seed's workloads.
const (
	MiB = 1 << 20
	GiB = 1 << 30

	// SeedSize is what every table of the seed writes: 512 MiB.
	SeedSize = 512 * MiB
	// RaisedDirtyLimit keeps the dirty-data limit out of the way of a
	// SeedSize file (the seed raises it "to at least the object size wanted
	// plus the pieces in flight").
	RaisedDirtyLimit = 3 * GiB / 2
)

// Variant is one column of the seed's tables: a format and, for Stream, the
// target of objects sent ahead (stream_segment_bytes).
type Variant struct {
	Name   string
	Format segment.Format
	Target int64 // StreamSegmentBytes; 0 under Parted
	// Params, when set, are the variant's whole parameters (a mount's
	// defaults), used as they are instead of the seed's.
	Params *engine.Params
}

// Parted is PartedSegment: everything is written at the flush.
var Parted = Variant{Name: "parted", Format: segment.FormatParted}

// Stream returns the StreamSegment variant with the given target.
func Stream(target int64) Variant {
	return Variant{Name: "stream " + sizeName(target), Format: segment.FormatStream, Target: target}
}

// BuysVariants are the columns of "What it buys", in the seed's order.
func BuysVariants() []Variant {
	return []Variant{Parted, Stream(4 * MiB), Stream(16 * MiB), Stream(256 * MiB), Stream(512 * MiB), Stream(GiB)}
}

// sizeName writes n as the seed does: 4 MiB, 1 GiB.
func sizeName(n int64) string {
	switch {
	case n >= GiB && n%GiB == 0:
		return fmt.Sprintf("%d GiB", n/GiB)
	case n >= MiB && n%MiB == 0:
		return fmt.Sprintf("%d MiB", n/MiB)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// BenchParams are the engine parameters of the seed's measurements with the
// dirty-data limit raised: objects of at most 1 GiB, 16 MiB pieces, 8 in
// flight, 4 KiB data and meta blocks (the engine's defaults).
func BenchParams(v Variant) engine.Params {
	if v.Params != nil {
		return *v.Params
	}
	p := engine.DefaultParams()
	p.Format = v.Format
	p.StreamSegmentBytes = v.Target
	p.MaxObjectBytes = GiB
	p.ChunkSize = 16 * MiB
	p.Concurrency = 8
	p.DirtyLimit = RaisedDirtyLimit
	return p
}

// Run is one measured run: a writer writes Size bytes to a new file in
// WriteSize writes at Rate, then flushes once.
type Run struct {
	// Profile is the emulated link in front of memory staging; the zero
	// profile (or link.ProfileNone) adds no delay.
	Profile link.Profile
	Params  engine.Params
	// Size is the number of bytes written in all.
	Size int64
	// WriteSize is the length of one write.
	WriteSize int
	// Rate is the writer's pace in bytes per second; 0 is unpaced.
	Rate float64
	// Hot is the working set: write i goes to offset (i × WriteSize) mod
	// Hot. 0 (or Size) writes the file once, front to back.
	Hot int64
	// ByRef writes by reference (engine.File.WriteRef) instead of by value:
	// the engine reads the blocks from a source when it sends them.
	ByRef bool
}

// Result is what one run measured.
type Result struct {
	// Flush is the wall time of the one Flush call.
	Flush time.Duration
	// Total is the wall time of the run: writes, pacing and flush.
	Total  time.Duration
	Timing engine.FlushTiming
	// Objects is the number of objects of the checkpoint (part 0 included):
	// everything under the file's prefix but its head.
	Objects int
	// LongestWrite is the longest single write call.
	LongestWrite time.Duration
	// WriteTime is the time spent inside the write calls, all together.
	WriteTime time.Duration
	// Uploaded is the payload sent to the store over the whole run (Put and
	// UploadPart bytes, the head included); Kept is the file's size.
	Uploaded int64
	Kept     int64
	// FlushStarted are the requests started during the flush (the engine's
	// own and the last pieces it sent ahead while settling), by operation;
	// requests sent ahead before the flush that ended during it are not.
	FlushStarted map[staging.Op]int
	// FlushSentBytes is the payload of the requests started during the
	// flush: the data still unsent at the flush (StreamFlushBytes), the tail
	// of the open object (its leaves, summary and header), part 0 and the
	// head, and any piece or object the last write handed to an upload task
	// whose request had not begun yet (unsent too, when the flush began).
	FlushSentBytes int64
	// Limit is the physical limit of the flush: FlushSentBytes over the
	// link, plus one latency for each request that must follow another
	// (SeqRequests).
	Limit time.Duration
	// FlushLongest is the longest request of each operation the flush
	// started (the link's delay and the store's own time).
	FlushLongest map[staging.Op]time.Duration
	// InFlight and InFlightBytes are the requests sent ahead that had not
	// returned when the flush began, and their payload.
	InFlight      int
	InFlightBytes int64
	// LimitInFlight is Limit started once the requests in flight at the
	// flush (sent ahead, not landed) can have ended over the link.
	LimitInFlight time.Duration
	// SeqRequests is the number of requests in the flush's critical chain:
	// create of an upload, the data pieces, complete, part 0, head.
	SeqRequests int
}

// Amplification is Uploaded over Kept.
func (r Result) Amplification() float64 {
	if r.Kept == 0 {
		return 0
	}
	return float64(r.Uploaded) / float64(r.Kept)
}

// FlushOverLimit is Flush over Limit (0 when there is no limit).
func (r Result) FlushOverLimit() float64 {
	if r.Limit <= 0 {
		return 0
	}
	return float64(r.Flush) / float64(r.Limit)
}

// benchPrefix is the file's prefix in the store, as the namespace would give.
const benchPrefix = "vol/f/bench/"

// Source returns n bytes of incompressible, non-repeating content, so that no
// layer (leaf reuse by hash, for one) profits from repeated data.
func Source(n int) []byte {
	r := rand.New(rand.NewPCG(0x5eed, uint64(n)))
	b := make([]byte, n)
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// repeatSource is a block source whose bytes at off are src's at off modulo
// its length: what a writer by reference would give from its own buffers (a
// mapped file, a model's tensors). It never changes, as the contract asks.
type repeatSource []byte

func (s repeatSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read source at %d: negative offset", off)
	}
	n := 0
	for n < len(p) {
		at := (off + int64(n)) % int64(len(s))
		n += copy(p[n:], s[at:])
	}
	return n, nil
}

// validate reports what is wrong with r.
func (r Run) validate() error {
	var errs []error
	if r.Size <= 0 {
		errs = append(errs, fmt.Errorf("size %d: want > 0", r.Size))
	}
	if r.WriteSize <= 0 {
		errs = append(errs, fmt.Errorf("write size %d: want > 0", r.WriteSize))
	}
	if r.Rate < 0 {
		errs = append(errs, fmt.Errorf("rate %g: want >= 0", r.Rate))
	}
	if r.Hot < 0 || (r.Hot > 0 && r.Hot%int64(r.WriteSize) != 0) {
		errs = append(errs, fmt.Errorf("working set %d: want a multiple of the write size %d", r.Hot, r.WriteSize))
	}
	return errors.Join(errs...)
}

// RunOne performs r on a fresh memory store and returns what it measured.
// The memory of the previous run is returned to the system first, so that
// runs do not pay for each other's garbage.
func RunOne(ctx context.Context, r Run) (Result, error) {
	if err := r.validate(); err != nil {
		return Result{}, fmt.Errorf("bench run: %w", err)
	}
	runtime.GC()
	debug.FreeOSMemory()

	mem := mem.New()
	var linked staging.Store = mem
	if r.Profile.Latency > 0 || r.Profile.PerRequestBps > 0 || r.Profile.TotalBps > 0 {
		linked = link.New(mem, r.Profile)
	}
	counting := counting.New(linked)
	starts := &startCounter{Store: counting, link: r.Profile, live: make(map[*liveReq]struct{})}
	f, err := engine.Create(ctx, starts, benchPrefix, engine.Options{Params: r.Params, FileID: "bench"})
	if err != nil {
		return Result{}, fmt.Errorf("bench run: %w", err)
	}
	defer f.Close()
	created := counting.Snapshot()

	src := Source(r.WriteSize)
	hot := r.Hot
	if hot == 0 || hot > r.Size {
		hot = r.Size
	}
	var res Result
	start := time.Now()
	var written int64
	for i := int64(0); written < r.Size; i++ {
		n := min(int64(r.WriteSize), r.Size-written)
		off := (i * int64(r.WriteSize)) % hot
		if r.Rate > 0 {
			// Hold the pace: a write starts once the bytes before it are
			// due. A writer that fell behind (a write that waited) does not
			// sleep until it is back on schedule, so the average rate holds.
			due := start.Add(time.Duration(float64(written) / r.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return Result{}, fmt.Errorf("bench run: pacing write at %d: %w", off, ctx.Err())
				case <-time.After(d):
				}
			}
		}
		w0 := time.Now()
		if r.ByRef {
			err = f.WriteRef(ctx, off, n, repeatSource(src), off)
		} else {
			_, err = f.WriteAt(ctx, src[:n], off)
		}
		if err != nil {
			return Result{}, fmt.Errorf("bench run: write %d bytes at %d: %w", n, off, err)
		}
		d := time.Since(w0)
		res.WriteTime += d
		res.LongestWrite = max(res.LongestWrite, d)
		written += n
	}
	var inflightWait time.Duration
	res.InFlight, res.InFlightBytes, inflightWait = starts.arm()
	f0 := time.Now()
	t, err := f.Flush(ctx)
	res.Flush = time.Since(f0)
	res.Total = time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("bench run: flush: %w", err)
	}
	after := counting.Snapshot()
	res.Timing = t
	var biggest int64
	res.FlushStarted, res.FlushSentBytes, biggest, res.FlushLongest = starts.disarm()
	res.Kept = f.Size()
	all := after.Sub(created)
	res.Uploaded = all.Op(staging.OpPut).BytesSent + all.Op(staging.OpUploadPart).BytesSent

	objs, err := staging.ListAll(ctx, mem, benchPrefix)
	if err != nil {
		return Result{}, fmt.Errorf("bench run: list objects: %w", err)
	}
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, "/"+volume.HeadName) {
			res.Objects++
		}
	}
	res.SeqRequests = seqRequests(res.FlushStarted)
	res.Limit = flushLimit(r.Profile, r.Params, res.FlushSentBytes, biggest, res.SeqRequests)
	// Part 0 goes only after every object has completed: the chain starts
	// when the last request in flight can have ended.
	res.LimitInFlight = inflightWait + res.Limit
	return res, nil
}

// seqRequests counts the requests of a flush that must follow one another:
// the create of an upload, its pieces (one latency: they go in parallel),
// its completion, then part 0 and the head, which are Puts (two Puts or
// more), or only the head when part 0 was the multipart object itself (one
// Put). Data objects stored whole before part 0 add one more when there are
// more than two Puts.
func seqRequests(started map[staging.Op]int) int {
	n := 0
	for _, op := range []staging.Op{staging.OpCreateMultipart, staging.OpUploadPart, staging.OpCompleteMultipart} {
		if started[op] > 0 {
			n++
		}
	}
	puts := started[staging.OpPut]
	n += min(puts, 2)
	if puts > 2 {
		n++
	}
	return n
}

// flushLimit is the physical limit of a flush that must send bytes, in
// requests of at most biggest bytes each, and make seq requests one after the
// other over the link of profile p: the bytes go at the link's total
// bandwidth, or at what Concurrency requests carry if that is less, and no
// faster than one request's bandwidth moves the biggest; each request in the
// chain pays the latency once.
func flushLimit(p link.Profile, params engine.Params, bytes, biggest int64, seq int) time.Duration {
	secs := float64(seq) * p.Latency.Seconds()
	if bytes > 0 {
		agg := p.TotalBps
		if p.PerRequestBps > 0 {
			conc := float64(params.Concurrency) * p.PerRequestBps
			if agg <= 0 || conc < agg {
				agg = conc
			}
		}
		var xfer float64
		if agg > 0 {
			xfer = float64(bytes) / agg
		}
		if p.PerRequestBps > 0 {
			xfer = max(xfer, float64(min(bytes, biggest))/p.PerRequestBps)
		}
		secs += xfer
	}
	return time.Duration(secs * float64(time.Second))
}

// startCounter counts the writing requests started while it is armed: the
// flush's critical chain is made of requests the flush started, whatever
// else (pieces sent ahead earlier) ends during it.
type startCounter struct {
	staging.Store

	mu    sync.Mutex
	armed bool               // GUARDED_BY(mu)
	n     map[staging.Op]int // GUARDED_BY(mu)
	bytes int64              // GUARDED_BY(mu); payload of the Puts and UploadParts
	big   int64              // GUARDED_BY(mu); the largest of those payloads
	// Requests in flight now, and their payload, armed or not.
	inflight      int   // GUARDED_BY(mu)
	inflightBytes int64 // GUARDED_BY(mu)
	// live are the requests in flight, for the earliest time the link lets
	// the last of them end.
	link link.Profile
	live map[*liveReq]struct{} // GUARDED_BY(mu)
	// longest is the longest request of each operation, started armed.
	longest map[staging.Op]time.Duration // GUARDED_BY(mu)
}

// liveReq is a request in flight: when it started and its payload.
type liveReq struct {
	t0    time.Time
	bytes int64
}

// arm starts counting and returns the requests in flight, their payload
// (what was sent ahead but had not landed when the flush began), and how
// long the link makes the flush wait for the last of them at least: each
// pays its latency and moves its payload at one request's bandwidth.
func (s *startCounter) arm() (int, int64, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.n, s.bytes, s.big = true, make(map[staging.Op]int), 0, 0
	s.longest = make(map[staging.Op]time.Duration)
	now := time.Now()
	var wait time.Duration
	for q := range s.live {
		end := q.t0.Add(s.link.Latency)
		if s.link.PerRequestBps > 0 {
			end = end.Add(time.Duration(float64(q.bytes) / s.link.PerRequestBps * float64(time.Second)))
		}
		wait = max(wait, end.Sub(now))
	}
	return s.inflight, s.inflightBytes, wait
}

// disarm stops counting and returns what was counted since arm: requests
// by operation, their payload, the largest payload of one request, and the
// longest request of each operation.
func (s *startCounter) disarm() (map[staging.Op]int, int64, int64, map[staging.Op]time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = false
	return s.n, s.bytes, s.big, s.longest
}

// start counts a request; the caller calls the returned func when it ends.
func (s *startCounter) start(op staging.Op, payload int) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	armed := s.armed
	if armed {
		s.n[op]++
		s.bytes += int64(payload)
		s.big = max(s.big, int64(payload))
	}
	s.inflight++
	s.inflightBytes += int64(payload)
	t0 := time.Now()
	q := &liveReq{t0: t0, bytes: int64(payload)}
	s.live[q] = struct{}{}
	return func() {
		d := time.Since(t0)
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.live, q)
		s.inflight--
		s.inflightBytes -= int64(payload)
		if armed && s.armed && d > s.longest[op] {
			s.longest[op] = d
		}
	}
}

func (s *startCounter) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	defer s.start(staging.OpPut, len(data))()
	return s.Store.Put(ctx, key, data, opts)
}

func (s *startCounter) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	defer s.start(staging.OpCreateMultipart, 0)()
	return s.Store.CreateMultipart(ctx, key, opts)
}

func (s *startCounter) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	defer s.start(staging.OpUploadPart, len(data))()
	return s.Store.UploadPart(ctx, key, uploadID, n, data)
}

// The memory store keeps what the engine gives up: the benchmark counts no
// copy of the store's as the writer's cost.
var _ staging.PartKeeper = (*startCounter)(nil)

func (s *startCounter) UploadPartKept(ctx context.Context, key, uploadID string, n int32, data []byte) (string, bool, error) {
	defer s.start(staging.OpUploadPart, len(data))()
	return staging.UploadPartGiven(ctx, s.Store, key, uploadID, n, data)
}

func (s *startCounter) PutKept(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, bool, error) {
	defer s.start(staging.OpPut, len(data))()
	return staging.PutGiven(ctx, s.Store, key, data, opts)
}

func (s *startCounter) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	defer s.start(staging.OpCompleteMultipart, 0)()
	return s.Store.CompleteMultipart(ctx, key, uploadID, parts, cond)
}
