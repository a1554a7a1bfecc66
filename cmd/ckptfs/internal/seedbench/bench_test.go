package seedbench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/config"
)

// The benchmarks run one measured run per iteration (use -benchtime=1x for
// the tables) and report the seed's figures as metrics. BENCH_SIZE scales
// every run (default 512M); BENCH_HOT_MIB lists the working sets of
// BenchmarkAmp in MiB (default 512,64,16). Select cells with -bench, e.g.
//
//	go test ./cmd/ckptfs/internal/seedbench/ -run '^$' -bench 'Buys/general/100MBps' -benchtime 1x
func benchSize(b *testing.B) int64 {
	s := os.Getenv("BENCH_SIZE")
	if s == "" {
		return SeedSize
	}
	n, err := config.ParseSize(s)
	if err != nil || n < MiB || n%MiB != 0 {
		b.Fatalf("BENCH_SIZE=%q: want whole MiB, at least 1M (%v)", s, err)
	}
	return n
}

func benchHots(b *testing.B) []int64 {
	s := os.Getenv("BENCH_HOT_MIB")
	if s == "" {
		return []int64{512 * MiB, 64 * MiB, 16 * MiB}
	}
	var hots []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || v < 1 {
			b.Fatalf("BENCH_HOT_MIB=%q: want MiB counts, comma separated", s)
		}
		hots = append(hots, v*MiB)
	}
	return hots
}

func benchName(s string) string { return strings.ReplaceAll(s, " ", "") }

func runBench(b *testing.B, r Run) Result {
	b.Helper()
	var res Result
	for b.Loop() {
		var err error
		res, err = RunOne(context.Background(), r)
		if err != nil {
			b.Fatal(err)
		}
	}
	return res
}

func BenchmarkBuys(b *testing.B) {
	size := benchSize(b)
	for _, p := range Profiles() {
		for _, rate := range []float64{100e6, 400e6, 0} {
			for _, v := range BuysVariants() {
				name := fmt.Sprintf("%s/%s/%s", p.Name, benchName(strings.ReplaceAll(rateName(rate), "/", "p")), benchName(v.Name))
				b.Run(name, func(b *testing.B) {
					res := runBench(b, Run{Profile: p, Params: BenchParams(v), Size: size, WriteSize: MiB, Rate: rate})
					b.ReportMetric(res.Flush.Seconds(), "flush-s")
					b.ReportMetric(float64(res.Objects), "objects")
					b.ReportMetric(res.Limit.Seconds(), "limit-s")
					b.ReportMetric(res.FlushOverLimit(), "flush/limit")
					b.ReportMetric(res.LongestWrite.Seconds()*1000, "longest-write-ms")
				})
			}
		}
	}
}

func BenchmarkWriter(b *testing.B) {
	size := benchSize(b)
	for _, byRef := range []bool{false, true} {
		how := "value"
		if byRef {
			how = "ref"
		}
		for _, v := range []Variant{Parted, Stream(16 * MiB), Stream(GiB)} {
			b.Run(how+"/"+benchName(v.Name), func(b *testing.B) {
				b.SetBytes(size)
				res := runBench(b, Run{Params: BenchParams(v), Size: size, WriteSize: 16 * MiB, ByRef: byRef})
				b.ReportMetric(WriterRow{Result: res}.SecondsPerGiB(size), "write-s/GiB")
			})
		}
	}
}

func BenchmarkAmp(b *testing.B) {
	size := benchSize(b)
	for _, hot := range benchHots(b) {
		hot = min(hot, size)
		for _, v := range []Variant{Parted, Stream(4 * MiB), Stream(16 * MiB), Stream(GiB)} {
			b.Run(fmt.Sprintf("hot%dMiB/%s", hot/MiB, benchName(v.Name)), func(b *testing.B) {
				res := runBench(b, Run{Profile: Profiles()[1], Params: BenchParams(v), Size: size, WriteSize: MiB, Rate: 200e6, Hot: hot})
				b.ReportMetric(res.Amplification(), "uploaded/kept")
				b.ReportMetric(float64(res.Objects), "objects")
			})
		}
	}
}

func BenchmarkLimits(b *testing.B) {
	size := benchSize(b)
	for _, p := range Profiles() {
		for _, v := range []Variant{Parted, Stream(16 * MiB), Stream(GiB), Stream(4 * MiB)} {
			b.Run(p.Name+"/"+benchName(v.Name), func(b *testing.B) {
				res := runBench(b, Run{Profile: p, Params: LimitsParams(v), Size: size, WriteSize: MiB})
				b.ReportMetric(res.Total.Seconds(), "run-s")
				b.ReportMetric(res.Flush.Seconds(), "flush-s")
				b.ReportMetric(float64(res.Objects), "objects")
				b.ReportMetric(float64(res.Timing.StreamSentBytes)/MiB, "sent-ahead-MiB")
			})
		}
	}
}
