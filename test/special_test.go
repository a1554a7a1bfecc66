package test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
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
// pass data through the FIFO on each mount. Devices are refused with EPERM;
// mknod of a regular file makes an empty file.
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

	// Devices are refused; a regular file by mknod is an empty file.
	if err := syscall.Mknod(m1.path("null"), syscall.S_IFCHR|0o666, int(unixMkdev(1, 3))); !errors.Is(err, syscall.EPERM) {
		t.Errorf("mknod of a character device: %v, want EPERM", err)
	}
	if err := syscall.Mknod(m1.path("disk"), syscall.S_IFBLK|0o660, int(unixMkdev(8, 0))); !errors.Is(err, syscall.EPERM) {
		t.Errorf("mknod of a block device: %v, want EPERM", err)
	}
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

func unixMkdev(major, minor uint32) uint64 {
	return uint64(major)<<8 | uint64(minor)
}
