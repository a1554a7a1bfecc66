package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckptfs/ckptfs/cmd/ckptfs/internal/seedbench"
	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/fusefs"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/link"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// The WAL table (-table wal): writers append to one file with the
// write-ahead log on, each acknowledged only once a record holding it is
// stored, then one flush (a WAL publish).
//
// Each cell is one link, one write size and a number of concurrent writers.
// Every writer writes its own region of the file front to back, one write
// after another, until the duration is over or the cell has acknowledged its
// byte cap (-size), whichever comes first: the cap keeps part 0 within one
// object (a WAL publish packs everything dirty into it) and the memory a run
// holds bounded.

// walWriteSizes are the write sizes of the WAL table.
var walWriteSizes = []int{4 << 10, 1 << 20}

// walDataBlockSize is the data block size of the WAL table's file: the
// engine's default, where the mount's is 64 KiB, so that the smaller writes
// of the table each fill whole blocks.
const walDataBlockSize = 4 << 10

// walSourceBytes is the content writes are cut from: distinct blocks, so
// that nothing profits from repeated data.
const walSourceBytes = 16 << 20

// walBenchPrefix is the file's prefix in the store, as the namespace would
// give.
const walBenchPrefix = "vol/f/bench/"

// walBenchParams are the mount's defaults on this machine
// (config.MountDefault, mapped as a mount maps them) with the WAL on and
// 4 KiB data blocks.
func walBenchParams() engine.Params {
	p := fusefs.Params(config.MountDefault(config.TotalRAM()))
	p.WAL = true
	p.DataBlockSize = walDataBlockSize
	return p
}

// walCell is one measured run of the WAL table.
type walCell struct {
	Profile   link.Profile
	WriteSize int
	Writers   int
	Duration  time.Duration
	// Cap is the most bytes the cell writes, all writers together.
	Cap    int64
	Params engine.Params
}

// walRow is what one cell measured.
type walRow struct {
	walCell
	// Elapsed is from the writers' start to the last acknowledgement.
	Elapsed time.Duration
	// Capped says the cell ended at its byte cap before the duration.
	Capped bool
	Acks   int64 // acknowledged writes
	Bytes  int64 // acknowledged bytes
	// Records and RecordBytes are the record PUTs made while the writers ran
	// (keys prefix+"wal/<seq>"; the lease's owner object is not a record) and
	// their payload.
	Records     int64
	RecordBytes int64
	// PutTime is the record PUTs' time, all together; PeakInFlight the
	// most record PUTs in flight at once.
	PutTime      time.Duration
	PeakInFlight int64
	MeanLatency  time.Duration
	P99Latency   time.Duration
	MaxLatency   time.Duration
	// Flush is how long Flush took; Landed is from the Flush call until the
	// checkpoint was published (part 0 and the head stored).
	Flush  time.Duration
	Landed time.Duration
	// Part0Bytes is part 0 (data, index nodes, header); Objects the objects
	// the flush wrote: 1 for a WAL publish, more on the direct path.
	Part0Bytes int64
	Objects    int
}

// WritesPerSec is acknowledged writes per second.
func (r walRow) WritesPerSec() float64 { return perSec(float64(r.Acks), r.Elapsed) }

// MBPerSec is acknowledged megabytes (10^6 bytes) per second.
func (r walRow) MBPerSec() float64 { return perSec(float64(r.Bytes), r.Elapsed) / 1e6 }

// PutsPerWrite is record PUTs per acknowledged write.
func (r walRow) PutsPerWrite() float64 {
	if r.Acks == 0 {
		return 0
	}
	return float64(r.Records) / float64(r.Acks)
}

// WritesPerRecord is acknowledged writes per record PUT.
func (r walRow) WritesPerRecord() float64 {
	if r.Records == 0 {
		return 0
	}
	return float64(r.Acks) / float64(r.Records)
}

// MeanRecordBytes is the mean payload of one record PUT.
func (r walRow) MeanRecordBytes() float64 {
	if r.Records == 0 {
		return 0
	}
	return float64(r.RecordBytes) / float64(r.Records)
}

// MeanPut is the mean time of one record PUT.
func (r walRow) MeanPut() time.Duration {
	if r.Records == 0 {
		return 0
	}
	return r.PutTime / time.Duration(r.Records)
}

// LinkFloor is what the link makes a record holding one write cost: its
// latency, and the record's bytes over one request's bandwidth.
func (r walRow) LinkFloor() time.Duration {
	return walPutFloor(r.Profile, wal.EncodedSize([]wal.Op{{Kind: wal.OpWrite, Data: make([]byte, r.WriteSize)}}))
}

func walPutFloor(p link.Profile, n int) time.Duration {
	d := p.Latency
	if p.PerRequestBps > 0 {
		d += time.Duration(float64(n) / p.PerRequestBps * float64(time.Second))
	}
	return d
}

func perSec(n float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return n / d.Seconds()
}

// walRecordCounter counts the PUTs of WAL records under a file's prefix.
// It also sums how long they took (the link's delay and the store's own
// time) and keeps the most that were in flight at once.
type walRecordCounter struct {
	staging.Store
	dir      string // prefix + wal.Dir
	puts     atomic.Int64
	bytes    atomic.Int64
	nanos    atomic.Int64
	inflight atomic.Int64
	peak     atomic.Int64
}

func (c *walRecordCounter) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	name, ok := strings.CutPrefix(key, c.dir)
	if ok {
		_, ok = wal.ParseRecordName(name)
	}
	if !ok {
		return c.Store.Put(ctx, key, data, opts)
	}
	c.puts.Add(1)
	c.bytes.Add(int64(len(data)))
	n := c.inflight.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	t0 := time.Now()
	info, err := c.Store.Put(ctx, key, data, opts)
	c.nanos.Add(int64(time.Since(t0)))
	c.inflight.Add(-1)
	return info, err
}

// walRunOne measures one cell on a fresh memory store behind the cell's
// link. The memory of the previous run is returned to the system first.
func walRunOne(ctx context.Context, c walCell) (walRow, error) {
	row := walRow{walCell: c}
	if c.WriteSize <= 0 || c.WriteSize > walSourceBytes || c.Writers < 1 || c.Duration <= 0 || c.Cap < int64(c.WriteSize) {
		return row, fmt.Errorf("wal run: write size %d, %d writers, duration %v, cap %d: want positive, a cap of at least one write",
			c.WriteSize, c.Writers, c.Duration, c.Cap)
	}
	runtime.GC()
	debug.FreeOSMemory()

	mem := mem.New()
	var linked staging.Store = mem
	if c.Profile.Latency > 0 || c.Profile.PerRequestBps > 0 || c.Profile.TotalBps > 0 {
		linked = link.New(mem, c.Profile)
	}
	rc := &walRecordCounter{Store: linked, dir: walBenchPrefix + wal.Dir}
	f, err := engine.Create(ctx, rc, walBenchPrefix, engine.Options{Params: c.Params, FileID: "bench"})
	if err != nil {
		return row, fmt.Errorf("wal run: %w", err)
	}
	defer f.Close()
	// The first change takes the log's lease; an mtime change does it, and
	// stores the first record, before the clock starts.
	if err := f.SetMtime(ctx, time.Now()); err != nil {
		return row, fmt.Errorf("wal run: take the log: %w", err)
	}

	src := seedbench.Source(walSourceBytes)
	n := int64(c.WriteSize)
	pieces := int64(len(src)) / n
	// A writer never writes more than the cap: regions that far apart never
	// meet.
	region := (c.Cap + n - 1) / n * n
	var claimed atomic.Int64
	var capped atomic.Bool
	lat := make([][]time.Duration, c.Writers)
	errs := make([]error, c.Writers)
	begin := make(chan struct{})
	var deadline time.Time
	var wg sync.WaitGroup
	for w := range c.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			off := int64(w) * region
			for k := int64(0); time.Now().Before(deadline); k++ {
				if ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				if claimed.Add(n) > c.Cap {
					capped.Store(true)
					return
				}
				at := ((k + int64(w)*131) % pieces) * n
				w0 := time.Now()
				if _, err := f.WriteAt(ctx, src[at:at+n], off); err != nil {
					errs[w] = fmt.Errorf("writer %d: write %d bytes at %d: %w", w, n, off, err)
					return
				}
				lat[w] = append(lat[w], time.Since(w0))
				off += n
			}
		}()
	}
	puts0, bytes0, nanos0 := rc.puts.Load(), rc.bytes.Load(), rc.nanos.Load()
	rc.peak.Store(0)
	start := time.Now()
	deadline = start.Add(c.Duration)
	close(begin)
	wg.Wait()
	row.Elapsed = time.Since(start)
	row.Records, row.RecordBytes = rc.puts.Load()-puts0, rc.bytes.Load()-bytes0
	row.PutTime, row.PeakInFlight = time.Duration(rc.nanos.Load()-nanos0), rc.peak.Load()
	row.Capped = capped.Load()
	if err := errors.Join(errs...); err != nil {
		return row, fmt.Errorf("wal run: %w", err)
	}

	all := slices.Concat(lat...)
	slices.Sort(all)
	row.Acks = int64(len(all))
	row.Bytes = row.Acks * n
	if len(all) > 0 {
		var sum time.Duration
		for _, d := range all {
			sum += d
		}
		row.MeanLatency = sum / time.Duration(len(all))
		row.P99Latency = all[(len(all)*99+99)/100-1]
		row.MaxLatency = all[len(all)-1]
	}

	// A WAL publish returns once part 0 is packed; Sync waits for it to
	// land (and would recover a failed one).
	f0 := time.Now()
	t, err := f.Flush(ctx)
	row.Flush = time.Since(f0)
	if err != nil {
		return row, fmt.Errorf("wal run: flush: %w", err)
	}
	if err := f.Sync(ctx); err != nil {
		return row, fmt.Errorf("wal run: wait for the checkpoint: %w", err)
	}
	row.Landed = time.Since(f0)
	if st := f.Stat(); st.Cno != t.Cno || st.Dirty {
		return row, fmt.Errorf("wal run: checkpoint %d did not land (head at %d, dirty %v)", t.Cno, st.Cno, st.Dirty)
	}
	row.Part0Bytes = t.StreamFlushBytes + t.StreamMetaBytes
	row.Objects = t.Objects
	return row, nil
}

// walTable measures every cell: each profile × write size × writers.
func walTable(ctx context.Context, profiles []link.Profile, writers []int, d time.Duration, capBytes int64, progress func(walRow)) ([]walRow, error) {
	params := walBenchParams()
	var rows []walRow
	for _, p := range profiles {
		for _, ws := range walWriteSizes {
			for _, w := range writers {
				r, err := walRunOne(ctx, walCell{Profile: p, WriteSize: ws, Writers: w, Duration: d, Cap: capBytes, Params: params})
				if err != nil {
					return rows, fmt.Errorf("wal %s %s × %d: %w", p.Name, walSizeName(int64(ws)), w, err)
				}
				if progress != nil {
					progress(r)
				}
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

func walSizeName(n int64) string {
	switch {
	case n >= seedbench.MiB && n%seedbench.MiB == 0:
		return fmt.Sprintf("%d MiB", n/seedbench.MiB)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func walMs(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

// walMarkdown prints the rows as one table.
func walMarkdown(w io.Writer, rows []walRow) {
	fmt.Fprintln(w, "| link | write | writers | ran s | acked writes/s | MB/s | record PUTs per write | writes per record | mean record KiB | record PUT mean ms | record PUTs in flight (peak) | one-write PUT on the link ms | latency mean ms | p99 ms | flush ms | landed ms | part 0 MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		ran := fmt.Sprintf("%.2f", r.Elapsed.Seconds())
		if r.Capped {
			ran += " (cap)"
		}
		flush := walMs(r.Flush)
		if r.Objects > 1 {
			flush += fmt.Sprintf(" (direct, %d objects)", r.Objects)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %.0f | %.1f | %.3f | %.1f | %.0f | %s | %d | %s | %s | %s | %s | %s | %.1f |\n",
			r.Profile.Name, walSizeName(int64(r.WriteSize)), r.Writers, ran,
			r.WritesPerSec(), r.MBPerSec(), r.PutsPerWrite(), r.WritesPerRecord(), r.MeanRecordBytes()/1024,
			walMs(r.MeanPut()), r.PeakInFlight, walMs(r.LinkFloor()), walMs(r.MeanLatency), walMs(r.P99Latency),
			flush, walMs(r.Landed), float64(r.Part0Bytes)/seedbench.MiB)
	}
}

// walColumns explains the columns of the WAL table.
const walColumns = `Columns: ` + "`ran s`" + ` is from the writers' start to the last acknowledgement
("cap": the cell's bytes were all acknowledged before the duration); a
record PUT's time is as the engine saw it (the link's delay and the store's
own time); ` + "`one-write PUT on the link`" + ` is the link's latency plus one write's
record over one request's bandwidth; latency is that of the writing calls;
` + "`flush`" + ` is the Flush call and ` + "`landed`" + ` from that call until part 0 and the head
were stored (File.Sync waits for the publish in flight). "direct": the
checkpoint went the direct way, in parts, and Flush waited for it.
`

// walParamsText describes the parameters of the WAL table.
func walParamsText(p engine.Params) string {
	batch, inflight := p.WALBatchBytes, p.WALMaxInFlight
	if batch == 0 {
		batch = wal.DefaultBatchBytes
	}
	if inflight == 0 {
		inflight = wal.DefaultMaxInFlight
	}
	return fmt.Sprintf("the mount's defaults on this machine with wal=on and %s data blocks (dirty limit %s, objects of at most %s); "+
		"records of at most %s, %d in flight",
		walSizeName(int64(p.DataBlockSize)), config.FormatSize(p.DirtyLimit), config.FormatSize(p.MaxObjectBytes),
		walSizeName(int64(batch)), inflight)
}
