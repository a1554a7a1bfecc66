package test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAppendOnTwoMounts: two mounts open one file with O_APPEND, each
// appends 8 bytes, and both close (in either order). Two appends given in
// some serial order leave both, one after the other, past the base: each
// mount reads the one the first close published first, and the second
// closer's fstat after its fsync shows the merged size (its offset stays
// where its own write ended). An append through the second closer's
// descriptor after that lands at the merged end.
func TestAppendOnTwoMounts(t *testing.T) {
	for _, aFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("aClosesFirst=%v", aFirst), func(t *testing.T) {
			v := newVolume(t)
			a := v.mount("ns_refresh=100ms,flush_interval=0")
			b := v.mount("ns_refresh=100ms,flush_interval=0")
			if err := os.WriteFile(a.path("log"), []byte("base\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			waitSize(t, b.path("log"), 5)
			open := func(m *mount) *os.File {
				f, err := os.OpenFile(m.path("log"), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				return f
			}
			fa, fb := open(a), open(b)
			if _, err := fa.Write([]byte("from-m1\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := fb.Write([]byte("from-m2\n")); err != nil {
				t.Fatal(err)
			}
			first, second := fa, fb
			want := "base\nfrom-m1\nfrom-m2\n"
			if !aFirst {
				first, second = fb, fa
				want = "base\nfrom-m2\nfrom-m1\n"
			}
			if err := first.Close(); err != nil {
				t.Fatalf("first close: %v", err)
			}
			if err := second.Sync(); err != nil {
				t.Fatalf("fsync of the second: %v", err)
			}
			st, err := second.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if st.Size() != int64(len(want)) {
				t.Errorf("the second appender's fstat after its fsync: %d bytes, want %d", st.Size(), len(want))
			}
			// The offset the kernel keeps is where its own write ended.
			if pos, err := second.Seek(0, io.SeekCurrent); err != nil || pos != 13 {
				t.Errorf("the second appender's offset after its fsync: %d (%v), want 13", pos, err)
			}
			if _, err := second.Write([]byte("again\n")); err != nil {
				t.Fatal(err)
			}
			if err := second.Close(); err != nil {
				t.Fatalf("second close: %v", err)
			}
			want += "again\n"
			for _, m := range []*mount{a, b} {
				waitContent(t, m.path("log"), want)
			}
		})
	}
}

// TestAppendOnTwoMountsAfterTruncate: mount b appends to a file while mount
// a truncates it to 2 bytes and publishes; b's close then merges. In the
// serial order the truncate comes first (it was published first), so b's
// append lands at the end of the truncated file.
func TestAppendOnTwoMountsAfterTruncate(t *testing.T) {
	v := newVolume(t)
	a := v.mount("ns_refresh=100ms,flush_interval=0")
	b := v.mount("ns_refresh=100ms,flush_interval=0")
	if err := os.WriteFile(a.path("log"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitSize(t, b.path("log"), 5)
	fb, err := os.OpenFile(b.path("log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	if _, err := fb.Write([]byte("from-m2\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(a.path("log"), 2); err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatalf("close on b: %v", err)
	}
	want := "bafrom-m2\n"
	for _, m := range []*mount{a, b} {
		waitContent(t, m.path("log"), want)
	}
}

// TestWALAppendAfterOtherWriter: with the WAL, mount a appends and holds the
// file; mount b's append is refused (EBUSY, one writer at a time) until a
// closes, and then lands at the end a left, not at the size b's kernel
// last knew.
func TestWALAppendAfterOtherWriter(t *testing.T) {
	v := newVolume(t)
	a := v.mount("wal=on,ns_refresh=100ms")
	b := v.mount("wal=on,ns_refresh=100ms")
	if err := os.WriteFile(a.path("shared"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var fb *os.File
	waitFor(t, 10*time.Second, func() error {
		st, err := os.Stat(b.path("shared"))
		if err != nil {
			return err
		}
		if st.Size() != 5 {
			return fmt.Errorf("b sees %d bytes", st.Size())
		}
		fb, err = os.OpenFile(b.path("shared"), os.O_WRONLY|os.O_APPEND, 0)
		return err
	})
	t.Cleanup(func() { fb.Close() })
	fa, err := os.OpenFile(a.path("shared"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fa.Close() })
	if _, err := fa.Write([]byte("from-m1\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := fb.Write([]byte("from-m2\n")); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("append from a second mount while the first holds the file: %v, want EBUSY", err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		_, err := fb.Write([]byte("from-m2\n"))
		return err
	})
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	a.unmount()
	b.unmount()
	checkShared(t, v, "base\nfrom-m1\nfrom-m2\n")
}

// TestAppendDescriptorAndSharedMapping: the pages of a shared mapping of a
// descriptor opened with O_APPEND are written back through that descriptor
// (the kernel sends them with no caller): they stay at their offsets, not
// appended.
func TestAppendDescriptorAndSharedMapping(t *testing.T) {
	v := newVolume(t)
	m := v.mount("flush_interval=0")
	base := bytes.Repeat([]byte{'x'}, 8192)
	if err := os.WriteFile(m.path("f"), base, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(m.path("f"), os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mm, err := unix.Mmap(int(f.Fd()), 0, len(base), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(mm[100:], "MM")
	copy(mm[5000:], "NN")
	if err := unix.Msync(mm, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Munmap(mm); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), base...)
	copy(want[100:], "MM")
	copy(want[5000:], "NN")
	want = append(want, "tail"...)
	c := v.mount("")
	got, err := os.ReadFile(c.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("after writing through a shared mapping: %s, want %s", describe(got), describe(want))
	}
}

// TestAppendFromOutsideThePIDNamespace: a mount run in a PID namespace of
// its own (as in a container) is given no caller (pid 0) for a process
// outside it, as for the kernel's write-back of a shared mapping. Its
// O_APPEND writes are appends all the same: two mounts open a file with
// O_APPEND, each appends, the other mount closes first, and the merge of
// the namespaced mount's close places its append after the other's, not
// over it at the size its kernel had cached.
func TestAppendFromOutsideThePIDNamespace(t *testing.T) {
	need(t, "unshare", "fusermount3")
	if out, err := runErr("", "unshare", "-p", "-f", "true"); err != nil {
		t.Skipf("cannot make a PID namespace here: %v %s", err, out)
	}
	v := newVolume(t)
	a := v.mount("ns_refresh=100ms,flush_interval=0")
	store, opts, env := s3Args(t, v)
	dir := mountpoint(t)
	cmd := exec.Command("unshare", "-p", "-f", "--kill-child", ckptfsBinary(t), "mount", "-f", "-o", withNamespace(opts)+",ns_refresh=100ms,flush_interval=0,log=warn", store, dir)
	cmd.Env = env
	var stderr lockedText
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		if isMounted(t, dir) {
			if out, err := runErr("", "fusermount3", "-u", dir); err != nil {
				t.Errorf("fusermount3 -u %s: %v %s", dir, err, out)
			}
		}
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill() // --kill-child: the namespace dies with it
			<-exited
		}
	})
	waitFor(t, 30*time.Second, func() error {
		select {
		case <-exited:
			t.Fatalf("the namespaced mount exited: %s", stderr.String())
		default:
		}
		if !isMounted(t, dir) {
			return errors.New("not mounted yet")
		}
		return nil
	})
	path := filepath.Join(dir, "log")
	if err := os.WriteFile(a.path("log"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitSize(t, path, 5)
	fa, err := os.OpenFile(a.path("log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if _, err := fa.Write([]byte("from-a, the longer\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := fb.Write([]byte("from-b\n")); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatalf("close on a: %v", err)
	}
	if err := fb.Close(); err != nil {
		t.Fatalf("close on the namespaced mount: %v", err)
	}
	want := "base\nfrom-a, the longer\nfrom-b\n"
	for _, p := range []string{a.path("log"), path} {
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s reads %q, want %q", p, got, want)
		}
	}
}

// TestAppendSetWithFcntl: O_APPEND set with fcntl(F_SETFL) after the open
// makes the descriptor's later writes appends (the kernel passes a write's
// descriptor flags): the merge of its mount's close places its append after
// the other mount's, published first, not over it.
func TestAppendSetWithFcntl(t *testing.T) {
	v := newVolume(t)
	a := v.mount("ns_refresh=100ms,flush_interval=0")
	b := v.mount("ns_refresh=100ms,flush_interval=0")
	if err := os.WriteFile(a.path("log"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitSize(t, b.path("log"), 5)
	fa, err := os.OpenFile(a.path("log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.OpenFile(b.path("log"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if _, err := unix.FcntlInt(fb.Fd(), unix.F_SETFL, unix.O_APPEND); err != nil {
		t.Fatal(err)
	}
	if _, err := fa.Write([]byte("from-a, the longer\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := fb.Write([]byte("from-b\n")); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatalf("close on a: %v", err)
	}
	if err := fb.Close(); err != nil {
		t.Fatalf("close on b: %v", err)
	}
	want := "base\nfrom-a, the longer\nfrom-b\n"
	for _, m := range []*mount{a, b} {
		got, err := os.ReadFile(m.path("log"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s reads %q, want %q", m.dir, got, want)
		}
	}
}

// waitSize waits until path shows size bytes (another mount's view catches
// up within ns_refresh).
func waitSize(t *testing.T, path string, size int64) {
	t.Helper()
	waitFor(t, 10*time.Second, func() error {
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		if st.Size() != size {
			return fmt.Errorf("%s shows %d bytes, want %d", path, st.Size(), size)
		}
		return nil
	})
}

// waitContent waits until path reads want.
func waitContent(t *testing.T, path, want string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() error {
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if string(got) != want {
			return fmt.Errorf("%s reads %q, want %q", path, got, want)
		}
		return nil
	})
}
