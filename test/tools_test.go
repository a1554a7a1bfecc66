package test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBigFile copies a large random file in with cp, checks it after a
// remount with cmp, overwrites its middle with dd conv=notrunc, and
// truncates it both ways, comparing against the same operations on a local
// copy each time.
func TestBigFile(t *testing.T) {
	need(t, "dd", "cp", "cmp", "truncate")
	v := newVolume(t)
	local := filepath.Join(t.TempDir(), "big")
	mib := size(1024, 64)
	randomFile(t, local, mib<<20)

	m := v.mount("")
	run(t, "", "cp", local, m.path("big"))
	m.unmount()

	m = v.mount("")
	run(t, "", "cmp", local, m.path("big"))

	// Overwrite 3 MiB in the middle, not on block boundaries.
	patch := filepath.Join(t.TempDir(), "patch")
	run(t, "", "dd", "if=/dev/urandom", "of="+patch, "bs=1000", "count=3000", "status=none")
	seek := fmt.Sprintf("seek=%d", mib*1024*1024/2/1000)
	for _, f := range []string{local, m.path("big")} {
		run(t, "", "dd", "if="+patch, "of="+f, "bs=1000", seek, "conv=notrunc", "status=none")
	}
	// The window around the patch (the rest was compared above).
	win := []string{"-i", fmt.Sprint(mib<<20/2 - 8<<20), "-n", fmt.Sprint(16 << 20)}
	run(t, "", "cmp", append(win, local, m.path("big"))...)

	// Shrink to an odd size, then grow with a hole.
	for _, sz := range []string{"12345678", "40000000"} {
		for _, f := range []string{local, m.path("big")} {
			run(t, "", "truncate", "-s", sz, f)
		}
		run(t, "", "cmp", local, m.path("big"))
	}
	m.unmount()
	m = v.mount("")
	run(t, "", "cmp", local, m.path("big"))
}

// TestTarTree unpacks a source tree with tar and compares it with diff -r
// after a remount.
func TestTarTree(t *testing.T) {
	need(t, "tar", "diff")
	src := filepath.Join(runtime.GOROOT(), "src", "net", "http")
	if testing.Short() {
		src = filepath.Join(runtime.GOROOT(), "src", "net", "netip")
	}
	tarball := filepath.Join(t.TempDir(), "src.tar")
	run(t, filepath.Dir(src), "tar", "-cf", tarball, filepath.Base(src))
	v := newVolume(t)
	m := v.mount("")
	run(t, m.dir, "tar", "-xf", tarball)
	m.unmount()
	m = v.mount("")
	out, err := runErr("", "diff", "-r", src, m.path(filepath.Base(src)))
	if err != nil {
		t.Fatalf("diff -r: %v\n%s", err, out)
	}
	// tar restores modification times with utimensat.
	a, err := os.Stat(filepath.Join(src, "server.go"))
	if testing.Short() {
		a, err = os.Stat(filepath.Join(src, "netip.go"))
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(m.path(filepath.Join(filepath.Base(src), a.Name())))
	if err != nil {
		t.Fatal(err)
	}
	if !a.ModTime().Equal(b.ModTime()) {
		t.Errorf("mtime of %s: %v after tar -x, want %v", a.Name(), b.ModTime(), a.ModTime())
	}
}

// TestSQLite runs 1,000 transactions and checks the database after a remount.
func TestSQLite(t *testing.T) {
	need(t, "sqlite3")
	v := newVolume(t)
	m := v.mount("")
	var sql strings.Builder
	sql.WriteString("PRAGMA journal_mode=WAL;\nCREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&sql, "BEGIN; INSERT INTO t(v) VALUES ('row %d %s'); COMMIT;\n", i, strings.Repeat("x", i%200))
	}
	script := filepath.Join(t.TempDir(), "tx.sql")
	if err := os.WriteFile(script, []byte(sql.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, m.dir, "sh", "-c", "sqlite3 db.sqlite < "+script)
	m.unmount()
	m = v.mount("")
	if out := run(t, m.dir, "sqlite3", "db.sqlite", "PRAGMA integrity_check;"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("integrity_check: %s", out)
	}
	if out := run(t, m.dir, "sqlite3", "db.sqlite", "SELECT count(*) FROM t;"); strings.TrimSpace(out) != "1000" {
		t.Fatalf("rows: %s, want 1000", out)
	}
}

// TestGit makes a repository with commits and checks it with git fsck after a
// remount.
func TestGit(t *testing.T) {
	need(t, "git")
	v := newVolume(t)
	m := v.mount("")
	repo := m.path("repo")
	git := func(args ...string) string {
		return run(t, repo, "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	}
	run(t, m.dir, "git", "init", "-q", "repo")
	for i := 0; i < 5; i++ {
		if err := os.WriteFile(filepath.Join(repo, fmt.Sprintf("f%d.txt", i)), []byte(strings.Repeat(fmt.Sprintf("line %d\n", i), 1000)), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", ".")
		git("commit", "-q", "-m", fmt.Sprintf("commit %d", i))
	}
	git("gc", "-q")
	m.unmount()
	m = v.mount("")
	run(t, m.path("repo"), "git", "fsck", "--full", "--strict")
	if out := run(t, m.path("repo"), "git", "rev-list", "--count", "HEAD"); strings.TrimSpace(out) != "5" {
		t.Fatalf("commits: %s, want 5", out)
	}
}

// TestAtomicSave saves a large file the way checkpoint writers do (write a
// temporary file, fsync, os.replace) while readers keep opening the name:
// no reader may see ENOENT or a partial file.
func TestAtomicSave(t *testing.T) {
	need(t, "python3")
	v := newVolume(t)
	m := v.mount("")
	mib := size(256, 32)
	script := fmt.Sprintf(`
import os, sys, threading
path = sys.argv[1]
n = %d
def save(seed):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        block = bytes([seed]) * (1 << 20)
        for _ in range(n):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
save(1)
errors = []
stop = False
def reader():
    while not stop:
        try:
            with open(path, "rb") as f:
                head = f.read(1 << 16)
                f.seek(-(1 << 16), 2)
                tail = f.read()
            if len(set(head)) != 1 or head[:1] != tail[:1] or len(set(tail)) != 1:
                errors.append("mixed versions")
        except OSError as e:
            errors.append(repr(e))
ts = [threading.Thread(target=reader) for _ in range(2)]
for t in ts: t.start()
for seed in (2, 3):
    save(seed)
stop = True
for t in ts: t.join()
if errors:
    print(errors[:5]); sys.exit(1)
with open(path, "rb") as f:
    data = f.read()
assert len(data) == n << 20 and set(data) == {3}, (len(data), set(data))
`, mib)
	run(t, "", "python3", "-c", script, m.path("model.bin"))
	m.unmount()
	m = v.mount("")
	fi, err := os.Stat(m.path("model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != mib<<20 {
		t.Fatalf("size %d after remount, want %d", fi.Size(), mib<<20)
	}
	if _, err := os.Stat(m.path("model.bin.tmp")); !os.IsNotExist(err) {
		t.Fatalf("temporary file still there: %v", err)
	}
}

// TestMmapWrite writes through a shared mapping (python mmap) and reads the
// result after a remount.
func TestMmapWrite(t *testing.T) {
	need(t, "python3")
	v := newVolume(t)
	m := v.mount("")
	script := `
import mmap, os, sys
p = sys.argv[1]
with open(p, "wb") as f:
    f.write(b"\0" * (1 << 20))
with open(p, "r+b") as f:
    mm = mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    mm[4096:4096+11] = b"hello mmap!"
    mm[-5:] = b"tail!"
    mm.flush()
    mm.close()
with open(p, "rb") as f:
    mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    assert mm[4096:4096+11] == b"hello mmap!", mm[4096:4096+11]
    mm.close()
`
	run(t, "", "python3", "-c", script, m.path("mapped"))
	m.unmount()
	m = v.mount("")
	b, err := os.ReadFile(m.path("mapped"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 1<<20 || string(b[4096:4096+11]) != "hello mmap!" || string(b[len(b)-5:]) != "tail!" {
		t.Fatalf("after remount: %d bytes, %q ... %q", len(b), b[4096:4096+11], b[len(b)-5:])
	}
}
