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

	"ckptfs/fs/engine"
	"ckptfs/segment"
	"ckptfs/staging"
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
	// profile (or staging.ProfileNone) adds no delay.
	Profile staging.LinkProfile
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
	// Limit is the physical limit of the flush: the bytes the flush itself
	// had to send (StreamFlushBytes + StreamMetaBytes) over the link, plus
	// one latency for each request that must follow another (SeqRequests).
	Limit time.Duration
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

// source returns n bytes of incompressible, non-repeating content, so that no
// layer (leaf reuse by hash, for one) profits from repeated data.
func source(n int) []byte {
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

	mem := staging.NewMem()
	var linked staging.Store = mem
	if r.Profile.Latency > 0 || r.Profile.PerRequestBps > 0 || r.Profile.TotalBps > 0 {
		linked = staging.NewLink(mem, r.Profile)
	}
	counting := staging.NewCounting(linked)
	starts := &startCounter{Store: counting}
	f, err := engine.Create(ctx, starts, benchPrefix, engine.Options{Params: r.Params, FileID: "bench"})
	if err != nil {
		return Result{}, fmt.Errorf("bench run: %w", err)
	}
	defer f.Close()
	created := counting.Snapshot()

	src := source(r.WriteSize)
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
			// Hold the pace: write i may start once the bytes before it are
			// due. A writer that fell behind does not sleep (no catching up
			// by bursts beyond what the calls themselves allow).
			due := start.Add(time.Duration(float64(written) / r.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return Result{}, ctx.Err()
				case <-time.After(d):
				}
			}
		}
		w0 := time.Now()
		if _, err := f.WriteAt(ctx, src[:n], off); err != nil {
			return Result{}, fmt.Errorf("bench run: write %d bytes at %d: %w", n, off, err)
		}
		d := time.Since(w0)
		res.WriteTime += d
		res.LongestWrite = max(res.LongestWrite, d)
		written += n
	}
	starts.arm()
	f0 := time.Now()
	t, err := f.Flush(ctx)
	res.Flush = time.Since(f0)
	res.Total = time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("bench run: flush: %w", err)
	}
	after := counting.Snapshot()
	res.Timing = t
	res.FlushStarted = starts.disarm()
	res.Kept = f.Size()
	all := after.Sub(created)
	res.Uploaded = all.Op(staging.OpPut).BytesSent + all.Op(staging.OpUploadPart).BytesSent

	objs, err := staging.ListAll(ctx, mem, benchPrefix)
	if err != nil {
		return Result{}, fmt.Errorf("bench run: list objects: %w", err)
	}
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, "/"+engine.HeadKey) {
			res.Objects++
		}
	}
	res.SeqRequests = seqRequests(res.FlushStarted)
	res.Limit = flushLimit(r.Profile, r.Params, t.StreamFlushBytes+t.StreamMetaBytes, res.SeqRequests)
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

// flushLimit is the physical limit of a flush that must send bytes and make
// seq requests one after the other over the link of profile p: the bytes go
// at the link's total bandwidth, or at what Concurrency requests carry if
// that is less, and no faster than one request's bandwidth moves one piece;
// each request in the chain pays the latency once.
func flushLimit(p staging.LinkProfile, params engine.Params, bytes int64, seq int) time.Duration {
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
			xfer = max(xfer, float64(min(bytes, params.ChunkSize))/p.PerRequestBps)
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
}

func (s *startCounter) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.n = true, make(map[staging.Op]int)
}

func (s *startCounter) disarm() map[staging.Op]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = false
	return s.n
}

func (s *startCounter) start(op staging.Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed {
		s.n[op]++
	}
}

func (s *startCounter) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	s.start(staging.OpPut)
	return s.Store.Put(ctx, key, data, opts)
}

func (s *startCounter) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	s.start(staging.OpCreateMultipart)
	return s.Store.CreateMultipart(ctx, key, opts)
}

func (s *startCounter) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	s.start(staging.OpUploadPart)
	return s.Store.UploadPart(ctx, key, uploadID, n, data)
}

func (s *startCounter) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	s.start(staging.OpCompleteMultipart)
	return s.Store.CompleteMultipart(ctx, key, uploadID, parts, cond)
}
