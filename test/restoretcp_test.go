package test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3"
	"github.com/ckptfs/ckptfs/staging/s3test"
	"github.com/ckptfs/ckptfs/test/faultproxy"
)

// BenchmarkRestoreOverTCP measures a restore, a cold sequential read of a
// big file through a fresh mount, over real TCP: the ckptfs binary mounts
// versitygw through faultproxy, whose Link is a far path (a handshake per
// new connection, a latency per request, one width shared by every
// connection). Every rate is given beside what that link carries with no
// FUSE and no ckptfs in the way, measured in the same run: ranged GETs of
// the volume's own data objects, linkGets of linkGetSize in flight,
// through the same proxy with the S3 store.
//
// It writes a file of random bytes through a mount straight on versitygw,
// then per iteration measures the link's ceiling and, for each reader
// (`cat`, `dd bs=1M`, Python's shutil.copyfileobj), mounts anew through the
// proxy (nothing cached) and times the program from its start to its exit.
// With s3fs on PATH it also reads a plain object of the same size through
// s3fs over the same proxy. The figures go to docs/benchmarks.md, "Restore
// over real TCP"; each is logged as a markdown row.
//
//	go test -count=1 -run '^$' -bench BenchmarkRestoreOverTCP -benchtime=1x -v ./test/
//
// The environment may change the file and the link:
//
//	CKPTFS_RESTORE_MIB        size of the file in MiB (default 1024)
//	CKPTFS_RESTORE_HANDSHAKE  Link.Handshake (default 60ms)
//	CKPTFS_RESTORE_LATENCY    Link.Latency, the round trip (default 40ms)
//	CKPTFS_RESTORE_MBPS       Link.TotalBandwidth in MB/s (default 150)
func BenchmarkRestoreOverTCP(b *testing.B) {
	for _, p := range []string{"fusermount3", "cat", "dd", "python3"} {
		if _, err := exec.LookPath(p); err != nil {
			b.Fatalf("%s is needed by this benchmark: %v", p, err)
		}
	}
	size := envInt(b, "CKPTFS_RESTORE_MIB", 1024) << 20
	link := faultproxy.Link{
		Handshake:      envDuration(b, "CKPTFS_RESTORE_HANDSHAKE", 60*time.Millisecond),
		Latency:        envDuration(b, "CKPTFS_RESTORE_LATENCY", 40*time.Millisecond),
		TotalBandwidth: envInt(b, "CKPTFS_RESTORE_MBPS", 150) * 1e6,
	}
	bin := ckptfsBinary(b)
	env, err := s3test.Shared()
	if err != nil {
		b.Fatalf("no S3 bucket: %v", err)
	}
	cfg := s3test.Config(b)
	store := "s3://" + cfg.Bucket + "/" + strings.TrimSuffix(cfg.Prefix, "/")
	procEnv := os.Environ()
	if env.AccessKey != "" { // else the environment's own credentials reach it
		procEnv = append(procEnv, "AWS_ACCESS_KEY_ID="+env.AccessKey, "AWS_SECRET_ACCESS_KEY="+env.SecretKey)
	}
	storeOpts := func(endpoint string) string {
		o := "endpoint=" + endpoint + ",path_style"
		if cfg.Region != "" {
			o += ",region=" + cfg.Region
		}
		return o
	}

	// The file, written once with no proxy in the way.
	const name = "ckpt.bin"
	w := startBinMount(b, bin, store, storeOpts(cfg.Endpoint)+",create", procEnv)
	start := time.Now()
	if err := writeRandom(filepath.Join(w.dir, name), size); err != nil {
		b.Fatalf("write %s: %v", name, err)
	}
	w.stop()
	b.Logf("wrote %d MiB through a mount on versitygw in %v", size>>20, time.Since(start).Round(time.Millisecond))

	// The data objects of the file, for the ceiling.
	direct, err := s3.New(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	objs, err := dataObjects(b.Context(), direct)
	if err != nil {
		b.Fatal(err)
	}

	p, err := faultproxy.Start(cfg.Endpoint, faultproxy.Rule{Link: &link})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := p.Close(); err != nil {
			b.Error(err)
		}
	})
	viaProxy := cfg
	viaProxy.Endpoint = p.URL()

	py, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		b.Fatalf("python3: %v", err)
	}
	python := strings.TrimSpace(string(py)) // the interpreter itself, not a shim
	readers := []struct {
		name string
		argv func(file string) []string
	}{
		{"cat", func(f string) []string { return []string{"cat", f} }},
		{"dd bs=1M", func(f string) []string { return []string{"dd", "if=" + f, "of=/dev/null", "bs=1M"} }},
		{"python3 shutil.copyfileobj", func(f string) []string {
			return []string{python, "-c", `import shutil, sys
with open(sys.argv[1], "rb") as src, open("/dev/null", "wb") as dst:
    shutil.copyfileobj(src, dst)`, f}
		}},
	}

	s3fs := newS3fsReader(b, env, cfg, p.URL(), size)

	b.Logf("link: %v handshake, %v round trip, %.0f MB/s shared by every connection; %d MiB; %d data objects",
		link.Handshake, link.Latency, float64(link.TotalBandwidth)/1e6, size>>20, len(objs))
	row := func(what string, r readStats, share string) {
		b.Helper()
		b.Logf("| %s | %.1f | %s | %v | %d + %d | %d | %s | %s | %.1f / %d |",
			what, r.mbps(), share, r.took.Round(time.Millisecond), r.mountConns, r.conns, r.requests,
			orDash(r.gets, "%.0f", float64(r.gets)), orDash(r.gets, "%.2f", float64(r.fetched)/float64(max(r.gets, 1))/(1<<20)),
			r.meanInFlight, r.peakInFlight)
	}
	for b.Loop() {
		b.Logf("| read of %d MiB, cold | MB/s | of the link's ceiling | time | connections (mount + read) | requests in the read | GETs | MiB per GET | requests in flight, mean / peak |", size>>20)
		b.Logf("|---|---|---|---|---|---|---|---|---|")
		// The ceiling before and after the reads: a shared machine's
		// load moves within a run. Rates are shares of their mean.
		first := linkCeiling(b, viaProxy, p, objs, size)
		row(fmt.Sprintf("link alone, before: %d GETs of %d MiB in flight (no FUSE, no ckptfs)", linkGets, linkGetSize>>20), first, "–")
		var reads []readStats
		var names []string
		for _, r := range readers {
			reads = append(reads, readCold(b, bin, store, storeOpts(p.URL()), procEnv, p, name, size, r.argv))
			names = append(names, "ckptfs, "+r.name)
		}
		if s3fs != nil {
			reads = append(reads, s3fs.read(b, p))
			names = append(names, "s3fs "+s3fs.version+", cat")
		}
		last := linkCeiling(b, viaProxy, p, objs, size)
		ceil := (first.mbps() + last.mbps()) / 2
		for i, r := range reads {
			row(names[i], r, fmt.Sprintf("%.0f %%", 100*r.mbps()/ceil))
			key := strings.Fields(strings.TrimPrefix(names[i], "ckptfs, "))[0]
			b.ReportMetric(r.mbps(), key+"-MB/s")
			b.ReportMetric(r.mbps()/ceil, key+"-ratio")
			b.ReportMetric(float64(r.mountConns+r.conns), key+"-conns")
			if r.gets > 0 {
				b.ReportMetric(float64(r.gets), key+"-GETs")
			}
			b.ReportMetric(r.meanInFlight, key+"-inflight")
		}
		row("link alone, after", last, "–")
		b.ReportMetric(ceil, "ceiling-MB/s")
	}
}

// orDash formats v with format when n is not 0, else "–".
func orDash(n int64, format string, v float64) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

// The ceiling's reader: what a client that knows where the bytes are keeps
// in flight (the scale of a mount's read-ahead), in pieces of a mount's
// larger GETs.
const (
	linkGets    = 16
	linkGetSize = 4 << 20
)

// readStats is one measured read and what the proxy saw during it.
type readStats struct {
	bytes      int64
	took       time.Duration
	mountConns int64 // connections accepted while mounting
	conns      int64 // connections accepted during the read
	requests   int64 // requests the proxy received during the read
	gets       int64 // the mount's GETs, mounting included
	fetched    int64 // payload bytes the mount or the ceiling's reader received
	// meanInFlight and peakInFlight: requests the proxy served at once,
	// sampled during the read.
	meanInFlight float64
	peakInFlight int
}

// mbps is the rate in MB/s (10^6 bytes).
func (r readStats) mbps() float64 { return float64(r.bytes) / r.took.Seconds() / 1e6 }

// linkCeiling reads total bytes of objs through the proxy with the S3 store:
// linkGets ranged GETs of linkGetSize kept in flight, from a store opened
// anew (its connections pay the handshake, as a fresh mount's do).
func linkCeiling(b *testing.B, cfg s3.Config, p *faultproxy.Proxy, objs []staging.ObjectInfo, total int64) readStats {
	b.Helper()
	type piece struct {
		key     string
		off, ln int64
	}
	var pieces []piece
	var planned int64
	for _, o := range objs {
		for off := int64(0); off < o.Size && planned < total; off += linkGetSize {
			n := min(linkGetSize, o.Size-off, total-planned)
			pieces = append(pieces, piece{o.Key, off, n})
			planned += n
		}
	}
	if planned < total {
		b.Fatalf("the data objects hold %d bytes, fewer than the file's %d", planned, total)
	}
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	st, err := s3.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	before := p.Counters()
	sample := sampleInFlight(p)
	start := time.Now()
	var next, got atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, linkGets)
	for w := range linkGets {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(pieces)) {
					return
				}
				pc := pieces[i]
				data, _, err := st.Get(ctx, pc.key, staging.Range{Off: pc.off, Len: pc.ln})
				if err != nil {
					errs[w] = fmt.Errorf("GET %s at %d: %w", pc.key, pc.off, err)
					cancel()
					return
				}
				got.Add(int64(len(data)))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	mean, peak := sample()
	after := p.Counters()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return readStats{bytes: got.Load(), fetched: got.Load(), gets: int64(len(pieces)), took: took, conns: after.Conns - before.Conns, requests: after.Requests - before.Requests,
		meanInFlight: mean, peakInFlight: peak}
}

// dataObjectKey matches a checkpoint object of a file, "f/<id>/<cno>.<part>".
var dataObjectKey = regexp.MustCompile(`^f/[^/]+/[0-9a-fA-F]+\.[0-9]+$`)

// dataObjects lists the checkpoint objects of the volume's files.
func dataObjects(ctx context.Context, st staging.Store) ([]staging.ObjectInfo, error) {
	all, err := staging.ListAll(ctx, st, "f/")
	if err != nil {
		return nil, fmt.Errorf("list the volume's files: %w", err)
	}
	var objs []staging.ObjectInfo
	for _, o := range all {
		if dataObjectKey.MatchString(o.Key) {
			objs = append(objs, o)
		}
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no data objects among the volume's %d objects under f/", len(all))
	}
	return objs, nil
}

// readCold mounts the volume anew through the proxy, reads name (size
// bytes) with the program argv gives, and unmounts.
func readCold(b *testing.B, bin, store, opts string, procEnv []string, p *faultproxy.Proxy, name string, size int64, argv func(string) []string) readStats {
	b.Helper()
	before := p.Counters()
	m := startBinMount(b, bin, store, opts, procEnv)
	mounted := p.Counters()
	sample := sampleInFlight(p)
	took := timeProgram(b, argv(filepath.Join(m.dir, name)))
	mean, peak := sample()
	after := p.Counters()
	got, err := scrape(m.metrics)
	if err != nil {
		b.Fatalf("scrape the mount's metrics: %v", err)
	}
	m.stop()
	if f := after.Faults() + after.Failed - before.Faults() - before.Failed; f != 0 {
		b.Fatalf("the proxy met %d faults or failures: %v", f, after)
	}
	if rx := int64(got["ckptfs_store_bytes_received_total"]); rx < size {
		b.Fatalf("the mount received %d bytes from the store for a file of %d", rx, size)
	}
	return readStats{
		bytes: size, took: took,
		mountConns: mounted.Conns - before.Conns, conns: after.Conns - mounted.Conns,
		requests:     after.Requests - mounted.Requests,
		gets:         int64(got[`ckptfs_store_requests_total{op="get"}`]),
		fetched:      int64(got["ckptfs_store_bytes_received_total"]),
		meanInFlight: mean, peakInFlight: peak,
	}
}

// timeProgram runs argv with its output to /dev/null and returns the time
// from its start to its exit.
func timeProgram(b *testing.B, argv []string) time.Duration {
	b.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	var stderr strings.Builder
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = null, &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	if err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	return took
}

// sampleInFlight samples, every few milliseconds, how many requests the
// proxy is serving, until the function it returns is called; that returns
// the mean and the most.
func sampleInFlight(p *faultproxy.Proxy) func() (float64, int) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var sum, n, peak int
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				k := len(p.InFlight())
				sum, n, peak = sum+k, n+1, max(peak, k)
			}
		}
	})
	return func() (float64, int) {
		close(done)
		wg.Wait()
		return float64(sum) / float64(max(n, 1)), peak
	}
}

// binMount is a `ckptfs mount -f` process serving dir, with its metrics
// listener at metrics.
type binMount struct {
	b       *testing.B
	dir     string
	metrics string
	cmd     *exec.Cmd
	stderr  *strings.Builder // read only once exited is closed
	exited  chan struct{}
	stopped bool
}

// startBinMount mounts store under b.TempDir() with the ckptfs binary bin,
// in the foreground, and waits until it is mounted; b.Cleanup unmounts it
// if stop was not called.
func startBinMount(b *testing.B, bin, store, opts string, procEnv []string) *binMount {
	b.Helper()
	dir, addr := mountpoint(b), freeAddr(b)
	m := &binMount{b: b, dir: dir, metrics: addr, stderr: &strings.Builder{}, exited: make(chan struct{})}
	m.cmd = exec.Command(bin, "mount", "-f", "-o", withNamespace(opts)+",metrics="+addr, store, dir)
	m.cmd.Env = procEnv
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		_ = m.cmd.Wait() // its status is read from ProcessState
		close(m.exited)
	}()
	b.Cleanup(m.abandon)
	waitMounted(b, dir, m.exited, m.stderr, "ckptfs mount "+store)
	return m
}

// waitMounted waits until dir is a mount point, at most a minute, failing
// b if the process that mounts it (what) exits first; its stderr is read
// only once exited is closed.
func waitMounted(b *testing.B, dir string, exited <-chan struct{}, stderr *strings.Builder, what string) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for !isMounted(b, dir) {
		select {
		case <-exited:
			b.Fatalf("%s exited: %s", what, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not mounted within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop unmounts with SIGTERM, as a service manager would, and waits for the
// process, which flushes every file first.
func (m *binMount) stop() {
	m.b.Helper()
	m.stopped = true
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		m.b.Fatalf("stop the mount: %v", err)
	}
	select {
	case <-m.exited:
	case <-time.After(2 * time.Minute):
		m.b.Fatalf("the mount did not exit within 2 minutes of SIGTERM")
	}
	if !m.cmd.ProcessState.Success() {
		m.b.Fatalf("the mount exited with %v: %s", m.cmd.ProcessState, m.stderr.String())
	}
}

// abandon, after a failure, kills the process and detaches what it left
// mounted; after stop it only waits for the process.
func (m *binMount) abandon() {
	if !m.stopped {
		_ = m.cmd.Process.Kill()
	}
	<-m.exited
	if isMounted(m.b, m.dir) {
		if out, err := exec.Command("fusermount3", "-u", "-z", m.dir).CombinedOutput(); err != nil {
			m.b.Errorf("fusermount3 -u -z %s: %v\n%s", m.dir, err, out)
		}
	}
}

// envInt is the integer in the environment variable name, or def.
func envInt(b *testing.B, name string, def int64) int64 {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// envDuration is the duration in the environment variable name, or def.
func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		b.Fatalf("%s=%q: want a duration such as 40ms", name, s)
	}
	return d
}

// s3fsReader reads a plain object of the same size as the ckptfs file
// through s3fs (which reads plain objects only), over the same proxy: the
// same link, another filesystem.
type s3fsReader struct {
	bucket, prefix string // the object is prefix + s3fsObject
	url            string // the proxy's
	region         string
	passwd         string // s3fs's credentials file, "" for the environment's
	version        string
	size           int64
}

const s3fsObject = "ckpt.bin"

// newS3fsReader uploads the plain object, with no proxy in the way, and
// returns its reader; nil when s3fs is not on PATH (it is a comparison, not
// a requirement).
func newS3fsReader(b *testing.B, env s3test.Env, cfg s3.Config, url string, size int64) *s3fsReader {
	b.Helper()
	if _, err := exec.LookPath("s3fs"); err != nil {
		b.Logf("s3fs is not on PATH: no s3fs row")
		return nil
	}
	ver, err := exec.Command("s3fs", "--version").Output()
	if err != nil {
		b.Fatalf("s3fs --version: %v", err)
	}
	r := &s3fsReader{url: url, region: cfg.Region, version: "?", size: size}
	for _, f := range strings.Fields(string(ver)) { // "... File System V1.90 (commit:unknown) ..."
		if len(f) > 1 && f[0] == 'V' && f[1] >= '0' && f[1] <= '9' {
			r.version = f[1:]
			break
		}
	}
	if r.region == "" {
		r.region = "us-east-1"
	}
	// A folder of its own, emptied when b ends; the volume's is ckptfs's.
	own := s3test.Config(b)
	r.bucket, r.prefix = own.Bucket, own.Prefix
	st, err := s3.New(b.Context(), own)
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{4, 5, 6}).Read(data) // never fails
	start := time.Now()
	if _, err := st.Put(b.Context(), s3fsObject, data, staging.PutOptions{}); err != nil {
		b.Fatalf("upload the plain object for s3fs: %v", err)
	}
	b.Logf("uploaded %d MiB as one object for s3fs in %v", size>>20, time.Since(start).Round(time.Millisecond))
	if env.AccessKey != "" {
		r.passwd = filepath.Join(b.TempDir(), "passwd-s3fs")
		if err := os.WriteFile(r.passwd, []byte(env.AccessKey+":"+env.SecretKey+"\n"), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// read mounts s3fs anew through the proxy, cats the object to /dev/null,
// and unmounts.
func (r *s3fsReader) read(b *testing.B, p *faultproxy.Proxy) readStats {
	b.Helper()
	dir := mountpoint(b)
	opts := "url=" + r.url + ",use_path_request_style,endpoint=" + r.region
	if r.passwd != "" {
		opts += ",passwd_file=" + r.passwd
	}
	before := p.Counters()
	var stderr strings.Builder
	cmd := exec.Command("s3fs", r.bucket+":/"+strings.TrimSuffix(r.prefix, "/"), dir, "-f", "-o", opts)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // unmounted, or killed below
		close(exited)
	}()
	unmounted := false
	b.Cleanup(func() {
		if !unmounted {
			_ = cmd.Process.Kill()
		}
		<-exited
		if isMounted(b, dir) {
			if out, err := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput(); err != nil {
				b.Errorf("fusermount3 -u -z %s: %v\n%s", dir, err, out)
			}
		}
	})
	waitMounted(b, dir, exited, &stderr, "s3fs")
	mounted := p.Counters()
	sample := sampleInFlight(p)
	took := timeProgram(b, []string{"cat", filepath.Join(dir, s3fsObject)})
	mean, peak := sample()
	after := p.Counters()
	if fi, err := os.Stat(filepath.Join(dir, s3fsObject)); err != nil || fi.Size() != r.size {
		b.Fatalf("s3fs shows %s as %v (%v), want %d bytes", s3fsObject, fi, err, r.size)
	}
	if out, err := exec.Command("fusermount3", "-u", dir).CombinedOutput(); err != nil {
		b.Fatalf("fusermount3 -u %s: %v\n%s", dir, err, out)
	}
	unmounted = true
	select {
	case <-exited:
	case <-time.After(time.Minute):
		b.Fatalf("s3fs did not exit within a minute of its unmount")
	}
	return readStats{
		bytes: r.size, took: took,
		mountConns: mounted.Conns - before.Conns, conns: after.Conns - mounted.Conns,
		requests:     after.Requests - mounted.Requests,
		meanInFlight: mean, peakInFlight: peak,
	}
}
