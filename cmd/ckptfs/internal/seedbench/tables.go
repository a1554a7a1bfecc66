package seedbench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/link"
)

// Profiles are the project's reference links, in the seed's order.
func Profiles() []link.Profile {
	return []link.Profile{link.ProfileDirectory, link.ProfileGeneral}
}

// rateName writes a writer's pace: "100 MB/s" or "unpaced".
func rateName(bps float64) string {
	if bps <= 0 {
		return "unpaced"
	}
	return fmt.Sprintf("%g MB/s", bps/1e6)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func mib(n int64) string { return fmt.Sprintf("%.1f", float64(n)/MiB) }

// ---------------------------------------------------------------- buys

// BuysConfig is the "What it buys" workload. Zero fields take the seed's
// values.
type BuysConfig struct {
	Size     int64          // SeedSize
	Rates    []float64      // 100 MB/s, 400 MB/s, unpaced (0)
	Profiles []link.Profile // directory, general
	Variants []Variant      // BuysVariants()
	// Progress, when set, is called with each row as it is measured.
	Progress func(BuysRow)
}

// BuysRow is one cell of "What it buys".
type BuysRow struct {
	Profile string
	Rate    float64
	Variant Variant
	Result
}

func (c BuysConfig) withDefaults() BuysConfig {
	if c.Size == 0 {
		c.Size = SeedSize
	}
	if c.Rates == nil {
		c.Rates = []float64{100e6, 400e6, 0}
	}
	if c.Profiles == nil {
		c.Profiles = Profiles()
	}
	if c.Variants == nil {
		c.Variants = BuysVariants()
	}
	return c
}

// Buys measures "What it buys": Size bytes in 1 MiB writes at each rate,
// then one flush, for each profile and variant, with the dirty-data limit
// raised out of the way.
func Buys(ctx context.Context, c BuysConfig) ([]BuysRow, error) {
	c = c.withDefaults()
	var rows []BuysRow
	for _, p := range c.Profiles {
		for _, rate := range c.Rates {
			for _, v := range c.Variants {
				res, err := RunOne(ctx, Run{Profile: p, Params: BenchParams(v), Size: c.Size, WriteSize: MiB, Rate: rate})
				if err != nil {
					return rows, fmt.Errorf("what it buys, %s at %s, %s: %w", p.Name, rateName(rate), v.Name, err)
				}
				row := BuysRow{Profile: p.Name, Rate: rate, Variant: v, Result: res}
				rows = append(rows, row)
				if c.Progress != nil {
					c.Progress(row)
				}
			}
		}
	}
	return rows, nil
}

// BuysMarkdown prints rows as the seed's table (flush seconds, objects per
// checkpoint in parentheses), then one line per row with the longest write,
// the physical limit of the flush and the ratios.
func BuysMarkdown(w io.Writer, rows []BuysRow) {
	type key struct {
		profile string
		rate    float64
	}
	var keys []key
	var variants []string
	cells := make(map[key]map[string]BuysRow)
	for _, r := range rows {
		k := key{r.Profile, r.Rate}
		if cells[k] == nil {
			keys = append(keys, k)
			cells[k] = make(map[string]BuysRow)
		}
		cells[k][r.Variant.Name] = r
		if !contains(variants, r.Variant.Name) {
			variants = append(variants, r.Variant.Name)
		}
	}
	fmt.Fprintf(w, "| link | writer | %s |\n", strings.Join(variants, " | "))
	fmt.Fprintf(w, "|---|---|%s\n", strings.Repeat("---|", len(variants)))
	for _, k := range keys {
		fmt.Fprintf(w, "| %s | %s |", k.profile, rateName(k.rate))
		for _, v := range variants {
			if r, ok := cells[k][v]; ok {
				fmt.Fprintf(w, " %s (%d) |", secs(r.Flush), r.Objects)
			} else {
				fmt.Fprint(w, " |")
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| link | writer | variant | flush s | objects | longest write ms | flush sent MiB | sequential requests | limit s | flush/limit | limit after in flight s | flush/that |  parted/flush | sent ahead MiB | in flight at flush | dead MiB | settle / plan / data / part 0 / head ms | longest complete ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range keys {
		parted, hasParted := cells[k][Parted.Name]
		for _, v := range variants {
			r, ok := cells[k][v]
			if !ok {
				continue
			}
			ratio := "–"
			if hasParted && r.Flush > 0 {
				ratio = fmt.Sprintf("%.1f×", float64(parted.Flush)/float64(r.Flush))
			}
			t := r.Timing
			fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s | %s | %d | %s | %.2f | %s | %.2f | %s | %s | %d, %s MiB | %s | %s | %s |\n",
				k.profile, rateName(k.rate), v, secs(r.Flush), r.Objects, ms(r.LongestWrite),
				mib(r.FlushSentBytes), r.SeqRequests, secs(r.Limit), r.FlushOverLimit(),
				secs(r.LimitInFlight), ratioOf(r.Flush, r.LimitInFlight), ratio, mib(t.StreamSentBytes), r.InFlight, mib(r.InFlightBytes), mib(t.StreamDeadBytes), phases(t),
				ms(r.FlushLongest[staging.OpCompleteMultipart]))
		}
	}
}

func ratioOf(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// phases writes where a flush's time went: settling what was sent ahead
// (the rest of Total), planning, data parts, part 0 and the head.
func phases(t engine.FlushTiming) string {
	settle := t.Total - t.Plan - t.Data - t.Part0 - t.Head
	return fmt.Sprintf("%.0f / %.0f / %.0f / %.0f / %.0f", float64(settle)/1e6, float64(t.Plan)/1e6,
		float64(t.Data)/1e6, float64(t.Part0)/1e6, float64(t.Head)/1e6)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------- writer

// WriterConfig is the writer-cost workload. Zero fields take the seed's
// values.
type WriterConfig struct {
	Size      int64     // SeedSize
	WriteSize int       // 16 MiB
	Variants  []Variant // Parted, Stream 16 MiB, Stream 1 GiB
	// Repeats is how many times each variant runs; the row is the run with
	// the least time in the writing calls (default 3).
	Repeats  int
	Progress func(WriterRow)
}

// WriterRow is the cost of the writing calls of one variant.
type WriterRow struct {
	Variant Variant
	// ByRef: written by reference (WriteRef) rather than by value.
	ByRef bool
	Result
}

// SecondsPerGiB is the time spent inside the writing calls per GiB written.
func (r WriterRow) SecondsPerGiB(size int64) float64 {
	return r.WriteTime.Seconds() / (float64(size) / GiB)
}

func (c WriterConfig) withDefaults() WriterConfig {
	if c.Size == 0 {
		c.Size = SeedSize
	}
	if c.WriteSize == 0 {
		c.WriteSize = 16 * MiB
	}
	if c.Variants == nil {
		c.Variants = []Variant{Parted, Stream(16 * MiB), Stream(GiB)}
	}
	if c.Repeats <= 0 {
		c.Repeats = 3
	}
	return c
}

// Writer measures the cost of the writing calls: Size bytes in WriteSize
// writes, unpaced, at 4 KiB blocks, on memory staging with no link, with the
// dirty-data limit raised; by value (WriteAt), then by reference (WriteRef).
func Writer(ctx context.Context, c WriterConfig) ([]WriterRow, error) {
	c = c.withDefaults()
	var rows []WriterRow
	for _, byRef := range []bool{false, true} {
		for _, v := range c.Variants {
			var best Result
			for i := range c.Repeats {
				res, err := RunOne(ctx, Run{Params: BenchParams(v), Size: c.Size, WriteSize: c.WriteSize, ByRef: byRef})
				if err != nil {
					return rows, fmt.Errorf("writer cost, %s (by reference: %v): %w", v.Name, byRef, err)
				}
				if i == 0 || res.WriteTime < best.WriteTime {
					best = res
				}
			}
			row := WriterRow{Variant: v, ByRef: byRef, Result: best}
			rows = append(rows, row)
			if c.Progress != nil {
				c.Progress(row)
			}
		}
	}
	return rows, nil
}

// WriterMarkdown prints the writer's cost per GiB, by value and by
// reference, each with its ratio to Parted's written the same way.
func WriterMarkdown(w io.Writer, rows []WriterRow, size int64) {
	parted := map[bool]float64{}
	for _, r := range rows {
		if r.Variant.Name == Parted.Name {
			parted[r.ByRef] = r.SecondsPerGiB(size)
		}
	}
	fmt.Fprintln(w, "| variant | written | s/GiB in the writing calls | against parted | longest write ms | flush s | sent ahead MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		ratio := "–"
		if p := parted[r.ByRef]; p > 0 {
			ratio = fmt.Sprintf("%.2f×", r.SecondsPerGiB(size)/p)
		}
		how := "by value"
		if r.ByRef {
			how = "by reference"
		}
		fmt.Fprintf(w, "| %s | %s | %.3f | %s | %s | %s | %s |\n", r.Variant.Name, how, r.SecondsPerGiB(size), ratio,
			ms(r.LongestWrite), secs(r.Flush), mib(r.Timing.StreamSentBytes))
	}
}

// ---------------------------------------------------------------- amp

// AmpConfig is the write-amplification workload. Zero fields take the seed's
// values.
type AmpConfig struct {
	Size     int64        // SeedSize
	Rate     float64      // 200 MB/s
	Hots     []int64      // 512, 64, 16 MiB (BENCH_HOT_MIB)
	Variants []Variant    // Parted, Stream 4 MiB, 16 MiB, 1 GiB
	Profile  link.Profile // the general purpose link
	Progress func(AmpRow)
}

// AmpRow is one cell of the write-amplification table.
type AmpRow struct {
	Hot     int64 // the working set, at most the size written
	Variant Variant
	Result
}

func (c AmpConfig) withDefaults() AmpConfig {
	if c.Size == 0 {
		c.Size = SeedSize
	}
	if c.Rate == 0 {
		c.Rate = 200e6
	}
	if c.Hots == nil {
		c.Hots = []int64{512 * MiB, 64 * MiB, 16 * MiB}
	}
	if c.Variants == nil {
		c.Variants = []Variant{Parted, Stream(4 * MiB), Stream(16 * MiB), Stream(GiB)}
	}
	if c.Profile.Name == "" {
		c.Profile = link.ProfileGeneral
	}
	return c
}

// Amp measures write amplification: Size bytes at Rate in 1 MiB writes round
// each working set (write i at (i × 1 MiB) mod hot), then one flush; bytes
// uploaded over bytes kept.
func Amp(ctx context.Context, c AmpConfig) ([]AmpRow, error) {
	c = c.withDefaults()
	var rows []AmpRow
	for _, hot := range c.Hots {
		hot = min(hot, c.Size)
		for _, v := range c.Variants {
			res, err := RunOne(ctx, Run{Profile: c.Profile, Params: BenchParams(v), Size: c.Size, WriteSize: MiB, Rate: c.Rate, Hot: hot})
			if err != nil {
				return rows, fmt.Errorf("write amplification, working set %s, %s: %w", sizeName(hot), v.Name, err)
			}
			row := AmpRow{Hot: hot, Variant: v, Result: res}
			rows = append(rows, row)
			if c.Progress != nil {
				c.Progress(row)
			}
		}
	}
	return rows, nil
}

// AmpMarkdown prints amplification as the seed does (working set by
// variant), then the seed's counters of each row.
func AmpMarkdown(w io.Writer, rows []AmpRow) {
	var hots []int64
	var variants []string
	cells := make(map[int64]map[string]AmpRow)
	for _, r := range rows {
		if cells[r.Hot] == nil {
			hots = append(hots, r.Hot)
			cells[r.Hot] = make(map[string]AmpRow)
		}
		cells[r.Hot][r.Variant.Name] = r
		if !contains(variants, r.Variant.Name) {
			variants = append(variants, r.Variant.Name)
		}
	}
	fmt.Fprintf(w, "| working set | %s |\n", strings.Join(variants, " | "))
	fmt.Fprintf(w, "|---|%s\n", strings.Repeat("---|", len(variants)))
	for _, h := range hots {
		fmt.Fprintf(w, "| %s |", sizeName(h))
		for _, v := range variants {
			if r, ok := cells[h][v]; ok {
				fmt.Fprintf(w, " %.2f× |", r.Amplification())
			} else {
				fmt.Fprint(w, " |")
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| working set | variant | uploaded MiB | kept MiB | amplification | data only | objects | stream_sent MiB | stream_dead MiB | stream_flush MiB | stream_meta MiB | flush s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, h := range hots {
		for _, v := range variants {
			r, ok := cells[h][v]
			if !ok {
				continue
			}
			t := r.Timing
			data := float64(t.StreamSentBytes+t.StreamFlushBytes) / float64(max(r.Kept, 1))
			fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f× | %.2f× | %d | %s | %s | %s | %s | %s |\n",
				sizeName(h), v, mib(r.Uploaded), mib(r.Kept), r.Amplification(), data, r.Objects,
				mib(t.StreamSentBytes), mib(t.StreamDeadBytes), mib(t.StreamFlushBytes), mib(t.StreamMetaBytes), secs(r.Flush))
		}
	}
}

// ---------------------------------------------------------------- limits

// LimitsConfig is the "dirty-data limits come first" workload. Zero fields
// take the seed's values.
type LimitsConfig struct {
	Size     int64          // SeedSize
	Rate     float64        // unpaced (0)
	Profiles []link.Profile // directory, general
	Variants []Variant      // Parted, Stream 16 MiB, Stream 1 GiB, Stream 4 MiB
	Progress func(LimitsRow)
}

// LimitsRow is one cell of the dirty-limits table.
type LimitsRow struct {
	Profile string
	Variant Variant
	Result
}

func (c LimitsConfig) withDefaults() LimitsConfig {
	if c.Size == 0 {
		c.Size = SeedSize
	}
	if c.Profiles == nil {
		c.Profiles = Profiles()
	}
	if c.Variants == nil {
		c.Variants = []Variant{Parted, Stream(16 * MiB), Stream(GiB), Stream(4 * MiB)}
	}
	return c
}

// LimitsParams are the engine's defaults (the seed's: dirty-data limit
// 8 MiB) with the variant's format and target.
func LimitsParams(v Variant) engine.Params {
	p := engine.DefaultParams()
	p.Format = v.Format
	p.StreamSegmentBytes = v.Target
	return p
}

// Limits measures Size bytes in 1 MiB writes with the default dirty-data
// limit, then one flush.
func Limits(ctx context.Context, c LimitsConfig) ([]LimitsRow, error) {
	c = c.withDefaults()
	var rows []LimitsRow
	for _, p := range c.Profiles {
		for _, v := range c.Variants {
			res, err := RunOne(ctx, Run{Profile: p, Params: LimitsParams(v), Size: c.Size, WriteSize: MiB, Rate: c.Rate})
			if err != nil {
				return rows, fmt.Errorf("default limits, %s, %s: %w", p.Name, v.Name, err)
			}
			row := LimitsRow{Profile: p.Name, Variant: v, Result: res}
			rows = append(rows, row)
			if c.Progress != nil {
				c.Progress(row)
			}
		}
	}
	return rows, nil
}

// LimitsMarkdown prints the run and flush times, the objects and what was
// sent ahead.
func LimitsMarkdown(w io.Writer, rows []LimitsRow) {
	fmt.Fprintln(w, "| link | variant | run s (writes + flush) | flush s | objects | MiB per object | longest write ms | sent ahead MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		per := "–"
		if r.Objects > 0 {
			per = mib(r.Uploaded / int64(r.Objects))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s | %s | %s |\n", r.Profile, r.Variant.Name,
			secs(r.Total), secs(r.Flush), r.Objects, per, ms(r.LongestWrite), mib(r.Timing.StreamSentBytes))
	}
}
