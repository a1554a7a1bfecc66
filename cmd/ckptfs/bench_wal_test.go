package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/cmd/ckptfs/internal/seedbench"
	"github.com/ckptfs/ckptfs/staging/link"
)

// A tiny cell without a link: the row must add up, never be fast.
func TestWALRunOne(t *testing.T) {
	for _, ws := range walWriteSizes {
		t.Run(walSizeName(int64(ws)), func(t *testing.T) {
			c := walCell{Profile: link.ProfileNone, WriteSize: ws, Writers: 8, Duration: 200 * time.Millisecond,
				Cap: 4 * seedbench.MiB, Params: walBenchParams()}
			r, err := walRunOne(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if r.Acks == 0 || r.Bytes != r.Acks*int64(ws) || r.Bytes > c.Cap {
				t.Errorf("%d writes, %d bytes: want some, %d bytes each, at most the cap %d", r.Acks, r.Bytes, ws, c.Cap)
			}
			if r.Records < 1 || r.Records > r.Acks {
				t.Errorf("%d record PUTs for %d writes: want 1 to one per write", r.Records, r.Acks)
			}
			if r.RecordBytes < r.Bytes {
				t.Errorf("records hold %d bytes, less than the %d written", r.RecordBytes, r.Bytes)
			}
			if r.MeanLatency <= 0 || r.P99Latency < r.MeanLatency/2 || r.MaxLatency < r.P99Latency {
				t.Errorf("latency mean %v, p99 %v, max %v", r.MeanLatency, r.P99Latency, r.MaxLatency)
			}
			// One object is a WAL publish; more, the direct path (a checkpoint
			// that mixes runs and scattered blocks isolates them in objects).
			if r.Objects < 1 || r.Part0Bytes < r.Bytes || r.Landed < r.Flush {
				t.Errorf("flush: %d objects, part 0 %d bytes for %d written, flush %v, landed %v", r.Objects, r.Part0Bytes, r.Bytes, r.Flush, r.Landed)
			}
			var b strings.Builder
			walMarkdown(&b, []walRow{r})
			if !strings.Contains(b.String(), fmt.Sprintf("| none | %s | 8 |", walSizeName(int64(ws)))) {
				t.Errorf("markdown:\n%s", b.String())
			}
		})
	}
}

func TestWALFlags(t *testing.T) {
	c, err := parseBenchFlags("all", "64M", "all", "100", "64", 1)
	if err != nil || !strings.Contains(strings.Join(c.tables, ","), "wal") {
		t.Errorf("-table all: %v, %v; want the wal table in it", c.tables, err)
	}
	if _, err := parseBenchFlags("wal", "64M", "none", "100", "64", 1); err != nil {
		t.Errorf("-table wal: %v", err)
	}
	if _, ws, err := parseWALFlags(time.Second, "1, 8,64"); err != nil || fmt.Sprint(ws) != "[1 8 64]" {
		t.Errorf("-writers 1,8,64: %v, %v", ws, err)
	}
	for _, bad := range []struct {
		d time.Duration
		w string
	}{{0, "1"}, {time.Second, "0"}, {time.Second, "1,x"}, {time.Second, ""}} {
		if _, _, err := parseWALFlags(bad.d, bad.w); err == nil {
			t.Errorf("-duration %v -writers %q accepted", bad.d, bad.w)
		}
	}
}

// BenchmarkWAL runs the cells of the wal table, one measured run per
// iteration (use -benchtime 1x). BENCH_WAL_DURATION sets how long each run's
// writers write (default 3s); BENCH_SIZE caps the bytes of a run (512M).
//
//	go test ./cmd/ckptfs/ -run '^$' -bench 'WAL/general/4KiB' -benchtime 1x
func BenchmarkWAL(b *testing.B) {
	d := 3 * time.Second
	if s := os.Getenv("BENCH_WAL_DURATION"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 {
			b.Fatalf("BENCH_WAL_DURATION=%q: want a duration > 0", s)
		}
		d = v
	}
	capBytes := int64(seedbench.SeedSize)
	if s := os.Getenv("BENCH_SIZE"); s != "" {
		c, err := parseBenchFlags("wal", s, "none", "0", "1", 1)
		if err != nil {
			b.Fatalf("BENCH_SIZE=%q: %v", s, err)
		}
		capBytes = c.size
	}
	params := walBenchParams()
	for _, p := range seedbench.Profiles() {
		for _, ws := range walWriteSizes {
			for _, w := range []int{1, 8, 64} {
				name := fmt.Sprintf("%s/%s/%dw", p.Name, strings.ReplaceAll(walSizeName(int64(ws)), " ", ""), w)
				b.Run(name, func(b *testing.B) {
					var r walRow
					for b.Loop() {
						var err error
						r, err = walRunOne(context.Background(), walCell{Profile: p, WriteSize: ws, Writers: w, Duration: d, Cap: capBytes, Params: params})
						if err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(r.WritesPerSec(), "writes/s")
					b.ReportMetric(r.MBPerSec(), "MB/s")
					b.ReportMetric(r.PutsPerWrite(), "puts/write")
					b.ReportMetric(float64(r.MeanLatency)/float64(time.Millisecond), "mean-ms")
					b.ReportMetric(float64(r.P99Latency)/float64(time.Millisecond), "p99-ms")
					b.ReportMetric(float64(r.Flush)/float64(time.Millisecond), "flush-ms")
					b.ReportMetric(float64(r.Landed)/float64(time.Millisecond), "landed-ms")
					b.ReportMetric(float64(r.MeanPut())/float64(time.Millisecond), "put-ms")
					b.ReportMetric(float64(r.PeakInFlight), "peak-inflight")
					b.ReportMetric(r.MeanRecordBytes()/(1<<20), "record-MiB")
				})
			}
		}
	}
}
