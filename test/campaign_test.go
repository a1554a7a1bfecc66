package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/fs/inspect"
	"github.com/ckptfs/ckptfs/fs/namespace"
	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
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
// or EINTR while its mount lives (EIO only where the proxy injects faults:
// not in the dir mode), and an operation, mount, check or gc run
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
	// The cleaner keeps one checkpoint of a file and deletes what is
	// unreferenced at once (--min-age 0s) after a run first found it so,
	// under faults: a held descriptor or a partial write on a view a second
	// old may then meet objects gone (EIO, which the faults give anyway), as
	// the cleaner's contract says. The dir mode, which has no faults and
	// fails on EIO, runs it within its contract: --min-age 5s
	// (campaignDirMinAge), longer than a reader on the other mount holds a
	// descriptor (the driver's holdFor, 2 s) and than a view of a file stays
	// stale (an open reads the head). Its namespace lag is shorter than the
	// read-only mount's view lags (campaignThirdOpts), so that mount meets
	// names of reaped files.
	campaignKeep      = "1"
	campaignGrace     = "10s"
	campaignMinAge    = "0s"
	campaignDirMinAge = "5s"
	campaignNSLag     = "1s"
	// campaignWALLease: with wal=on, a killed mount's lease that the next
	// mounts cannot judge (it was taken in another PID namespace) keeps
	// them out this long; an iteration starts no sooner after the kills.
	campaignWALLease = 3 * time.Second
)

// campaignThirdCatchUp bounds how long C may lag behind the others: its
// ns_refresh_max, the kernel's one-second caches, and the reads of the log
// under the proxy's faults.
const campaignThirdCatchUp = 20 * time.Second

// campaignThirdOpts: the read-only mount C, whose view of the namespace
// lags (it re-reads the log every 2 s while in use, up to 4 s when idle).
const campaignThirdOpts = "ro,ns_refresh=2s,ns_refresh_max=4s,log=info"

// campaignMountOpts: small blocks and objects sent ahead early, so that
// a flush has objects above the head and a kill lands between them.
const campaignMountOpts = "create,ns_refresh=200ms,data_block_size=4K,stream_segment_bytes=128K,segment_max_object_bytes=8M,segment_mpu_chunk_size=5M,log=info"

// campaignOptional lists the optional operations and modes
// (campaign.Optional; docs/campaign.md, "Optional operations") a run does
// unless CKPTFS_CAMPAIGN_OPS says otherwise. Each was made to find one
// fault: one is listed here once its fault is fixed, so that the default
// run (scripts/test) stays green.
var campaignOptional = []string{"append", "cprw", "hreap", "many", "olease", "rocreat", "slow", "walmix"}

// campaignOps: CKPTFS_CAMPAIGN_OPS, names of campaign.Optional separated by
// commas ("all": every one; set and empty: none), or campaignOptional.
func campaignOps(t *testing.T) map[string]bool {
	names := campaignOptional
	if s, ok := os.LookupEnv("CKPTFS_CAMPAIGN_OPS"); ok {
		names = strings.Split(s, ",")
		if strings.TrimSpace(s) == "all" {
			names = campaign.Optional
		}
	}
	ops := map[string]bool{}
	for _, n := range names {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !campaign.IsOptional(n) {
			t.Fatalf("CKPTFS_CAMPAIGN_OPS: %q is not one of %v", n, campaign.Optional)
		}
		ops[n] = true
	}
	return ops
}

// campaignSlowRule is the proxy's rule of the slow mode while the drivers
// run: 60 % of requests answered 503, and 30 % delayed by up to 10 s, so
// that a retry outlives every window of the mount's (a lease, a refresh, a
// request's timeout).
func campaignSlowRule(seed uint64) faultproxy.Rule {
	return faultproxy.Rule{Seed: seed, Error503: 0.6, Delay: 0.3, MaxDelay: 10 * time.Second}
}

// campaignSlowAfter: in the slow mode the store is slow from this long
// after the drivers start.
const campaignSlowAfter = 10 * time.Second

// campaignSlowOpTimeout: in the slow mode an operation is a hang only
// after this long (its requests are retried, each delayed up to 10 s).
const campaignSlowOpTimeout = 5 * time.Minute

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
		// Beside the mount's binary: one folder per source tree, so that
		// two checkouts tested at once never run each other's driver.
		driverBin.path = filepath.Join(filepath.Dir(ckptfsBinary(t)), "campaign-driver")
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
	fallocs      int64 // fallocate changes (holes punched, ranges zeroed, allocations)
	fsyncs       int64 // fsyncs and closes that succeeded
	copies       int64 // copies (copy_file_range, ckptfs cp) that succeeded
	links        int64 // hard links made (a file's second name)
	xattrs       int64 // extended attributes set or removed
	// Where features meet: reads through the other mount (close-to-open),
	// through a descriptor it held across the home mount's closes, of a
	// name another mount had just unlinked or a lagging read-only mount
	// showed, of .checkpoints; O_CREAT opens through the other mount, mode
	// changes, and changes through the other mount that a merge met.
	crossReads, heldReads, staleReads, ckptReads int64
	crossCreates, chmods, foreign                int64
	thirdWrites                                  int64 // write requests of the read-only mount (none allowed)
	fsckFiles                                    int64 // files fsck counted at the end of the run
	kills                                        int
	partedMounts                                 int   // mounts of A and B that created files in the parted format
	partedFiles, streamFiles                     int   // named files at the end, by the format of their head
	eio                                          int64 // operations failed with EIO under faults, or ETIMEDOUT under the slow store (tolerated)
	eintr                                        int64 // operations interrupted by a signal (tolerated)
	ebusy                                        int64 // with the WAL, home writes of a file the other mount still published (tolerated)
	bytesChecked                                 int64
	filesChecked                                 int64
	gcRuns                                       int64
	gcFailed                                     int64
	proxy                                        faultproxy.Counters

	// The optional operations (campaignOps): appends through both mounts,
	// O_RDONLY|O_CREAT opens beside a creator's appends, copies while the
	// other mount rewrote the source, reads of a held descriptor past its
	// file's reaping, plain writers merged over a WAL writer's truncate,
	// lease operations with the holder's requests held (and of those, the
	// ones whose other write succeeded: the lease taken), iterations with
	// the slow store. copiesStale are those copies that failed with ESTALE
	// (the source showed another version), holding a prefix of one.
	appends, roCreats, copiesRewritten, reapReads int64
	copiesStale                                   int64
	walMixes, leases, leasesTaken                 int64
	slowIterations                                int
}

func (s campaignStats) String() string {
	return fmt.Sprintf("%d iterations, %d operations (%d succeeded: %d writes of %d bytes, %d fallocates, %d fsyncs and closes, %d copies, %d hard links; "+
		"%d reads through the other mount, %d through a held descriptor, %d of names just unlinked or on the lagging read-only mount, %d of .checkpoints, "+
		"%d O_CREAT opens through the other mount, %d chmods, %d extended attributes set or removed, %d changes through the other mount met by a merge or after it), "+
		"%d SIGKILLs, %d mounts writing the parted format, %d operations failed with EIO under faults, %d with EINTR and %d with EBUSY (the WAL's lease of a copy the other mount still published), %d files and %d bytes checked after the kills, %d gc runs (%d failed), "+
		"%d write requests from the read-only mount, %d files counted by fsck at the end (names at the end: %d of parted files, %d of stream files), faults: %d of %v",
		s.iterations, s.ops, s.okOps, s.writes, s.bytesWritten, s.fallocs, s.fsyncs, s.copies, s.links,
		s.crossReads, s.heldReads, s.staleReads, s.ckptReads, s.crossCreates, s.chmods, s.xattrs, s.foreign,
		s.kills, s.partedMounts, s.eio, s.eintr, s.ebusy, s.filesChecked, s.bytesChecked, s.gcRuns, s.gcFailed,
		s.thirdWrites, s.fsckFiles, s.partedFiles, s.streamFiles, s.proxy.Faults(), s.proxy) + s.optional()
}

// optional is the figures of the optional operations, "" when none ran.
func (s campaignStats) optional() string {
	if s.appends+s.roCreats+s.copiesRewritten+s.reapReads+s.walMixes+s.leases == 0 && s.slowIterations == 0 {
		return ""
	}
	return fmt.Sprintf("; optional: %d appends through both mounts, %d O_RDONLY|O_CREAT opens beside appends, %d copies while the source was rewritten (%d failed with ESTALE), "+
		"%d held descriptors read past their file's reaping, %d plain writers merged over a WAL writer, %d writes beside a slow lease holder (%d took the lease), %d iterations with the slow store",
		s.appends, s.roCreats, s.copiesRewritten, s.copiesStale, s.reapReads, s.walMixes, s.leases, s.leasesTaken, s.slowIterations)
}

func (s *campaignStats) add(o campaignStats) {
	s.iterations += o.iterations
	s.ops += o.ops
	s.okOps += o.okOps
	s.writes += o.writes
	s.bytesWritten += o.bytesWritten
	s.fallocs += o.fallocs
	s.fsyncs += o.fsyncs
	s.copies += o.copies
	s.links += o.links
	s.crossReads += o.crossReads
	s.heldReads += o.heldReads
	s.staleReads += o.staleReads
	s.ckptReads += o.ckptReads
	s.crossCreates += o.crossCreates
	s.chmods += o.chmods
	s.xattrs += o.xattrs
	s.foreign += o.foreign
	s.thirdWrites += o.thirdWrites
	s.fsckFiles += o.fsckFiles
	s.kills += o.kills
	s.partedMounts += o.partedMounts
	s.partedFiles += o.partedFiles
	s.streamFiles += o.streamFiles
	s.eio += o.eio
	s.eintr += o.eintr
	s.ebusy += o.ebusy
	s.bytesChecked += o.bytesChecked
	s.filesChecked += o.filesChecked
	s.appends += o.appends
	s.roCreats += o.roCreats
	s.copiesRewritten += o.copiesRewritten
	s.copiesStale += o.copiesStale
	s.reapReads += o.reapReads
	s.walMixes += o.walMixes
	s.leases += o.leases
	s.leasesTaken += o.leasesTaken
	s.slowIterations += o.slowIterations
	s.gcRuns += o.gcRuns
	s.gcFailed += o.gcFailed
	addCounters(&s.proxy, o.proxy)
}

// TestCampaign runs the campaign without and with the WAL.
func TestCampaign(t *testing.T) {
	need(t, "fusermount3", "unshare") // mount B runs in a PID namespace of its own
	iterations := campaignIterations(t)
	seed := campaignSeed(t)
	ops := campaignOps(t)
	t.Logf("campaign: seed %d (CKPTFS_CAMPAIGN_SEED), %d iterations per mode (CKPTFS_CAMPAIGN_ITERATIONS), optional operations %v (CKPTFS_CAMPAIGN_OPS)", seed, iterations, slices.Sorted(maps.Keys(ops)))
	start := time.Now()
	var total campaignStats
	for i, m := range []struct {
		name          string
		wal, dirStore bool
		iterations    int
		slow          bool
	}{
		{"plain", false, false, iterations, false},
		{"wal", true, false, iterations, false},
		// Two mounts of a file:// volume (no proxy, no faults): the
		// directory store's listings under concurrent renames (a gap in
		// the namespace log's listing is re-checked before it is
		// believed), and the most operations and merges per second of
		// the three. A third of the others' iterations: longer runs of
		// it alone find more (docs/campaign.md).
		{"dir", false, true, max(1, iterations/3), false},
		// Without the WAL on S3, with a store slow enough that a retry
		// outlives every window (campaignSlowRule) while the drivers run;
		// only with "slow" in CKPTFS_CAMPAIGN_OPS, and few iterations.
		{"slow", false, false, max(1, iterations/3), true},
		// Four mounts of a namespace v2 volume changing names in
		// directories of their own and a shared one (campaign_many_test.go);
		// only with "many" in CKPTFS_CAMPAIGN_OPS (it is by default:
		// campaignOptional).
		{"many", false, false, iterations, false},
	} {
		if m.slow && !ops[campaign.ModeSlow] || m.name == campaign.ModeMany && !ops[campaign.ModeMany] {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			if m.name == campaign.ModeMany {
				c := newCampaign(t, seed+uint64(i), false, false, campaign.ModeMany)
				s := c.runMany(m.iterations)
				t.Logf("campaign %s: %v", m.name, s)
				return
			}
			c := newCampaign(t, seed+uint64(i), m.wal, m.dirStore, "")
			c.setOptional(ops, m.slow)
			s := c.run(m.iterations)
			t.Logf("campaign %s: %v", m.name, s)
			total.add(s)
		})
	}
	t.Logf("campaign: seed %d, %v in %v", seed, total, time.Since(start).Round(time.Second))
	if !t.Failed() && total.iterations > 0 && (total.partedFiles == 0 || total.streamFiles == 0) {
		t.Errorf("the campaign ended with %d files in the parted format and %d in the stream format: one format was never tried", total.partedFiles, total.streamFiles)
	}
}

// mountProc is one mount: the built binary in the foreground (mount B in a
// PID namespace of its own: under unshare, whose child it is).
type mountProc struct {
	idx    int
	dir    string
	log    string
	cmd    *exec.Cmd
	pidns  bool
	exited chan struct{}
	err    error // after exited
}

// process is the mount's own process: under unshare, its child.
func (m *mountProc) process() *os.Process {
	if !m.pidns {
		return m.cmd.Process
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", m.cmd.Process.Pid, m.cmd.Process.Pid))
	if err != nil {
		return m.cmd.Process
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return m.cmd.Process
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return m.cmd.Process
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return m.cmd.Process
	}
	return p
}

type campaignRun struct {
	t     *testing.T
	seed  uint64
	rngMu sync.Mutex // the gc loop draws too
	rng   *rand.Rand // GUARDED_BY(rngMu)
	wal   bool
	vol   *volume
	bin   string
	drv   string
	store string
	opts  string // store options, through the proxy
	env   []string
	proxy *faultproxy.Proxy
	// Mounts A and B (B in a PID namespace of its own), killed and started
	// again every iteration, and C (index 2), read-only, lagging, through
	// a proxy of its own that counts its write requests, for the whole
	// run.
	// D (index 3): a mount without the WAL beside WAL mounts (walmix),
	// started and killed with A and B.
	dirs        [4]string
	mounts      [4]*mountProc
	thirdOpts   string
	thirdWrites atomic.Int64
	createMode  uint32       // a new file's mode: 0644 less the umask
	killed      []*mountProc // killed, not yet detached
	// drivers and killedAt (unix ns, 0: alive) of the iteration running.
	drivers  []*driverProc
	killedAt [4]int64
	logs     string // folder of mount logs, kept when the campaign fails
	logN     int

	// base is what the last check read: per driver, name -> content. A
	// driver's directory exists once it is in base.
	base      []map[string][]byte
	baseModes []map[string]uint32
	baseInos  []map[string]uint64 // names of one file (hard links) share its inode number
	baseXattr []map[string]string // campaign.Xattr of each name's file ("" for none)
	// ghosts: per driver, the files that had each name in the last
	// iteration (its model's names and past holders). The read-only
	// mount C caught up in the check, but its kernel keeps the entries
	// the check looked up for a second (the entry timeout): a name gone
	// since may still lead there at the next iteration's start.
	ghosts []map[string][]holder
	stats  campaignStats
	// flushes: mount idx flushes every second (no -foreign for its
	// drivers: what it had published would not be known).
	flushes [2]bool
	starts  [2]int // mounts of A and B started
	// curDriver is the driver whose log check is following.
	curDriver int

	faultMu sync.Mutex
	faults  []faultproxy.Event // every fault the proxy injected

	// The optional operations (campaignOps) this mode's drivers do.
	ops map[string]bool
	// many: the many-mounts mode (campaign_many_test.go): A, B, C and D
	// are four mounts of a namespace v2 volume alike.
	many bool
	// manyDoubt: in the many mode, directories whose rmdir was in flight
	// at a kill, with the kill's time (unix ns): see manySealedENOENT.
	manyDoubt map[string]int64
	// manyGC: what the gc loop of the many mode deleted (gcMu held).
	manyGC manyGCCounts
	// slow: the slow mode (campaignSlowRule while the drivers run).
	slow      bool
	opTimeout time.Duration
	// mountProxy, with olease in the wal mode: A's and B's own proxies, so
	// that one holder's requests can be held back longer than the lease
	// (holdBack); mountOpts are their store options.
	mountProxy [2]*faultproxy.Proxy
	mountOpts  [2]string
	holdMu     sync.Mutex
	holding    [2]int // holdBack calls running, per mount

	gcStop chan struct{}
	gcDone chan struct{}
	gcMu   sync.Mutex
	gcErrs []string // gc runs that failed, their output's tail
	gcHang string
}

// newCampaign makes a campaign's volume, proxies and logs' folder; many
// is campaign.ModeMany for the many-mounts mode, else "".
func newCampaign(t *testing.T, seed uint64, wal, dirStore bool, many string) *campaignRun {
	bin := ckptfsBinary(t)
	drv := campaignDriver(t)
	mode := map[bool]string{false: "plain", true: "wal"}[wal]
	if many != "" {
		mode = many
	}
	var v *volume
	var store string
	env := os.Environ()
	if dirStore {
		mode = "dir"
		store = "file://" + filepath.Join(t.TempDir(), "vol")
	} else {
		v = newVolume(t)
		store, _, env = s3Args(t, v)
	}
	logs := filepath.Join(os.TempDir(), "ckptfs-campaign", fmt.Sprintf("%d-%s", seed, mode))
	_ = os.RemoveAll(logs)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &campaignRun{
		t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0xca)), wal: wal, opTimeout: campaignOpTimeout,
		bin: bin, drv: drv, store: store, env: env, logs: logs, vol: v,
		base: make([]map[string][]byte, campaignDrivers), baseModes: make([]map[string]uint32, campaignDrivers),
		baseInos: make([]map[string]uint64, campaignDrivers), baseXattr: make([]map[string]string, campaignDrivers),
		ghosts: make([]map[string][]holder, campaignDrivers),
		many:   many != "",
	}
	um := syscall.Umask(0)
	syscall.Umask(um)
	c.createMode = 0o644 &^ uint32(um)
	for i := range c.dirs {
		c.dirs[i] = mountpoint(t)
	}
	c.cleanup()
	if dirStore {
		return c
	}
	rule := campaignRule(seed)
	rule.OnFault = c.recordFault
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
	thirdRule := campaignRule(seed ^ 0x3)
	thirdRule.Match = func(r *http.Request) bool {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			c.thirdWrites.Add(1)
		}
		return true
	}
	thirdProxy, err := faultproxy.Start(v.cfg.Endpoint, thirdRule)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := thirdProxy.Close(); err != nil {
			t.Error(err)
		}
	})
	c.thirdOpts = "endpoint=" + thirdProxy.URL() + ",path_style,region=" + v.cfg.Region
	return c
}

// recordFault keeps a fault the proxy injected, for faultsDuring.
func (c *campaignRun) recordFault(e faultproxy.Event) {
	c.faultMu.Lock()
	c.faults = append(c.faults, e)
	c.faultMu.Unlock()
}

// setOptional makes the mode's drivers do the optional operations ops
// (those that apply to it), and makes it the slow mode.
func (c *campaignRun) setOptional(ops map[string]bool, slow bool) {
	c.ops, c.slow = ops, slow
	if slow {
		c.opTimeout = campaignSlowOpTimeout
	}
	if !c.wal || !ops[campaign.OpLease] || c.proxy == nil {
		return
	}
	// A's and B's own proxies, with the rule of the shared one.
	for i := range c.mountProxy {
		rule := campaignRule(c.seed ^ uint64(0x10+i))
		rule.OnFault = c.recordFault
		p, err := faultproxy.Start(c.vol.cfg.Endpoint, rule)
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() {
			p.Stall(false)
			if err := p.Close(); err != nil {
				c.t.Error(err)
			}
		})
		c.mountProxy[i] = p
		c.mountOpts[i] = "endpoint=" + p.URL() + ",path_style,region=" + c.vol.cfg.Region
	}
}

// driverOps are the optional operations this mode's drivers do: O_APPEND
// writers need two mounts that write one file at once (not with the WAL,
// whose lease refuses the second), a plain writer beside a WAL writer and
// a lease taken from a slow holder need the WAL.
func (c *campaignRun) driverOps() []string {
	var out []string
	for _, n := range campaign.Optional {
		switch {
		case !c.ops[n], n == campaign.ModeSlow, n == campaign.ModeMany:
		case n == campaign.OpAppend && c.wal:
		case (n == campaign.OpWALMix || n == campaign.OpLease) && !c.wal:
		case n == campaign.OpLease && c.mountProxy[0] == nil:
		default:
			out = append(out, n)
		}
	}
	return out
}

// startPlain starts mount D, without the WAL, beside the WAL mounts A and
// B, when the drivers do walmix.
func (c *campaignRun) startPlain() {
	if c.wal && c.ops[campaign.OpWALMix] {
		c.startMount(3, "")
	}
}

// holdBack holds every request of mount idx (its own proxy) back for
// longer than the WAL lease, from the moment a driver begins olease with
// idx as its home: the holder's renewals stop, its lease runs out, and the
// other mount's write may take it while the holder's write waits.
func (c *campaignRun) holdBack(idx int) {
	p := c.mountProxy[idx]
	c.holdMu.Lock()
	c.holding[idx]++
	p.Stall(true)
	c.holdMu.Unlock()
	time.Sleep(campaignWALLease + 3*time.Second)
	c.holdMu.Lock()
	c.holding[idx]--
	if c.holding[idx] == 0 {
		p.Stall(false)
	}
	c.holdMu.Unlock()
}

// usesBoth: optional operations that use both mounts (A and B), whatever
// mount their log names.
func usesBoth(kind string) bool {
	return kind == campaign.OpAppend || kind == campaign.OpROCreat || kind == campaign.OpCopyRewritten || kind == campaign.OpLease
}

// addCounters adds o to p.
func addCounters(p *faultproxy.Counters, o faultproxy.Counters) {
	p.Conns += o.Conns
	p.Ended += o.Ended
	p.Requests += o.Requests
	p.Forwarded += o.Forwarded
	p.Error503 += o.Error503
	p.Error500 += o.Error500
	p.Delayed += o.Delayed
	p.Lost += o.Lost
	p.Stalled += o.Stalled
	p.Failed += o.Failed
	p.Gone += o.Gone
}

// cleanup kills and detaches the mounts and stops the drivers and the gc
// loop when the test ends; the logs stay when it failed.
func (c *campaignRun) cleanup() {
	t, logs := c.t, c.logs
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
	if idx < 2 && c.mountOpts[idx] != "" {
		opts = c.mountOpts[idx] + "," + campaignMountOpts + extra
	}
	if c.wal && idx != 3 {
		opts += fmt.Sprintf(",wal=on,wal_lease=%v", campaignWALLease)
	}
	if idx == 2 && !c.many {
		opts = c.thirdOpts + "," + campaignThirdOpts
	}
	if c.many {
		opts += ",namespace=v2"
	}
	m.cmd = exec.Command(c.bin, "mount", "-f", "-o", opts, c.store, m.dir)
	if idx == 1 {
		// B runs in a PID namespace of its own, as in a container: the pid
		// its leases and markers carry means nothing outside it.
		m.pidns = true
		m.cmd = exec.Command("unshare", append([]string{"-p", "-f", "--kill-child"}, m.cmd.Args...)...)
	}
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
		if m.pidns {
			_ = m.process().Kill()
		}
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
			_ = m.process().Signal(syscall.SIGQUIT)
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
	for _, r := range c.inFlight() {
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
			ctx, cancel := context.WithTimeout(context.Background(), 2*c.opTimeout)
			minAge := campaignMinAge
			if c.proxy == nil {
				minAge = campaignDirMinAge
			}
			cmd := exec.CommandContext(ctx, c.bin, "gc", "--keep", campaignKeep, "--grace", campaignGrace, "--min-age", minAge, "--ns-lag", campaignNSLag, "-o", c.opts, c.store)
			if c.many {
				cmd.Args = append(cmd.Args[:len(cmd.Args)-1], "--trim-grace", manyTrimGrace, c.store)
			}
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
			if c.many && err == nil {
				c.manyGC.add(out.String())
			}
			if err != nil {
				c.stats.gcFailed++
				tail := out.String()
				if len(tail) > 2000 {
					tail = tail[len(tail)-2000:]
				}
				if timedOut {
					c.gcHang = fmt.Sprintf("gc ran longer than %v:\n%s", 2*c.opTimeout, out.String())
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
	d := &driverProc{id: id, home: home, done: make(chan struct{})}
	d.cmd = exec.Command(c.drv, "-id", strconv.Itoa(id), "-seed", strconv.FormatUint(c.seed*1000+uint64(iter), 10),
		"-dir", fmt.Sprintf("d%d", id), "-home", c.dirs[home], "-other", c.dirs[1-home],
		"-seq-base", strconv.Itoa(iter*10_000_000),
		"-third", c.dirs[2], "-copies", "-cross",
		"-ckptfs", c.bin, "-store", c.store, "-store-opts", c.opts)
	d.cmd.Env = c.env // ckptfs cp reaches the store
	if ops := c.driverOps(); len(ops) > 0 {
		d.cmd.Args = append(d.cmd.Args, "-ops", strings.Join(ops, ","))
		if c.ops[campaign.OpWALMix] && c.wal {
			d.cmd.Args = append(d.cmd.Args, "-plain", c.dirs[3])
		}
	}
	if !c.wal {
		// Checkpoint numbers name what an fsync or close acknowledged
		// (with the WAL the checkpoint is published later).
		d.cmd.Args = append(d.cmd.Args, "-cno")
		if !c.flushes[home] {
			// Changes through the other mount that the home mount's next
			// fsync merges (with the WAL the other mount may not write).
			d.cmd.Args = append(d.cmd.Args, "-foreign")
		}
	}
	c.launch(d)
	return d
}

// launch starts driver d's command and follows its log.
func (c *campaignRun) launch(d *driverProc) {
	t, home := c.t, d.home
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
				if f := strings.Fields(l); len(f) > 3 && f[3] == campaign.OpLease && home < 2 && c.mountProxy[home] != nil {
					go c.holdBack(home)
				}
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
}

// watch waits until done() is true, checking every driver's operation in
// flight against campaignOpTimeout, and the gc loop.
// beforeKill waits until every driver that still runs has finished the
// operation it is in and one more: an operation that hangs is found here by
// the watchdog, where the kill would otherwise end it. Then a little more,
// so that the kill falls anywhere in the next ones.
func (c *campaignRun) beforeKill(drivers []*driverProc) {
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
}

func (c *campaignRun) watch(drivers []*driverProc, done func() bool) {
	for !done() {
		time.Sleep(20 * time.Millisecond)
		for _, d := range drivers {
			d.mu.Lock()
			op, since := d.inFlight, d.since
			d.mu.Unlock()
			if op != "" && time.Since(since) > c.opTimeout {
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
		c.startMount(i, c.mountExtra(i))
	}
	c.startPlain()
	c.startMount(2, "")
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
	c.finalClean()
	c.stats.thirdWrites = c.thirdWrites.Load()
	if n := c.stats.thirdWrites; n != 0 {
		t.Errorf("the read-only mount C sent %d write requests", n)
	}
	if c.proxy != nil {
		c.stats.proxy = c.proxy.Counters()
	}
	for _, p := range c.mountProxy {
		if p != nil {
			addCounters(&c.stats.proxy, p.Counters())
		}
	}
	return c.stats
}

// finalClean: with the drivers gone and the mounts idle, the cleaner with
// no grace leaves exactly the files that have names: no orphan stays
// (unlinked files, with or without objects, and copies' sources), and
// fsck finds no problem and no leftover upload.
func (c *campaignRun) finalClean() {
	t := c.t
	// A create that the kill cut after its name landed and before its head
	// did leaves a named file with no object: an empty file (the mount
	// shows it so, and the cleaner leaves it), which fsck, counting files
	// by their objects, does not count. So an empty named file may be
	// missing from fsck's count.
	named, empty := 0, 0
	for id, inos := range c.baseInos {
		files := map[uint64]bool{}
		for name, ino := range inos {
			if !files[ino] && len(c.base[id][name]) == 0 {
				empty++
			}
			files[ino] = true
		}
		named += len(files) // a file with two names is one
	}
	pinned := 0
	var gcOut string
	for range 2 {
		// The grace counts from the first run that found a thing
		// unreferenced: the second deletes what the first recorded.
		out, err := c.tool(2*c.opTimeout, "gc", "--keep", campaignKeep, "--grace", "0s", "--min-age", "0s", "--ns-lag", "0s", "-o", c.opts, c.store)
		if err != nil {
			t.Errorf("the last gc: %v\n%s", err, out)
			return
		}
		gcOut = out
	}
	// An orphan stays while a retained checkpoint of a copy by reference
	// points into it (the gc says so).
	for _, l := range strings.Split(gcOut, "\n") {
		if strings.HasPrefix(l, "kept orphaned file ") {
			pinned++
		}
	}
	out, err := c.tool(2*c.opTimeout, "fsck", "-o", c.opts, c.store)
	if err != nil {
		t.Errorf("fsck after the last gc: %v\n%s", err, out)
		return
	}
	var files, objects, problems, leftovers int
	for _, l := range strings.Split(out, "\n") {
		if n, _ := fmt.Sscanf(l, "%d files, %d objects, %d problems, %d leftovers", &files, &objects, &problems, &leftovers); n == 4 {
			break
		}
	}
	c.stats.fsckFiles = int64(files)
	// The mounts killed last left writer markers, live for their TTL: an
	// orphan one covers waits (the cleaner cannot tell a killed writer from
	// a slow one). Every other orphan must be gone.
	marked := map[string]bool{}
	var st staging.Store
	if c.vol != nil {
		st = c.vol.store()
	} else {
		dst, err := dir.New(strings.TrimPrefix(c.store, "file://"))
		if err != nil {
			t.Fatal(err)
		}
		st = dst
	}
	objs, err := staging.ListAll(context.Background(), st, "f/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		id, rest, _ := strings.Cut(strings.TrimPrefix(o.Key, "f/"), "/")
		if strings.HasPrefix(rest, ckvolume.WritersDir) {
			marked[id] = true
		}
	}
	c.countFormats(st)
	if problems != 0 || leftovers != 0 || files < named+pinned-empty || files > named+pinned+len(marked) {
		t.Errorf("fsck after the last gc: %d files (the drivers' directories name %d, %d of them empty, copies keep %d orphans, %d files have writer markers), %d objects, %d problems, %d leftover uploads:\n%s\nthe last gc:\n%s", files, named, empty, pinned, len(marked), objects, problems, leftovers, out, gcOut)
	}
}

// countFormats counts the named files by the format of their head (read
// from the store, not through the proxy); a file never written has none.
func (c *campaignRun) countFormats(st staging.Store) {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), campaignOpTimeout)
	defer cancel()
	v, err := inspect.Open(ctx, st, "")
	if err != nil {
		t.Errorf("count the files' formats: %v", err)
		return
	}
	err = v.Walk(ctx, func(p string, n namespace.Node) error {
		if n.Kind != namespace.KindFile {
			return nil
		}
		hd, _, err := segment.ReadHead(ctx, st, ckvolume.HeadKey(v.Prefix(n.FileID)), segment.FileTag(n.FileID))
		switch {
		case errors.Is(err, staging.ErrNotFound):
		case err != nil:
			return fmt.Errorf("head of %s: %w", p, err)
		case hd.Inode.Format == segment.FormatParted:
			c.stats.partedFiles++
		default:
			c.stats.streamFiles++
		}
		return nil
	})
	if err != nil {
		t.Errorf("count the files' formats: %v", err)
	}
}

// tool runs a ckptfs command through the proxy, within d.
func (c *campaignRun) tool(d time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	cmd.WaitDelay = 10 * time.Second
	b, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		c.hang(fmt.Sprintf("ckptfs %s ran longer than %v", strings.Join(args[:1], " "), d))
	}
	return string(b), err
}

// mountExtra: some mounts flush every second, some only on fsync and close.
// One of A and B creates files in the parted format, the other in the
// stream format, taking turns from one start to the next: a file keeps the
// format it was created in, so the two meet (a file of one is rewritten,
// copied and read through a mount of the other).
func (c *campaignRun) mountExtra(idx int) string {
	var extra string
	c.flushes[idx] = c.rngN(2) == 0
	if c.flushes[idx] {
		extra += ",flush_interval=1s"
	}
	if (c.starts[idx]+idx)%2 == 1 {
		extra += ",format=parted"
		c.stats.partedMounts++
	}
	c.starts[idx]++
	return extra
}

func (c *campaignRun) iteration(iter int) {
	t := c.t
	if c.wal {
		// A lease of a killed mount in another PID namespace cannot be
		// judged: it keeps writers out until it expires.
		for _, k := range c.killedAt {
			if wait := time.Until(time.Unix(0, k).Add(campaignWALLease + time.Second)); k != 0 && wait > 0 {
				time.Sleep(wait)
			}
		}
	}
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
	if c.slow {
		// The drivers make and write files at the usual speed for a
		// while, then meet the slow store, where one does a few
		// operations a minute: opens of files that exist among them.
		runFor = campaignSlowAfter + time.Duration(30+c.rngN(30))*time.Second
		until = time.Now().Add(runFor)
		slowFrom := time.Now().Add(campaignSlowAfter)
		c.watch(drivers, func() bool { return time.Now().After(slowFrom) })
		rule := campaignSlowRule(c.seed + uint64(iter))
		rule.OnFault = c.recordFault
		c.proxy.SetRule(rule)
		c.stats.slowIterations++
	}
	c.watch(drivers, func() bool { return time.Now().After(until) })
	c.beforeKill(drivers)
	first := c.rngN(2)
	c.killedAt = [4]int64{}
	killedAt := &c.killedAt
	if m := c.mounts[3]; m != nil {
		// D first: a driver's exit would close its descriptors there,
		// and D flush what it holds after the others died.
		killedAt[3] = time.Now().UnixNano()
		c.kill(m)
	}
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
	if c.slow {
		// The check reads through the faults of the other modes.
		rule := campaignRule(c.seed)
		rule.OnFault = c.recordFault
		c.proxy.SetRule(rule)
	}

	// New mounts, and the check.
	for i := range 2 {
		c.startMount(i, c.mountExtra(i))
	}
	c.startPlain()
	mounted := time.Now()
	for _, d := range drivers {
		c.check(iter, d, *killedAt)
	}
	c.stats.iterations++
	t.Logf("iteration %d: ran %v, killed %c then %c, drivers stopped %v later, remounted in %v, checked in %v",
		iter, runFor.Round(time.Millisecond), 'A'+first, 'A'+1-first, stopped.Sub(start.Add(runFor)).Round(time.Millisecond),
		mounted.Sub(stopped).Round(time.Millisecond), time.Since(mounted).Round(time.Millisecond))
}

func (c *campaignRun) check(iter int, d *driverProc, killedAt [4]int64) {
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
	// Whatever this check finds, the next iteration starts from what mount
	// A shows (a failure that stops the check early too).
	adopted := false
	defer func() {
		if adopted {
			return
		}
		if got, ok := c.readDirOn(0, d, func(string, ...any) {}); ok {
			c.adopt(d, got)
		}
	}()
	if derr != nil {
		fail("the driver exited with %v: %s", derr, stderr)
		return
	}
	ops, err := campaign.Parse(lines)
	if err != nil {
		fail("%v", err)
		return
	}

	// The view before the iteration; through C a name may still lead where
	// it did in the last one (ghosts).
	view := nsView{dir: c.base[d.id] != nil, names: map[string]*mfile{}, past: map[string][]holder{}}
	byIno := map[uint64]*mfile{} // names of one file share its model
	for name, b := range c.base[d.id] {
		ino := c.baseInos[d.id][name]
		if byIno[ino] == nil {
			byIno[ino] = newMfile(b, nil, c.baseModes[d.id][name])
			byIno[ino].xattr = c.baseXattr[d.id][name]
		}
		view.names[name] = byIno[ino]
	}
	view.ghosts, c.ghosts[d.id] = c.ghosts[d.id], nil
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
			switch op.Mount {
			case 1:
				abs = 1 - d.home
			case 3:
				abs = 3
			}
			killed := op.Mount != 2 && killedAt[abs] != 0 && (!op.Ended || killedAt[abs] <= op.End)
			if op.Kind == "see" || op.Kind == "toolcp" || op.Kind == "ocreat" || usesBoth(op.Kind) { // it uses both mounts
				for _, k := range killedAt {
					killed = killed || k != 0 && (!op.Ended || k <= op.End)
				}
			}
			switch {
			case killed:
			case op.Errno == int(syscall.EIO) && c.proxy != nil:
				c.stats.eio++
			case op.Errno == int(syscall.ETIMEDOUT) && c.slow:
				// The slow store: answered nothing to the mount for
				// op_timeout, so the call ended (docs/outages.md); its
				// outcome is unknown, as with EIO.
				c.stats.eio++
			case op.Errno == int(syscall.EIO):
				fail("%v: EIO while mount %c was alive, with no faults to give it (the file:// volume)", op, 'A'+abs)
			case op.Errno == int(syscall.EINTR):
				// A signal (the driver's Go runtime preempts with
				// SIGURG) interrupted a FUSE request the mount then
				// abandoned; the outcome is unknown, as with EIO.
				c.stats.eintr++
			case c.wal && op.Errno == int(syscall.EBUSY) && op.Kind == campaign.OpCopyRewritten && op.Mount == 0:
				// The copy's source rewritten through the other mount, whose
				// WAL holds its lease while its last publish lands.
				c.stats.ebusy++
			case c.wal && op.Errno == int(syscall.EBUSY) && op.Mount == 0 && len(op.Args) > 0 && view.names[op.Args[0]] != nil && view.names[op.Args[0]].byOther:
				// The other mount copied into the file and closed it; its
				// mark that it is closing the lease (one request, which
				// may meet the faults) came later than a second.
				c.stats.ebusy++
			default:
				fail("%v: %v while mount %c was alive (the faults give EIO at most, a signal EINTR); faults injected meanwhile: %s", op, syscall.Errno(op.Errno), 'A'+abs, c.faultsDuring(op))
			}
			// A change of names may or may not have happened: an
			// alternative view; a change of content is the file's last,
			// unacknowledged state.
			if op.Kind == "mkdir" || op.Kind == "rename" || op.Kind == "link" || op.Kind == "unlink" || isCopy(op.Kind) || op.Kind == "open" && op.Int(1) == 1 {
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

	c.ghosts[d.id] = ghostsOf(view, alt)

	// What the mount shows now.
	got, ok := c.readDir(d, fail)
	if !ok {
		return
	}
	if lo := ops[len(ops)-1:]; len(lo) == 1 && lo[0].Kind == "toolcp" && !(lo[0].Ended && lo[0].OK) {
		// ckptfs cp builds the copy under a temporary name; one that
		// failed or was cut short may leave it (it says so).
		for name, b := range got.files {
			if strings.HasPrefix(name, ".ckptfs-cp-") {
				view.names[name] = newMfile(b, nil, 0)
				if alt != nil {
					alt.names[name] = view.names[name]
				}
			}
		}
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
		if perm := got.modes[name]; !f.modeOK(perm) {
			fail("file %s: after the kill its mode is %o, want %o (or %o, if a chmod in flight happened)", name, perm, f.mode, f.modeAlt)
		}
		if x := got.xattrs[name]; !f.xattrOK(x) {
			fail("file %s: after the kill its %s is %q, want %q (or %q, if a change in flight happened; \"\": none)", name, campaign.Xattr, x, f.xattr, f.xattrAlt)
		}
	}
	// Names of one file (hard links) show one inode number, names of
	// different files different ones.
	inoOf, fileOf := map[*mfile]string{}, map[uint64]string{}
	for name, f := range chosen.names {
		ino := got.inos[name]
		if other, ok := inoOf[f]; ok && got.inos[other] != ino {
			fail("files %s and %s: two names of one file, after the kill inodes %d and %d", other, name, got.inos[other], ino)
		}
		if other, ok := fileOf[ino]; ok && chosen.names[other] != f {
			fail("files %s and %s: two files, after the kill one inode (%d)", other, name, ino)
		}
		inoOf[f], fileOf[ino] = name, name
	}
	// Mount B must show the same. A request of a killed mount that the
	// proxy held (the slow store holds them past every window) may land
	// after the new mounts started: B, read after A, may then lag behind A
	// until its next refresh, so it is read again until it shows A's names,
	// for campaignThirdCatchUp (slow mode, CI: an unlink in flight at the
	// kill, gone on A, f0 still on B). A lasting difference still fails.
	gotB, ok := c.readDirOn(1, d, fail)
	if !ok {
		return
	}
	for deadline := time.Now().Add(campaignThirdCatchUp); !sameNamesGot(got, gotB) && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		if gotB, ok = c.readDirOn(1, d, fail); !ok {
			return
		}
	}
	if !sameNamesGot(got, gotB) {
		fail("mount A shows %s, mount B %s", describeGot(got), describeGot(gotB))
	} else {
		for name, b := range got.files {
			if !bytes.Equal(b, gotB.files[name]) {
				fail("file %s: mount A reads %d bytes (crc %08x), mount B %d bytes (crc %08x)", name, len(b), crc(b), len(gotB.files[name]), crc(gotB.files[name]))
			}
			if got.modes[name] != gotB.modes[name] {
				fail("file %s: mount A shows mode %o, mount B %o", name, got.modes[name], gotB.modes[name])
			}
			if got.xattrs[name] != gotB.xattrs[name] {
				fail("file %s: mount A shows %s %q, mount B %q", name, campaign.Xattr, got.xattrs[name], gotB.xattrs[name])
			}
		}
	}
	c.checkThird(d, got, fail)
	c.adopt(d, got)
	adopted = true
}

// ghostsOf: the files each name led to in the model's views (the one with
// the operation in flight at the end too), which a lagging mount may still
// show under the name in the next iteration.
func ghostsOf(view nsView, alt *nsView) map[string][]holder {
	g := map[string][]holder{}
	views := []nsView{view}
	if alt != nil {
		views = append(views, *alt)
	}
	for _, v := range views {
		for name, f := range v.names {
			g[name] = append(g[name], holder{f, f.acked})
		}
		for name, hs := range v.past {
			g[name] = append(g[name], hs...)
		}
	}
	return g
}

// adopt makes got the starting point of driver d's next iteration.
func (c *campaignRun) adopt(d *driverProc, got gotDir) {
	if got.dir {
		c.base[d.id], c.baseModes[d.id], c.baseInos[d.id], c.baseXattr[d.id] = got.files, got.modes, got.inos, got.xattrs
	} else {
		c.base[d.id], c.baseModes[d.id], c.baseInos[d.id], c.baseXattr[d.id] = nil, nil, nil, nil
	}
}

// checkThird: the read-only mount C, whose view lags, shows what mount A
// shows once it has caught up (within campaignThirdCatchUp).
func (c *campaignRun) checkThird(d *driverProc, got gotDir, fail func(string, ...any)) {
	deadline := time.Now().Add(campaignThirdCatchUp)
	for {
		// While it catches up a name it shows may be gone on the others.
		var why string
		gotC, ok := c.readDirOn(2, d, func(f string, a ...any) { why = fmt.Sprintf(f, a...) })
		if !ok {
			if time.Now().After(deadline) {
				fail("the read-only mount C, %v after A was checked: %s", campaignThirdCatchUp, why)
				return
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		// The same files, not only the same bytes: a lagging name may lead
		// to another file that holds the same (an empty one, say).
		same := sameNamesGot(got, gotC)
		for name, b := range got.files {
			same = same && bytes.Equal(b, gotC.files[name]) && got.modes[name] == gotC.modes[name] && got.inos[name] == gotC.inos[name] &&
				got.xattrs[name] == gotC.xattrs[name]
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			fail("the read-only mount C shows %s %v %q, mount A %s %v %q, %v after A was checked", describeGot(gotC), gotC.modes, gotC.xattrs, describeGot(got), got.modes, got.xattrs, campaignThirdCatchUp)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// faultsDuring lists the faults injected while op ran (and a second
// before).
// inFlight lists the requests the proxy serves now (none without one).
func (c *campaignRun) inFlight() []faultproxy.Request {
	if c.proxy == nil {
		return nil
	}
	return c.proxy.InFlight()
}

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

// gotDir is a driver's directory as a mount shows it.
type gotDir struct {
	dir   bool
	files map[string][]byte
	modes map[string]uint32 // permission bits
	inos  map[string]uint64 // inode numbers: every mount derives them from the namespace alike
	// xattrs: each file's campaign.Xattr ("" for none).
	xattrs map[string]string
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
		g := gotDir{files: map[string][]byte{}, modes: map[string]uint32{}, inos: map[string]uint64{}, xattrs: map[string]string{}}
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
			g.modes[e.Name()] = uint32(fi.Mode().Perm())
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				g.inos[e.Name()] = st.Ino
			}
			buf := make([]byte, 64)
			n, err := unix.Getxattr(p, campaign.Xattr, buf)
			switch {
			case errors.Is(err, unix.ENODATA):
			case err != nil:
				res <- result{err: fmt.Errorf("getxattr %s: %w", p, err)}
				return
			default:
				g.xattrs[e.Name()] = string(buf[:n])
			}
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
