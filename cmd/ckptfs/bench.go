package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ckptfs/ckptfs/cmd/ckptfs/internal/seedbench"
	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/fusefs"
	"github.com/ckptfs/ckptfs/staging/link"
)

const benchLong = `ckptfs bench: reproduces the seed's tables on memory staging behind an emulated
link and prints them as markdown, with the command line that made them.

  buys    512 MiB in 1 MiB writes at 100 MB/s, 400 MB/s and unpaced, then one
          flush: flush seconds (objects per checkpoint), against the physical
          limit of each flush
  writer  seconds per GiB spent inside the writing calls (16 MiB writes, no link)
  amp     write amplification round a working set, at 200 MB/s
  limits  the default dirty-data limit (8 MiB): nothing is sent ahead
  wal     the write-ahead log (wal=on): writers of 4 KiB and 1 MiB writes, each
          to its own region, for --duration or until --size bytes are
          acknowledged: writes per second, record PUTs per write, latency;
          then one flush (a WAL publish) and the time until it landed

The size defaults to $BENCH_SIZE, else 512M; the working sets to
$BENCH_HOT_MIB (MiB, comma separated), else 512,64,16.`

// newBenchCmd is "ckptfs bench [flags]".
func newBenchCmd() *cobra.Command {
	defSize := "512M"
	if s := os.Getenv("BENCH_SIZE"); s != "" {
		defSize = s
	}
	defHot := "512,64,16"
	if s := os.Getenv("BENCH_HOT_MIB"); s != "" {
		defHot = s
	}
	var table, sizeText, profileText, ratesText, hotText, writersText string
	var repeats int
	var duration time.Duration
	c := &cobra.Command{
		Use:   "bench [flags]",
		Short: "reproduce the seed's tables (markdown on stdout)",
		Long:  benchLong,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := parseBenchFlags(table, sizeText, profileText, ratesText, hotText, repeats)
			var werr error
			cfg.duration, cfg.writers, werr = parseWALFlags(duration, writersText)
			if err = errors.Join(err, werr); err != nil {
				return &usageError{err}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			return runBench(ctx, cfg, benchArgv(c), c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	f := c.Flags()
	f.StringVar(&table, "table", "all", "`table`: buys, writer, amp, limits, wal or all")
	f.StringVar(&sizeText, "size", defSize, "`bytes` written by each run (512M is the seed's)")
	f.StringVar(&profileText, "profile", "all", "link: directory, general, none (no link) or all")
	f.StringVar(&ratesText, "rates", "100,400,0", "writer paces of the buys table in MB/s; 0 is unpaced")
	f.StringVar(&hotText, "hot", defHot, "working sets of the amp table in MiB")
	f.IntVar(&repeats, "repeats", 3, "runs per row of the writer table (the least time is kept)")
	durationFlag(f, &duration, "duration", 3*time.Second, "how long the writers of each row of the wal table write")
	f.StringVar(&writersText, "writers", "1,8,64", "concurrent writers of the rows of the wal table")
	return c
}

// benchArgv is the command line that makes the tables again: the flags
// given, by name.
func benchArgv(c *cobra.Command) []string {
	argv := []string{"ckptfs", "bench"}
	c.Flags().Visit(func(f *pflag.Flag) {
		argv = append(argv, "--"+f.Name, f.Value.String())
	})
	return argv
}

type benchConfig struct {
	tables   []string
	size     int64
	profiles []link.Profile
	rates    []float64
	hots     []int64
	repeats  int
	duration time.Duration // wal table
	writers  []int         // wal table
}

func parseBenchFlags(table, size, profile, rates, hot string, repeats int) (benchConfig, error) {
	var c benchConfig
	var errs []error
	switch table {
	case "all":
		c.tables = []string{"buys", "writer", "amp", "limits", "wal"}
	case "buys", "writer", "amp", "limits", "wal":
		c.tables = []string{table}
	default:
		errs = append(errs, fmt.Errorf("--table %q: want buys, writer, amp, limits, wal or all", table))
	}
	n, err := config.ParseSize(size)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("--size: %w", err))
	case n < seedbench.MiB:
		errs = append(errs, fmt.Errorf("--size %s: want at least 1M", size))
	case n%seedbench.MiB != 0:
		errs = append(errs, fmt.Errorf("--size %s: want whole MiB (the writes are 1 MiB)", size))
	}
	c.size = n
	switch profile {
	case "all":
		c.profiles = seedbench.Profiles()
	default:
		p, err := link.ProfileByName(profile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--profile: %w", err))
		}
		c.profiles = []link.Profile{p}
	}
	for _, f := range strings.Split(rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 {
			errs = append(errs, fmt.Errorf("--rates %q: want MB/s numbers >= 0, comma separated", rates))
			break
		}
		c.rates = append(c.rates, v*1e6)
	}
	for _, f := range strings.Split(hot, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || v < 1 {
			errs = append(errs, fmt.Errorf("working sets %q: want MiB counts >= 1, comma separated", hot))
			break
		}
		c.hots = append(c.hots, v*seedbench.MiB)
	}
	if repeats < 1 {
		errs = append(errs, fmt.Errorf("--repeats %d: want at least 1", repeats))
	}
	c.repeats = repeats
	return c, errors.Join(errs...)
}

func runBench(ctx context.Context, c benchConfig, argv []string, stdout, stderr io.Writer) error {
	fmt.Fprintf(stdout, "Made by `%s` on %s (%s, GOMAXPROCS %d).\n\n",
		strings.Join(argv, " "), time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.Version(), runtime.GOMAXPROCS(0))
	for _, t := range c.tables {
		start := time.Now()
		switch t {
		case "buys":
			rows, err := seedbench.Buys(ctx, seedbench.BuysConfig{Size: c.size, Rates: c.rates, Profiles: c.profiles,
				Variants: append(seedbench.BuysVariants(), mountVariant()),
				Progress: func(r seedbench.BuysRow) {
					fmt.Fprintf(stderr, "buys: %s %.0f MB/s %s: flush %.2f s, %d objects\n", r.Profile, r.Rate/1e6, r.Variant.Name, r.Flush.Seconds(), r.Objects)
				}})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "### What it buys: %s in 1 MiB writes, then one flush\n\n", sizeText(c.size))
			fmt.Fprintln(stdout, "Flush seconds (objects per checkpoint).")
			fmt.Fprintln(stdout)
			seedbench.BuysMarkdown(stdout, rows)
		case "writer":
			rows, err := seedbench.Writer(ctx, seedbench.WriterConfig{Size: c.size, Repeats: c.repeats,
				Progress: func(r seedbench.WriterRow) {
					fmt.Fprintf(stderr, "writer: %s: %.3f s/GiB\n", r.Variant.Name, r.SecondsPerGiB(c.size))
				}})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "### Writer cost: %s in 16 MiB writes, 4 KiB blocks, memory staging, best of %d\n\n", sizeText(c.size), c.repeats)
			seedbench.WriterMarkdown(stdout, rows, c.size)
		case "amp":
			for _, p := range c.profiles {
				rows, err := seedbench.Amp(ctx, seedbench.AmpConfig{Size: c.size, Hots: c.hots, Profile: p,
					Progress: func(r seedbench.AmpRow) {
						fmt.Fprintf(stderr, "amp: %s round %d MiB %s: %.2f×\n", p.Name, r.Hot/seedbench.MiB, r.Variant.Name, r.Amplification())
					}})
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "### Write amplification: %s at 200 MB/s round a working set, %s link\n\n", sizeText(c.size), p.Name)
				fmt.Fprintln(stdout, "Bytes uploaded (Put and UploadPart payloads) over bytes kept (the file's size).")
				fmt.Fprintln(stdout)
				seedbench.AmpMarkdown(stdout, rows)
				fmt.Fprintln(stdout)
			}
		case "limits":
			rows, err := seedbench.Limits(ctx, seedbench.LimitsConfig{Size: c.size, Profiles: c.profiles,
				Progress: func(r seedbench.LimitsRow) {
					fmt.Fprintf(stderr, "limits: %s %s: run %.2f s, %d objects\n", r.Profile, r.Variant.Name, r.Total.Seconds(), r.Objects)
				}})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "### The dirty-data limits come first: %s in 1 MiB writes, unpaced, default limits (8 MiB)\n\n", sizeText(c.size))
			seedbench.LimitsMarkdown(stdout, rows)
		case "wal":
			rows, err := walTable(ctx, c.profiles, c.writers, c.duration, c.size, func(r walRow) {
				fmt.Fprintf(stderr, "wal: %s %s × %d: %.0f writes/s, %.1f MB/s, %.1f writes per record, record PUT %s ms, p99 %s ms, max %s ms, flush %s ms, landed %s ms\n",
					r.Profile.Name, walSizeName(int64(r.WriteSize)), r.Writers, r.WritesPerSec(), r.MBPerSec(), r.WritesPerRecord(),
					walMs(r.MeanPut()), walMs(r.P99Latency), walMs(r.MaxLatency), walMs(r.Flush), walMs(r.Landed))
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "### Write-ahead log (wal=on): writers for %s each (or until %s are acknowledged), then one flush\n\n", c.duration, sizeText(c.size))
			fmt.Fprintf(stdout, "One file on memory staging behind the link; %s. Each writer writes its own region, one write after another.\n\n", walParamsText(walBenchParams()))
			walMarkdown(stdout, rows)
			fmt.Fprintln(stdout)
			fmt.Fprint(stdout, walColumns)
		}
		fmt.Fprintf(stdout, "\n(%s: %.0f s)\n\n", t, time.Since(start).Seconds())
	}
	return nil
}

// parseWALFlags checks the flags of the wal table.
func parseWALFlags(d time.Duration, writers string) (time.Duration, []int, error) {
	var errs []error
	if d <= 0 {
		errs = append(errs, fmt.Errorf("--duration %s: want more than 0", d))
	}
	var ws []int
	for _, f := range strings.Split(writers, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 || v > 4096 {
			errs = append(errs, fmt.Errorf("--writers %q: want counts from 1 to 4096, comma separated", writers))
			break
		}
		ws = append(ws, v)
	}
	return d, ws, errors.Join(errs...)
}

func sizeText(n int64) string {
	if n%seedbench.GiB == 0 {
		return fmt.Sprintf("%d GiB", n/seedbench.GiB)
	}
	return fmt.Sprintf("%d MiB", n/seedbench.MiB)
}

// mountVariant is the last column of the buys table: what a mount on this
// machine writes with no option given (config.MountDefault), so that the
// flush a user's fsync waits for is measured against its limit too.
func mountVariant() seedbench.Variant {
	p := fusefs.Params(config.MountDefault(config.TotalRAM()))
	return seedbench.Variant{Name: "mount", Format: p.Format, Target: p.StreamSegmentBytes, Params: &p}
}
