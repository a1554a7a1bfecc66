package test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging/s3test"
)

// TestOpsLogReopen: a detached mount with log_file survives SIGHUP and
// reopens the file by name, so that after logrotate renamed it the rest of
// the log (here the unmount) goes to a new file at the old name.
func TestOpsLogReopen(t *testing.T) {
	need(t, "fusermount3")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	dir := mountpoint(t)
	logDir := t.TempDir()
	logFile := filepath.Join(logDir, "ckptfs.log")
	cmd := exec.Command(bin, "mount", "-o", withNamespace(opts)+",log=info,log_file="+logFile, store, dir)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ckptfs mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if isMounted(t, dir) {
			runErr("", "fusermount3", "-u", dir)
		}
	})
	var pid int
	waitFor(t, 30*time.Second, func() error {
		b, _ := os.ReadFile(logFile)
		m := regexp.MustCompile(`"pid": (\d+)`).FindSubmatch(b)
		if m == nil {
			return errors.New("the log names no pid yet")
		}
		pid, _ = strconv.Atoi(string(m[1]))
		return nil
	})
	run(t, dir, "sh", "-c", "echo before > a")

	rotated := logFile + ".1"
	if err := os.Rename(logFile, rotated); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP to the mount (pid %d): %v", pid, err)
	}
	waitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(logFile)
		if err != nil || !strings.Contains(string(b), "log file reopened") {
			return errors.New("no new log file yet")
		}
		return nil
	})
	if !isMounted(t, dir) {
		t.Fatal("the mount ended on SIGHUP")
	}
	if got := run(t, dir, "sh", "-c", "echo after > b && cat a b"); got != "before\nafter\n" {
		t.Fatalf("after SIGHUP the mount reads %q", got)
	}
	run(t, "", "fusermount3", "-u", dir)
	waitFor(t, 30*time.Second, func() error {
		if syscall.Kill(pid, 0) == nil {
			return errors.New("the mount process is still running")
		}
		return nil
	})
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(rotated)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "unmounted") {
		t.Fatalf("the new log file has no unmount line:\n%s", b)
	}
	if strings.Contains(string(old), "unmounted") || !strings.Contains(string(old), "mounted") {
		t.Fatalf("the rotated file is not the log up to SIGHUP:\n%s", old)
	}
	e, _ := s3test.Shared()
	for _, f := range [][]byte{b, old} {
		if e.SecretKey != "" && strings.Contains(string(f), e.SecretKey) {
			t.Fatalf("the log holds the secret key:\n%s", f)
		}
	}
}

// TestOpsNoSyslog: a detached mount without log_file on a machine without
// /dev/log (a container) logs to /var/log/ckptfs.log when it may (root), and
// says why in one info line there, not in a warning at every mount; when it
// may not, it says before detaching that its log is discarded.
func TestOpsNoSyslog(t *testing.T) {
	need(t, "fusermount3")
	if _, err := os.Stat("/dev/log"); err == nil {
		t.Skip("this machine has a system log")
	}
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	dir := mountpoint(t)
	cmd := exec.Command(bin, "mount", "-o", withNamespace(opts), store, dir)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ckptfs mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if isMounted(t, dir) {
			runErr("", "fusermount3", "-u", dir)
		}
	})
	run(t, "", "fusermount3", "-u", dir)
	if os.Geteuid() != 0 {
		if !strings.Contains(string(out), "warning: no system log") || !strings.Contains(string(out), "log is discarded") ||
			!strings.Contains(string(out), "log_file=PATH") {
			t.Fatalf("no warning that the log is discarded:\n%s", out)
		}
		return
	}
	// Root may write /var/log: the log goes there, with a note of why,
	// mounted and unmounted; the terminal is told nothing.
	if len(out) != 0 {
		t.Fatalf("the mount printed\n%s\nwant nothing: the log goes where --help says", out)
	}
	note := "info\tckptfs\tno journal and no system log (/dev/log): logging to /var/log/ckptfs.log; -o log_file=PATH chooses another file\n"
	waitFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile("/var/log/ckptfs.log")
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), dir) || !strings.Contains(string(b), "unmounted") || !strings.Contains(string(b), note) {
			return fmt.Errorf("/var/log/ckptfs.log has no note, or no mounted and unmounted lines of %s", dir)
		}
		return nil
	})
}

// TestOpsLogrotate: the package's logrotate file (scripts/package/logrotate,
// /etc/logrotate.d/ckptfs) rotates a detached mount's log_file with
// copytruncate, no signal: what was logged before is in the rotated file,
// and the mount's next lines start the emptied one (the log is opened
// O_APPEND: no hole of the old length before them).
func TestOpsLogrotate(t *testing.T) {
	need(t, "fusermount3", "logrotate")
	conf, err := os.ReadFile(filepath.Join(repoRoot(t), "scripts", "package", "logrotate"))
	if err != nil {
		t.Fatal(err)
	}
	const paths = "/var/log/ckptfs.log /var/log/ckptfs/*.log {"
	if !strings.Contains(string(conf), paths) {
		t.Fatalf("scripts/package/logrotate has no %q", paths)
	}
	work := t.TempDir()
	logFile := filepath.Join(work, "ckptfs.log")
	confFile := filepath.Join(work, "logrotate.conf")
	if err := os.WriteFile(confFile, []byte(strings.Replace(string(conf), paths, logFile+" {", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := mountpoint(t)
	if out, err := runErr("", ckptfsBinary(t), "mount", "-o", withNamespace("create")+",log=info,log_file="+logFile, "file://"+filepath.Join(work, "store"), dir); err != nil {
		t.Fatalf("ckptfs mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if isMounted(t, dir) {
			runErr("", "fusermount3", "-u", dir)
		}
	})
	waitFor(t, 30*time.Second, func() error {
		if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "\tmounted\t") {
			return errors.New("the log does not say mounted yet")
		}
		return nil
	})
	if out, err := runErr("", "logrotate", "-f", "-s", filepath.Join(work, "state"), confFile); err != nil {
		t.Fatalf("logrotate: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(logFile + ".1"); err != nil || !strings.Contains(string(b), "\tmounted\t") {
		t.Fatalf("the rotated log %s.1: %v\n%s", logFile, err, b)
	}
	run(t, "", "fusermount3", "-u", dir)
	waitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(logFile)
		if err != nil || !strings.Contains(string(b), "\tunmounted\t") {
			return errors.New("the log after rotation does not say unmounted yet")
		}
		if b[0] == 0 || strings.Contains(string(b), "\tmounted\t") {
			t.Fatalf("the log after rotation:\n%q\nwant only what came after it, from its first byte", b)
		}
		return nil
	})
}
