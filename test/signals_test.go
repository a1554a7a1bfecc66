package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// stormScript calls creat, write, fsync, setxattr, close, rename, unlink,
// mkdir and rmdir through libc (ctypes: Python's own wrappers retry EINTR,
// PEP 475) for a few seconds under SIGALRM every millisecond, with a
// handler that does nothing, installed without SA_RESTART. It prints one
// JSON object: the signals caught, the calls made, and the failures of each
// call by errno name.
const stormScript = `
import ctypes, errno, json, os, signal, sys, time
d, secs = sys.argv[1], float(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
libc.setxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
libc.open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
caught = 0
def handler(s, f):
    global caught
    caught += 1
signal.signal(signal.SIGALRM, handler)
signal.siginterrupt(signal.SIGALRM, True)
calls, failed = 0, {}
def call(name, rc):
    global calls
    calls += 1
    if rc < 0:
        e = ctypes.get_errno()
        k = name + " " + errno.errorcode.get(e, str(e))
        failed[k] = failed.get(k, 0) + 1
    return rc
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
end, i = time.monotonic() + secs, 0
while time.monotonic() < end:
    f = os.path.join(d, "f%d" % i).encode()
    g = os.path.join(d, "g%d" % i).encode()
    sub = os.path.join(d, "d%d" % i).encode()
    fd = call("creat", libc.open(f, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644))
    if fd >= 0:
        call("write", libc.write(fd, b"x" * 4096, 4096))
        call("fsync", libc.fsync(fd))
        call("setxattr", libc.setxattr(f, b"user.k", b"v", 1, 0))
        call("close", libc.close(fd))
        call("rename", libc.rename(f, g))
        call("unlink", libc.unlink(g))
    call("mkdir", libc.mkdir(sub, 0o755))
    call("rmdir", libc.rmdir(sub))
    i += 1
signal.setitimer(signal.ITIMER_REAL, 0, 0)
print(json.dumps({"caught": caught, "calls": calls, "rounds": i, "failed": failed}))
`

type stormResult struct {
	Caught, Calls, Rounds int
	Failed                map[string]int
}

// storm runs stormScript in dir for secs seconds.
func storm(t *testing.T, dir string, secs float64) stormResult {
	t.Helper()
	out, err, took := runBounded(t, "python3", "-c", stormScript, dir, fmt.Sprint(secs))
	if err != nil {
		t.Fatalf("storm: %v\n%s", err, out)
	}
	var r stormResult
	if err := json.Unmarshal([]byte(lastLine(out)), &r); err != nil {
		t.Fatalf("storm output %q: %v", out, err)
	}
	t.Logf("storm of %v: %d signals caught, %d calls in %d rounds, failures %v", took.Round(time.Millisecond), r.Caught, r.Calls, r.Rounds, r.Failed)
	return r
}

// TestSignalStorm: a program that catches a signal every millisecond sees
// its creat, fsync, setxattr, close, rename, unlink, mkdir and rmdir calls
// finish with their real result, never EINTR, as on a local disk: a
// non-fatal signal does not interrupt an operation the store can finish.
func TestSignalStorm(t *testing.T) {
	need(t, "python3")
	m := newVolume(t).mount("")
	r := storm(t, m.dir, 3)
	if r.Caught < 100 || r.Rounds < 5 {
		t.Fatalf("the storm was too weak to show anything: %d signals, %d rounds", r.Caught, r.Rounds)
	}
	for k, n := range r.Failed {
		t.Errorf("%s: %d calls failed", k, n)
	}
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("%d entries left, want none: every name made was removed", len(ents))
	}
}

// holdingStore holds writes of namespace log entries (v1) and of dentries
// (v2, namesWrite) while held is set,
// until release is closed, so that a change waits on the store for as long
// as the test needs.
type holdingStore struct {
	staging.Store
	hold     atomic.Bool
	inFlight atomic.Int32
	release  chan struct{}
}

func (s *holdingStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if s.hold.Load() && namesWrite(key) {
		s.inFlight.Add(1)
		select {
		case <-s.release:
		case <-ctx.Done():
		}
		s.inFlight.Add(-1)
	}
	return s.Store.Put(ctx, key, data, opts)
}

// namesWrite says whether key is written by a change of names: a v1 log
// entry or a v2 dentry (not a v2 lease nor an inode batch's claim, which a
// change may write first).
func namesWrite(key string) bool {
	return strings.Contains(key, "ns/log/") || strings.HasPrefix(key, "ns2/d/") || strings.Contains(key, "/ns2/d/")
}

// TestKilledCallerLeaves: kill -9 of a program whose mkdir waits on the
// store ends it at once, while the store still holds the write, and a
// signal it catches does not (its mkdir waits and succeeds). The change
// then finishes without the killed caller and the mount stays whole.
func TestKilledCallerLeaves(t *testing.T) {
	need(t, "mkdir", "python3")
	hs := &holdingStore{release: make(chan struct{})}
	m := newVolume(t).mountWrapped("", func(st staging.Store) staging.Store { hs.Store = st; return hs })
	hs.hold.Store(true)
	released := false
	release := func() {
		if !released {
			released = true
			hs.hold.Store(false)
			close(hs.release)
		}
	}
	defer release()
	waitHeld := func(done <-chan struct{}) {
		t.Helper()
		deadline := time.After(time.Minute)
		for hs.inFlight.Load() == 0 {
			select {
			case <-done:
				t.Fatal("the program ended before its change reached the store")
			case <-deadline:
				t.Fatal("the change never reached the store")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}

	// A caught signal: the mkdir keeps waiting and succeeds once the store answers.
	caught := exec.Command("python3", "-c", `
import ctypes, signal, sys
signal.signal(signal.SIGUSR1, lambda s, f: None)
signal.siginterrupt(signal.SIGUSR1, True)
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.mkdir(sys.argv[1].encode(), 0o755)
e = ctypes.get_errno()
signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # later signals: not fatal at exit
print(rc, e)
`, m.path("caught"))
	var cout strings.Builder
	caught.Stdout, caught.Stderr = &cout, &cout
	if err := caught.Start(); err != nil {
		t.Fatal(err)
	}
	cdone := make(chan error, 1)
	go func() { cdone <- caught.Wait() }()
	waitHeld(nil)
	for i := 0; i < 20; i++ {
		_ = caught.Process.Signal(syscall.SIGUSR1)
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-cdone:
		t.Fatalf("mkdir with signals caught returned while the store held its change: %v %s", err, cout.String())
	default:
	}
	hs.hold.Store(false)
	close(hs.release)
	released = true
	if err := <-cdone; err != nil || strings.TrimSpace(cout.String()) != "0 0" {
		t.Fatalf("mkdir under signals: %v, printed %q, want \"0 0\"", err, cout.String())
	}

	// kill -9: the program is gone while the store still holds the write.
	// On v2 the interrupt cancels the change's request instead: its Tree
	// does not ask namespace.WithGone whether the caller is killed.
	skipOnV2(t, "a killed caller's change finishing without it (namespace.WithGone)")
	hs.release = make(chan struct{})
	released = false
	hs.hold.Store(true)
	killedDir := m.path("killed")
	cmd := exec.Command("mkdir", killedDir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	waitHeld(done)
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(time.Minute):
		stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", cmd.Process.Pid))
		t.Fatalf("mkdir killed during its change still there after a minute; kernel stack:\n%s", stack)
	}
	if hs.inFlight.Load() == 0 {
		t.Fatal("the store answered before the killed mkdir ended: nothing shown")
	}
	release()
	// The change finishes without its caller: the directory appears.
	deadline := time.Now().Add(time.Minute)
	for {
		if fi, err := os.Stat(killedDir); err == nil && fi.IsDir() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed caller's mkdir never landed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.ReadDir(m.dir); err != nil {
		t.Fatal(err)
	}
}

// inFUSE says whether process pid is blocked in a request to a FUSE
// filesystem (its kernel stack, readable by root, or its wait channel).
func inFUSE(pid int) bool {
	for _, f := range []string{"stack", "wchan"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if strings.Contains(string(b), "request_wait_answer") || strings.Contains(string(b), "fuse_simple_request") {
			return true
		}
	}
	return false
}

// TestCaughtSignalWhileQueued: a mkdir queued behind another change that
// the store holds, whose program catches signals meanwhile, succeeds once
// the store answers; with -o intr the first signal fails it with EINTR and
// the directory is not made (the change was only queued).
func TestCaughtSignalWhileQueued(t *testing.T) {
	need(t, "mkdir", "python3")
	for _, tc := range []struct {
		opts, want string
		made       bool
	}{{"", "0 0", true}, {"intr", "-1 4", false}} {
		t.Run("opts="+tc.opts, func(t *testing.T) {
			hs := &holdingStore{release: make(chan struct{})}
			// v1 whatever CKPTFS_TEST_NAMESPACE says: v1's changes queue
			// behind one another for its log; v2's go out at once.
			m := newVolume(t).mountWrapped("namespace=v1,"+tc.opts, func(st staging.Store) staging.Store { hs.Store = st; return hs })
			// The second mkdir is in another directory: the kernel holds
			// a directory's lock across a mkdir in it.
			if err := os.Mkdir(m.path("a"), 0o755); err != nil {
				t.Fatal(err)
			}
			hs.hold.Store(true)
			released := false
			release := func() {
				if !released {
					released = true
					hs.hold.Store(false)
					close(hs.release)
				}
			}
			defer release()
			// The first change: its log entry is held by the store.
			first := exec.Command("mkdir", m.path("first"))
			if err := first.Start(); err != nil {
				t.Fatal(err)
			}
			fdone := make(chan error, 1)
			go func() { fdone <- first.Wait() }()
			deadline := time.After(time.Minute)
			for hs.inFlight.Load() == 0 {
				select {
				case err := <-fdone:
					t.Fatalf("the first mkdir ended before its change reached the store: %v", err)
				case <-deadline:
					t.Fatal("the first change never reached the store")
				case <-time.After(5 * time.Millisecond):
				}
			}
			// The second waits in the queue; it catches SIGUSR1.
			second := exec.Command("python3", "-c", `
import ctypes, signal, sys
signal.signal(signal.SIGUSR1, lambda s, f: None)
signal.siginterrupt(signal.SIGUSR1, True)
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.mkdir(sys.argv[1].encode(), 0o755)
e = ctypes.get_errno()
signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # later signals: not fatal at exit
print(rc, e)
`, m.path("a/second"))
			var out strings.Builder
			second.Stdout, second.Stderr = &out, &out
			if err := second.Start(); err != nil {
				t.Fatal(err)
			}
			sdone := make(chan error, 1)
			go func() { sdone <- second.Wait() }()
			deadline = time.After(time.Minute)
			for !inFUSE(second.Process.Pid) {
				select {
				case err := <-sdone:
					t.Fatalf("the second mkdir ended before it waited on the mount: %v %s", err, out.String())
				case <-deadline:
					stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", second.Process.Pid))
					t.Fatalf("the second mkdir never waited on the mount; kernel stack:\n%s", stack)
				case <-time.After(5 * time.Millisecond):
				}
			}
			// Signals while it waits: with intr, it ends with EINTR;
			// without, it is still waiting after every one.
			var err error
			ended := false
			for i := 0; i < 20 && !ended; i++ {
				_ = second.Process.Signal(syscall.SIGUSR1)
				select {
				case err = <-sdone:
					ended = true
				case <-time.After(10 * time.Millisecond):
				}
			}
			if ended != (tc.opts == "intr") {
				t.Fatalf("ended while the store held the first change: %v, want %v (%s)", ended, tc.opts == "intr", out.String())
			}
			release()
			if !ended {
				err = <-sdone
			}
			if err != nil || strings.TrimSpace(out.String()) != tc.want {
				t.Fatalf("second mkdir: %v, printed %q, want %q", err, out.String(), tc.want)
			}
			if err := <-fdone; err != nil {
				t.Fatalf("first mkdir: %v", err)
			}
			_, serr := os.Stat(m.path("a/second"))
			if (serr == nil) != tc.made {
				t.Errorf("second directory made: %v, want %v", serr == nil, tc.made)
			}
		})
	}
}
