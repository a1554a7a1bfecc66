package test

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unixSocketScript binds an AF_UNIX stream socket at argv[1] (mknod of a
// socket file in the mount), connects to it through the path, and echoes
// one message back. With argv[2] == "bind" it binds only (the file stays).
const unixSocketScript = `
import os, socket, sys
path = sys.argv[1]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
if sys.argv[2] == "bind":
    sys.exit(0)
srv.listen(1)
cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
cli.connect(path)
conn, _ = srv.accept()
cli.sendall(b"ping")
conn.sendall(conn.recv(4) + b" pong")
print(cli.recv(16).decode())
`

// throughFIFO passes a line from a writer process to a reader process
// through the FIFO at path, both unmodified programs (sh, cat).
func throughFIFO(t *testing.T, path, line string) {
	t.Helper()
	reader := exec.Command("cat", path)
	var out strings.Builder
	reader.Stdout, reader.Stderr = &out, &out
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- reader.Wait() }()
	if o, err := runErr("/", "sh", "-c", `printf '%s\n' "$1" > "$2"`, "sh", line, path); err != nil {
		t.Fatalf("writer: %v: %s", err, o)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("reader: %v: %s", err, out.String())
		}
	case <-time.After(time.Minute):
		_ = reader.Process.Kill()
		t.Fatal("the reader of the FIFO never got EOF")
	}
	if out.String() != line+"\n" {
		t.Fatalf("read %q through the FIFO, want %q", out.String(), line+"\n")
	}
}

// checkSpecial checks that path is a FIFO or socket with permission bits
// perm.
func checkSpecial(t *testing.T, path string, typ, perm uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	if st.Mode&syscall.S_IFMT != typ || st.Mode&0o7777 != perm || st.Size != 0 || st.Nlink != 1 {
		t.Errorf("%s: mode %o size %d nlink %d, want type %o perm %o, size 0, nlink 1", path, st.Mode, st.Size, st.Nlink, typ, perm)
	}
}

// TestSpecialFiles: mkfifo and the bind of a Unix socket make entries that
// every mount of the volume shows, across a remount; a writer and a reader
// pass data through the FIFO on each mount. mknod of a regular file makes
// an empty file (devices: TestDeviceNodes).
func TestSpecialFiles(t *testing.T) {
	need(t, "mkfifo", "python3", "sh", "cat", "ls")
	v := newVolume(t)
	m1 := v.mount("")
	fifo, sock := m1.path("fifo"), m1.path("sock")
	run(t, m1.dir, "mkfifo", "-m", "0640", fifo)
	out := run(t, m1.dir, "python3", "-c", unixSocketScript, sock, "echo")
	if strings.TrimSpace(out) != "ping pong" {
		t.Fatalf("through the socket: %q, want \"ping pong\"", out)
	}
	checkSpecial(t, fifo, syscall.S_IFIFO, 0o640)
	var sst syscall.Stat_t
	if err := syscall.Lstat(sock, &sst); err != nil || sst.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		t.Fatalf("socket file: mode %o, %v", sst.Mode, err)
	}
	sockPerm := sst.Mode & 0o7777
	throughFIFO(t, fifo, "one")
	if ls := run(t, m1.dir, "ls", "-l", m1.dir); !strings.Contains(ls, "prw-r-----") || !strings.Contains(ls, "\ns") {
		t.Errorf("ls -l shows no FIFO or socket:\n%s", ls)
	}

	// A regular file by mknod is an empty file.
	if err := syscall.Mknod(m1.path("reg"), syscall.S_IFREG|0o600, 0); err != nil {
		t.Errorf("mknod of a regular file: %v", err)
	} else if fi, err := os.Lstat(m1.path("reg")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("mknod'ed regular file: %v, %v", fi, err)
	}

	// A second mount of the volume sees them, and its FIFO works.
	m2 := v.mount("")
	deadline := time.Now().Add(time.Minute)
	for {
		_, e1 := os.Lstat(m2.path("fifo"))
		_, e2 := os.Lstat(m2.path("sock"))
		if e1 == nil && e2 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second mount does not show the FIFO and the socket: %v, %v", e1, e2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	checkSpecial(t, m2.path("fifo"), syscall.S_IFIFO, 0o640)
	checkSpecial(t, m2.path("sock"), syscall.S_IFSOCK, sockPerm)
	throughFIFO(t, m2.path("fifo"), "two")

	// A remount shows them too; then they are removed like any name.
	m1.unmount()
	m2.unmount()
	m3 := v.mount("")
	checkSpecial(t, m3.path("fifo"), syscall.S_IFIFO, 0o640)
	checkSpecial(t, m3.path("sock"), syscall.S_IFSOCK, sockPerm)
	throughFIFO(t, m3.path("fifo"), "three")
	if err := os.Rename(m3.path("fifo"), m3.path("fifo2")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"fifo2", "sock", "reg"} {
		if err := os.Remove(m3.path(n)); err != nil {
			t.Fatal(err)
		}
	}
	// A socket can be bound again at the same path once removed.
	run(t, m3.dir, "python3", "-c", unixSocketScript, m3.path("sock"), "bind")
	checkSpecial(t, m3.path("sock"), syscall.S_IFSOCK, sockPerm)
}

// checkDevice checks that path is a device node of type typ (S_IFCHR or
// S_IFBLK), permission bits perm and number major:minor, with no size.
func checkDevice(t *testing.T, path string, typ, perm, major, minor uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	if st.Mode&syscall.S_IFMT != typ || st.Mode&0o7777 != perm || unix.Major(st.Rdev) != major || unix.Minor(st.Rdev) != minor || st.Size != 0 {
		t.Errorf("%s: mode %o rdev %d:%d size %d, want type %o perm %o rdev %d:%d, size 0",
			path, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), st.Size, typ, perm, major, minor)
	}
}

// openDevice opens path for reading and writing and says how it failed; a
// descriptor it got is closed.
func openDevice(path string) error {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NONBLOCK, 0)
	if err == nil {
		syscall.Close(fd)
	}
	return err
}

// TestDeviceNodes: mknod of block and character devices makes nodes that
// every mount of the volume shows with their type, mode, owner and number
// (stat, ls -l), across a remount, and that chmod, chown, link, rename and
// unlink treat as any name, as ext4 and tmpfs do. No mount opens one as a
// device: the mount is nodev (in /proc/self/mountinfo), so the kernel
// refuses the open of the node of /dev/null (1:3) with EACCES on the mount
// that made it and on another that read it from the bucket. fsck passes,
// with the nodes and once they are gone.
func TestDeviceNodes(t *testing.T) {
	need(t, "ls")
	v := newVolume(t)
	m1 := v.mount("")
	if mi := mountInfo(t, m1.dir); !strings.Contains(strings.Fields(mi)[5], "nodev") {
		t.Fatalf("the mount is not nodev: %q", mi)
	}
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	devs := []struct {
		name         string
		typ, perm    uint32
		major, minor uint32
	}{
		{"null", syscall.S_IFCHR, 0o666, 1, 3},
		{"sda", syscall.S_IFBLK, 0o660, 8, 0},
		{"big", syscall.S_IFCHR, 0o600, 4095, 1<<20 - 1}, // Linux's largest
		{"whiteout", syscall.S_IFCHR, 0, 0, 0},           // overlayfs's whiteout
	}
	for _, d := range devs {
		if err := syscall.Mknod(m1.path(d.name), d.typ|d.perm, int(unix.Mkdev(d.major, d.minor))); err != nil {
			t.Fatalf("mknod %s: %v", d.name, err)
		}
		checkDevice(t, m1.path(d.name), d.typ, d.perm, d.major, d.minor)
	}
	if err := openDevice(m1.path("null")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("open of a device node on the mount that made it: %v, want EACCES (nodev)", err)
	}
	if ls := run(t, m1.dir, "ls", "-l", m1.dir); !regexp.MustCompile(`(?m)^crw-rw-rw- .* 1, +3 .* null$`).MatchString(ls) ||
		!regexp.MustCompile(`(?m)^brw-rw---- .* 8, +0 .* sda$`).MatchString(ls) {
		t.Errorf("ls -l does not show the devices:\n%s", ls)
	}
	// Names like any other.
	if err := os.Chmod(m1.path("sda"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(m1.path("sda"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(m1.path("null"), m1.path("null2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m1.path("big"), m1.path("big2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m1.path("whiteout")); err != nil {
		t.Fatal(err)
	}

	// Another mount reads them from the bucket: the same attributes, and no
	// device opened.
	m2 := v.mount("")
	deadline := time.Now().Add(time.Minute)
	for {
		_, e1 := os.Lstat(m2.path("big2"))
		_, e2 := os.Lstat(m2.path("whiteout"))
		if e1 == nil && errors.Is(e2, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second mount does not show the changes: %v, %v", e1, e2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	shown := func(m *mount) {
		t.Helper()
		checkDevice(t, m.path("null"), syscall.S_IFCHR, 0o666, 1, 3)
		checkDevice(t, m.path("null2"), syscall.S_IFCHR, 0o666, 1, 3)
		checkDevice(t, m.path("sda"), syscall.S_IFBLK, 0o640, 8, 0)
		checkDevice(t, m.path("big2"), syscall.S_IFCHR, 0o600, 4095, 1<<20-1)
		var st syscall.Stat_t
		if err := syscall.Lstat(m.path("sda"), &st); err != nil || st.Uid != 1234 || st.Gid != 5678 {
			t.Errorf("owner of sda: %d:%d, %v", st.Uid, st.Gid, err)
		}
		if err := syscall.Lstat(m.path("null"), &st); err != nil || st.Nlink != 2 {
			t.Errorf("links of null: %d, %v", st.Nlink, err)
		}
		if err := openDevice(m.path("null")); !errors.Is(err, syscall.EACCES) {
			t.Errorf("open of a device node read from the bucket: %v, want EACCES (nodev)", err)
		}
		if err := openDevice(m.path("sda")); !errors.Is(err, syscall.EACCES) {
			t.Errorf("open of a block device node read from the bucket: %v, want EACCES (nodev)", err)
		}
	}
	shown(m2)
	m1.unmount()
	m2.unmount()
	fsckClean(t, v.store()) // fsck passes the device nodes by
	m3 := v.mount("")
	shown(m3)
	for _, n := range []string{"null", "null2", "sda", "big2"} {
		if err := os.Remove(m3.path(n)); err != nil {
			t.Fatal(err)
		}
	}
	if ents, err := os.ReadDir(m3.dir); err != nil || len(ents) != 0 {
		t.Errorf("after the removals: %v, %v", ents, err)
	}
	m3.unmount()
	fsckClean(t, v.store())
}
