package test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fgMount is a `ckptfs mount -f` process; exited is closed once it was
// waited for, and cmd.ProcessState may be read then; stderr is what it wrote
// there, readable while it runs.
type fgMount struct {
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *lockedText
}

// unmountAtEnd detaches whatever is still mounted at dir (a mount killed
// by the test, or stacked) when the test ends.
func unmountAtEnd(t *testing.T, dir string) {
	t.Cleanup(func() {
		for i := 0; i < 3 && isMounted(t, dir); i++ {
			runErr("", "umount", "-l", dir)
		}
	})
}

// startForeground runs `ckptfs mount -f` of a file:// store and waits until
// dir is mounted.
func startForeground(t *testing.T, store, dir, opts string) fgMount {
	t.Helper()
	return startForegroundWith(t, store, dir, opts, nil, func() error {
		if !isMounted(t, dir) {
			return errors.New("not mounted yet")
		}
		return nil
	})
}

// startForegroundWith is startForeground with env as the mount's whole
// environment (nil: this process's) and ready saying when it serves (a dead
// mount at dir is in the mount table already).
func startForegroundWith(t *testing.T, store, dir, opts string, env []string, ready func() error) fgMount {
	t.Helper()
	m := fgMount{cmd: exec.Command(ckptfsBinary(t), "mount", "-f", "-o", withNamespace(opts), store, dir),
		exited: make(chan struct{}), stderr: &lockedText{}}
	m.cmd.Env = env
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.cmd.Wait(); close(m.exited) }()
	t.Cleanup(func() {
		m.cmd.Process.Kill()
		<-m.exited
	})
	waitFor(t, 30*time.Second, func() error {
		select {
		case <-m.exited:
			t.Fatalf("ckptfs mount -o %s exited: %v: %s", opts, m.cmd.ProcessState, m.stderr.String())
		default:
		}
		return ready()
	})
	return m
}

// TestMountOptsAutoUnmount: after kill -9 of the mount process, a mount made
// with auto_unmount is gone (fusermount3's watcher unmounted it) and the
// directory is usable; without it the mount point is left "Transport endpoint
// is not connected" (ENOTCONN) until someone unmounts it.
func TestMountOptsAutoUnmount(t *testing.T) {
	need(t, "fusermount3")
	store := "file://" + t.TempDir()
	for _, tt := range []struct {
		opts   string
		cleans bool
	}{{"auto_unmount", true}, {"", false}} {
		t.Run(tt.opts, func(t *testing.T) {
			dir := mountpoint(t)
			unmountAtEnd(t, dir)
			cmd := startForeground(t, store, dir, "create,log=warn,"+tt.opts).cmd
			if err := os.WriteFile(filepath.Join(dir, "f-"+tt.opts), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if tt.cleans {
				waitFor(t, 10*time.Second, func() error {
					if isMounted(t, dir) {
						return errors.New("still mounted after kill -9")
					}
					return nil
				})
				if _, err := os.ReadDir(dir); err != nil {
					t.Fatalf("mount point after kill -9: %v", err)
				}
				return
			}
			// The contrast: the dead mount stays, and fails every access.
			waitFor(t, 10*time.Second, func() error {
				_, err := os.Stat(filepath.Join(dir, "f-"))
				if !errors.Is(err, syscall.ENOTCONN) {
					return fmt.Errorf("stat: %v, want ENOTCONN", err)
				}
				return nil
			})
			if !isMounted(t, dir) {
				t.Fatal("not mounted after kill -9 without auto_unmount")
			}
		})
	}
}

// TestMountOptsAutoUnmountSIGTERM: a mount made with auto_unmount still
// unmounts itself on SIGTERM, flushing what was written, and exits 0.
func TestMountOptsAutoUnmountSIGTERM(t *testing.T) {
	need(t, "fusermount3")
	store := "file://" + t.TempDir()
	dir := mountpoint(t)
	m := startForeground(t, store, dir, "create,auto_unmount")
	// Written and not closed by an fsync: the unmount must flush it.
	run(t, dir, "sh", "-c", "echo late > late")
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("mount process still running 30s after SIGTERM")
	}
	if !m.cmd.ProcessState.Success() {
		t.Fatalf("mount process after SIGTERM: %v", m.cmd.ProcessState)
	}
	if isMounted(t, dir) {
		t.Fatal("still mounted after SIGTERM")
	}
	startForeground(t, store, dir, "auto_unmount")
	if b, err := os.ReadFile(filepath.Join(dir, "late")); err != nil || string(b) != "late\n" {
		t.Fatalf("late: %q, %v", b, err)
	}
	run(t, "", "fusermount3", "-u", dir)
}

// installHelper makes /sbin/mount.ckptfs a link to the built binary, where
// mount(8) looks for helpers, for the length of the test. A helper already
// there (not ours) skips the test rather than be replaced.
func installHelper(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("installing /sbin/mount.ckptfs needs root")
	}
	need(t, "mount", "umount")
	const helper = "/sbin/mount.ckptfs"
	if _, err := os.Lstat(helper); err == nil {
		t.Skipf("%s exists already", helper)
	}
	if err := os.Symlink(ckptfsBinary(t), helper); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(helper) })
}

// TestMountOptsFstab: an fstab line with ckptfs as its type mounts through
// mount(8) and its helper mount.ckptfs, with the generic and systemd options
// such lines carry, and those options reach the kernel (noexec).
func TestMountOptsFstab(t *testing.T) {
	installHelper(t)
	store := "file://" + t.TempDir()
	dir := mountpoint(t)
	unmountAtEnd(t, dir)
	fstab := filepath.Join(t.TempDir(), "fstab")
	line := store + " " + dir + " ckptfs _netdev,nofail,x-systemd.automount,noexec," + withNamespace("create") + ",log_file=" +
		filepath.Join(t.TempDir(), "log") + " 0 0\n"
	if err := os.WriteFile(fstab, []byte("# test fstab\n"+line), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "", "mount", "-T", fstab, dir)
	if !isMounted(t, dir) {
		t.Fatal("mount -T fstab returned 0 but nothing is mounted")
	}
	mi := mountInfo(t, dir)
	if !strings.Contains(mi, "fuse.ckptfs") || !strings.Contains(mi, "noexec") {
		t.Fatalf("mountinfo of %s: %q, want fuse.ckptfs and noexec", dir, mi)
	}
	run(t, dir, "sh", "-c", "echo hello > greeting")
	run(t, "", "umount", dir)
	if isMounted(t, dir) {
		t.Fatal("still mounted after umount")
	}

	// mount -a -T mounts every line; the data written above is there.
	run(t, "", "mount", "-a", "-T", fstab)
	waitFor(t, 10*time.Second, func() error {
		if !isMounted(t, dir) {
			return errors.New("mount -a -T: not mounted")
		}
		return nil
	})
	if b, err := os.ReadFile(filepath.Join(dir, "greeting")); err != nil || string(b) != "hello\n" {
		t.Fatalf("greeting after mount -a: %q, %v", b, err)
	}
	run(t, "", "umount", dir)
}

// TestMountOptsHelper: mount.ckptfs run the way mount(8) runs a helper,
// STORE DIR with -n -s -v and -o, mounts and detaches.
func TestMountOptsHelper(t *testing.T) {
	helper := filepath.Join(t.TempDir(), "mount.ckptfs")
	if err := os.Symlink(ckptfsBinary(t), helper); err != nil {
		t.Fatal(err)
	}
	store := "file://" + t.TempDir()
	dir := mountpoint(t)
	t.Cleanup(func() {
		if isMounted(t, dir) {
			runErr("", "fusermount3", "-u", dir)
		}
	})
	run(t, "", helper, store, dir, "-n", "-s", "-v", "-o", withNamespace("rw,nodev,nosuid,_netdev,nofail,x-systemd.device-timeout=10s,create")+",uid=4321")
	if !isMounted(t, dir) {
		t.Fatal("mount.ckptfs returned 0 but nothing is mounted")
	}
	if got := statUGA(t, dir); !strings.HasPrefix(got[0], "4321:") {
		t.Fatalf("stat of the root with uid=4321: %v", got)
	}
	run(t, "", "fusermount3", "-u", dir)

	// nonempty is refused with the reason, before anything is mounted.
	out, err := runErr("", helper, store, dir, "-o", "nonempty")
	if err == nil || !strings.Contains(out, "nonempty") || !strings.Contains(out, "not supported") {
		t.Fatalf("mount.ckptfs -o nonempty: %v\n%s", err, out)
	}
	if isMounted(t, dir) {
		t.Fatal("mounted with -o nonempty")
	}
}

// mountInfo is the /proc/self/mountinfo line of dir.
func mountInfo(t testing.TB, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return line
		}
	}
	return ""
}

// TestMountNoPath: mount(8) runs mount.ckptfs with the environment it was
// given, and an fstab mount at boot (or `env -i mount -a`) gives no PATH.
// The mount must find fusermount3 and unmount without one: an fstab line
// with auto_unmount mounts, and kill -9 of its process still unmounts it; a
// mount process started with an empty environment unmounts on SIGTERM while
// a file in it is held open (lazily, then exits once the file is closed).
func TestMountNoPath(t *testing.T) {
	need(t, "fusermount3")
	t.Run("fstab auto_unmount", func(t *testing.T) {
		installHelper(t)
		mount, err := exec.LookPath("mount")
		if err != nil {
			t.Fatal(err)
		}
		store := "file://" + t.TempDir()
		dir := mountpoint(t)
		unmountAtEnd(t, dir)
		fstab := filepath.Join(t.TempDir(), "fstab")
		line := store + " " + dir + " ckptfs " + withNamespace("create") + ",auto_unmount,log_file=" + filepath.Join(t.TempDir(), "log") + " 0 0\n"
		if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, "", "env", "-i", mount, "-a", "-T", fstab)
		waitFor(t, 10*time.Second, func() error {
			if !isMounted(t, dir) {
				return errors.New("env -i mount -a: not mounted")
			}
			return nil
		})
		run(t, dir, "sh", "-c", "echo hello > greeting")
		pid := mountProcess(t, dir)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() error {
			if isMounted(t, dir) {
				return errors.New("still mounted after kill -9 of a mount made with auto_unmount")
			}
			return nil
		})
	})
	t.Run("busy SIGTERM", func(t *testing.T) {
		store := "file://" + t.TempDir()
		dir := mountpoint(t)
		unmountAtEnd(t, dir)
		// No PATH, nothing at all in the environment.
		m := startForegroundWith(t, store, dir, "create,log=warn", []string{}, func() error {
			if !isMounted(t, dir) {
				return errors.New("not mounted yet")
			}
			return nil
		})
		cmd, exited, stderr := m.cmd, m.exited, m.stderr
		if err := os.WriteFile(filepath.Join(dir, "held"), []byte("held\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		held, err := os.Open(filepath.Join(dir, "held"))
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		// The busy mount is detached at once; the process waits for the
		// file held open.
		waitFor(t, 30*time.Second, func() error {
			if isMounted(t, dir) {
				return fmt.Errorf("still mounted after SIGTERM with a file held open; stderr: %s", stderr.String())
			}
			return nil
		})
		if b, err := io.ReadAll(held); err != nil || string(b) != "held\n" {
			t.Fatalf("read of the held file after the lazy unmount: %q, %v", b, err)
		}
		held.Close()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatal("mount process still running 30s after its last file was closed")
		}
		if !cmd.ProcessState.Success() {
			t.Fatalf("mount process after SIGTERM: %v; stderr: %s", cmd.ProcessState, stderr.String())
		}
	})
}

// mountProcess is the pid of the ckptfs process serving dir (not the
// fusermount3 that auto_unmount keeps beside it).
func mountProcess(t *testing.T, dir string) int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if !strings.Contains(filepath.Base(args[0]), "ckptfs") || !slices.Contains(args, dir) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil {
			return pid
		}
	}
	t.Fatalf("no ckptfs process serves %s", dir)
	return 0
}

// lockedText keeps a process's output; it may be read while the process
// still writes it.
type lockedText struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedText) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedText) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
