package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/test/campaign"
	"github.com/ckptfs/ckptfs/test/faultproxy"
)

// The crash-and-fault campaign (docs/campaign.md).
//
// Each iteration, on two mounts of one volume (the built binary, in the
// foreground, through a fault-injecting proxy in front of the S3 server),
// four driver programs (test/campaign/driver) write, overwrite, truncate,
// fsync, close, read, rename and unlink the files of their own directories,
// data through a home mount, renames and unlinks through either, while
// `ckptfs gc` runs in a loop with short grace periods. After a random while
// (and once every driver has finished two more operations: a hang is found
// rather than ended by the kill) both mounts are killed with SIGKILL, a
// little apart; new mounts are
// started, and every file is checked against a model built from the
// drivers' logs of what was acknowledged. What a check reads is the next
// iteration's starting point.
//
// The model, per file (a file is followed across renames):
//   - its states: the content after each change (write, truncate, O_TRUNC)
//     the driver made, in order; the driver makes one change at a time.
//   - the acknowledged state: without the WAL the state at the last fsync or
//     close that succeeded; with wal=on, the state after every change that
//     succeeded.
//   - after the crash the file must hold one of the states from the
//     acknowledged one on (a flush publishes some state at or after the last
//     acknowledged one), where a write after the acknowledged state may be
//     applied in part, a prefix of it (the kernel hands a write(2) to the
//     mount in pieces and a periodic flush may fall between them). With the
//     WAL only the write in flight may be partial.
//   - the names of a driver's directory are those the acknowledged renames,
//     unlinks and creates left; the one operation in flight (a driver stops
//     at its first error) may or may not have happened.
//
// Failures: an acknowledged byte lost (the file is older than its
// acknowledged state, or a name is missing), a byte read that no write put
// there (during the run, by the driver's reads, or after the crash), two
// new mounts that disagree, an operation that fails with anything but EIO
// or EINTR while its mount lives, and an operation, mount, check or gc run
// that hangs (the mounts then get SIGQUIT
// and their logs, with every goroutine's stack, are kept).

// campaignRule is the proxy's rule: about 6 % of requests meet a fault.
func campaignRule(seed uint64) faultproxy.Rule {
	return faultproxy.Rule{Seed: seed, Error503: 0.01, Error500: 0.01, Delay: 0.02, MaxDelay: 400 * time.Millisecond, LoseAnswer: 0.02}
}

const (
	campaignDrivers = 4
	// campaignOpTimeout is how long one operation may take before it is a
	// hang: a flush of a few MiB that meets several delays and retries
	// takes seconds, not a minute.
	campaignOpTimeout = 60 * time.Second
	// The cleaner's ages: short, so that a killed mount's leftovers become
	// old enough within the campaign, and a live writer's work above its
	// head is exposed to the cleaner as soon as it is a few seconds old.
	campaignGrace  = "5s"
	campaignMinAge = "2s"
)

// campaignMountOpts: small blocks and objects sent ahead early, so that
// a flush has objects above the head and a kill lands between them.
const campaignMountOpts = "create,ns_refresh=200ms,data_block_size=4K,stream_segment_bytes=128K,segment_max_object_bytes=8M,segment_mpu_chunk_size=5M,log=info"

// campaignIterations: CKPTFS_CAMPAIGN_ITERATIONS per mode (without and with
// the WAL), 3 by default and 1 with -short.
func campaignIterations(t *testing.T) int {
	if s := os.Getenv("CKPTFS_CAMPAIGN_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CKPTFS_CAMPAIGN_ITERATIONS=%q: want a number >= 1", s)
		}
		return n
	}
	return int(size(3, 1))
}

// campaignSeed: CKPTFS_CAMPAIGN_SEED, or a new one, logged so that a failed
// run can be repeated (as far as timing allows).
func campaignSeed(t *testing.T) uint64 {
	if s := os.Getenv("CKPTFS_CAMPAIGN_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CKPTFS_CAMPAIGN_SEED=%q: want a number", s)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

var driverBin struct {
	once sync.Once
	path string
	err  error
	out  string
}

// campaignDriver builds test/campaign/driver once per test binary.
func campaignDriver(t *testing.T) string {
	t.Helper()
	driverBin.once.Do(func() {
		dir := filepath.Join(os.TempDir(), "ckptfs-e2e-bin")
		if driverBin.err = os.MkdirAll(dir, 0o755); driverBin.err != nil {
			return
		}
		driverBin.path = filepath.Join(dir, "campaign-driver")
		_, file, _, _ := runtime.Caller(0)
		driverBin.out, driverBin.err = runErr(filepath.Dir(file), "go", "build", "-o", driverBin.path, "github.com/ckptfs/ckptfs/test/campaign/driver")
	})
	if driverBin.err != nil {
		t.Fatalf("build the campaign driver: %v\n%s", driverBin.err, driverBin.out)
	}
	return driverBin.path
}

// campaignStats are the figures a campaign reaches.
type campaignStats struct {
	iterations   int
	ops, okOps   int64 // operations attempted, and succeeded
	writes       int64
	bytesWritten int64
	fsyncs       int64 // fsyncs and closes that succeeded
	copies       int64 // copies (copy_file_range) that succeeded
	kills        int
	eio          int64 // operations failed with EIO under faults (tolerated)
	eintr        int64 // operations interrupted by a signal (tolerated)
	bytesChecked int64
	filesChecked int64
	gcRuns       int64
	gcFailed     int64
	proxy        faultproxy.Counters
}

func (s campaignStats) String() string {
	return fmt.Sprintf("%d iterations, %d operations (%d succeeded: %d writes of %d bytes, %d fsyncs and closes, %d copies), %d SIGKILLs, %d operations failed with EIO under faults and %d with EINTR, %d files and %d bytes checked after the kills, %d gc runs (%d failed), faults: %d of %v",
		s.iterations, s.ops, s.okOps, s.writes, s.bytesWritten, s.fsyncs, s.copies, s.kills, s.eio, s.eintr, s.filesChecked, s.bytesChecked, s.gcRuns, s.gcFailed, s.proxy.Faults(), s.proxy)
}

func (s *campaignStats) add(o campaignStats) {
	s.iterations += o.iterations
	s.ops += o.ops
	s.okOps += o.okOps
	s.writes += o.writes
	s.bytesWritten += o.bytesWritten
	s.fsyncs += o.fsyncs
	s.copies += o.copies
	s.kills += o.kills
	s.eio += o.eio
	s.eintr += o.eintr
	s.bytesChecked += o.bytesChecked
	s.filesChecked += o.filesChecked
	s.gcRuns += o.gcRuns
	s.gcFailed += o.gcFailed
	p := &s.proxy
	p.Requests += o.proxy.Requests
	p.Forwarded += o.proxy.Forwarded
	p.Error503 += o.proxy.Error503
	p.Error500 += o.proxy.Error500
	p.Delayed += o.proxy.Delayed
	p.Lost += o.proxy.Lost
	p.Stalled += o.proxy.Stalled
	p.Failed += o.proxy.Failed
	p.Gone += o.proxy.Gone
}

// TestCampaign runs the campaign without and with the WAL.
func TestCampaign(t *testing.T) {
	need(t, "fusermount3")
	iterations := campaignIterations(t)
	seed := campaignSeed(t)
	t.Logf("campaign: seed %d (CKPTFS_CAMPAIGN_SEED), %d iterations per mode (CKPTFS_CAMPAIGN_ITERATIONS)", seed, iterations)
	start := time.Now()
	var total campaignStats
	for i, wal := range []bool{false, true} {
		name := "plain"
		if wal {
			name = "wal"
		}
		t.Run(name, func(t *testing.T) {
			c := newCampaign(t, seed+uint64(i), wal)
			s := c.run(iterations)
			t.Logf("campaign %s: %v", name, s)
			total.add(s)
		})
	}
	t.Logf("campaign: seed %d, %v in %v", seed, total, time.Since(start).Round(time.Second))
}

// mountProc is one mount: the built binary in the foreground.
type mountProc struct {
	idx    int
	dir    string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // after exited
}

type campaignRun struct {
	t      *testing.T
	seed   uint64
	rngMu  sync.Mutex // the gc loop draws too
	rng    *rand.Rand // GUARDED_BY(rngMu)
	wal    bool
	bin    string
	drv    string
	store  string
	opts   string // store options, through the proxy
	env    []string
	proxy  *faultproxy.Proxy
	dirs   [2]string
	mounts [2]*mountProc
	killed []*mountProc // killed, not yet detached
	// drivers and killedAt (unix ns, 0: alive) of the iteration running.
	drivers  []*driverProc
	killedAt [2]int64
	logs     string // folder of mount logs, kept when the campaign fails
	logN     int

	// base is what the last check read: per driver, name -> content. A
	// driver's directory exists once it is in base.
	base  []map[string][]byte
	stats campaignStats
	// curDriver is the driver whose log check is following.
	curDriver int

	faultMu sync.Mutex
	faults  []faultproxy.Event // every fault the proxy injected

	gcStop chan struct{}
	gcDone chan struct{}
	gcMu   sync.Mutex
	gcErrs []string // gc runs that failed, their output's tail
	gcHang string
}

func newCampaign(t *testing.T, seed uint64, wal bool) *campaignRun {
	bin := ckptfsBinary(t)
	drv := campaignDriver(t)
	v := newVolume(t)
	store, _, env := s3Args(t, v)
	logs := filepath.Join(os.TempDir(), "ckptfs-campaign", fmt.Sprintf("%d-%s", seed, map[bool]string{false: "plain", true: "wal"}[wal]))
	_ = os.RemoveAll(logs)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &campaignRun{
		t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0xca)), wal: wal,
		bin: bin, drv: drv, store: store, env: env, logs: logs,
		base: make([]map[string][]byte, campaignDrivers),
	}
	rule := campaignRule(seed)
	rule.OnFault = func(e faultproxy.Event) {
		c.faultMu.Lock()
		c.faults = append(c.faults, e)
		c.faultMu.Unlock()
	}
	proxy, err := faultproxy.Start(v.cfg.Endpoint, rule)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := proxy.Close(); err != nil {
			t.Error(err)
		}
	})
	c.proxy = proxy
	c.opts = "endpoint=" + proxy.URL() + ",path_style,region=" + v.cfg.Region
	for i := range c.dirs {
		c.dirs[i] = mountpoint(t)
	}
	t.Cleanup(func() {
		for _, m := range c.mounts {
			if m != nil {
				c.kill(m)
			}
		}
		// The drivers stop at their next call on a dead mount.
		for _, d := range c.drivers {
			_ = d.stdin.Close()
			<-d.done
		}
		c.detach()
		c.stopGC()
		if !t.Failed() {
			_ = os.RemoveAll(logs)
		} else {
			t.Logf("the mounts' logs are in %s", logs)
		}
	})
	return c
}

// startMount mounts mount idx in the foreground and waits until it is
// mounted.
func (c *campaignRun) startMount(idx int, extra string) *mountProc {
	t := c.t
	c.logN++
	m := &mountProc{idx: idx, dir: c.dirs[idx], log: filepath.Join(c.logs, fmt.Sprintf("mount-%02d-%c.log", c.logN, 'A'+idx)), exited: make(chan struct{})}
	lf, err := os.Create(m.log)
	if err != nil {
		t.Fatal(err)
	}
	opts := c.opts + "," + campaignMountOpts + extra
	if c.wal {
		opts += ",wal=on"
	}
	m.cmd = exec.Command(c.bin, "mount", "-f", "-o", opts, c.store, m.dir)
	// GOTRACEBACK=all: a SIGQUIT (see hang) writes every goroutine's stack.
	m.cmd.Env = append(slices.Clone(c.env), "GOTRACEBACK=all")
	m.cmd.Stdout, m.cmd.Stderr = lf, lf
	if err := m.cmd.Start(); err != nil {
		lf.Close()
		t.Fatal(err)
	}
	go func() {
		m.err = m.cmd.Wait()
		lf.Close()
		close(m.exited)
	}()
	c.mounts[idx] = m
	c.t.Logf("mount %c: pid %d, log %s", 'A'+idx, m.cmd.Process.Pid, filepath.Base(m.log))
	deadline := time.Now().Add(campaignOpTimeout)
	for !isMounted(t, m.dir) {
		select {
		case <-m.exited:
			b, _ := os.ReadFile(m.log)
			t.Fatalf("mount %c exited before it mounted: %v\n%s", 'A'+idx, m.err, b)
		default:
		}
		if time.Now().After(deadline) {
			c.hang(fmt.Sprintf("mount %c not mounted within %v", 'A'+idx, campaignOpTimeout))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m
}

// kill kills a mount with SIGKILL. Its mount point stays attached (every
// call on it fails with ENOTCONN) until detach: detached, the path would
// lead into the empty folder below it.
func (c *campaignRun) kill(m *mountProc) {
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
	if c.mounts[m.idx] == m {
		c.mounts[m.idx] = nil
		c.killed = append(c.killed, m)
	}
}

// detach detaches the mount points of killed mounts.
func (c *campaignRun) detach() {
	for _, m := range c.killed {
		if isMounted(c.t, m.dir) {
			if out, err := runErr("", "fusermount3", "-uz", m.dir); err != nil {
				c.t.Errorf("fusermount3 -uz %s: %v\n%s", m.dir, err, out)
			}
		}
	}
	c.killed = nil
}

// hang fails the campaign: every live mount gets SIGQUIT (the Go runtime
// writes every goroutine's stack to its log) and then SIGKILL.
func (c *campaignRun) hang(what string) {
	c.t.Helper()
	var logs []string
	for _, m := range c.mounts {
		if m == nil {
			continue
		}
		select {
		case <-m.exited:
		default:
			_ = m.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-m.exited:
			case <-time.After(10 * time.Second):
			}
		}
		logs = append(logs, m.log)
		c.kill(m)
	}
	for _, d := range c.drivers {
		d.mu.Lock()
		_ = os.WriteFile(filepath.Join(c.logs, fmt.Sprintf("driver-%d-hang.log", d.id)), []byte(strings.Join(d.lines, "\n")+"\n"), 0o644)
		d.mu.Unlock()
	}
	var kills []string
	for i, k := range c.killedAt {
		if k != 0 {
			kills = append(kills, fmt.Sprintf("mount %c killed at %d", 'A'+i, k))
		}
	}
	if len(kills) > 0 {
		what += " (" + strings.Join(kills, ", ") + ")"
	}
	// Whether the server or a client is waiting.
	var slow []string
	for _, r := range c.proxy.InFlight() {
		if age := time.Since(r.Since); age > 5*time.Second {
			slow = append(slow, fmt.Sprintf("%s %s %s for %v", r.Method, r.Path, r.Stage, age.Round(time.Second)))
		}
	}
	if len(slow) > 0 {
		what += "; requests the proxy has held for more than 5s: " + strings.Join(slow, "; ")
	}
	c.t.Fatalf("HANG: %s; live mounts' stacks (SIGQUIT) are at the end of %q; the drivers' logs are driver-*-hang.log in %s",
		what, logs, c.logs)
}

// runGC runs `ckptfs gc` in a loop, through the proxy, until stopGC.
func (c *campaignRun) runGC() {
	c.gcStop, c.gcDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.gcDone)
		for {
			select {
			case <-c.gcStop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*campaignOpTimeout)
			cmd := exec.CommandContext(ctx, c.bin, "gc", "--keep", "2", "--grace", campaignGrace, "--min-age", campaignMinAge, "-o", c.opts, c.store)
			cmd.Env = c.env
			cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
			cmd.WaitDelay = 10 * time.Second
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			timedOut := ctx.Err() != nil
			cancel()
			c.gcMu.Lock()
			c.stats.gcRuns++
			if err != nil {
				c.stats.gcFailed++
				tail := out.String()
				if len(tail) > 2000 {
					tail = tail[len(tail)-2000:]
				}
				if timedOut {
					c.gcHang = fmt.Sprintf("gc ran longer than %v:\n%s", 2*campaignOpTimeout, out.String())
				}
				if len(c.gcErrs) < 20 {
					c.gcErrs = append(c.gcErrs, fmt.Sprintf("%v: %s", err, tail))
				}
			}
			c.gcMu.Unlock()
			select {
			case <-c.gcStop:
				return
			case <-time.After(time.Duration(c.rngN(500)) * time.Millisecond):
			}
		}
	}()
}

func (c *campaignRun) rngN(n int) int {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return c.rng.IntN(n)
}

func (c *campaignRun) stopGC() {
	if c.gcStop == nil {
		return
	}
	select {
	case <-c.gcStop:
	default:
		close(c.gcStop)
	}
	<-c.gcDone
}

// driverProc is one driver program of one iteration.
type driverProc struct {
	id    int
	home  int // absolute mount index of its home mount
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu       sync.Mutex
	lines    []string
	inFlight string    // the last "B" line without its "E"
	since    time.Time // when inFlight began
	ended    int       // operations that returned
	done     chan struct{}
	err      error
	stderr   bytes.Buffer
}

func (c *campaignRun) startDriver(id, home int, iter int) *driverProc {
	t := c.t
	d := &driverProc{id: id, home: home, done: make(chan struct{})}
	d.cmd = exec.Command(c.drv, "-id", strconv.Itoa(id), "-seed", strconv.FormatUint(c.seed*1000+uint64(iter), 10),
		"-dir", fmt.Sprintf("d%d", id), "-home", c.dirs[home], "-other", c.dirs[1-home],
		"-seq-base", strconv.Itoa(iter*10_000_000))
	if !c.wal {
		// With the WAL a copy is not by reference: the kernel copies the
		// bytes, and a copy cut short by a kill holds a part of them, which
		// the model does not follow.
		d.cmd.Args = append(d.cmd.Args, "-copies")
	}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l := sc.Text()
			d.mu.Lock()
			d.lines = append(d.lines, l)
			if strings.HasPrefix(l, "B ") {
				d.inFlight, d.since = l, time.Now()
			} else {
				d.inFlight = ""
				d.ended++
			}
			d.mu.Unlock()
		}
		err := d.cmd.Wait()
		d.mu.Lock()
		d.err = err
		d.mu.Unlock()
		close(d.done)
	}()
	return d
}

// watch waits until done() is true, checking every driver's operation in
// flight against campaignOpTimeout, and the gc loop.
func (c *campaignRun) watch(drivers []*driverProc, done func() bool) {
	for !done() {
		time.Sleep(20 * time.Millisecond)
		for _, d := range drivers {
			d.mu.Lock()
			op, since := d.inFlight, d.since
			d.mu.Unlock()
			if op != "" && time.Since(since) > campaignOpTimeout {
				c.hang(fmt.Sprintf("driver %d (home mount %c): operation %q has not returned for %v", d.id, 'A'+d.home, op, time.Since(since).Round(time.Second)))
			}
		}
		c.gcMu.Lock()
		h := c.gcHang
		c.gcMu.Unlock()
		if h != "" {
			c.hang(h)
		}
	}
}

func (c *campaignRun) run(iterations int) campaignStats {
	t := c.t
	start := time.Now()
	for i := range 2 {
		c.startMount(i, c.mountExtra())
	}
	t.Logf("mounted in %v", time.Since(start).Round(time.Millisecond))
	c.runGC()
	// A failure of the check does not stop the campaign: what the mount
	// shows becomes the next iteration's base, so the iterations after it
	// still find what else is wrong. A hang stops it (t.Fatal).
	for iter := range iterations {
		c.iteration(iter)
	}
	gcStop := time.Now()
	c.stopGC()
	t.Logf("gc stopped in %v", time.Since(gcStop).Round(time.Millisecond))
	c.gcMu.Lock()
	for _, e := range c.gcErrs {
		t.Logf("a gc run failed: %s", e)
	}
	c.gcMu.Unlock()
	c.stats.proxy = c.proxy.Counters()
	return c.stats
}

// mountExtra: some mounts flush every second, some only on fsync and close.
func (c *campaignRun) mountExtra() string {
	if c.rngN(2) == 0 {
		return ",flush_interval=1s"
	}
	return ""
}

func (c *campaignRun) iteration(iter int) {
	t := c.t
	start := time.Now()
	drivers := make([]*driverProc, campaignDrivers)
	for id := range drivers {
		drivers[id] = c.startDriver(id, (id+iter)%2, iter)
	}
	// Run for a while, then kill both mounts, a little apart, in a random
	// order.
	c.drivers = drivers
	runFor := time.Duration(1500+c.rngN(4500)) * time.Millisecond
	until := time.Now().Add(runFor)
	c.watch(drivers, func() bool { return time.Now().After(until) })
	// Before the kill, every driver that still runs must finish the
	// operation it is in and one more: an operation that hangs is found
	// here by the watchdog, where the kill would otherwise end it. Then a
	// little more, so that the kill falls anywhere in the next ones.
	snap := make([]int, len(drivers))
	for i, d := range drivers {
		d.mu.Lock()
		snap[i] = d.ended
		d.mu.Unlock()
	}
	c.watch(drivers, func() bool {
		for i, d := range drivers {
			select {
			case <-d.done:
				continue
			default:
			}
			d.mu.Lock()
			n := d.ended
			d.mu.Unlock()
			if n < snap[i]+2 {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Duration(c.rngN(300)) * time.Millisecond)
	first := c.rngN(2)
	c.killedAt = [2]int64{}
	killedAt := &c.killedAt
	for k, idx := range []int{first, 1 - first} {
		if k == 1 {
			gap := time.Now().Add(time.Duration(c.rngN(800)) * time.Millisecond)
			c.watch(drivers, func() bool { return time.Now().After(gap) })
		}
		killedAt[idx] = time.Now().UnixNano()
		t.Logf("SIGKILL mount %c (pid %d) at %s", 'A'+idx, c.mounts[idx].cmd.Process.Pid, time.Unix(0, killedAt[idx]).UTC().Format("15:04:05.000"))
		c.kill(c.mounts[idx])
		c.stats.kills++
	}
	// The drivers stop at their first error, which the dead mounts give.
	for _, d := range drivers {
		_ = d.stdin.Close()
	}
	c.watch(drivers, func() bool {
		for _, d := range drivers {
			select {
			case <-d.done:
			default:
				return false
			}
		}
		return true
	})
	c.detach()
	stopped := time.Now()

	// New mounts, and the check.
	for i := range 2 {
		c.startMount(i, c.mountExtra())
	}
	mounted := time.Now()
	for _, d := range drivers {
		c.check(iter, d, *killedAt)
	}
	c.stats.iterations++
	t.Logf("iteration %d: ran %v, killed %c then %c, drivers stopped %v later, remounted in %v, checked in %v",
		iter, runFor.Round(time.Millisecond), 'A'+first, 'A'+1-first, stopped.Sub(start.Add(runFor)).Round(time.Millisecond),
		mounted.Sub(stopped).Round(time.Millisecond), time.Since(mounted).Round(time.Millisecond))
}

// mfile is the model of one file of a driver.
type mfile struct {
	states [][]byte // content after each change
	by     []*campaign.Op
	acked  int // index in states of the acknowledged state
	// uncertain: the op in flight at the end changed this file: its state
	// is the last one and may or may not have happened.
	uncertain bool
}

func (f *mfile) cur() []byte { return f.states[len(f.states)-1] }

func (f *mfile) push(b []byte, op *campaign.Op) {
	f.states = append(f.states, b)
	f.by = append(f.by, op)
}

// nsView is a driver's directory: whether it exists and its names.
type nsView struct {
	dir   bool
	names map[string]*mfile
}

func (v nsView) clone() nsView {
	n := nsView{dir: v.dir, names: make(map[string]*mfile, len(v.names))}
	for k, f := range v.names {
		n.names[k] = f
	}
	return n
}

// check checks driver d's files after the kill against the model its log
// gives, through mount A, compares with mount B, and makes what it read the
// next iteration's base.
func (c *campaignRun) check(iter int, d *driverProc, killedAt [2]int64) {
	t := c.t
	c.curDriver = d.id
	d.mu.Lock()
	lines, stderr, derr := d.lines, d.stderr.String(), d.err
	d.mu.Unlock()
	fail := func(format string, a ...any) {
		t.Helper()
		logPath := filepath.Join(c.logs, fmt.Sprintf("driver-%d-iter-%d.log", d.id, iter))
		_ = os.WriteFile(logPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		t.Errorf("iteration %d, driver %d (dir d%d, home mount %c, seed %d): %s\n(the driver's log: %s)", iter, d.id, d.id, 'A'+d.home, c.seed, fmt.Sprintf(format, a...), logPath)
	}
	if derr != nil {
		fail("the driver exited with %v: %s", derr, stderr)
		return
	}
	ops, err := campaign.Parse(lines)
	if err != nil {
		fail("%v", err)
		return
	}

	// The view before the iteration.
	view := nsView{dir: c.base[d.id] != nil, names: map[string]*mfile{}}
	for name, b := range c.base[d.id] {
		view.names[name] = &mfile{states: [][]byte{b}, by: []*campaign.Op{nil}}
	}
	var alt *nsView // the view if the last op, in flight, happened
	for i, op := range ops {
		c.stats.ops++
		last := i == len(ops)-1
		if !op.Ended || !op.OK {
			if !last {
				fail("operation %v is not the last the driver did, but failed", op)
				return
			}
			abs := d.home
			if op.Mount == 1 {
				abs = 1 - d.home
			}
			killed := killedAt[abs] != 0 && (!op.Ended || killedAt[abs] <= op.End)
			if op.Kind == "see" { // it reads both mounts
				for _, k := range killedAt {
					killed = killed || k != 0 && (!op.Ended || k <= op.End)
				}
			}
			switch {
			case killed:
			case op.Errno == int(syscall.EIO):
				c.stats.eio++
			case op.Errno == int(syscall.EINTR):
				// A signal (the driver's Go runtime preempts with
				// SIGURG) interrupted a FUSE request the mount then
				// abandoned; the outcome is unknown, as with EIO.
				c.stats.eintr++
			default:
				fail("%v: %v while mount %c was alive (the faults give EIO at most, a signal EINTR); faults injected meanwhile: %s", op, syscall.Errno(op.Errno), 'A'+abs, c.faultsDuring(op))
			}
			// A change of names may or may not have happened: an
			// alternative view; a change of content is the file's last,
			// unacknowledged state.
			if op.Kind == "mkdir" || op.Kind == "rename" || op.Kind == "unlink" || op.Kind == "copy" || op.Kind == "open" && op.Int(1) == 1 {
				a := view.clone()
				alt = &a
				c.apply(op, alt, true, fail)
			} else {
				c.apply(op, &view, true, fail)
			}
			continue
		}
		c.stats.okOps++
		if !c.apply(op, &view, false, fail) {
			return
		}
	}

	// What the mount shows now.
	got, ok := c.readDir(d, fail)
	if !ok {
		return
	}
	views := []nsView{view}
	if alt != nil {
		views = append(views, *alt)
	}
	var chosen *nsView
	for i := range views {
		if sameNames(views[i], got) {
			chosen = &views[i]
			break
		}
	}
	if chosen == nil {
		want := []string{describeNames(view)}
		if alt != nil {
			want = append(want, describeNames(*alt)+" (if the last operation happened)")
		}
		fail("after the kill the directory holds %s, want %s; last operation %v", describeGot(got), strings.Join(want, " or "), lastOp(ops))
		return
	}
	for name, f := range chosen.names {
		content := got.files[name]
		c.stats.filesChecked++
		c.stats.bytesChecked += int64(len(content))
		if msg := c.matches(f, content); msg != "" {
			fail("file %s: %s", name, msg)
		}
	}
	// Mount B must show the same.
	gotB, ok := c.readDirOn(1, d, fail)
	if !ok {
		return
	}
	if !sameNamesGot(got, gotB) {
		fail("mount A shows %s, mount B %s", describeGot(got), describeGot(gotB))
	} else {
		for name, b := range got.files {
			if !bytes.Equal(b, gotB.files[name]) {
				fail("file %s: mount A reads %d bytes (crc %08x), mount B %d bytes (crc %08x)", name, len(b), crc(b), len(gotB.files[name]), crc(gotB.files[name]))
			}
		}
	}
	if got.dir {
		c.base[d.id] = got.files
	} else {
		c.base[d.id] = nil
	}
}

// faultsDuring lists the faults injected while op ran (and a second
// before).
func (c *campaignRun) faultsDuring(op *campaign.Op) string {
	from := time.Unix(0, op.Begin).Add(-time.Second)
	to := time.Unix(0, op.End)
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	var out []string
	for _, e := range c.faults {
		if e.Time.Before(from) || e.Time.After(to) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %s %s (%v before the op ended)", e.Fault, e.Method, e.Path, e.Delay, to.Sub(e.Time).Round(time.Millisecond)))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

func lastOp(ops []*campaign.Op) string {
	if len(ops) == 0 {
		return "none"
	}
	return ops[len(ops)-1].String()
}

func crc(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// apply applies op to the view. uncertain: the op is the one in flight at
// the end (it may or may not have happened). It reports false when the log
// cannot be followed (a failure is reported).
func (c *campaignRun) apply(op *campaign.Op, v *nsView, uncertain bool, fail func(string, ...any)) bool {
	name := ""
	if len(op.Args) > 0 {
		name = op.Args[0]
	}
	f := v.names[name]
	needFile := func() bool {
		if f == nil {
			fail("%v: the model has no file %s", op, name)
			return false
		}
		return true
	}
	change := func(b []byte) {
		// A change in flight at the end is the file's last state, never
		// acknowledged: the file may hold it or the one before.
		f.push(b, op)
		f.uncertain = uncertain
		if c.wal && !uncertain {
			f.acked = len(f.states) - 1
		}
	}
	switch op.Kind {
	case "mkdir":
		v.dir = true
	case "open":
		create, trunc := op.Int(1) == 1, op.Int(2) == 1
		if create {
			if f != nil {
				fail("%v: created over an existing file of the model", op)
				return false
			}
			f = &mfile{states: [][]byte{nil}, by: []*campaign.Op{op}}
			v.names[name] = f
		} else if !needFile() {
			return false
		}
		if trunc && len(f.cur()) > 0 {
			change(nil)
		}
	case "write":
		if !needFile() {
			return false
		}
		off, n := op.Int(1), op.Int(2)
		old := f.cur()
		b := make([]byte, max(int64(len(old)), off+n))
		copy(b, old)
		copy(b[off:], campaign.Pattern(c.curDriver, op.Seq, off, int(n)))
		change(b)
		if !uncertain {
			c.stats.writes++
			c.stats.bytesWritten += n
		}
	case "trunc":
		if !needFile() {
			return false
		}
		size := op.Int(1)
		old := f.cur()
		b := make([]byte, size)
		copy(b, old)
		change(b)
	case "fsync", "close":
		if !needFile() {
			return false
		}
		if !uncertain {
			f.acked = len(f.states) - 1
			c.stats.fsyncs++
		}
	case "read":
		if uncertain {
			return true
		}
		if !needFile() {
			return false
		}
		n, sum := op.Result[0], op.Result[1]
		want := f.cur()
		if n != strconv.Itoa(len(want)) || sum != strconv.FormatUint(uint64(crc(want)), 10) {
			fail("%v: read %s bytes with crc32c %s through the open file, want %d bytes with crc %d: a read gave bytes the file does not hold (%s)",
				op, n, sum, len(want), crc(want), f.history())
			return false
		}
	case "rename":
		if !needFile() {
			return false
		}
		dst := op.Args[1]
		delete(v.names, name)
		v.names[dst] = f
	case "unlink":
		if !needFile() {
			return false
		}
		delete(v.names, name)
	case "copy":
		// A new file with what the source holds now; the copy is fsynced
		// and closed before the op ends.
		if !needFile() {
			return false
		}
		dst := op.Args[1]
		if v.names[dst] != nil {
			fail("%v: copied over an existing file of the model", op)
			return false
		}
		g := &mfile{states: [][]byte{nil}, by: []*campaign.Op{op}}
		g.push(f.cur(), op)
		g.uncertain = uncertain
		if !uncertain {
			g.acked = 1
			c.stats.copies++
		}
		v.names[dst] = g
	case "see":
	default:
		fail("%v: unknown operation", op)
		return false
	}
	return true
}

// matches says why content is none of the states f may be in, or "".
func (c *campaignRun) matches(f *mfile, content []byte) string {
	last := len(f.states) - 1
	for k := f.acked; k <= last; k++ {
		if bytes.Equal(content, f.states[k]) {
			return ""
		}
		op := f.by[k]
		// A write after the acknowledged state may be there in part
		// (without the WAL; with it only the one in flight).
		partialOK := k > f.acked && op != nil && op.Kind == "write" && (!c.wal || (f.uncertain && k == last))
		if partialOK && partialMatch(content, f.states[k-1], f.states[k], op.Int(1), op.Int(2)) {
			return ""
		}
	}
	// Say how it differs from the acknowledged state.
	ack := f.states[f.acked]
	i := 0
	for i < len(ack) && i < len(content) && ack[i] == content[i] {
		i++
	}
	var where string
	switch {
	case len(content) < len(ack) && i == len(content):
		where = fmt.Sprintf("it is %d bytes, the acknowledged state %d: acknowledged bytes from %d on are lost", len(content), len(ack), len(content))
	case i < len(content) && i < len(ack):
		where = fmt.Sprintf("byte %d is %#02x, the acknowledged state has %#02x (%s)", i, content[i], ack[i], c.whoWrote(f, content, int64(i)))
	default:
		where = fmt.Sprintf("it is %d bytes, the acknowledged state %d", len(content), len(ack))
	}
	return fmt.Sprintf("after the kill it holds %d bytes (crc %08x), none of the states from the acknowledged one (%d of %d) on: %s; %s",
		len(content), crc(content), f.acked, last, where, f.history())
}

// whoWrote names the write of the model whose bytes content has at off.
func (c *campaignRun) whoWrote(f *mfile, content []byte, off int64) string {
	for k := len(f.by) - 1; k >= 1; k-- {
		op := f.by[k]
		if op == nil || op.Kind != "write" {
			continue
		}
		wo, wn := op.Int(1), op.Int(2)
		if off < wo || off >= wo+wn {
			continue
		}
		end := min(wo+wn, int64(len(content)))
		if bytes.Equal(content[off:end], campaign.Pattern(c.curDriver, op.Seq, off, int(end-off))) {
			return fmt.Sprintf("the byte of write #%d, state %d", op.Seq, k)
		}
	}
	allZero := true
	for _, b := range content[off:min(int64(len(content)), off+64)] {
		allZero = allZero && b == 0
	}
	if allZero {
		return "zeros: a hole or a block never written"
	}
	return "written by no write of this file in this iteration"
}

// partialMatch: content is prev with a prefix of the write [off, off+n) that
// made next applied.
func partialMatch(content, prev, next []byte, off, n int64) bool {
	p := 0
	for p < len(content) && p < len(next) && content[p] == next[p] {
		p++
	}
	if int64(p) < off || int64(p) > off+n {
		return false
	}
	want := make([]byte, max(len(prev), p))
	copy(want, prev)
	copy(want[:p], next[:p])
	return bytes.Equal(content, want)
}

func (f *mfile) history() string {
	var parts []string
	for k, op := range f.by {
		s := "base"
		if op != nil {
			s = op.String()
		}
		mark := ""
		if k == f.acked {
			mark = " [acknowledged]"
		}
		parts = append(parts, fmt.Sprintf("state %d: %d bytes crc %08x by %s%s", k, len(f.states[k]), crc(f.states[k]), s, mark))
	}
	return "history: " + strings.Join(parts, "; ")
}

// gotDir is a driver's directory as a mount shows it.
type gotDir struct {
	dir   bool
	files map[string][]byte
}

func (c *campaignRun) readDir(d *driverProc, fail func(string, ...any)) (gotDir, bool) {
	return c.readDirOn(0, d, fail)
}

// readDirOn lists and reads driver d's directory through mount idx, under
// the watchdog.
func (c *campaignRun) readDirOn(idx int, d *driverProc, fail func(string, ...any)) (gotDir, bool) {
	dir := filepath.Join(c.dirs[idx], fmt.Sprintf("d%d", d.id))
	type result struct {
		g   gotDir
		err error
	}
	res := make(chan result, 1)
	var mu sync.Mutex
	doing := "list " + dir
	go func() {
		g := gotDir{files: map[string][]byte{}}
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			res <- result{g: g}
			return
		}
		if err != nil {
			res <- result{err: err}
			return
		}
		g.dir = true
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			mu.Lock()
			doing = "read " + p
			mu.Unlock()
			b, err := os.ReadFile(p)
			if err != nil {
				res <- result{err: err}
				return
			}
			fi, err := os.Stat(p)
			if err != nil {
				res <- result{err: err}
				return
			}
			if fi.Size() != int64(len(b)) {
				res <- result{err: fmt.Errorf("%s: stat says %d bytes, read gave %d", p, fi.Size(), len(b))}
				return
			}
			g.files[e.Name()] = b
		}
		res <- result{g: g}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			fail("through mount %c after the kill: %v", 'A'+idx, r.err)
			return gotDir{}, false
		}
		return r.g, true
	case <-time.After(campaignOpTimeout):
		mu.Lock()
		what := doing
		mu.Unlock()
		c.hang(fmt.Sprintf("the check's %s through mount %c did not return within %v", what, 'A'+idx, campaignOpTimeout))
		return gotDir{}, false
	}
}

func sameNames(v nsView, g gotDir) bool {
	if v.dir != g.dir || len(v.names) != len(g.files) {
		return false
	}
	for n := range v.names {
		if _, ok := g.files[n]; !ok {
			return false
		}
	}
	return true
}

func sameNamesGot(a, b gotDir) bool {
	if a.dir != b.dir || len(a.files) != len(b.files) {
		return false
	}
	for n := range a.files {
		if _, ok := b.files[n]; !ok {
			return false
		}
	}
	return true
}

func describeNames(v nsView) string {
	if !v.dir {
		return "no directory"
	}
	var n []string
	for k := range v.names {
		n = append(n, k)
	}
	sort.Strings(n)
	return "[" + strings.Join(n, " ") + "]"
}

func describeGot(g gotDir) string {
	if !g.dir {
		return "no directory"
	}
	var n []string
	for k, b := range g.files {
		n = append(n, fmt.Sprintf("%s(%d)", k, len(b)))
	}
	sort.Strings(n)
	return "[" + strings.Join(n, " ") + "]"
}
