package test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
)

// attrScript creates a file, writes it, then on each line of stdin sets
// attributes on the open descriptor as tar -x does (futimens, fchown,
// fchmod; each error of the last two printed) and answers "ok", and at EOF
// closes it and prints "closed" or the close's error.
const attrScript = `
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, b"payload")
print("created", flush=True)
for line in sys.stdin:
    os.utime(fd, ns=(1_500_000_000 * 10**9, 1_600_000_000 * 10**9))
    for name, call in (("fchown", lambda: os.fchown(fd, 7, 8)), ("fchmod", lambda: os.fchmod(fd, 0o640))):
        try:
            call()
        except OSError as e:
            print(name + ":", e.errno, flush=True)
    print("ok", flush=True)
try:
    os.close(fd)
    print("closed", flush=True)
except OSError as e:
    print("close:", e.errno, flush=True)
`

// attrRun runs attrScript on path: step is called once the file is created,
// and returns whether the attributes are then set; the output lines after
// "created" are returned.
func attrRun(t *testing.T, path string, step func() bool) []string {
	t.Helper()
	cmd := exec.Command("python3", "-c", attrScript, path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(outp)
	line, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "created" {
		t.Fatalf("script: %q, %v", line, err)
	}
	if step() {
		io.WriteString(in, "go\n")
	}
	in.Close()
	var out []string
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			out = append(out, strings.TrimSpace(line))
		}
		if err != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("script: %v (output %q)", err, out)
	}
	return out
}

func statOf(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

// The attributes a program sets on the file it writes are shown at once and
// are in the store once its close returns, as another mount shows.
func TestAttrsOfOpenFileLandByClose(t *testing.T) {
	need(t, "python3")
	v := newVolume(t)
	m := v.mount("")
	out := attrRun(t, m.path("f"), func() bool { return true })
	if len(out) != 2 || out[0] != "ok" || out[1] != "closed" {
		t.Fatalf("script printed %q", out)
	}
	check := func(where, path string) {
		t.Helper()
		st := statOf(t, path)
		if st.Mode&0o7777 != 0o640 || st.Uid != 7 || st.Gid != 8 || st.Mtim.Sec != 1_600_000_000 {
			t.Fatalf("%s: mode %o uid %d gid %d mtime %d; want 0640 7 8 1600000000", where, st.Mode&0o7777, st.Uid, st.Gid, st.Mtim.Sec)
		}
	}
	check("this mount", m.path("f"))
	other := v.mount("")
	check("another mount", other.path("f"))
	if b, err := os.ReadFile(other.path("f")); err != nil || string(b) != "payload" {
		t.Fatalf("another mount reads %q, %v", b, err)
	}
}

// A change of attributes that cannot land fails: a change of owner or mode
// at once (it is never deferred), a change of times the close that waits
// for it; none is shown afterwards.
func TestAttrsOfOpenFileFailureFailsClose(t *testing.T) {
	need(t, "python3")
	v := newVolume(t)
	var faults *faulty.Store
	// v1 whatever CKPTFS_TEST_NAMESPACE says: its times land with its log
	// after the call (deferred to the close); v2 writes each change at once.
	m := v.mountWrapped("namespace=v1,s3_request_timeout=1s,s3_retry_max_time=1s", func(st staging.Store) staging.Store {
		faults = faulty.New(st, 1)
		return faults
	})
	out := attrRun(t, m.path("f"), func() bool {
		// The namespace log refuses every entry from now on: the file is
		// created, its attribute changes cannot land.
		faults.Add(faulty.Rule{Op: staging.OpPut, Match: func(key string) bool { return strings.Contains(key, "/ns/log/") || strings.HasPrefix(key, "ns/log/") }, Kind: faulty.Error})
		return true
	})
	faults.Clear()
	if len(out) != 4 || !strings.HasPrefix(out[0], "fchown: ") || !strings.HasPrefix(out[1], "fchmod: ") ||
		out[2] != "ok" || !strings.HasPrefix(out[3], "close: ") {
		t.Fatalf("script printed %q; want fchown and fchmod failed, the times set, then a failed close", out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := statOf(t, m.path("f"))
		if st.Mode&0o7777 == 0o600 && st.Uid != 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the failed close: mode %o uid %d; want the attributes as created (0600, not 7)", st.Mode&0o7777, st.Uid)
		}
		time.Sleep(100 * time.Millisecond) // the kernel's attribute cache
	}
	if b, err := os.ReadFile(m.path("f")); err != nil || string(b) != "payload" {
		t.Fatalf("the data reads %q, %v", b, err)
	}
}

// TestCtimeFollowsChanges: st_ctime moves with every change of the file, its
// data included (a write changes mtime and ctime, POSIX), and never falls
// behind st_mtime unless a program set the mtime ahead.
func TestCtimeFollowsChanges(t *testing.T) {
	need(t, "dd", "touch", "chmod")
	v := newVolume(t)
	m := v.mount("")
	path := m.path("f")
	times := func(what string) (mtime, ctime int64) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		mtime, ctime = st.Mtim.Nano(), st.Ctim.Nano()
		t.Logf("%s: mtime %d, ctime %d", what, mtime, ctime)
		return mtime, ctime
	}
	if err := os.WriteFile(path, []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, c0 := times("created")
	time.Sleep(20 * time.Millisecond)
	run(t, m.dir, "dd", "if=/dev/zero", "of=f", "bs=4k", "count=1", "seek=1", "conv=notrunc,fsync", "status=none")
	m1, c1 := times("written")
	if c1 <= c0 || c1 < m1 {
		t.Fatalf("after a write: ctime %d (before: %d), mtime %d; want ctime past the old one and not behind mtime", c1, c0, m1)
	}
	time.Sleep(20 * time.Millisecond)
	run(t, m.dir, "chmod", "600", "f")
	m2, c2 := times("chmod")
	if c2 <= c1 || m2 != m1 {
		t.Fatalf("after chmod: ctime %d (before: %d), mtime %d (before: %d); want ctime moved, mtime kept", c2, c1, m2, m1)
	}
	run(t, m.dir, "touch", "-m", "-d", "2001-01-01 00:00:00 UTC", "f")
	m3, c3 := times("mtime set into the past")
	if m3 != time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() || c3 <= c2 {
		t.Fatalf("after touch -m -d 2001: mtime %d, ctime %d (before: %d)", m3, c3, c2)
	}
	time.Sleep(20 * time.Millisecond)
	run(t, m.dir, "dd", "if=/dev/zero", "of=f", "bs=4k", "count=1", "conv=notrunc,fsync", "status=none")
	m4, c4 := times("written again")
	if m4 <= c3 || c4 < m4 {
		t.Fatalf("after a write: mtime %d, ctime %d (the set before: %d); want both at the write", m4, c4, c3)
	}
}
