package test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
)

// toolVolume is a volume on the S3 server, not yet formatted, with its
// store URL and options for the tools, and the ckptfs binary run with the
// server's credentials.
func toolVolume(t *testing.T) (v *volume, store, opts string, ckptfs func(args ...string) (string, error)) {
	t.Helper()
	bin := ckptfsBinary(t)
	v = newVolume(t)
	store, opts, env := s3Args(t, v)
	opts = strings.TrimSuffix(opts, ",create")
	ckptfs = func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	return v, store, opts, ckptfs
}

// TestNSv2Mount: a volume made with ckptfs format -o namespace=v2 is
// mounted with namespace v2 (docs/namespace-v2.md §10, step 3), and
// unmodified programs use it: cp, dd, cat and cmp, ls -l, mkdir -p, rm; an
// O_EXCL create of a name that exists fails with EEXIST; a second mount
// sees the first's names and the first sees the second's create (within
// ns_refresh of its last listing of the directory); mv of a
// file, of a directory into another and back (through the moves log) and
// rmdir of an empty directory work (step 4), and are seen by the other
// mount; ln makes a second name of a file, which the other mount sees as
// the same file of two names, and rm of one name leaves the other; mv of a
// directory into itself fails; after both unmount, a new mount finds
// everything as it was left.
func TestNSv2Mount(t *testing.T) {
	need(t, "cp", "dd", "cmp", "ls", "mkdir", "rm", "mv", "rmdir", "ln")
	v, store, opts, ckptfs := toolVolume(t)
	if out, err := ckptfs("format", "-o", opts+",namespace=v2", store); err != nil || !strings.Contains(out, "namespace=v2") {
		t.Fatalf("format -o namespace=v2: %v\n%s", err, out)
	}
	if d, err := ckvolume.ReadDescriptor(t.Context(), v.store(), ""); err != nil || d.LayoutVersion != 2 || d.Namespace != "v2" {
		t.Fatalf("descriptor after format: %+v, %v", d, err)
	}

	local := t.TempDir()
	small, big := filepath.Join(local, "small"), filepath.Join(local, "big")
	randomFile(t, small, 100<<10+7)
	randomFile(t, big, 8<<20)

	a := v.mount("")
	run(t, a.dir, "cp", small, "small")
	run(t, a.dir, "dd", "if="+big, "of=big", "bs=1M", "count=8", "conv=fsync", "status=none")
	run(t, a.dir, "cmp", big, "big")
	if got := run(t, a.dir, "cat", "small"); got != mustRead(t, small) {
		t.Fatalf("cat small: %d bytes, want the %d copied", len(got), len(mustRead(t, small)))
	}
	run(t, a.dir, "mkdir", "-p", "a/b")
	run(t, a.dir, "sh", "-c", "echo inside > a/b/c")
	run(t, a.dir, "sh", "-c", "echo gone > doomed")
	run(t, a.dir, "rm", "doomed")
	ls := run(t, a.dir, "ls", "-l")
	for _, want := range []string{" small\n", " big\n", " a\n", "8388608"} {
		if !strings.Contains(ls, want) {
			t.Errorf("ls -l lacks %q:\n%s", want, ls)
		}
	}
	if strings.Contains(ls, "doomed") {
		t.Errorf("ls -l shows the removed name:\n%s", ls)
	}
	if _, err := os.OpenFile(a.path("big"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL create of an existing name: %v, want EEXIST", err)
	}

	// Step 4: mv of a file, of a directory into another and back, rmdir
	// and ln; a directory is not moved into itself.
	run(t, a.dir, "mv", "big", "moved")
	run(t, a.dir, "mv", "moved", "big")
	run(t, a.dir, "mkdir", "empty", "gone")
	run(t, a.dir, "rmdir", "gone")
	run(t, a.dir, "ln", "big", "hard")
	run(t, a.dir, "ln", "small", "a/small2")
	if ino, nlink := statIno(t, a.path("hard")); ino != must1(statIno(t, a.path("big"))) || nlink != 2 {
		t.Errorf("ln big hard: hard is ino %d of %d names", ino, nlink)
	}
	run(t, a.dir, "mv", "empty", "a/")
	if fi, err := os.Stat(a.path("a/empty")); err != nil || !fi.IsDir() {
		t.Errorf("a/empty after mv empty a/: %v", err)
	}
	run(t, a.dir, "mv", "a/empty", ".")
	if _, err := runErr(a.dir, "mv", "a", "a/b/"); err == nil {
		t.Errorf("mv of a directory into its own subdirectory succeeded")
	}
	for _, name := range []string{"moved", "gone", "a/empty"} {
		if _, err := os.Lstat(a.path(name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after the mv, rmdir and refused changes: %v", name, err)
		}
	}
	run(t, a.dir, "cmp", big, "big")

	b := v.mount("")
	run(t, b.dir, "cmp", big, "big")
	run(t, b.dir, "cmp", small, "small")
	if got := run(t, b.dir, "cat", "a/b/c"); got != "inside\n" {
		t.Errorf("a/b/c on the second mount: %q", got)
	}
	if _, err := os.Stat(b.path("doomed")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the second mount sees the removed name: %v", err)
	}
	if _, err := os.OpenFile(b.path("small"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, fs.ErrExist) {
		t.Errorf("O_EXCL create on the second mount of a name the first made: %v, want EEXIST", err)
	}
	// The links, from the second mount: one file of two names; rm of one
	// leaves the other.
	run(t, b.dir, "cmp", big, "hard")
	if ino, nlink := statIno(t, b.path("hard")); ino != must1(statIno(t, b.path("big"))) || nlink != 2 {
		t.Errorf("the second mount sees hard as ino %d of %d names", ino, nlink)
	}
	run(t, b.dir, "rm", "small")
	run(t, b.dir, "cmp", small, "a/small2")
	run(t, b.dir, "sh", "-c", "echo from b > a/b/fromb")
	// Within ns_refresh (1 s) of its last listing of a/b, the first mount
	// answers a miss there from it, as a v1 mount answers one from its
	// copy of the log: the second's name shows by then.
	waitContent(t, a.path("a/b/fromb"), "from b\n")
	a.unmount()
	b.unmount()

	if out, err := ckptfs("ls", "-o", opts, store, "/a/b"); err != nil || !strings.Contains(out, " c\n") || !strings.Contains(out, " fromb\n") {
		t.Errorf("ckptfs ls /a/b: %v\n%s", err, out)
	}
	// The cleaner on v2: the unlinked file (doomed) is reaped, every named
	// file kept; fsck then finds the volume whole.
	if out, err := ckptfs("gc", "-o", opts, "--grace", "0", "--ns-lag", "0", "--min-age", "0", store); err != nil || !strings.Contains(out, "0 orphaned files pending") {
		t.Errorf("ckptfs gc of a v2 volume: %v\n%s; want the orphan reaped", err, out)
	}
	if out, err := ckptfs("fsck", "-o", opts, store); err != nil {
		t.Errorf("ckptfs fsck of a v2 volume after gc: %v\n%s", err, out)
	}

	c := v.mount("")
	run(t, c.dir, "cmp", big, "big")
	run(t, c.dir, "cmp", small, "a/small2")
	run(t, c.dir, "cmp", big, "hard")
	if _, nlink := statIno(t, c.path("a/small2")); nlink != 1 {
		t.Errorf("a/small2 after the rm of small: %d names", nlink)
	}
	if got := run(t, c.dir, "cat", "a/b/c", "a/b/fromb"); got != "inside\nfrom b\n" {
		t.Errorf("a/b after a new mount: %q", got)
	}
	names := run(t, c.dir, "ls", "-A")
	if names != "a\nbig\nempty\nhard\n" {
		t.Errorf("the root after a new mount:\n%s", names)
	}
}

// TestNSv2Root: chmod, chown, touch and setfattr of a v2 mount's root (its
// attributes are ns2/root, docs/namespace-v2.md §3) work, a second mount
// sees them (within ns_refresh and the kernel's attribute timeout), fsck
// accepts the volume, and a new mount after both unmount finds them kept.
func TestNSv2Root(t *testing.T) {
	need(t, "chmod", "chown", "touch")
	v, store, opts, ckptfs := toolVolume(t)
	if out, err := ckptfs("format", "-o", opts+",namespace=v2", store); err != nil {
		t.Fatalf("format -o namespace=v2: %v\n%s", err, out)
	}
	a, b := v.mount(""), v.mount("")
	if fi, err := os.Stat(b.dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the root of a new v2 volume: %v, %v", fi, err)
	}
	run(t, a.dir, "chmod", "1777", ".")
	run(t, a.dir, "chown", "1234:5678", ".")
	run(t, a.dir, "touch", "-m", "-d", "2001-02-03 04:05:06", ".")
	if err := syscall.Setxattr(a.dir, "user.root", []byte("r"), 0); err != nil {
		t.Fatalf("setxattr of the root: %v", err)
	}
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.Local)
	root := func(m *mount) error {
		fi, err := os.Stat(m.dir)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&(fs.ModePerm|fs.ModeSticky) != 0o777|fs.ModeSticky || st.Uid != 1234 || st.Gid != 5678 || !fi.ModTime().Equal(mtime) {
			return fmt.Errorf("the root is %v, owned by %d:%d, modified %v", fi.Mode(), st.Uid, st.Gid, fi.ModTime())
		}
		buf := make([]byte, 16)
		n, err := syscall.Getxattr(m.dir, "user.root", buf)
		if err != nil || string(buf[:n]) != "r" {
			return fmt.Errorf("user.root of the root: %q, %v", buf[:max(n, 0)], err)
		}
		return nil
	}
	if err := root(a); err != nil {
		t.Fatalf("on the mount that changed it: %v", err)
	}
	waitFor(t, 30*time.Second, func() error { return root(b) })
	a.unmount()
	b.unmount()
	if out, err := ckptfs("fsck", "-o", opts, store); err != nil {
		t.Errorf("ckptfs fsck of a v2 volume with the root's attributes: %v\n%s", err, out)
	}
	c := v.mount("")
	if err := root(c); err != nil {
		t.Errorf("after a new mount: %v", err)
	}
}

// TestNSv2Fragments: setfattr -n user.ckptfs.fragments -v 16 on an empty
// directory of a v2 mount sets its fragment count (docs/namespace-v2.md
// §3), getfattr answers it on both mounts and after a remount, the names
// both mounts add there are listed by each; another count on the directory
// with names is ENOTEMPTY, a count out of bounds EINVAL, on the root
// ENOTSUP; fsck accepts the volume.
func TestNSv2Fragments(t *testing.T) {
	v, store, opts, ckptfs := toolVolume(t)
	if out, err := ckptfs("format", "-o", opts+",namespace=v2", store); err != nil {
		t.Fatalf("format -o namespace=v2: %v\n%s", err, out)
	}
	const attr = "user.ckptfs.fragments"
	frags := func(path string) (string, error) {
		buf := make([]byte, 8)
		n, err := syscall.Getxattr(path, attr, buf)
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	a, b := v.mount(""), v.mount("")
	if err := os.Mkdir(a.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := frags(a.path("d")); err != nil || got != "1" {
		t.Fatalf("fragments of a new directory: %q, %v", got, err)
	}
	if err := syscall.Setxattr(a.path("d"), attr, []byte("16"), 0); err != nil {
		t.Fatalf("setfattr %s 16 of an empty directory: %v", attr, err)
	}
	for _, m := range []*mount{a, b} {
		waitFor(t, 30*time.Second, func() error {
			if got, err := frags(m.path("d")); err != nil || got != "16" {
				return fmt.Errorf("fragments %q, %v", got, err)
			}
			return nil
		})
	}
	var want []string
	for i := range 8 {
		for j, m := range []*mount{a, b} {
			name := fmt.Sprintf("%c%d", 'a'+j, i)
			if err := os.WriteFile(m.path("d/"+name), []byte(name), 0o644); err != nil {
				t.Fatal(err)
			}
			want = append(want, name)
		}
	}
	slices.Sort(want)
	for _, m := range []*mount{a, b} {
		waitFor(t, 30*time.Second, func() error {
			ents, err := os.ReadDir(m.path("d"))
			if err != nil {
				return err
			}
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("d lists %q, want %q", got, want)
			}
			return nil
		})
	}
	for _, c := range []struct {
		path, value string
		want        syscall.Errno
	}{{a.path("d"), "4", syscall.ENOTEMPTY}, {b.path("d"), "3", syscall.EINVAL}, {a.path("d"), "512", syscall.EINVAL},
		{a.dir, "16", syscall.ENOTSUP}} {
		if err := syscall.Setxattr(c.path, attr, []byte(c.value), 0); !errors.Is(err, c.want) {
			t.Errorf("setfattr %s %s of %s: %v, want %v", attr, c.value, c.path, err, c.want)
		}
	}
	a.unmount()
	b.unmount()
	if out, err := ckptfs("fsck", "-o", opts, store); err != nil {
		t.Errorf("ckptfs fsck: %v\n%s", err, out)
	}
	c := v.mount("")
	if got, err := frags(c.path("d")); err != nil || got != "16" {
		t.Errorf("fragments after a new mount: %q, %v", got, err)
	}
	if ents, err := os.ReadDir(c.path("d")); err != nil || len(ents) != len(want) {
		t.Errorf("d after a new mount: %d names, %v", len(ents), err)
	}
}

// mustRead is the content of a local file.
func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// statIno is the inode number and the count of names of path.
func statIno(t *testing.T, path string) (uint64, uint64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Ino, uint64(st.Nlink)
}

// must1 is the first of two values.
func must1(a, _ uint64) uint64 { return a }
