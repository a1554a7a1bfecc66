package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// nsWriter is the program TestWALLeasePIDNamespace runs inside a new PID
// namespace, after the mount: argv: mount dir. It appends 64 KiB to file f
// for each "w" on stdin and prints "ack <end>" (or "err <errno>"); on "q"
// it closes f, unmounts and exits.
const nsWriter = `
import os, subprocess, sys

d = sys.argv[1]
fd = os.open(os.path.join(d, 'f'), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
off = 0
for line in sys.stdin:
    cmd = line.strip()
    if cmd == 'w':
        try:
            os.pwrite(fd, bytes([off // 65536 + 1]) * 65536, off)
            off += 65536
            print('ack', off, flush=True)
        except OSError as e:
            print('err', e.errno, flush=True)
    elif cmd == 'q':
        try:
            os.close(fd)
            print('closed', flush=True)
        except OSError as e:
            print('err', e.errno, flush=True)
        subprocess.run(['fusermount3', '-u', d])
        break
`

// TestWALLeasePIDNamespace: a mount with wal=on run under
// unshare -p -f --mount-proc (its pid means nothing outside) writes a file;
// a mount outside, on the same host and boot, cannot take its lease: its
// write fails with EBUSY, a stat does not replay, and the inner writer's
// next write goes through. Both writes of the inner writer are kept.
func TestWALLeasePIDNamespace(t *testing.T) {
	need(t, "unshare", "python3", "fusermount3")
	if out, err := runErr("", "unshare", "-p", "-f", "--mount-proc", "true"); err != nil {
		t.Skipf("cannot make a PID namespace here: %v %s", err, out)
	}
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	dir := mountpoint(t)
	logPath := filepath.Join(t.TempDir(), "inner.log")

	// The inner shell mounts (the daemon detaches inside the namespace, whose
	// mounts are its own) and becomes the writer; when it exits the namespace
	// ends with it.
	inner := exec.Command("unshare", "-p", "-f", "--kill-child", "--mount-proc", "sh", "-c",
		`"$0" mount -o "$1" "$2" "$3" && exec python3 -c "$4" "$3"`,
		bin, opts+",wal=on,log=debug,log_file="+logPath, store, dir, nsWriter)
	inner.Env = env
	stdin, err := inner.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := inner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A file, not a buffer: Wait would wait for every process that holds
	// the descriptor.
	errPath := filepath.Join(t.TempDir(), "inner.stderr")
	ef, err := os.Create(errPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	inner.Stderr = ef
	stderr := func() string { b, _ := os.ReadFile(errPath); return string(b) }
	if err := inner.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	exited := make(chan struct{}) // closed when the inner command ended, with waitErr
	var waitErr error
	go func() { waitErr = inner.Wait(); close(exited) }()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("inner mount's log:\n%s\ninner stderr:\n%s", b, stderr())
		}
		select {
		case <-exited:
		default:
			_ = inner.Process.Kill() // --kill-child: the namespace dies with it
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				t.Errorf("the inner mount did not exit within 30s of SIGKILL")
			}
		}
	})
	// say sends a command to the writer and returns its answer.
	say := func(cmd string) string {
		t.Helper()
		if _, err := fmt.Fprintln(stdin, cmd); err != nil {
			t.Fatalf("send %q to the inner writer: %v\n%s", cmd, err, stderr())
		}
		select {
		case l, ok := <-lines:
			if !ok {
				<-exited
				t.Fatalf("the inner writer exited: %v\n%s", waitErr, stderr())
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatalf("no answer to %q from the inner writer", cmd)
		}
		return ""
	}
	if got := say("w"); got != "ack 65536" {
		t.Fatalf("inner first write: %q", got)
	}

	// The lease names the inner writer, in its own PID namespace.
	st := v.store()
	_, owners := walKeys(t, st)
	if len(owners) != 1 {
		t.Fatalf("leases %v, want one", owners)
	}
	readOwner := func() map[string]any {
		t.Helper()
		b, _, err := staging.GetLimited(context.Background(), st, owners[0], 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		var o map[string]any
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatalf("owner %q: %v", b, err)
		}
		return o
	}
	before := readOwner()
	var ns syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &ns); err != nil {
		t.Fatal(err)
	}
	if n, _ := before["pidns"].(float64); n == 0 || uint64(n) == ns.Ino {
		t.Fatalf("inner lease %v: want the pid namespace of the inner mount, not ours (%d)", before, ns.Ino)
	}

	// Outside: a stat and a write of the file, by a mount with the WAL.
	out := v.mount("wal=on,ns_refresh=100ms")
	var fb *os.File
	waitFor(t, 20*time.Second, func() error {
		var err error
		fb, err = os.OpenFile(out.path("f"), os.O_WRONLY, 0)
		return err
	})
	defer fb.Close()
	if _, err := os.Stat(out.path("f")); err != nil {
		t.Fatalf("stat from outside: %v", err)
	}
	if _, err := fb.WriteAt([]byte("outside"), 0); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("write from outside while the inner mount holds the lease: %v, want EBUSY", err)
	}
	if after := readOwner(); after["writer"] != before["writer"] {
		t.Fatalf("the lease was taken: %v, before %v", after, before)
	}

	// The inner writer goes on.
	if got := say("w"); got != "ack 131072" {
		t.Fatalf("inner write after the outside attempts: %q", got)
	}
	if got := say("q"); got != "closed" {
		t.Fatalf("inner close: %q", got)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("inner: %v\n%s", waitErr, stderr())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the inner writer did not exit after q")
	}
	fb.Close()
	out.unmount()
	check := v.mount("")
	got, err := os.ReadFile(check.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Repeat([]byte{1}, 65536), bytes.Repeat([]byte{2}, 65536)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("f after the inner writer closed it: %d bytes, want the inner writer's %d (first bytes %q)",
			len(got), len(want), got[:min(len(got), 16)])
	}
	if strings.Contains(stderr(), "took over") {
		t.Fatalf("inner stderr: %s", stderr())
	}
}
