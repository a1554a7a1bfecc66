package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging/link"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// BenchmarkFlushWait measures how long a pwrite past the end and a pread
// anywhere in a file wait while a flush of a 512 MiB file runs on the
// general link, beside the same probes for 2 s just before it with no
// flush, over 5 repeats, and prints p50, p99 and max of each
// (docs/benchmarks.md). Every block of the file is dirty when the flush
// starts (nothing sent ahead, no partial segment), so the flush stores all
// of it, and reads find their blocks in memory until its head lands (then
// it frees what it published, before it returns, and a read GETs): the
// probes that ended before the head landed are also counted apart. The
// tests' invariant check at every unlock of File.mu, which walks every
// dirty block now and then, is off for the file (it would be timed too);
// the invariants are checked after each step instead. It runs once per
// b.N:
//
//	go test -run '^$' -bench BenchmarkFlushWait -benchtime 1x ./fs/engine/
func BenchmarkFlushWait(b *testing.B) {
	const (
		size     = 512 << 20
		probe    = 4 << 10
		repeats  = 5
		baseline = 2 * time.Second
	)
	p := DefaultParams()
	p.StreamSegmentBytes = 0
	p.DirtyLimit = 2 * size
	ctx := context.Background()
	waits := map[string][]time.Duration{}
	for range b.N {
		for rep := range repeats {
			st := link.New(mem.New(), link.ProfileGeneral)
			prefix := fmt.Sprintf("fw%d/", rep)
			f, err := Create(ctx, st, prefix, Options{Params: p, FileID: prefix})
			if err != nil {
				b.Fatal(err)
			}
			f.noUnlockChecks = true
			chunk := pattern(1<<20, uint64(rep))
			for off := int64(0); off < size; off += int64(len(chunk)) {
				if _, err := f.WriteAt(ctx, chunk, off); err != nil {
					b.Fatal(err)
				}
			}
			// Without a flush first, on the file as the flush finds it
			// (every block dirty), for baseline.
			if err := f.checkInvariants(); err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			probes := startFlushProbes(ctx, f, size, probe, stop)
			time.Sleep(baseline)
			close(stop)
			w, r, err := probes()
			if err != nil {
				b.Fatal(err)
			}
			add := func(op, while string, ds []probeWait) {
				for _, d := range ds {
					waits[op+", "+while] = append(waits[op+", "+while], d.d)
					if while == "flush" && !d.landed {
						k := op + ", flush, before its head landed"
						waits[k] = append(waits[k], d.d)
					}
				}
			}
			add("pwrite past the end", "no flush", w)
			add("pread", "no flush", r)
			if err := f.checkInvariants(); err != nil {
				b.Fatal(err)
			}
			// With the flush: probes until it returns.
			stop = make(chan struct{})
			probes = startFlushProbes(ctx, f, size, probe, stop)
			start := time.Now()
			if _, err := f.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			took := time.Since(start)
			close(stop)
			w, r, err = probes()
			if err != nil {
				b.Fatal(err)
			}
			add("pwrite past the end", "flush", w)
			add("pread", "flush", r)
			if err := f.checkInvariants(); err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(os.Stderr, "repeat %d: flush of %d MiB took %v\n", rep, size>>20, took.Round(time.Millisecond))
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
	fmt.Printf("| probe | while | n | p50 | p99 | max |\n|---|---|---|---|---|---|\n")
	for _, op := range []string{"pwrite past the end", "pread"} {
		for _, while := range []string{"flush", "flush, before its head landed", "no flush"} {
			d := waits[op+", "+while]
			slices.Sort(d)
			if len(d) == 0 {
				continue
			}
			q := func(x float64) time.Duration { return d[min(len(d)-1, int(x*float64(len(d))))] }
			fmt.Printf("| %s | %s | %d | %v | %v | %v |\n", op, while, len(d),
				q(0.50).Round(time.Microsecond), q(0.99).Round(time.Microsecond), d[len(d)-1].Round(time.Microsecond))
		}
	}
}

// probeWait is one probe's time, and whether the file's checkpoint had
// moved (a flush's head landed) when it ended.
type probeWait struct {
	d      time.Duration
	landed bool
}

// startFlushProbes starts two goroutines until stop closes: one writes
// probe bytes past the end of the file again and again, the other reads
// probe bytes at random offsets in [0, size), each timing every call, a
// millisecond apart. The returned wait gives the writes' and the reads'
// times.
func startFlushProbes(ctx context.Context, f *File, size, probe int64, stop <-chan struct{}) func() ([]probeWait, []probeWait, error) {
	var wg sync.WaitGroup
	var writes, reads []probeWait
	var werr, rerr error
	wbuf, rbuf := pattern(int(probe), 99), make([]byte, probe)
	cno := f.Stat().Cno
	loop := func(op func() error, out *[]probeWait, errp *error) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			if err := op(); err != nil {
				*errp = err
				return
			}
			*out = append(*out, probeWait{time.Since(start), f.Stat().Cno != cno})
			time.Sleep(time.Millisecond)
		}
	}
	wg.Add(2)
	go loop(func() error {
		_, err := f.WriteAt(ctx, wbuf, f.Size())
		return err
	}, &writes, &werr)
	rng := rand.New(rand.NewPCG(1, 2))
	go loop(func() error {
		_, err := f.ReadAt(ctx, rbuf, rng.Int64N(size-probe))
		return err
	}, &reads, &rerr)
	return func() ([]probeWait, []probeWait, error) {
		wg.Wait()
		if werr != nil {
			return nil, nil, fmt.Errorf("pwrite: %w", werr)
		}
		if rerr != nil {
			return nil, nil, fmt.Errorf("pread: %w", rerr)
		}
		return writes, reads, nil
	}
}
