package test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountPointInUse: a second `ckptfs mount` on a directory that is
// already a mount point (named directly, or through a symlink) is refused
// with exit status 1 and a line saying how to unmount, and the first mount
// still serves.
func TestMountPointInUse(t *testing.T) {
	store := "file://" + t.TempDir()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	unmountAtEnd(t, dir)
	first := startForeground(t, store, dir, "create,log=warn")
	// While the first mount is empty: a mount point that is not empty is
	// refused anyway, but an empty one was stacked on. A second mount that
	// is not refused stays in the foreground: the bound ends it.
	for _, at := range []string{dir, link} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, ckptfsBinary(t), "mount", "-f", "-o", "log=warn", store, at)
		out, err := cmd.CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("second mount at %s: %v, want exit status 1; output: %s", at, err, out)
		}
		want := "ckptfs mount: " + at + " is already a mount point (fuse.ckptfs); unmount it first: fusermount3 -u " + at + "\n"
		if string(out) != want {
			t.Errorf("second mount at %s said %q, want %q", at, out, want)
		}
	}
	// The first mount serves: what it is given reads back.
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "first" {
		t.Fatalf("read through the first mount: %q, %v", b, err)
	}
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() error {
		select {
		case <-first.exited:
			return nil
		default:
			return errors.New("first mount still running")
		}
	})
	if s := first.cmd.ProcessState; !s.Success() {
		t.Errorf("first mount exited %v", s)
	}
	if isMounted(t, dir) {
		t.Error("still mounted after the first mount exited")
	}
}

// TestRestartAfterKill: a mount killed with kill -9 (no auto_unmount)
// leaves its mount point dead (ENOTCONN); the same mount command run again,
// with nothing in between, unmounts the dead mount, mounts, and shows every
// write the dead process acknowledged: with wal=on one it never flushed.
func TestRestartAfterKill(t *testing.T) {
	store := "file://" + t.TempDir()
	dir := mountpoint(t)
	unmountAtEnd(t, dir)
	const opts = "create,wal=on,log=warn"
	first := startForeground(t, store, dir, opts)
	f, err := os.Create(filepath.Join(dir, "acked"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("acknowledged, never flushed\n")); err != nil {
		t.Fatal(err)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	f.Close() // the server is gone: nothing is flushed by this
	if _, err := os.Stat(dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat of the mount point after kill -9: %v, want ENOTCONN", err)
	}

	// Ready once it serves: the dead mount is in the mount table already.
	second := startForegroundWith(t, store, dir, opts, nil, func() error {
		_, err := os.ReadDir(dir)
		return err
	})
	stderr := second.stderr
	if !strings.Contains(stderr.String(), "dead ckptfs mount") {
		t.Errorf("the restarted mount did not say it cleared a dead mount; stderr: %s", stderr.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "acked")); err != nil || string(b) != "acknowledged, never flushed\n" {
		t.Fatalf("the killed mount's acknowledged write, read after the restart: %q, %v", b, err)
	}
}
