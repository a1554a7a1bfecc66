package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
)

// walWriter is the program TestWALCrashSIGKILL runs through the mount:
// argv: mount dir, the offset of file a after which it fsyncs a once, the
// mtime (ns) it gives file c. Every byte it writes is walPattern of its file's
// tag and offset. It prints "ack <file> <end>" after each write returns. File
// b, written faster, waits for a to keep within four times its size until a
// line comes on stdin.
const walWriter = `
import array, os, sys, threading, time

d, fsync_at, mtime = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def pat(tag, off, n):
    w = off // 8
    a = array.array('Q', range((w << 8) | tag, ((w + n // 8) << 8) | tag, 256))
    if sys.byteorder != 'little':
        a.byteswap()
    return a.tobytes()

lock = threading.Lock()
def say(*a):
    with lock:
        print(*a, flush=True)

# c: written and closed, then truncated and its mtime set.
c = os.path.join(d, 'c')
fd = os.open(c, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
buf = pat(0xC3, 0, 256 * 1024)
if os.write(fd, buf) != len(buf):
    sys.exit('short write to c')
os.close(fd)
for op, call in (('truncate', lambda: os.truncate(c, 100000)),
                 ('utime', lambda: os.utime(c, ns=(mtime, mtime)))):
    try:
        call()
    except OSError as e:
        say('cerr', op, e.errno)
say('c done')

acked = {'a': 0, 'b': 0}
dead = threading.Event()
free = threading.Event()  # set by a line on stdin: b stops waiting for a

def release():
    sys.stdin.readline()
    free.set()
threading.Thread(target=release, daemon=True).start()

def writer(name, tag, chunk):
    off = 0
    try:
        fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        synced = False
        while True:
            # b keeps within a few times a's size until released.
            while name == 'b' and off > 4 * acked['a'] + chunk and not dead.is_set() and not free.is_set():
                time.sleep(0.001)
            buf = pat(tag, off, chunk)
            n = os.write(fd, buf)
            if n != chunk:
                say('short', name, off, n)
                dead.set()
                return
            off += n
            acked[name] = off
            say('ack', name, off)
            if name == 'a' and not synced and off >= fsync_at:
                os.fsync(fd)
                synced = True
                say('fsync', name, off)
    except OSError as e:
        dead.set()
        say('err', name, off, e.errno)

ts = [threading.Thread(target=writer, args=('a', 0xA1, 4096)),
      threading.Thread(target=writer, args=('b', 0xB2, 1 << 20))]
for t in ts:
    t.start()
for t in ts:
    t.join()
`

// walPattern is what walWriter writes at [off, off+n) of the file tagged tag
// (off and n multiples of 8): each 8-byte little-endian word holds its index
// in the file shifted left by 8, or'ed with tag.
func walPattern(tag byte, off, n int64) []byte {
	b := make([]byte, n)
	for i := int64(0); i < n; i += 8 {
		w := uint64((off+i)/8)<<8 | uint64(tag)
		for j := range int64(8) {
			b[i+j] = byte(w >> (8 * j))
		}
	}
	return b
}

// checkWritten checks a file walWriter wrote in chunk-sized writes whose last
// acknowledged one ended at acked: every acknowledged byte is there, and what
// follows is whole writes (at most the one in flight), each with its bytes.
func checkWritten(t *testing.T, p string, tag byte, chunk, acked int64) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	size := int64(len(got))
	if fi, err := os.Stat(p); err != nil {
		t.Errorf("stat %s: %v", p, err)
	} else if fi.Size() != size {
		t.Errorf("%s: stat says %d bytes, read %d", p, fi.Size(), size)
	}
	if size < acked {
		t.Errorf("%s: %d bytes, but writes through %d were acknowledged", p, size, acked)
	}
	if size%chunk != 0 {
		t.Errorf("%s: %d bytes, not at a write boundary (writes of %d): a write was half applied", p, size, chunk)
	}
	if size > acked+chunk {
		t.Errorf("%s: %d bytes, more than the acknowledged %d and the one write in flight (%d)", p, size, acked, chunk)
	}
	want := walPattern(tag, 0, size)
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Errorf("%s: byte %d (in the write at %d) is %#x, want %#x (acknowledged through %d, size %d)",
			p, i, int64(i)/chunk*chunk, got[i], want[i], acked, size)
	}
	t.Logf("%s: acknowledged %d, %d bytes after the crash", p, acked, size)
}

// walKeys lists the objects under the wal/ folders of every file of a
// volume: records and leases.
func walKeys(t *testing.T, st staging.Store) (records, owners []string) {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, "f/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if !strings.Contains(o.Key, "/wal/") {
			continue
		}
		if strings.HasSuffix(o.Key, "/wal/owner") {
			owners = append(owners, o.Key)
		} else {
			records = append(records, o.Key)
		}
	}
	return records, owners
}

// waitWALClean waits until no record or lease is left under any wal/.
func waitWALClean(t *testing.T, st staging.Store) {
	t.Helper()
	waitFor(t, 15*time.Second, func() error {
		records, owners := walKeys(t, st)
		if len(records)+len(owners) > 0 {
			return fmt.Errorf("left under wal/: %d records %v, leases %v", len(records), records, owners)
		}
		return nil
	})
}

// TestWALCrashSIGKILL: the built binary mounted with wal=on is killed with
// SIGKILL while a program appends to two files (4 KiB and 1 MiB writes) and
// has fsynced one of them; a new mount finds every acknowledged byte, and
// nothing of the writes in flight but whole writes; a truncate and utime made
// before are kept; the replay publishes and removes the records; a mount
// without the WAL reads the result.
func TestWALCrashSIGKILL(t *testing.T) {
	need(t, "python3", "fusermount3")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	dir := mountpoint(t)

	logPath := filepath.Join(t.TempDir(), "mount.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	mnt := exec.Command(bin, "mount", "-f", "-o", withNamespace(opts)+",wal=on,log=debug", store, dir)
	mnt.Env = env
	mnt.Stdout, mnt.Stderr = logFile, logFile
	if err := mnt.Start(); err != nil {
		t.Fatal(err)
	}
	mntExited := make(chan error, 1)
	go func() { mntExited <- mnt.Wait() }()
	killed := false
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("the killed mount's log:\n%s", b)
		}
		if !killed {
			_ = mnt.Process.Kill()
			<-mntExited
		}
		if isMounted(t, dir) {
			_, _ = runErr("", "fusermount3", "-uz", dir)
		}
	})
	waitFor(t, 30*time.Second, func() error {
		select {
		case err := <-mntExited:
			killed = true
			b, _ := os.ReadFile(logPath)
			t.Fatalf("ckptfs mount -f exited: %v\n%s", err, b)
		default:
		}
		if !isMounted(t, dir) {
			return errors.New("not mounted yet")
		}
		return nil
	})

	const (
		chunkA   = 4 << 10
		chunkB   = 1 << 20
		mtimeC   = int64(1_500_000_000_123_456_789)
		sizeC    = 100000
		writtenC = 256 << 10
	)
	target := size(8<<20, 2<<20) // acknowledged bytes of each of a and b before the kill
	fsyncAt := target / 2

	py := exec.Command("python3", "-c", walWriter, dir, strconv.FormatInt(fsyncAt, 10), strconv.FormatInt(mtimeC, 10))
	stdout, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := py.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pyErr := filepath.Join(t.TempDir(), "writer.stderr")
	ef, err := os.Create(pyErr)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	py.Stderr = ef
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		acked   = map[string]int64{}
		fsynced int64 // a's offset at its fsync, 0 before
		cDone   bool
		cErrs   []string // truncate or utime of c that failed
		lines   []string // the rest: errors
		pyWait  error
	)
	pyDone := make(chan struct{})
	progress := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			mu.Lock()
			switch {
			case len(f) == 3 && f[0] == "ack":
				n, _ := strconv.ParseInt(f[2], 10, 64)
				acked[f[1]] = n
			case len(f) == 3 && f[0] == "fsync":
				fsynced, _ = strconv.ParseInt(f[2], 10, 64)
			case len(f) == 2 && f[0] == "c":
				cDone = true
			case len(f) == 3 && f[0] == "cerr":
				n, _ := strconv.Atoi(f[2])
				cErrs = append(cErrs, fmt.Sprintf("%s of c: %v", f[1], syscall.Errno(n)))
			default:
				lines = append(lines, sc.Text())
			}
			mu.Unlock()
			select {
			case progress <- struct{}{}:
			default:
			}
		}
		err := py.Wait()
		mu.Lock()
		pyWait = err
		mu.Unlock()
		close(pyDone)
	}()
	t.Cleanup(func() {
		select {
		case <-pyDone:
		default:
			_ = py.Process.Kill()
			<-pyDone
		}
	})
	stderr := func() string { b, _ := os.ReadFile(pyErr); return string(b) }

	// Until a and b have a few MiB acknowledged and a has written past its
	// fsync.
	start := time.Now()
	deadline := time.After(2 * time.Minute)
	for ready := false; !ready; {
		select {
		case <-progress:
		case <-pyDone:
			t.Fatalf("the writer exited before the kill: %v\n%q\n%s", pyWait, lines, stderr())
		case <-deadline:
			mu.Lock()
			a, b, s := acked["a"], acked["b"], fsynced
			mu.Unlock()
			t.Fatalf("the writer did not get far within 2 minutes: acknowledged a %d, b %d, fsync at %d", a, b, s)
		}
		mu.Lock()
		ready = cDone && acked["a"] >= target && acked["b"] >= target && fsynced > 0 && acked["a"] > fsynced
		early := slices.Clone(lines)
		mu.Unlock()
		if len(early) > 0 {
			t.Fatalf("the writer failed before the kill: %q", early)
		}
	}
	t.Logf("writing for %v before the kill", time.Since(start))

	// Let b write as fast as it can, and kill the mount at some point of one
	// of its writes: after it acknowledged two more (running free), and a
	// little while later, so that the kill may land while a 1 MiB write is
	// in flight (a's 4 KiB ones are in flight most of the time).
	mu.Lock()
	from := acked["b"]
	mu.Unlock()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	for free := false; !free; {
		select {
		case <-progress:
		case <-pyDone:
			t.Fatalf("the writer exited before the kill: %v\n%q\n%s", pyWait, lines, stderr())
		}
		mu.Lock()
		free = acked["b"] >= from+2*chunkB
		mu.Unlock()
	}
	time.Sleep(time.Duration(rand.N(20_000)) * time.Microsecond)
	if err := mnt.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	if err := <-mntExited; err == nil {
		t.Fatal("the mount exited cleanly after SIGKILL")
	}
	select {
	case <-pyDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the writer still runs 30s after the mount was killed")
	}
	// The scanner is done: no more writes to these.
	ackA, ackB := acked["a"], acked["b"]
	t.Logf("acknowledged: a %d, b %d; a fsynced at %d; the writer exited with %v, saying %q", ackA, ackB, fsynced, pyWait, lines)
	if pyWait != nil {
		t.Errorf("the writer: %v\n%s", pyWait, stderr())
	}
	stopped := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "err" {
			t.Errorf("the writer says %q", l)
			continue
		}
		n, _ := strconv.Atoi(f[3])
		// ECONNABORTED: a write in flight when the connection went.
		if e := syscall.Errno(n); e != syscall.ENOTCONN && e != syscall.ECONNABORTED && e != syscall.EIO {
			t.Errorf("write to %s after the kill: %v (%d), want ENOTCONN, ECONNABORTED or EIO", f[1], e, n)
		}
		stopped++
	}
	if stopped != 2 {
		t.Errorf("%d writers stopped by an error from the dead mount, want both", stopped)
	}
	// Acknowledged before the crash, so they must hold after it.
	for _, e := range cErrs {
		t.Errorf("before the crash, on a mount with the WAL: %s", e)
	}
	run(t, "", "fusermount3", "-uz", dir)

	st := v.store()
	records, owners := walKeys(t, st)
	t.Logf("after the kill: %d WAL records, leases %v", len(records), owners)
	if len(records) == 0 || len(owners) == 0 {
		t.Fatalf("after the kill: %d WAL records and leases %v; want records of the writes since the last publish and the dead writer's leases",
			len(records), owners)
	}

	m := v.mount("wal=on")
	// c is looked at first as a program would after a crash: stat, then
	// read (which opens it), then stat again.
	checkC := func(when string) {
		t.Helper()
		fi, err := os.Stat(m.path("c"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != sizeC {
			t.Errorf("c %s: size %d, truncated to %d before the crash", when, fi.Size(), sizeC)
		}
		if got := fi.ModTime().UnixNano(); got != mtimeC {
			t.Errorf("c %s: mtime %d (%v), set to %d before the crash", when, got, fi.ModTime(), mtimeC)
		}
	}
	checkC("after the crash, before an open")
	if b, err := os.ReadFile(m.path("c")); err != nil || !bytes.Equal(b, walPattern(0xC3, 0, writtenC)[:sizeC]) {
		t.Errorf("c reads %d bytes (%v), want the first %d of the %d written", len(b), err, sizeC, writtenC)
	}
	checkC("after the crash, opened")
	checkWritten(t, m.path("a"), 0xA1, chunkA, ackA)
	checkWritten(t, m.path("b"), 0xB2, chunkB, ackB)
	m.unmount()
	// The replay published the records and the unmount waited for their
	// deletion and released the leases.
	waitWALClean(t, st)

	plain := v.mount("")
	checkWritten(t, plain.path("a"), 0xA1, chunkA, ackA)
	checkWritten(t, plain.path("b"), 0xB2, chunkB, ackB)
	plain.unmount()
	if records, owners := walKeys(t, st); len(records)+len(owners) > 0 {
		t.Errorf("after a mount without the WAL: %v %v under wal/", records, owners)
	}
}

// TestWALCrossMount: a file written with the WAL reads the same without it,
// one overwritten without it reads the same with it, and an append with it
// reads the same without it.
func TestWALCrossMount(t *testing.T) {
	need(t, "cp", "cmp", "dd")
	v := newVolume(t)
	n := size(24<<20, 3<<20)
	src := filepath.Join(t.TempDir(), "src")
	randomFile(t, src, n)
	want, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	expect := filepath.Join(t.TempDir(), "expect")
	save := func() {
		t.Helper()
		if err := os.WriteFile(expect, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(m *mount, when string) {
		t.Helper()
		if out, err := runErr("", "cmp", expect, m.path("f")); err != nil {
			t.Fatalf("%s: %v\n%s", when, err, out)
		}
	}

	m := v.mount("wal=on")
	run(t, "", "cp", src, m.path("f"))
	m.unmount()

	m = v.mount("")
	save()
	check(m, "written with the WAL, read without")
	// 1 MiB of new bytes across a block boundary, not at one.
	patch := filepath.Join(t.TempDir(), "patch")
	randomFile(t, patch, 1<<20)
	p, err := os.ReadFile(patch)
	if err != nil {
		t.Fatal(err)
	}
	const at = 1<<20 + 1234
	run(t, "", "dd", "if="+patch, "of="+m.path("f"), "bs=4096", "oflag=seek_bytes", fmt.Sprintf("seek=%d", at), "conv=notrunc", "status=none")
	copy(want[at:], p)
	m.unmount()

	m = v.mount("wal=on")
	save()
	check(m, "overwritten without the WAL, read with it")
	f, err := os.OpenFile(m.path("f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail := p[:300000]
	if _, err := f.Write(tail); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want = append(want, tail...)
	m.unmount()

	m = v.mount("")
	save()
	check(m, "appended with the WAL, read without")
	m.unmount()
	if records, owners := walKeys(t, v.store()); len(records)+len(owners) > 0 {
		t.Errorf("left under wal/: %v %v", records, owners)
	}
}

// TestWALSecondWriter: while one mount writes a file with the WAL, a write
// to it from another mount with the WAL fails with EBUSY; once the first
// closes it, the other's write goes through and both writes are kept.
func TestWALSecondWriter(t *testing.T) {
	v, a, b, fa, fb := sharedWriters(t)
	_, err := fb.WriteAt([]byte("from b\n"), 7)
	if !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("write from a second mount while the first holds the file: %v, want EBUSY", err)
	}
	// a goes on writing meanwhile.
	if _, err := fa.WriteAt([]byte("more a\n"), 7); err != nil {
		t.Fatalf("the first writer, after a refused second one: %v", err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		_, err := fb.WriteAt([]byte("from b\n"), 14)
		return err
	})
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	a.unmount()
	b.unmount()
	checkShared(t, v, "from a\nmore a\nfrom b\n")
}

// TestWALWriterLetsGoAtClose: a mount whose last descriptor open for
// writing a file closes lets the WAL's lease go once its last publish
// lands, though it still holds the file open for reading: a write from
// another mount right after the close goes through (it waits for that
// publish at most), and both mounts' bytes are kept.
func TestWALWriterLetsGoAtClose(t *testing.T) {
	v, a, b, fa, fb := sharedWriters(t)
	ra, err := os.Open(a.path("shared")) // a reader a keeps open
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ra.Close() }) // before the unmounts, should the test stop early
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fb.WriteAt([]byte("from b\n"), 7); err != nil {
		t.Fatalf("a write from another mount right after the writer closed (its reader still open): %v", err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	// a writes again: it takes the lease back from b, on b's checkpoint.
	waitFor(t, 10*time.Second, func() error {
		f, err := os.OpenFile(a.path("shared"), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte("again\n"), 14); err != nil {
			return err
		}
		return f.Close()
	})
	if err := ra.Close(); err != nil {
		t.Fatal(err)
	}
	a.unmount()
	b.unmount()
	checkShared(t, v, "from a\nfrom b\nagain\n")
}

// sharedWriters mounts a new volume twice with the WAL (a, b), writes
// "from a\n" into file "shared" through a, keeping fa open, and opens the
// file for writing through b (fb) once b sees it. Both descriptors close
// when the test ends, before the unmounts.
func sharedWriters(t *testing.T) (v *volume, a, b *mount, fa, fb *os.File) {
	t.Helper()
	v = newVolume(t)
	a = v.mount("wal=on,ns_refresh=100ms")
	b = v.mount("wal=on,ns_refresh=100ms")
	fa, err := os.Create(a.path("shared"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fa.Close() })
	if _, err := fa.WriteAt([]byte("from a\n"), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		var err error
		fb, err = os.OpenFile(b.path("shared"), os.O_WRONLY, 0)
		return err
	})
	t.Cleanup(func() { fb.Close() })
	return v, a, b, fa, fb
}

// checkShared reads file "shared" of v through a new mount without the WAL
// (the writers' mounts are gone): it must hold want.
func checkShared(t *testing.T, v *volume, want string) {
	t.Helper()
	c := v.mount("")
	got, err := os.ReadFile(c.path("shared"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("after both: %q, want %q", got, want)
	}
}

// TestWALSqlite: sqlite3 commits transactions one by one on a mount with
// the WAL (each commit fsyncs its journal and the database); the database
// checks out there, and on a mount without the WAL afterwards.
func TestWALSqlite(t *testing.T) {
	need(t, "sqlite3")
	v := newVolume(t)
	m := v.mount("wal=on")
	txns := int(size(200, 100))
	var sql strings.Builder
	sql.WriteString("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, n INTEGER);\n")
	for i := 0; i < txns; i++ {
		fmt.Fprintf(&sql, "BEGIN; INSERT INTO t (v, n) VALUES (printf('row %%d %%s', %d, hex(randomblob(64))), %d); UPDATE t SET n = n + 1 WHERE id %% 7 = %d; COMMIT;\n", i, i, i%7)
	}
	script := filepath.Join(t.TempDir(), "txns.sql")
	if err := os.WriteFile(script, []byte(sql.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	db := m.path("test.db")
	run(t, "", "sqlite3", db, ".read "+script)
	query := func(db, q string) string {
		t.Helper()
		return strings.TrimSpace(run(t, "", "sqlite3", db, q))
	}
	if got := query(db, "PRAGMA integrity_check;"); got != "ok" {
		t.Fatalf("integrity_check with the WAL: %q", got)
	}
	// Row i+1 is inserted with n = i; then n of every row whose id is i
	// modulo 7 goes up by one.
	ns := make([]int, txns+1)
	for i := 0; i < txns; i++ {
		ns[i+1] = i
		for id := 1; id <= i+1; id++ {
			if id%7 == i%7 {
				ns[id]++
			}
		}
	}
	total := 0
	for _, n := range ns {
		total += n
	}
	sum := fmt.Sprintf("%d|%d", txns, total)
	if got := query(db, "SELECT count(*), sum(n) FROM t;"); got != sum {
		t.Fatalf("count and sum with the WAL: %q, want %q", got, sum)
	}
	m.unmount()

	plain := v.mount("")
	db = plain.path("test.db")
	if got := query(db, "PRAGMA integrity_check;"); got != "ok" {
		t.Fatalf("integrity_check without the WAL: %q", got)
	}
	if got := query(db, "SELECT count(*), sum(n) FROM t;"); got != sum {
		t.Fatalf("count and sum without the WAL: %q, want %q", got, sum)
	}
	if _, err := os.Stat(plain.path("test.db-journal")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a journal is left: %v", err)
	}
}

// The log of an unlinked file written with the WAL goes with its data when
// the cleaner deletes the orphan: records of writes never published and the
// lease included.
func TestWALUnlink(t *testing.T) {
	v := newVolume(t)
	m := v.mount("wal=on")
	f, err := os.Create(m.path("u"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := f.Write(bytes.Repeat([]byte{byte(i)}, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	st := v.store()
	records, owners := walKeys(t, st)
	if len(records) == 0 || len(owners) != 1 {
		t.Fatalf("while written: %d records, leases %v; want records and one lease", len(records), owners)
	}
	if err := os.Remove(m.path("u")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("after the unlink")); err != nil {
		t.Fatalf("write to an unlinked open file: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m.unmount()
	reapOrphans(t, st)
	if n := countObjects(t, st, "f/"); n != 0 {
		t.Fatalf("%d objects left under f/", n)
	}
}

// walPwriter writes argv[2] MiB to argv[1] with pwrite, 1 MiB at a time, in
// walPattern with tag 0xD4; it neither fsyncs nor closes, says "done" and
// waits for its stdin to close.
const walPwriter = `
import array, os, sys

p, n = sys.argv[1], int(sys.argv[2])

def pat(tag, off, n):
    w = off // 8
    a = array.array('Q', range((w << 8) | tag, ((w + n // 8) << 8) | tag, 256))
    if sys.byteorder != 'little':
        a.byteswap()
    return a.tobytes()

fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
for i in range(n):
    buf = pat(0xD4, i << 20, 1 << 20)
    if os.pwrite(fd, buf, i << 20) != len(buf):
        sys.exit('short write')
print('done', flush=True)
sys.stdin.read()
`

// processState is the state letter of process pid (field 3 of
// /proc/<pid>/stat), or 0.
func processState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// TestWALRemountWhileZombie: a mount with the WAL is killed (SIGKILL) after
// a program wrote 64 MiB with pwrite and neither fsynced nor closed; the
// killed process is left unreaped (a zombie: its pid still exists), and a new
// mount made at once shows every written byte, to stat and to a read, and
// replays the records (their writer is known dead).
func TestWALRemountWhileZombie(t *testing.T) {
	need(t, "python3", "fusermount3")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	dir := mountpoint(t)
	logPath := filepath.Join(t.TempDir(), "mount.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	mnt := exec.Command(bin, "mount", "-f", "-o", withNamespace(opts)+",wal=on", store, dir)
	mnt.Env = env
	mnt.Stdout, mnt.Stderr = logFile, logFile
	if err := mnt.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			_ = mnt.Process.Kill()
			_ = mnt.Wait()
		}
		if isMounted(t, dir) {
			_, _ = runErr("", "fusermount3", "-uz", dir)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("the killed mount's log:\n%s", b)
		}
	})
	waitFor(t, 30*time.Second, func() error {
		if s := processState(mnt.Process.Pid); s == 'Z' || s == 0 {
			t.Fatalf("ckptfs mount -f exited")
		}
		if !isMounted(t, dir) {
			return errors.New("not mounted yet")
		}
		return nil
	})

	mib := size(64, 16)
	py := exec.Command("python3", "-c", walPwriter, filepath.Join(dir, "f"), strconv.FormatInt(mib, 10))
	stdin, err := py.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	py.Stderr = os.Stderr
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = py.Process.Kill(); _ = py.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "done\n" {
		t.Fatalf("the writer: %q, %v", line, err)
	}

	if err := mnt.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped: the pid stays, as a zombie, until Wait below.
	waitFor(t, 30*time.Second, func() error {
		if s := processState(mnt.Process.Pid); s != 'Z' {
			return fmt.Errorf("the killed mount is in state %q", s)
		}
		return nil
	})
	_ = stdin.Close()
	run(t, "", "fusermount3", "-uz", dir)

	m := v.mount("wal=on")
	want := walPattern(0xD4, 0, mib<<20)
	fi, err := os.Stat(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != int64(len(want)) {
		t.Errorf("stat at once after the crash: %d bytes, want the %d written", fi.Size(), len(want))
	}
	got, err := os.ReadFile(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("read at once after the crash: %d bytes, common prefix %d; want the %d written", len(got), commonLen(got, want), len(want))
	}
	if s := processState(mnt.Process.Pid); s != 'Z' {
		t.Fatalf("the killed mount was reaped (state %q) before the checks", s)
	}
	_ = mnt.Wait()
	reaped = true
	// Its writer known dead, the records were replayed and published; the
	// unmount deletes them and releases the lease.
	m.unmount()
	waitWALClean(t, v.store())
	plain := v.mount("")
	if got, err := os.ReadFile(plain.path("f")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("published: %d bytes (%v), want the %d written", len(got), err, len(want))
	}
}

func commonLen(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// mountFaults is volume.mount with the mount's store behind fault injection.
func (v *volume) mountFaults(opts string) (*mount, *faulty.Store) {
	v.t.Helper()
	var faults *faulty.Store
	m := v.mountWrapped(opts, func(st staging.Store) staging.Store {
		faults = faulty.New(st, 1)
		return faults
	})
	return m, faults
}

// walOwner reads the lease of the only file of a volume that has one.
func walOwner(t *testing.T, st staging.Store) (owner struct {
	Writer  string
	Expires time.Time
}, ok bool) {
	t.Helper()
	_, owners := walKeys(t, st)
	if len(owners) != 1 {
		return owner, false
	}
	b, _, err := st.Get(context.Background(), owners[0], staging.Whole())
	if err != nil {
		return owner, false
	}
	if err := json.Unmarshal(b, &owner); err != nil {
		t.Fatalf("lease %s: %v", owners[0], err)
	}
	return owner, true
}

// TestWALStatKeepsWritersLease: a store outage stops the renewals of a
// writer's lease until it expires; a stat from another mount meanwhile
// reports the writer's logged writes without taking the lease (before, it
// took it, replayed, published and let it go, and every later write of the
// writer failed with EIO). Once the store is back the writer renews its
// lease and writes on.
func TestWALStatKeepsWritersLease(t *testing.T) {
	v := newVolume(t)
	a, faults := v.mountFaults("wal=on,wal_lease=3s,ns_refresh=100ms")
	b := v.mount("wal=on,wal_lease=3s,ns_refresh=100ms")
	st := v.store()

	fa, err := os.Create(a.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if _, err := fa.WriteAt([]byte("logged "), 0); err != nil {
		t.Fatal(err)
	}
	first, ok := walOwner(t, st)
	if !ok {
		t.Fatal("no lease while the file is written")
	}
	outage := faults.Add(faulty.Rule{Op: staging.OpAny, Match: func(key string) bool { return strings.HasSuffix(key, "/wal/owner") }, Kind: faulty.Error})
	waitFor(t, 30*time.Second, func() error {
		if o, ok := walOwner(t, st); ok && time.Now().Before(o.Expires) {
			return fmt.Errorf("the lease holds until %v", o.Expires)
		}
		return nil
	})
	var fi os.FileInfo
	waitFor(t, 10*time.Second, func() error {
		var err error
		fi, err = os.Stat(b.path("f"))
		return err
	})
	if fi.Size() != 7 {
		t.Errorf("stat from another mount: %d bytes, want the writer's 7 logged", fi.Size())
	}
	if o, ok := walOwner(t, st); !ok || o.Writer != first.Writer {
		t.Errorf("the lease after a stat from another mount: %+v (found %v), want the writer's own, untouched", o, ok)
	}
	if records, _ := walKeys(t, st); len(records) == 0 {
		t.Error("the writer's records are gone after a stat from another mount: it replayed them")
	}
	faults.Remove(outage)
	// The writer's next renewal extends its own lease, still there.
	waitFor(t, 30*time.Second, func() error {
		o, ok := walOwner(t, st)
		if !ok || o.Writer != first.Writer || !time.Now().Before(o.Expires) {
			return fmt.Errorf("the lease after the outage: %+v (found %v), want writer %s renewed", o, ok, first.Writer)
		}
		return nil
	})
	if _, err := fa.WriteAt([]byte("written"), 7); err != nil {
		t.Fatalf("the writer after the outage: %v", err)
	}
	if err := fa.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	a.unmount()
	b.unmount()
	c := v.mount("")
	if got, err := os.ReadFile(c.path("f")); err != nil || string(got) != "logged written" {
		t.Fatalf("published: %q, %v", got, err)
	}
}
