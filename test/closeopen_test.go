package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/staging"
)

// twoMountsWith makes two mounts of one volume and a file f written on a
// with data, seen on b.
func twoMountsWith(t *testing.T, optsA, optsB string, data []byte) (a, b *mount) {
	t.Helper()
	_, a, b = twoMountsOf(t, optsA, optsB, data)
	return a, b
}

// twoMountsOf is twoMountsWith, and the volume.
func twoMountsOf(t *testing.T, optsA, optsB string, data []byte) (v *volume, a, b *mount) {
	t.Helper()
	v = newVolume(t)
	a, b = v.mount(optsA), v.mount(optsB)
	if err := os.WriteFile(a.path("f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		got, err := os.ReadFile(b.path("f"))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("b reads %d bytes, want %d", len(got), len(data))
		}
		return nil
	})
	return v, a, b
}

// holdOpen has a python3 process open p read-only, read it whole and fstat
// it (so the kernel caches its pages and attributes) and keep it open until
// finish.
func holdOpen(t *testing.T, p string) *piped {
	t.Helper()
	h := pythonPiped(t, "", `
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
while os.read(fd, 1 << 20):
    pass
os.fstat(fd)
print("open", flush=True)
sys.stdin.read()
os.close(fd)
`, p)
	h.waitLine("open")
	return h
}

// cno is the checkpoint number a mount shows for p.
func cno(t *testing.T, p string) string {
	t.Helper()
	buf := make([]byte, 32)
	n, err := unix.Getxattr(p, "user.ckptfs.cno", buf)
	if err != nil {
		t.Fatalf("getxattr %s: %v", p, err)
	}
	return string(buf[:n])
}

// TestMultiCloseToOpen: while a process on mount a holds f open, mount b
// rewrites f and closes it; an open on a that starts after that close
// returned reads b's version at once (cat, cp), and a shows b's checkpoint.
func TestMultiCloseToOpen(t *testing.T) {
	need(t, "python3", "cat", "cp", "cmp")
	old := bytes.Repeat([]byte("a"), 256<<10)
	a, b := twoMountsWith(t, "ns_refresh=100ms", "ns_refresh=100ms", old)
	held := holdOpen(t, a.path("f"))

	upd := bytes.Repeat([]byte("b"), 256<<10)
	if err := os.WriteFile(b.path("f"), upd, 0o644); err != nil { // closed when it returns
		t.Fatal(err)
	}
	if got := run(t, "", "cat", a.path("f")); got != string(upd) {
		t.Fatalf("an open on a after b's close reads %q..., want b's %q...", got[:min(8, len(got))], upd[:8])
	}
	local := filepath.Join(t.TempDir(), "copy")
	run(t, "", "cp", a.path("f"), local)
	if got, err := os.ReadFile(local); err != nil || !bytes.Equal(got, upd) {
		t.Fatalf("cp on a after b's close copied %d bytes (%v), not b's version", len(got), err)
	}
	if ca, cb := cno(t, a.path("f")), cno(t, b.path("f")); ca != cb {
		t.Fatalf("a shows checkpoint %s of f, b published %s", ca, cb)
	}
	// An O_TRUNC open on a, the file still held there (the open drops the
	// kernel's attributes while the kernel may hold the inode for the
	// truncate), and b reads it.
	if err := os.WriteFile(a.path("f"), []byte("from a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(b.path("f")); err != nil || string(got) != "from a" {
		t.Fatalf("b reads %q (%v) after a's rewrite, want %q", got, err, "from a")
	}
	held.finish()
}

// TestMultiCloseToOpenSize: the same when b makes f longer: the open on a
// reads the new size whole, though a's kernel cached the old size a moment
// before (a read is cut at the size the kernel knows).
func TestMultiCloseToOpenSize(t *testing.T) {
	need(t, "python3", "cat")
	old := bytes.Repeat([]byte("a"), 64<<10)
	a, b := twoMountsWith(t, "ns_refresh=100ms", "ns_refresh=100ms", old)
	held := holdOpen(t, a.path("f"))
	if _, err := os.Stat(a.path("f")); err != nil { // the old size, cached
		t.Fatal(err)
	}
	upd := append(bytes.Repeat([]byte("b"), 64<<10), bytes.Repeat([]byte("c"), 192<<10)...)
	if err := os.WriteFile(b.path("f"), upd, 0o644); err != nil {
		t.Fatal(err)
	}
	got := run(t, "", "cat", a.path("f"))
	if got != string(upd) {
		t.Fatalf("an open on a after b's close reads %d bytes (%d b, %d c), want b's %d",
			len(got), strings.Count(got, "b"), strings.Count(got, "c"), len(upd))
	}
	held.finish()
}

// walHolder has a python3 process on mount m (wal=on) open f, write each
// of writes (offset and bytes) and keep f open, unflushed, until finish:
// the writes are acknowledged, durable only in its log.
func walHolder(t *testing.T, m *mount, writes ...string) *piped {
	t.Helper()
	w := pythonPiped(t, m.dir, `
import os, sys
fd = os.open("f", os.O_WRONLY)
for a in sys.argv[1:]:
    off, fill, n = a.split(":")
    os.pwrite(fd, fill.encode() * int(n), int(off))
print("written", flush=True)
sys.stdin.read()
os.close(fd)
`, writes...)
	w.waitLine("written")
	return w
}

// TestMultiCloseToOpenWAL: b writes f with the WAL and keeps it open (its
// writes acknowledged, in its log, not published); an open on a, where a
// process holds f open with its pages cached, reads them at once: the
// records over the unmoved head, and none of the old pages.
func TestMultiCloseToOpenWAL(t *testing.T) {
	need(t, "python3", "cat")
	const n = 256 << 10
	a, b := twoMountsWith(t, "ns_refresh=100ms", "wal=on,ns_refresh=100ms", bytes.Repeat([]byte("a"), n))
	held := holdOpen(t, a.path("f"))
	w := walHolder(t, b, "0:b:65536", "131072:c:65536")
	want := append(bytes.Repeat([]byte("b"), 64<<10), bytes.Repeat([]byte("a"), 64<<10)...)
	want = append(append(want, bytes.Repeat([]byte("c"), 64<<10)...), bytes.Repeat([]byte("a"), 64<<10)...)
	if got := run(t, "", "cat", a.path("f")); got != string(want) {
		t.Fatalf("an open on a after b's acknowledged writes reads %q at 0 and %q at 128 KiB, want b and c",
			got[:1], got[min(len(got)-1, 128<<10):][:1])
	}
	w.finish()
	held.finish()
}

// TestCopyWhileWALRecordsPending: cp on mount a (copy_file_range) of a
// file whose acknowledged writes are in mount b's WAL, not published,
// copies what an open of it reads: the records, whole; not the head with
// the tail past it copied from the records.
func TestCopyWhileWALRecordsPending(t *testing.T) {
	need(t, "python3", "cp", "cmp")
	const n = 256 << 10
	a, b := twoMountsWith(t, "ns_refresh=100ms", "wal=on,ns_refresh=100ms", bytes.Repeat([]byte("a"), n))
	w := walHolder(t, b, "0:b:65536", "262144:c:65536")
	run(t, a.dir, "cp", "f", "copy")
	want := append(append(bytes.Repeat([]byte("b"), 64<<10), bytes.Repeat([]byte("a"), 192<<10)...), bytes.Repeat([]byte("c"), 64<<10)...)
	got, err := os.ReadFile(a.path("copy"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the copy: %d bytes, %q at 0 and %q at 256 KiB; want %d, b and c", len(got), got[:1], got[min(len(got)-1, 256<<10):][:1], len(want))
	}
	w.finish()
}

// TestCpAfterWALWriterKilled: ckptfs cp of a file whose wal=on mount was
// killed (kill -9) while it held the file open with acknowledged writes in
// its log, not published: the copy holds them (cp replays and publishes the
// dead writer's records first, as a mount's open does).
func TestCpAfterWALWriterKilled(t *testing.T) {
	need(t, "python3", "fusermount3")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	const n = 256 << 10
	m := v.mount("")
	if err := os.WriteFile(m.path("f"), bytes.Repeat([]byte("a"), n), 0o644); err != nil {
		t.Fatal(err)
	}
	m.unmount()

	dir := mountpoint(t)
	mnt := exec.Command(bin, "mount", "-f", "-o", withNamespace(opts)+",wal=on", store, dir)
	mnt.Env = env
	logPath := filepath.Join(t.TempDir(), "mount.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	mnt.Stdout, mnt.Stderr = logFile, logFile
	if err := mnt.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- mnt.Wait() }()
	t.Cleanup(func() {
		_ = mnt.Process.Kill()
		<-exited
		if isMounted(t, dir) {
			_, _ = runErr("", "fusermount3", "-uz", dir)
		}
	})
	waitFor(t, 30*time.Second, func() error {
		if !isMounted(t, dir) {
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("not mounted yet:\n%s", b)
		}
		return nil
	})
	w := walHolder(t, &mount{t: t, dir: dir, done: true}, "0:b:65536", "262144:c:65536")
	if err := mnt.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			return nil
		default:
			return errors.New("the killed mount still runs")
		}
	})
	_ = w.cmd.Process.Kill()

	cmd := exec.Command(bin, "cp", "-o", opts, "-v", store, "/f", "/copy")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ckptfs cp: %v\n%s", err, out)
	}
	t.Logf("ckptfs cp: %s", bytes.TrimSpace(out))
	want := append(append(bytes.Repeat([]byte("b"), 64<<10), bytes.Repeat([]byte("a"), 192<<10)...), bytes.Repeat([]byte("c"), 64<<10)...)
	r := v.mount("")
	got, err := os.ReadFile(r.path("copy"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the copy: %d bytes, want %d with the killed writer's acknowledged writes", len(got), len(want))
	}
}

// TestMultiCloseToOpenWALUnmovedHead: f was written and published with the
// WAL on mount w; w writes it again and keeps it open, so its head stays
// where it was and only its log holds the writes: an open on r, where a
// process holds f open, still reads them (it lists the log).
func TestMultiCloseToOpenWALUnmovedHead(t *testing.T) {
	need(t, "python3", "cat")
	const n = 256 << 10
	v, w, r := twoMountsOf(t, "wal=on,ns_refresh=100ms", "ns_refresh=100ms", bytes.Repeat([]byte("a"), n))
	st := v.store()
	waitWALClean(t, st) // published, the lease let go
	head := func() string {
		t.Helper()
		objs, err := staging.ListAll(context.Background(), st, "f/")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if strings.HasSuffix(o.Key, "/inode") {
				return o.ETag
			}
		}
		t.Fatal("no head")
		return ""
	}
	before := head()
	held := holdOpen(t, r.path("f"))
	wr := walHolder(t, w, "0:b:65536", "131072:c:65536")
	if head() != before {
		t.Fatal("the head moved: the writes were published, not only logged")
	}
	want := append(bytes.Repeat([]byte("b"), 64<<10), bytes.Repeat([]byte("a"), 64<<10)...)
	want = append(append(want, bytes.Repeat([]byte("c"), 64<<10)...), bytes.Repeat([]byte("a"), 64<<10)...)
	if got := run(t, "", "cat", r.path("f")); got != string(want) {
		t.Fatalf("an open on r after w's acknowledged writes reads %q at 0 and %q at 128 KiB, want b and c",
			got[:1], got[min(len(got)-1, 128<<10):][:1])
	}
	wr.finish()
	held.finish()
}

// TestMultiCopyAfterOtherMountsClose: copy_file_range right after an open,
// without a stat (as Go's io.Copy between two files does), on a mount whose
// kernel cached the file's old size: the kernel cuts a copy at the size it
// holds without asking the mount, so the open must leave it the new one.
// Before the fix the copy held the first 64 KiB only (or nothing, for a
// file the kernel knew empty), and the source read whole. (An open within
// staleSizeQuiet of another that met a new size may keep the old one:
// docs/design.md.)
func TestMultiCopyAfterOtherMountsClose(t *testing.T) {
	for _, oldLen := range []int{0, 64 << 10} {
		t.Run(fmt.Sprintf("old %d bytes", oldLen), func(t *testing.T) {
			old := bytes.Repeat([]byte("a"), oldLen)
			a, b := twoMountsWith(t, "ns_refresh=100ms", "ns_refresh=100ms", old)
			if _, err := os.Stat(a.path("f")); err != nil { // the old size, cached
				t.Fatal(err)
			}
			upd := bytes.Repeat([]byte("b"), 256<<10)
			if err := os.WriteFile(b.path("f"), upd, 0o644); err != nil {
				t.Fatal(err)
			}
			in, err := os.Open(a.path("f"))
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			out, err := os.OpenFile(a.path("copy"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			var total int
			for {
				n, err := unix.CopyFileRange(int(in.Fd()), nil, int(out.Fd()), nil, 1<<30, 0)
				if err != nil {
					t.Fatalf("copy_file_range: %v", err)
				}
				if n == 0 {
					break
				}
				total += n
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(a.path("copy"))
			if err != nil || total != len(upd) || !bytes.Equal(got, upd) {
				t.Fatalf("copy_file_range after an open on a copied %d bytes and the copy holds %d (%v), want b's %d", total, len(got), err, len(upd))
			}
		})
	}
}
