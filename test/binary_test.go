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

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// s3Args returns the STORE argument and -o store options that reach the
// volume v (with create: v is new), and the environment with its
// credentials.
func s3Args(t *testing.T, v *volume) (store, opts string, env []string) {
	t.Helper()
	e, err := s3test.Shared()
	if err != nil {
		t.Fatal(err)
	}
	store = "s3://" + v.cfg.Bucket + "/" + strings.TrimSuffix(v.cfg.Prefix, "/")
	// No namespace=: the tools refuse it (a mount's option); the mounts
	// and formats of the tests add it (withNamespace, formatNamespace).
	opts = "endpoint=" + v.cfg.Endpoint + ",path_style,region=" + v.cfg.Region + ",create"
	env = os.Environ()
	if e.AccessKey != "" { // else the environment's own credentials reach it
		env = append(env, "AWS_ACCESS_KEY_ID="+e.AccessKey, "AWS_SECRET_ACCESS_KEY="+e.SecretKey)
	}
	return store, opts, env
}

func mountpoint(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// isMounted reports whether dir is a mount point now.
func isMounted(t testing.TB, dir string) bool {
	t.Helper()
	return mountInfo(t, dir) != ""
}

// TestBinaryDaemon mounts with the built binary (it detaches), writes with
// ordinary programs, unmounts with fusermount3 -u, and reads the data back
// through mount.ckptfs in the foreground, stopped with SIGTERM.
func TestBinaryDaemon(t *testing.T) {
	need(t, "fusermount3")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	dir := mountpoint(t)

	logFile := filepath.Join(t.TempDir(), "ckptfs.log")
	cmd := exec.Command(bin, "mount", "-o", withNamespace(opts)+",ns_refresh=500ms,log=debug,log_file="+logFile, store, dir)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ckptfs mount: %v\n%s", err, out)
	}
	if !isMounted(t, dir) {
		t.Fatal("ckptfs mount returned 0 but nothing is mounted")
	}
	t.Cleanup(func() {
		if isMounted(t, dir) {
			runErr("", "fusermount3", "-u", dir)
		}
	})
	run(t, dir, "sh", "-c", "mkdir sub && echo hello > sub/greeting && seq 1 100000 > numbers")
	run(t, "", "fusermount3", "-u", dir)
	if isMounted(t, dir) {
		t.Fatal("still mounted after fusermount3 -u")
	}
	e, _ := s3test.Shared()
	waitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(logFile)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), e.SecretKey) || strings.Contains(string(b), e.AccessKey) {
			t.Fatalf("the log holds the credentials:\n%s", b)
		}
		if !strings.Contains(string(b), "mounted") {
			return errors.New("log does not say mounted yet")
		}
		return nil
	})

	// mount.ckptfs, the form mount(8) runs: STORE MOUNTPOINT -o opts.
	helper := filepath.Join(t.TempDir(), "mount.ckptfs")
	if err := os.Symlink(bin, helper); err != nil {
		t.Fatal(err)
	}
	fg := exec.Command(helper, store, dir, "-o", opts+",_netdev", "-f")
	fg.Env = env
	var stderr strings.Builder
	fg.Stderr = &stderr
	if err := fg.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- fg.Wait() }()
	waitFor(t, 30*time.Second, func() error {
		if !isMounted(t, dir) {
			return errors.New("not mounted yet")
		}
		return nil
	})
	if out := run(t, dir, "cat", "sub/greeting"); out != "hello\n" {
		t.Fatalf("sub/greeting: %q", out)
	}
	if out := run(t, dir, "sh", "-c", "tail -n1 numbers"); out != "100000\n" {
		t.Fatalf("numbers ends with %q", out)
	}
	// Written now and not closed by an fsync: SIGTERM must flush it.
	run(t, dir, "sh", "-c", "echo late > late")
	if err := fg.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("mount.ckptfs after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("mount.ckptfs did not exit within 30s of SIGTERM")
	}
	if isMounted(t, dir) {
		t.Fatal("still mounted after SIGTERM")
	}
	m := v.mount("")
	if b, err := os.ReadFile(m.path("late")); err != nil || string(b) != "late\n" {
		t.Fatalf("late: %q %v", b, err)
	}
}

// TestBadInput: each failure to mount is reported before detaching, with an
// error that says what is wrong, and a corrupt object reads as EIO.
func TestBadInput(t *testing.T) {
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)

	// A volume written by a newer version.
	newer := newVolume(t)
	newerStore, _, _ := s3Args(t, newer)
	ctx := context.Background()
	if _, err := newer.store().Put(ctx, "ckptfs.json", []byte(`{"layout_version": 99, "format": "stream"}`), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown option", []string{"-o", opts + ",bogus_option=1", store, mountpoint(t)}, "bogus_option"},
		{"bad value", []string{"-o", opts + ",data_block_size=3000", store, mountpoint(t)}, "data_block_size"},
		{"unreachable store", []string{"-o", "endpoint=http://127.0.0.1:1,path_style,region=us-east-1", "s3://nobucket/x", mountpoint(t)}, "127.0.0.1:1"},
		{"newer layout", []string{"-o", opts, newerStore, mountpoint(t)}, "layout version 99"},
		{"missing mount point", []string{"-o", opts, store, filepath.Join(t.TempDir(), "nope")}, "no such file or directory"},
		{"non-empty mount point", []string{"-o", opts, store, nonEmpty}, "not empty"},
		{"bad store", []string{"ftp://x", mountpoint(t)}, "s3://bucket"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"mount"}, c.args...)...)
			cmd.Env = env
			start := time.Now()
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("exit: %v, want a failure\n%s", err, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("error does not mention %q:\n%s", c.want, out)
			}
			if d := time.Since(start); d > time.Minute {
				t.Errorf("took %v to fail", d)
			}
		})
	}

	t.Run("corrupt object reads as EIO", func(t *testing.T) {
		cv := newVolume(t)
		m := cv.mount("")
		data := make([]byte, 3<<20)
		for i := range data {
			data[i] = byte(i * 7)
		}
		if err := os.WriteFile(m.path("victim"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		m.unmount()
		st := cv.store()
		objs, err := staging.ListAll(ctx, st, "f/")
		if err != nil {
			t.Fatal(err)
		}
		corrupted := 0
		for _, o := range objs {
			if strings.HasSuffix(o.Key, "/inode") {
				continue
			}
			b, _, err := st.Get(ctx, o.Key, staging.Whole())
			if err != nil {
				t.Fatal(err)
			}
			for i := range b {
				b[i] ^= 0x5a
			}
			if _, err := st.Put(ctx, o.Key, b, staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			corrupted++
		}
		if corrupted == 0 {
			t.Fatal("no checkpoint object to corrupt")
		}
		m = cv.mount("")
		_, err = os.ReadFile(m.path("victim"))
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("read of a corrupt file: %v, want EIO", err)
		}
	})
}
