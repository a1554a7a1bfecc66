package test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/test/faultproxy"
)

// outageOpts bound every S3 request to about a second, so that an outage
// shows within seconds: a request fails after s3_request_timeout (or
// s3_connect_timeout) and is not retried past s3_retry_max_time.
const outageOpts = "create,s3_connect_timeout=1s,s3_request_timeout=1s,s3_stall_timeout=1s,s3_retry_max_time=1s,ns_refresh=200ms,log=info"

// outageWatchdog only catches a hang: far above the bound docs/outages.md
// gives for these options, it is no timing assertion.
const outageWatchdog = 2 * time.Minute

// outageMount is one ckptfs mount process in the foreground.
type outageMount struct {
	cmd    *exec.Cmd
	dir    string
	log    string
	exited chan struct{}
	err    error
}

func startOutageMount(t *testing.T, bin, store, opts string, env []string, dir, log string) *outageMount {
	t.Helper()
	lf, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	m := &outageMount{dir: dir, log: log, exited: make(chan struct{})}
	m.cmd = exec.Command(bin, "mount", "-f", "-o", withNamespace(opts), store, dir)
	m.cmd.Env = append(env, "GOTRACEBACK=all")
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
	t.Cleanup(func() {
		select {
		case <-m.exited:
		default:
			_ = m.cmd.Process.Kill()
			<-m.exited
			_ = exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("log of the mount of %s:\n%s", dir, b)
		}
	})
	deadline := time.Now().Add(outageWatchdog)
	for !isMounted(t, dir) {
		select {
		case <-m.exited:
			b, _ := os.ReadFile(log)
			t.Fatalf("mount exited before it mounted: %v\n%s", m.err, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not mounted within %v", outageWatchdog)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m
}

// runBounded runs a program on the mount and returns its error and how long
// it took; it fails the test if the program is still running after the
// watchdog (its stack in the kernel is logged: a D state shows there).
func runBounded(t *testing.T, name string, args ...string) (string, error, time.Duration) {
	t.Helper()
	return startBounded(t, name, args...).wait(t, time.Now().Add(outageWatchdog))
}

// boundedCmd is a program started by startBounded, running until wait.
type boundedCmd struct {
	name  string
	args  []string
	cmd   *exec.Cmd
	out   bytes.Buffer
	start time.Time
	done  chan error
}

// startBounded starts a program (its output and errors in one buffer) and
// kills it when the test ends if it is still running, so that several can
// run at once and a test that fails waiting on one leaves none behind.
func startBounded(t *testing.T, name string, args ...string) *boundedCmd {
	t.Helper()
	b := &boundedCmd{name: name, args: args, cmd: exec.Command(name, args...), done: make(chan error, 1)}
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
	b.start = time.Now()
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		err := b.cmd.Wait()
		b.done <- err
		close(exited)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-exited
	})
	return b
}

// wait returns the program's output, error and run time once it exits; it
// fails the test if the program still runs at the deadline.
func (b *boundedCmd) wait(t *testing.T, deadline time.Time) (string, error, time.Duration) {
	t.Helper()
	select {
	case err := <-b.done:
		return b.out.String(), err, time.Since(b.start)
	case <-time.After(time.Until(deadline)):
		stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", b.cmd.Process.Pid))
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
		t.Fatalf("%s %v hangs after %v\nstatus:\n%s\nkernel stack:\n%s", b.name, b.args, time.Since(b.start).Round(time.Second), status, stack)
		return "", nil, 0
	}
}

// TestOutage: with the store behind the mount stalling every request,
// metadata changes, stat, cat and fsync fail within the bound instead of
// hanging, a killed program ends, the unmount completes (exiting non-zero,
// naming the file it could not flush), and once the store is back a new
// mount reads every file flushed before the outage exactly.
//
// With wal=on a write during the outage fails too (its record cannot be
// stored), and what was written to the log before the outage but not
// flushed replays at the next mount.
//
// The two run at once: each has its own volume, proxy and mount process,
// and spends most of its half minute waiting out the one-second timeouts.
func TestOutage(t *testing.T) {
	for _, c := range []struct {
		name string
		wal  bool
	}{{"plain", false}, {"wal", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testOutage(t, c.wal)
		})
	}
}

// stallableVolume is a new volume on the test's S3 server behind a proxy
// that can stall every request: the binary, the store, the environment, the
// proxy, and the options that reach the store through it.
func stallableVolume(t *testing.T) (bin, store string, env []string, proxy *faultproxy.Proxy, reach string) {
	t.Helper()
	bin = ckptfsBinary(t)
	v := newVolume(t)
	store, _, env = s3Args(t, v)
	proxy, err := faultproxy.Start(v.cfg.Endpoint, faultproxy.Rule{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.Stall(false)
		if err := proxy.Close(); err != nil {
			t.Error(err)
		}
	})
	return bin, store, env, proxy, "endpoint=" + proxy.URL() + ",path_style,region=" + v.cfg.Region
}

func testOutage(t *testing.T, wal bool) {
	need(t, "fusermount3", "touch", "mkdir", "stat", "cat")
	bin, store, env, proxy, reach := stallableVolume(t)
	opts := reach + "," + outageOpts
	if wal {
		opts += ",wal=on"
	}
	logs := t.TempDir()
	dir := mountpoint(t)
	m := startOutageMount(t, bin, store, opts, env, dir, filepath.Join(logs, "mount-1.log"))
	p := func(name string) string { return filepath.Join(dir, name) }

	// Before the outage: files written and flushed, a directory.
	want := map[string][]byte{}
	for i, n := range []int{0, 1, 4096, 300_000} {
		name := fmt.Sprintf("f%d", i)
		data := bytes.Repeat([]byte(name+"."), n/3+1)[:n]
		f, err := os.Create(p(name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want[name] = data
	}
	if err := os.Mkdir(p("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A file kept open across the outage, for the fsync during it.
	dirty, err := os.OpenFile(p("dirty"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := dirty.Sync(); err != nil {
		t.Fatal(err)
	}

	proxy.Stall(true)
	start := time.Now()

	for _, c := range [][]string{
		{"touch", p("new")},
		{"mkdir", p("newdir")},
		{"touch", p("d/new")},
	} {
		out, err, took := runBounded(t, c[0], c[1:]...)
		t.Logf("%v during the outage: %v after %v: %s", c, err, took.Round(time.Millisecond), strings.TrimSpace(out))
		if err == nil {
			t.Errorf("%v succeeded with the store stalled", c)
		}
	}
	// The attributes of a closed file are remembered for a second (the
	// kernel's and the mount's): past that a stat asks the store, and with
	// the store silent answers what the mount last saw (docs/outages.md);
	// reading the data needs the store.
	time.Sleep(time.Until(start.Add(2 * time.Second)))
	if out, err, took := runBounded(t, "stat", "-c", "%s", p("f3")); err != nil || strings.TrimSpace(out) != "300000" {
		t.Errorf("stat of a file seen before the outage: %q, %v after %v; want its size from memory", out, err, took)
	}
	for _, c := range [][]string{
		{"cat", p("f2")},
	} {
		out, err, took := runBounded(t, c[0], c[1:]...)
		t.Logf("%v during the outage: %v after %v: %s", c, err, took.Round(time.Millisecond), strings.TrimSpace(out))
		if err == nil {
			t.Errorf("%v succeeded with the store stalled", c)
		}
	}

	// fsync of data written during the outage fails; it is not reported
	// durable. With the WAL the write itself fails: its record is not
	// stored.
	_, err = dirty.Write([]byte("written during the outage"))
	switch {
	case wal && !errors.Is(err, syscall.ETIMEDOUT):
		t.Errorf("write during the outage with the WAL: %v, want ETIMEDOUT", err)
	case !wal && err != nil:
		t.Fatalf("write during the outage (buffered, needs no store): %v", err)
	}
	synced := make(chan error, 1)
	t0 := time.Now()
	go func() { synced <- dirty.Sync() }()
	select {
	case err := <-synced:
		t.Logf("fsync during the outage: %v after %v", err, time.Since(t0).Round(time.Millisecond))
		if wal {
			// The write failed; whether anything is left to flush is
			// the engine's to say. Only a hang would be wrong.
		} else if err == nil {
			t.Error("fsync succeeded with the store stalled")
		} else if !errors.Is(err, syscall.ETIMEDOUT) && !errors.Is(err, syscall.EIO) {
			t.Errorf("fsync during the outage: %v, want ETIMEDOUT or EIO", err)
		}
	case <-time.After(outageWatchdog):
		t.Fatalf("fsync hangs past %v", outageWatchdog)
	}

	// kill ends a program waiting on the mount.
	for _, c := range [][]string{{"touch", p("killed")}, {"mkdir", p("killeddir")}, {"cat", p("f3")}} {
		cmd := exec.Command(c[0], c[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		t0 := time.Now()
		_ = cmd.Process.Kill()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
			t.Logf("%v killed: ended after %v", c, time.Since(t0).Round(time.Millisecond))
		case <-time.After(outageWatchdog):
			stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", cmd.Process.Pid))
			t.Fatalf("%v killed, still there after %v; kernel stack:\n%s", c, outageWatchdog, stack)
		}
	}

	// The store returns: the mount carries on. The flush that failed
	// succeeds now, and changes work again.
	proxy.Stall(false)
	if wal {
		if _, err := dirty.WriteAt([]byte("written during the outage"), 0); err != nil {
			t.Fatalf("write once the store is back: %v", err)
		}
		if _, err := dirty.Seek(0, io.SeekEnd); err != nil {
			t.Fatal(err)
		}
	}
	if err := dirty.Sync(); err != nil {
		t.Fatalf("fsync once the store is back: %v", err)
	}
	want["dirty"] = []byte("written during the outage")
	if out, err := runErr(dir, "touch", p("new")); err != nil {
		t.Fatalf("touch once the store is back: %v: %s", err, out)
	}
	want["new"] = []byte{}

	// A second outage, with data not flushed: the unmount names the file
	// it could not flush and the mount exits non-zero. With the WAL the
	// write's record is stored before the outage and replays at the next
	// mount.
	if _, err := dirty.Write([]byte(", and kept")); err != nil {
		t.Fatal(err)
	}
	if wal {
		want["dirty"] = []byte("written during the outage, and kept")
	}
	// Without the WAL the close's publish may yet land: a small file's part 0
	// and head go at once, and a request the stalled proxy held is applied
	// when it lets it through, after the mount gave up on it (an answer
	// lost, not a request refused). The file then reads as last written,
	// never as a mix.
	mayBe := map[string][]byte{"dirty": []byte("written during the outage, and kept")}
	proxy.Stall(true)
	if err := dirty.Close(); err == nil {
		t.Log("close of the dirty file during the outage: no error (flush_on_close off)")
	} else {
		t.Logf("close of the dirty file during the outage: %v", err)
	}
	out, err, took := runBounded(t, "fusermount3", "-u", dir)
	t.Logf("fusermount3 -u during the outage: %v after %v %s", err, took.Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("fusermount3 -u during the outage: %v: %s", err, out)
	}
	unmounted := time.Now()
	select {
	case <-m.exited:
	case <-time.After(outageWatchdog):
		t.Fatalf("the mount process still runs %v after the unmount", outageWatchdog)
	}
	t.Logf("mount exit: %v, %v after the unmount, %v after the outage began", m.err,
		time.Since(unmounted).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	logText, _ := os.ReadFile(m.log)
	var exit *exec.ExitError
	unflushed := errors.As(m.err, &exit) && exit.ExitCode() != 0
	named := strings.Contains(string(logText), "flush at unmount failed")
	switch {
	case !wal && !unflushed:
		t.Errorf("the mount exited with %v after an unmount that left a file unflushed, want a non-zero status", m.err)
	case !wal && !named, unflushed && !named:
		t.Errorf("the mount's log does not name the file it could not flush")
	}
	// With the WAL the last write's record was stored before the outage:
	// the file may have been published before it began, and then the
	// unmount has nothing to report. Either way the next mount must read
	// it back (below).
	if !strings.Contains(string(logText), "did not answer in time") {
		t.Errorf("the mount's log does not name the operations that timed out")
	}
	// The background refresh fails every tick of an outage: it is logged
	// when it starts failing, once per outage (two here), not every tick.
	if n := strings.Count(string(logText), "namespace refresh failed"); n > 2 {
		t.Errorf("the failing namespace refresh is logged %d times over two outages, want at most 2", n)
	}

	// The store returns: a new mount has everything flushed before.
	proxy.Stall(false)
	m2 := startOutageMount(t, bin, store, opts, env, dir, filepath.Join(logs, "mount-2.log"))
	for name, data := range want {
		got, err := os.ReadFile(p(name))
		if err != nil {
			t.Errorf("read %s after the outage: %v", name, err)
			continue
		}
		if alt, ok := mayBe[name]; !bytes.Equal(got, data) && !(ok && bytes.Equal(got, alt)) {
			t.Errorf("%s after the outage: %d bytes, want the %d flushed before it", name, len(got), len(data))
		}
	}
	if fi, err := os.Stat(p("d")); err != nil || !fi.IsDir() {
		t.Errorf("directory d after the outage: %v", err)
	}
	// The mount carries on: changes succeed again.
	if err := os.WriteFile(p("after"), []byte("after"), 0o644); err != nil {
		t.Errorf("write after the outage: %v", err)
	}
	out, err = runErr(dir, "fusermount3", "-u", dir)
	if err != nil {
		t.Fatalf("fusermount3 -u after the outage: %v: %s", err, out)
	}
	<-m2.exited
	if m2.err != nil {
		t.Errorf("the mount after the outage exited with %v", m2.err)
	}
}

// TestOutageSigterm: SIGTERM to a mount whose store is down unmounts it and
// ends the process, non-zero, naming the file it could not flush; it does
// not stay running unmounted.
func TestOutageSigterm(t *testing.T) {
	need(t, "fusermount3")
	bin, store, env, proxy, reach := stallableVolume(t)
	opts := reach + "," + outageOpts
	dir := mountpoint(t)
	m := startOutageMount(t, bin, store, opts, env, dir, filepath.Join(t.TempDir(), "mount.log"))
	f, err := os.Create(filepath.Join(dir, "dirty"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	proxy.Stall(true)
	if _, err := f.Write([]byte("written during the outage")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Logf("close during the outage: %v", err)
	}
	t0 := time.Now()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.exited:
	case <-time.After(outageWatchdog):
		t.Fatalf("the mount process still runs %v after SIGTERM", outageWatchdog)
	}
	t.Logf("mount exit after SIGTERM: %v after %v", m.err, time.Since(t0).Round(time.Millisecond))
	var exit *exec.ExitError
	if !errors.As(m.err, &exit) || exit.ExitCode() == 0 {
		t.Errorf("the mount exited with %v after SIGTERM left a file unflushed, want a non-zero status", m.err)
	}
	if isMounted(t, dir) {
		t.Errorf("%s still mounted after SIGTERM", dir)
	}
	logText, _ := os.ReadFile(m.log)
	if !strings.Contains(string(logText), "flush at unmount failed") {
		t.Errorf("the mount's log does not name the file it could not flush")
	}
}

// interruptScript makes namespace changes on a mount under a storm of
// SIGALRM (a handler that does nothing, as stress-ng's timer): every call
// interrupted with EINTR is checked to have changed nothing, then retried as
// a program would; any other error is reported. It prints one line per fault
// and "eintr N" at the end.
const interruptScript = `
import os, signal, sys
d, n = sys.argv[1], int(sys.argv[2])
signal.signal(signal.SIGALRM, lambda s, f: None)
signal.setitimer(signal.ITIMER_REAL, 0.004, 0.004)
eintr = 0
def retried(fn):
    while True:
        try:
            return fn()
        except InterruptedError:
            pass
def exists(path):
    try:
        retried(lambda: os.lstat(path))
        return True
    except FileNotFoundError:
        return False
def has_xattr(path):
    try:
        return retried(lambda: os.getxattr(path, "user.a")) == b"v"
    except OSError:
        return False
def change(what, path, took_effect, fn):
    global eintr
    for _ in range(1000):
        try:
            fn()
            return
        except InterruptedError:
            eintr += 1
            if took_effect(path):
                print(what, path, "failed with EINTR, yet took effect")
                return
        except OSError as e:
            print(what, path, e)
            return
    print(what, path, "interrupted 1000 times")
def create(path):
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    retried(lambda: os.close(fd))
for i in range(n):
    sub = os.path.join(d, "d%d" % i)
    f = os.path.join(sub, "f")
    gone = lambda p: not exists(p)
    change("mkdir", sub, exists, lambda: os.mkdir(sub))
    change("create", f, exists, lambda: create(f))
    change("setxattr", f, has_xattr, lambda: os.setxattr(f, "user.a", b"v"))
    change("unlink", f, gone, lambda: os.unlink(f))
    change("rmdir", sub, gone, lambda: os.rmdir(sub))
signal.setitimer(signal.ITIMER_REAL, 0, 0)
print("eintr", eintr)
`

// TestInterruptedChangesReportTheirOutcome: a signal that interrupts a
// namespace change whose log entry was already sent does not make it fail
// (it may be in the log); EINTR only comes when nothing changed. The proxy
// delays the answers of log entry writes, so that signals land while the
// entry is stored and its answer not yet back.
func TestInterruptedChangesReportTheirOutcome(t *testing.T) {
	need(t, "python3")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, _, env := s3Args(t, v)
	proxy, err := faultproxy.Start(v.cfg.Endpoint, faultproxy.Rule{
		Seed: 1, Delay: 0.99, MaxDelay: 30 * time.Millisecond,
		Match: func(r *http.Request) bool {
			return r.Method == http.MethodPut && namesWrite(r.URL.Path)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := proxy.Close(); err != nil {
			t.Error(err)
		}
	})
	opts := "endpoint=" + proxy.URL() + ",path_style,region=" + v.cfg.Region + ",create,log=info"
	dir := mountpoint(t)
	startOutageMount(t, bin, store, opts, env, dir, filepath.Join(t.TempDir(), "mount.log"))
	t.Cleanup(func() { _, _ = runErr(dir, "fusermount3", "-u", dir) })
	out, err, took := runBounded(t, "python3", "-c", interruptScript, dir, fmt.Sprint(size(150, 60)))
	t.Logf("after %v: %s; proxy: %v", took.Round(time.Millisecond), strings.TrimSpace(lastLine(out)), proxy.Counters())
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "eintr ") {
			t.Error(l)
		}
	}
}

// TestKilledDuringChange: a program killed while its change's log entry is
// being written ends at once (the kernel keeps it in uninterruptible sleep
// until the mount answers); the change finishes without it and the mount
// stays consistent. The proxy holds log entry writes for up to a minute;
// the kill comes while one is held, and the program must be gone while the
// proxy still holds it.
func TestKilledDuringChange(t *testing.T) {
	need(t, "fusermount3", "mkdir")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, _, env := s3Args(t, v)
	isLogPut := func(method, path string) bool {
		return method == http.MethodPut && namesWrite(path)
	}
	proxy, err := faultproxy.Start(v.cfg.Endpoint, faultproxy.Rule{
		Seed: 3, Delay: 0.99, MaxDelay: time.Minute,
		Match: func(r *http.Request) bool { return isLogPut(r.Method, r.URL.Path) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := proxy.Close(); err != nil {
			t.Error(err)
		}
	})
	opts := "endpoint=" + proxy.URL() + ",path_style,region=" + v.cfg.Region + ",create,log=info"
	dir := mountpoint(t)
	m := startOutageMount(t, bin, store, opts, env, dir, filepath.Join(t.TempDir(), "mount.log"))
	held := func() bool {
		for _, r := range proxy.InFlight() {
			if isLogPut(r.Method, r.Path) {
				return true
			}
		}
		return false
	}
	killedDuring := 0
	for i := 0; i < 5 && killedDuring == 0; i++ {
		cmd := exec.Command("mkdir", filepath.Join(dir, fmt.Sprintf("d%d", i)))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		deadline := time.After(outageWatchdog)
		waiting := true
		for waiting && !held() {
			select {
			case <-done:
				waiting = false // finished before the kill: try again
			case <-deadline:
				t.Fatal("mkdir's log entry write never reached the proxy")
			case <-time.After(5 * time.Millisecond):
			}
		}
		if !waiting {
			continue
		}
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(outageWatchdog):
			stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", cmd.Process.Pid))
			t.Fatalf("mkdir killed during its change still there after %v; kernel stack:\n%s", outageWatchdog, stack)
		}
		if held() {
			killedDuring++
		}
	}
	if killedDuring == 0 {
		t.Fatal("no killed mkdir ended while its log entry write was held: each waited for the answer (or every delay was too short)")
	}
	// The mount stays consistent and serves: ls works, and the unmount
	// waits for the change that finishes without its caller.
	if out, err := runErr(dir, "ls", dir); err != nil {
		t.Fatalf("ls after the kill: %v: %s", err, out)
	}
	out, err := runErr(dir, "fusermount3", "-u", dir)
	if err != nil {
		t.Fatalf("fusermount3 -u: %v: %s", err, out)
	}
	select {
	case <-m.exited:
	case <-time.After(2 * outageWatchdog):
		t.Fatal("the mount process did not exit after the unmount")
	}
	if m.err != nil {
		t.Errorf("the mount exited with %v", m.err)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// TestFallocatePastMaxSize: fallocate of a range ending past the largest
// file size is EFBIG, as on ext4.
func TestFallocatePastMaxSize(t *testing.T) {
	m := newVolume(t).mount("")
	f, err := os.Create(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct{ off, n int64 }{{1 << 60, 4096}, {1<<60 - 4096, 8192}, {1 << 62, 1}} {
		if err := syscall.Fallocate(int(f.Fd()), 0, c.off, c.n); !errors.Is(err, syscall.EFBIG) {
			t.Errorf("fallocate(%d, %d): %v, want EFBIG", c.off, c.n, err)
		}
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, 4096); err != nil {
		t.Errorf("fallocate(0, 4096): %v", err)
	}
}

// TestOutageDeadline: with the store stalled and its requests' own bounds at
// their defaults (a minute for an answer, two of retries), every call is
// bounded by op_timeout instead: a create, an fsync and the open of a file
// not seen yet answer ETIMEDOUT; a stat and a listing of what the mount has
// seen answer from memory. Once the store answers again nothing is half
// made: a create whose entry was sent either shows, an empty file, or does
// not.
func TestOutageDeadline(t *testing.T) {
	need(t, "fusermount3", "touch", "stat", "ls", "cat")
	bin, store, env, proxy, reach := stallableVolume(t)
	const opTimeout = 3 * time.Second
	opts := reach + ",create,log=info,op_timeout=3s"
	dir := mountpoint(t)
	m := startOutageMount(t, bin, store, opts, env, dir, filepath.Join(t.TempDir(), "mount.log"))
	p := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(p("seen"), []byte("before the outage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p("seen")); err != nil {
		t.Fatal(err)
	}
	dirty, err := os.OpenFile(p("dirty"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer dirty.Close()

	proxy.Stall(true)
	// Far below the store's own bounds (a minute for an answer): a call
	// that took longer than this was not cut by op_timeout.
	const bound = opTimeout + 20*time.Second
	for _, c := range [][]string{{"touch", p("new")}, {"cat", p("dirty")}} {
		out, err, took := runBounded(t, c[0], c[1:]...)
		t.Logf("%v during the outage: %v after %v: %s", c, err, took.Round(time.Millisecond), strings.TrimSpace(out))
		if err == nil || !strings.Contains(out, "timed out") {
			t.Errorf("%v with the store stalled: %v, %q; want ETIMEDOUT", c, err, out)
		}
		if took > bound {
			t.Errorf("%v took %v with op_timeout=%v", c, took, opTimeout)
		}
	}
	if _, err := dirty.Write([]byte("written during the outage")); err != nil {
		t.Fatalf("write during the outage (buffered): %v", err)
	}
	began := time.Now()
	err = dirty.Sync()
	if took := time.Since(began); !errors.Is(err, syscall.ETIMEDOUT) || took > bound {
		t.Errorf("fsync during the outage: %v after %v; want ETIMEDOUT within %v", err, took, bound)
	}
	// Past the mount's and the kernel's caches of attributes: the store is
	// asked, says nothing, and the attributes seen before answer.
	time.Sleep(2 * time.Second)
	for _, c := range [][]string{{"stat", "-c", "%s", p("seen")}, {"ls", "-l", dir}} {
		out, err, took := runBounded(t, c[0], c[1:]...)
		t.Logf("%v during the outage: %v after %v", c, err, took.Round(time.Millisecond))
		if err != nil || !strings.Contains(out, "17") {
			t.Errorf("%v during the outage: %v, %q; want the size seen before (17)", c, err, out)
		}
		if took > bound {
			t.Errorf("%v took %v with op_timeout=%v", c, took, opTimeout)
		}
	}

	proxy.Stall(false)
	if err := dirty.Sync(); err != nil {
		t.Fatalf("fsync once the store answers again: %v", err)
	}
	dirty.Close()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	startOutageMount(t, bin, store, opts, env, dir, filepath.Join(t.TempDir(), "mount2.log"))
	if b, err := os.ReadFile(p("dirty")); err != nil || string(b) != "written during the outage" {
		t.Errorf("dirty after the outage and a remount: %q, %v", b, err)
	}
	// The create that timed out: it landed whole (an empty file) or not at all.
	switch b, err := os.ReadFile(p("new")); {
	case err == nil && len(b) == 0:
		t.Log("the create sent during the outage landed: an empty file")
	case errors.Is(err, os.ErrNotExist):
		t.Log("the create sent during the outage did not land")
	default:
		t.Errorf("new after the outage: %q, %v; want an empty file or none", b, err)
	}
	run(t, "", "fusermount3", "-u", dir)
}
