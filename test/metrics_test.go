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
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ckptfs/staging/s3test"
)

// promSample is one sample line of the text exposition format: a metric
// name, optional labels, and a value.
var promSample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? ([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|NaN|Inf))$`)

var promComment = regexp.MustCompile(`^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$`)

// parseProm checks the syntax of a scrape and returns its samples by
// name{labels}.
func parseProm(text string) (map[string]float64, error) {
	samples := make(map[string]float64)
	types := make(map[string]string)
	helps := make(map[string]bool)
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if m := promComment.FindStringSubmatch(line); m != nil {
			switch m[1] {
			case "TYPE":
				if _, dup := types[m[2]]; dup {
					return nil, fmt.Errorf("line %d: second TYPE of %s", i+1, m[2])
				}
				switch m[3] {
				case "counter", "gauge", "summary", "histogram", "untyped":
				default:
					return nil, fmt.Errorf("line %d: unknown type %q", i+1, m[3])
				}
				types[m[2]] = m[3]
			case "HELP":
				helps[m[2]] = true
			}
			continue
		}
		m := promSample.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d is not a sample: %q", i+1, line)
		}
		family := m[1]
		typ, ok := types[family]
		if !ok {
			family = strings.TrimSuffix(strings.TrimSuffix(family, "_sum"), "_count")
			typ, ok = types[family]
		}
		if !ok {
			return nil, fmt.Errorf("line %d: sample %s has no TYPE before it", i+1, m[1])
		}
		if !helps[family] {
			return nil, fmt.Errorf("line %d: sample %s has no HELP", i+1, m[1])
		}
		if typ == "counter" && !strings.HasSuffix(m[1], "_total") {
			return nil, fmt.Errorf("line %d: counter %s does not end in _total", i+1, m[1])
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: value: %w", i+1, err)
		}
		key := m[1] + m[2]
		if _, dup := samples[key]; dup {
			return nil, fmt.Errorf("line %d: second sample %s", i+1, key)
		}
		samples[key] = v
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
		{"summary", "# HELP s S.\n# TYPE s summary\ns_sum 0.5\ns_count 2\n", true},
		{"no type", "a_total 3\n", false},
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
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	r := rand.NewChaCha8([32]byte{1, 2, 3})
	buf := make([]byte, 1<<20)
	for n > 0 {
		k := min(int64(len(buf)), n)
		_, _ = r.Read(buf[:k])
		if _, err := f.Write(buf[:k]); err != nil {
			f.Close()
			return err
		}
		n -= k
	}
	return f.Close()
}

// TestMetricsDuringWrite scrapes a real mount while a large file is written
// through it: the counters move between scrapes, every scrape is valid text
// exposition, and the listener is gone after unmount.
func TestMetricsDuringWrite(t *testing.T) {
	v := newVolume(t)
	m := v.mount("metrics=127.0.0.1:0,flush_interval=1s,stream_segment_bytes=16M")
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
	done := make(chan error, 1)
	go func() { done <- writeRandom(m.path("big"), n) }()

	// Scrape every 200ms until the write ends; keep every scrape.
	var scrapes []map[string]float64
	var werr error
	tick := time.NewTicker(200 * time.Millisecond)
loop:
	for {
		select {
		case werr = <-done:
			break loop
		case <-tick.C:
			s, err := scrape(addr)
			if err != nil {
				t.Fatalf("scrape during the write: %v", err)
			}
			scrapes = append(scrapes, s)
		}
	}
	tick.Stop()
	if werr != nil {
		t.Fatalf("write: %v", werr)
	}
	if len(scrapes) < 2 {
		t.Fatalf("only %d scrapes during the write", len(scrapes))
	}
	mid, last := scrapes[0], scrapes[len(scrapes)-1]
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
	t.Logf("after %d MiB: %v flushes, %v bytes sent ahead, %v flushed, %v meta, %v dead, %v requests",
		n>>20, end["ckptfs_flushes_total"], end["ckptfs_stream_sent_bytes_total"], end["ckptfs_stream_flush_bytes_total"],
		end["ckptfs_stream_meta_bytes_total"], end["ckptfs_stream_dead_bytes_total"], reqs(end))

	m.unmount()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("the metrics listener %s still accepts connections after unmount", addr)
	}
}

// TestMetricsListenerBusy: a mount whose metrics address is taken fails with
// an error that names the listener, and leaves nothing behind.
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
	cmd := exec.Command(bin, "mount", "-f", "-o", opts+",metrics="+ln.Addr().String(), store, mountpoint(t))
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("mount with a busy metrics address succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "metrics listener") {
		t.Fatalf("error does not name the metrics listener:\n%s", out)
	}
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
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
				opts+",log="+tc.level+",log_file="+logFile+",metrics="+addr, store, dir)
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
