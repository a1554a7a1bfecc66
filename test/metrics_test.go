package test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ckptfs/ckptfs/staging/s3test"
)

// parseProm parses a scrape with the Prometheus text parser, checks it
// with the Prometheus linter (HELP on every family, counters named _total,
// base units...), and returns its samples by name{labels}: a histogram's as
// name_bucket{le="..."}, name_sum and name_count.
func parseProm(text string) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		return nil, fmt.Errorf("lint: %w", err)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("lint: %v", problems)
	}
	samples := make(map[string]float64)
	for name, mf := range mfs {
		if mf.GetHelp() == "" {
			return nil, fmt.Errorf("%s has no HELP", name)
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				// volume is the same on every series of a mount
				// (checkScrapeVolume): keys leave it out.
				if l.GetName() == "volume" {
					continue
				}
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := func(suffix string, extra ...string) string {
				ls := append(slices.Clone(labels), extra...)
				if len(ls) == 0 {
					return name + suffix
				}
				return name + suffix + "{" + strings.Join(ls, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				samples[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				samples[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				samples[key("")] = m.GetUntyped().GetValue()
			case dto.MetricType_SUMMARY:
				samples[key("_sum")] = m.GetSummary().GetSampleSum()
				samples[key("_count")] = float64(m.GetSummary().GetSampleCount())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				samples[key("_sum")] = h.GetSampleSum()
				samples[key("_count")] = float64(h.GetSampleCount())
				for _, b := range h.GetBucket() {
					samples[key("_bucket", fmt.Sprintf("le=%q", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))] = float64(b.GetCumulativeCount())
				}
			default:
				return nil, fmt.Errorf("%s: type %v", name, mf.GetType())
			}
		}
	}
	return samples, nil
}

func TestParseProm(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		ok         bool
	}{
		{"counter", "# HELP a_total A.\n# TYPE a_total counter\na_total 3\n", true},
		{"labels", "# HELP a_total A.\n# TYPE a_total counter\na_total{op=\"put\",x=\"y\"} 3\n", true},
		{"histogram", "# HELP s_seconds S.\n# TYPE s_seconds histogram\ns_seconds_bucket{le=\"1\"} 1\ns_seconds_bucket{le=\"+Inf\"} 2\ns_seconds_sum 0.5\ns_seconds_count 2\n", true},
		{"no help", "# TYPE a_total counter\na_total 3\n", false},
		{"counter without _total", "# HELP a A.\n# TYPE a counter\na 3\n", false},
		{"bad value", "# HELP g G.\n# TYPE g gauge\ng three\n", false},
		{"bad label", "# HELP g G.\n# TYPE g gauge\ng{op=put} 1\n", false},
		{"duplicate", "# HELP g G.\n# TYPE g gauge\ng 1\ng 2\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseProm(tc.text)
			if (err == nil) != tc.ok {
				t.Fatalf("parseProm: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// scrape fetches /metrics from addr and parses it.
func scrape(addr string) (map[string]float64, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		return nil, fmt.Errorf("content type %q", ct)
	}
	return parseProm(string(b))
}

// writeRandom writes n random bytes to path, closing it (a flush) at the end.
func writeRandom(path string, n int64) error {
	return writeRandomThen(path, n, nil)
}

// writeRandomThen is writeRandom calling after, if not nil, with the bytes
// written so far after each MiB, the file still open.
func writeRandomThen(path string, n int64, after func(written int64) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	r := rand.NewChaCha8([32]byte{1, 2, 3})
	buf := make([]byte, 1<<20)
	var written int64
	for written < n {
		k := min(int64(len(buf)), n-written)
		_, _ = r.Read(buf[:k])
		if _, err := f.Write(buf[:k]); err != nil {
			f.Close()
			return err
		}
		written += k
		if after != nil {
			if err := after(written); err != nil {
				f.Close()
				return err
			}
		}
	}
	return f.Close()
}

// TestMetricsDuringWrite scrapes a real mount while a large file is written
// through it: the counters move between scrapes, every scrape is valid text
// exposition, and the listener is gone after unmount.
func TestMetricsDuringWrite(t *testing.T) {
	v := newVolume(t)
	// No periodic flush while it writes: at a slow writer's pace (the race
	// detector on a loaded machine) a flush every second took every 16 MiB
	// before it could be sent ahead. The close flushes.
	m := v.mount("metrics=127.0.0.1:0,flush_interval=10m,stream_segment_bytes=16M")
	addr := m.fsys.MetricsAddr()
	if addr == "" {
		t.Fatal("MetricsAddr is empty with -o metrics set")
	}
	first, err := scrape(addr)
	if err != nil {
		t.Fatalf("scrape before the write: %v", err)
	}
	for _, name := range []string{
		"ckptfs_flushes_total", "ckptfs_flush_seconds_sum", "ckptfs_flush_seconds_count",
		"ckptfs_stream_sent_bytes_total", "ckptfs_stream_dead_bytes_total", "ckptfs_stream_flush_bytes_total",
		"ckptfs_stream_meta_bytes_total", `ckptfs_store_requests_total{op="upload-part"}`,
		`ckptfs_errors_total{kind="flush"}`, `ckptfs_errors_total{kind="store"}`, "ckptfs_dirty_bytes",
		"ckptfs_pieces_in_flight", "ckptfs_open_files",
	} {
		if _, ok := first[name]; !ok {
			t.Errorf("scrape lacks %s", name)
		}
	}

	n := size(384<<20, 96<<20)
	// The writer itself scrapes at a quarter and at three quarters of the
	// file (so that two scrapes fall within the write however fast it
	// goes), and the test every 200ms besides; every scrape is kept.
	var (
		mu            sync.Mutex
		scrapes       []map[string]float64
		quarter, most map[string]float64
	)
	take := func() (map[string]float64, error) {
		s, err := scrape(addr)
		if err == nil {
			mu.Lock()
			scrapes = append(scrapes, s)
			mu.Unlock()
		}
		return s, err
	}
	done := make(chan error, 1)
	go func() {
		done <- writeRandomThen(m.path("big"), n, func(written int64) (err error) {
			switch written {
			case n / 4:
				quarter, err = take()
			case n * 3 / 4:
				most, err = take()
			}
			return err
		})
	}()
	var werr error
	tick := time.NewTicker(200 * time.Millisecond)
loop:
	for {
		select {
		case werr = <-done:
			break loop
		case <-tick.C:
			if _, err := take(); err != nil {
				t.Fatalf("scrape during the write: %v", err)
			}
		}
	}
	tick.Stop()
	if werr != nil {
		t.Fatalf("write: %v", werr)
	}
	mid, last := quarter, most
	reqs := func(s map[string]float64) float64 {
		var sum float64
		for k, v := range s {
			if strings.HasPrefix(k, "ckptfs_store_requests_total{") {
				sum += v
			}
		}
		return sum
	}
	if reqs(last) <= reqs(mid) {
		t.Errorf("store requests did not move during the write: %v then %v", reqs(mid), reqs(last))
	}
	if last["ckptfs_store_bytes_sent_total"] <= mid["ckptfs_store_bytes_sent_total"] {
		t.Errorf("bytes sent did not move during the write: %v then %v",
			mid["ckptfs_store_bytes_sent_total"], last["ckptfs_store_bytes_sent_total"])
	}
	var sawDirty, sawOpen bool
	for _, s := range scrapes {
		sawDirty = sawDirty || s["ckptfs_dirty_bytes"] > 0
		sawOpen = sawOpen || s["ckptfs_open_files"] > 0
	}
	if !sawDirty || !sawOpen {
		t.Errorf("no scrape saw dirty bytes (%v) or an open file (%v) during the write", sawDirty, sawOpen)
	}

	// The close flushed: the checkpoint's counters are in.
	end, err := scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	if end["ckptfs_flushes_total"] < 1 || end["ckptfs_flush_seconds_count"] != end["ckptfs_flushes_total"] ||
		end["ckptfs_flush_seconds_sum"] <= 0 {
		t.Errorf("flushes %v, flush seconds count %v sum %v", end["ckptfs_flushes_total"],
			end["ckptfs_flush_seconds_count"], end["ckptfs_flush_seconds_sum"])
	}
	if end["ckptfs_stream_sent_bytes_total"] <= first["ckptfs_stream_sent_bytes_total"] {
		t.Errorf("bytes sent ahead did not move: %v then %v", first["ckptfs_stream_sent_bytes_total"], end["ckptfs_stream_sent_bytes_total"])
	}
	data := end["ckptfs_stream_sent_bytes_total"] + end["ckptfs_stream_flush_bytes_total"]
	if data < float64(n) {
		t.Errorf("sent ahead + flushed = %v bytes, less than the %d written", data, n)
	}
	if end["ckptfs_stream_meta_bytes_total"] <= 0 {
		t.Errorf("no meta bytes counted")
	}
	if end[`ckptfs_errors_total{kind="flush"}`] != 0 {
		t.Errorf("flush errors: %v", end[`ckptfs_errors_total{kind="flush"}`])
	}
	// Latency histograms: of the FUSE writes, of the store's uploads, of
	// the flushes; and the process and runtime collectors.
	for _, k := range []string{`ckptfs_fuse_operation_seconds_count{op="write"}`, `ckptfs_fuse_operation_seconds_count{op="flush"}`,
		`ckptfs_store_request_seconds_count{op="put"}`, `ckptfs_flush_seconds_bucket{le="+Inf"}`,
		"ckptfs_flush_sent_ahead_bytes_count", "process_resident_memory_bytes", "go_goroutines"} {
		if end[k] <= 0 {
			t.Errorf("%s = %v, want more than 0", k, end[k])
		}
	}
	// The namespace's refresh reads the next log entry, which is not there
	// yet: an expected answer, not an error.
	if end[`ckptfs_store_refused_total{op="get"}`] <= 0 || end[`ckptfs_store_errors_total{op="get"}`] != 0 || end[`ckptfs_errors_total{kind="store"}`] != 0 {
		t.Errorf("gets refused %v, failed %v; store errors %v: want refusals and no errors", end[`ckptfs_store_refused_total{op="get"}`],
			end[`ckptfs_store_errors_total{op="get"}`], end[`ckptfs_errors_total{kind="store"}`])
	}
	t.Logf("after %d MiB: %v flushes, %v bytes sent ahead, %v flushed, %v meta, %v dead, %v requests",
		n>>20, end["ckptfs_flushes_total"], end["ckptfs_stream_sent_bytes_total"], end["ckptfs_stream_flush_bytes_total"],
		end["ckptfs_stream_meta_bytes_total"], end["ckptfs_stream_dead_bytes_total"], reqs(end))

	m.unmount()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("the metrics listener %s still accepts connections after unmount", addr)
	}
}

// TestMetricsListenerBusy: a mount whose metrics address is taken (another
// mount's metrics, a restart while the old process still holds the port)
// mounts all the same, without metrics, and says so on stderr naming the
// listener: the counters are not worth the files.
func TestMetricsListenerBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	need(t, "fusermount3")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	dir := mountpoint(t)
	// Detached (no -f): the command returns once mounted, having printed
	// its warnings.
	cmd := exec.Command(bin, "mount", "-o", withNamespace(opts)+",metrics="+ln.Addr().String(), store, dir)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mount with a busy metrics address failed: %v\n%s", err, out)
	}
	t.Cleanup(func() { runErr("", "fusermount3", "-u", dir) })
	if !strings.Contains(string(out), "metrics listener") || !strings.Contains(string(out), "mounted without metrics") {
		t.Errorf("the mount did not say its metrics listener could not start:\n%s", out)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("served"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "served" {
		t.Fatalf("read through the mount without metrics: %q, %v", b, err)
	}
}

// checkScrapeVolume scrapes addr: every series carries volume=want, the
// build is named by ckptfs_build_info{version,commit,go} = 1, and no secret
// is in the text.
func checkScrapeVolume(t *testing.T, addr, want string, secrets []string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, secret := range secrets {
		if secret != "" && strings.Contains(text, secret) {
			t.Errorf("the scrape holds a secret (%.6s...)", secret)
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["volume"] != want {
				t.Fatalf("%s %v: volume=%q, want %q", name, labels, labels["volume"], want)
			}
			if name == "ckptfs_build_info" {
				if labels["version"] == "" || labels["commit"] == "" || labels["go"] != runtime.Version() || m.GetGauge().GetValue() != 1 {
					t.Errorf("ckptfs_build_info %v = %v, want a version, a commit and go=%s, = 1", labels, m.GetGauge().GetValue(), runtime.Version())
				}
			}
		}
	}
	if mfs["ckptfs_build_info"] == nil {
		t.Error("no ckptfs_build_info")
	}
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestMountLogLevel runs the binary in the foreground with each -o log level
// and a metrics listener: what reaches the log file follows the level (info
// says "mounted", debug also each scrape), and neither the credentials nor
// the user part of the STORE URL is ever logged or shown in the mount table.
func TestMountLogLevel(t *testing.T) {
	need(t, "fusermount3")
	bin := ckptfsBinary(t)
	e, err := s3test.Shared()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		level                   string
		wantMounted, wantScrape bool
	}{
		{"debug", true, true},
		{"info", true, false},
		{"warn", false, false},
		{"error", false, false},
	} {
		t.Run(tc.level, func(t *testing.T) {
			v := newVolume(t)
			store, opts, env := s3Args(t, v)
			const canary = "canary-user:canary-secret"
			store = strings.Replace(store, "s3://", "s3://"+canary+"@", 1)
			dir := mountpoint(t)
			logFile := filepath.Join(t.TempDir(), "ckptfs.log")
			addr := freeAddr(t)
			cmd := exec.Command(bin, "mount", "-f", "-o",
				withNamespace(opts)+",log="+tc.level+",log_file="+logFile+",metrics="+addr, store, dir)
			cmd.Env = env
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					cmd.Process.Signal(syscall.SIGTERM)
					<-exited
				}
			})
			waitFor(t, 60*time.Second, func() error {
				select {
				case err := <-exited:
					stopped = true
					t.Fatalf("mount exited: %v\n%s", err, out.String())
				default:
				}
				if !isMounted(t, dir) {
					return errors.New("not mounted yet")
				}
				_, err := scrape(addr)
				return err
			})
			checkScrapeVolume(t, addr, strings.Replace(store, canary+"@", "", 1), []string{"canary", e.SecretKey, e.AccessKey})
			mounts, err := os.ReadFile("/proc/self/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(mounts), "canary") {
				t.Errorf("the mount table shows the user part of the STORE URL")
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := <-exited; err != nil {
				t.Fatalf("mount exited: %v\n%s", err, out.String())
			}
			stopped = true
			b, err := os.ReadFile(logFile)
			if err != nil {
				t.Fatal(err)
			}
			log := string(b)
			for _, secret := range []string{e.SecretKey, e.AccessKey, "canary"} {
				if secret != "" && strings.Contains(log, secret) {
					t.Fatalf("the log holds a credential (%.6s...):\n%s", secret, log)
				}
			}
			if got := strings.Contains(log, "\tmounted\t"); got != tc.wantMounted {
				t.Errorf("log says mounted: %v, want %v:\n%s", got, tc.wantMounted, log)
			}
			if got := strings.Contains(log, "metrics scraped"); got != tc.wantScrape {
				t.Errorf("log shows the scrape: %v, want %v:\n%s", got, tc.wantScrape, log)
			}
			// Nothing below the level is written.
			below := map[string][]string{"debug": nil, "info": {"DEBUG"}, "warn": {"DEBUG", "INFO"}, "error": {"DEBUG", "INFO", "WARN"}}
			sc := bufio.NewScanner(strings.NewReader(log))
			for sc.Scan() {
				for _, lv := range below[tc.level] {
					if f := strings.Split(sc.Text(), "\t"); len(f) > 1 && f[1] == lv {
						t.Errorf("log=%s wrote a %s line: %s", tc.level, lv, sc.Text())
					}
				}
			}
		})
	}
}

// With the WAL, the records behind acknowledged writes are counted.
func TestMetricsWAL(t *testing.T) {
	v := newVolume(t)
	m := v.mount("metrics=127.0.0.1:0,wal=on")
	f, err := os.Create(m.path("w"))
	if err != nil {
		t.Fatal(err)
	}
	const writes = 10
	for i := range writes {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	got, err := scrape(m.fsys.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	if got["ckptfs_wal_writes_total"] < writes || got["ckptfs_wal_records_total"] < 1 ||
		got["ckptfs_wal_bytes_total"] < writes*4096 || got["ckptfs_wal_record_failures_total"] != 0 {
		t.Fatalf("after %d acknowledged writes: records %v, writes %v, bytes %v, failures %v", writes,
			got["ckptfs_wal_records_total"], got["ckptfs_wal_writes_total"], got["ckptfs_wal_bytes_total"],
			got["ckptfs_wal_record_failures_total"])
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
