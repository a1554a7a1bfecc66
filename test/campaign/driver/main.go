// Command driver is the program the crash-and-fault campaign runs through
// ckptfs mounts: it writes, overwrites, truncates, fsyncs, closes, reads,
// renames and unlinks the files of its own directory with ordinary
// syscalls, by a seeded random plan, and logs every operation and its
// outcome (package campaign) on standard output. It stops at its first
// error, or when standard input closes.
//
//	driver -id N -seed S -dir NAME -home MOUNT -other MOUNT [-max-size BYTES]
//
// With -copies it also copies a file to a new name inside the home mount
// with copy_file_range (a copy by reference).
//
// Data operations go through the home mount; renames and unlinks through
// either. Before a change through the other mount the driver waits until
// that mount shows its directory as the home mount does (another mount's
// view lags by ns_refresh while in use, ns_refresh_max while idle), and after it until the home mount shows what
// the other one does, logging both waits as "see".
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/test/campaign"
)

const nameCount = 6 // f0 .. f5

type file struct {
	size int64
	fd   *os.File // nil when not open
}

type driver struct {
	id          int
	dir         string
	mounts      [2]string
	maxSize     int64
	rng         *rand.Rand
	seq         int64
	files       map[string]*file
	out         *os.File
	stop        chan struct{}
	seeDeadline time.Duration
	copies      bool
}

// errStop ends the run at the first failed operation.
var errStop = errors.New("stopped")

func main() {
	var (
		id      = flag.Int("id", 0, "driver number (0-255), part of every byte it writes")
		seed    = flag.Uint64("seed", 1, "seed of the plan")
		dir     = flag.String("dir", "", "the driver's directory, in both mounts")
		home    = flag.String("home", "", "mount point of the home mount")
		other   = flag.String("other", "", "mount point of the other mount")
		maxSize = flag.Int64("max-size", 4<<20, "largest file")
		seqBase = flag.Int64("seq-base", 0, "first seq minus one (unique across runs)")
		copies  = flag.Bool("copies", false, "also copy files to new names (copy_file_range)")
	)
	flag.Parse()
	if *dir == "" || *home == "" || *other == "" || *id < 0 || *id > 255 {
		fmt.Fprintln(os.Stderr, "usage: driver -id N -seed S -dir NAME -home MOUNT -other MOUNT")
		os.Exit(2)
	}
	d := &driver{
		id: *id, dir: *dir, mounts: [2]string{*home, *other}, maxSize: *maxSize,
		rng:   rand.New(rand.NewPCG(*seed, uint64(*id))),
		seq:   *seqBase,
		files: map[string]*file{}, out: os.Stdout, stop: make(chan struct{}),
		seeDeadline: 20 * time.Second,
		copies:      *copies,
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(d.stop)
	}()
	if err := d.run(); err != nil && !errors.Is(err, errStop) {
		fmt.Fprintln(os.Stderr, "driver:", err)
		os.Exit(1)
	}
}

func (d *driver) path(m int, name string) string { return filepath.Join(d.mounts[m], d.dir, name) }

// do logs the beginning of an operation, runs it and logs its end.
func (d *driver) do(kind string, m int, args []any, f func() ([]any, error)) error {
	d.seq++
	sargs := make([]string, len(args))
	for i, a := range args {
		sargs[i] = fmt.Sprint(a)
	}
	fmt.Fprintf(d.out, "B %d %d %s %d %s\n", d.seq, time.Now().UnixNano(), kind, m, strings.Join(sargs, " "))
	res, err := f()
	now := time.Now().UnixNano()
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EPROTO // not a syscall's error: a bug of the driver, the test says so
			fmt.Fprintln(os.Stderr, "driver:", kind, err)
		}
		fmt.Fprintf(d.out, "E %d %d err %d\n", d.seq, now, int(errno))
		return errStop
	}
	sres := make([]string, len(res))
	for i, a := range res {
		sres[i] = fmt.Sprint(a)
	}
	fmt.Fprintf(d.out, "E %d %d ok %s\n", d.seq, now, strings.Join(sres, " "))
	return nil
}

func (d *driver) run() error {
	// The directory and what it holds, as the home mount shows them.
	if _, err := os.Stat(filepath.Join(d.mounts[0], d.dir)); errors.Is(err, os.ErrNotExist) {
		if err := d.do("mkdir", 0, []any{d.dir}, func() ([]any, error) {
			return nil, os.Mkdir(filepath.Join(d.mounts[0], d.dir), 0o755)
		}); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir(filepath.Join(d.mounts[0], d.dir))
	if err != nil {
		return fmt.Errorf("list %s: %w", d.dir, err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return fmt.Errorf("stat %s/%s: %w", d.dir, e.Name(), err)
		}
		d.files[e.Name()] = &file{size: fi.Size()}
	}
	for {
		select {
		case <-d.stop:
			return nil
		default:
		}
		if err := d.step(); err != nil {
			return err
		}
		if d.rng.IntN(20) == 0 {
			time.Sleep(time.Duration(d.rng.IntN(200)) * time.Millisecond)
		}
	}
}

// pick returns one of the names, existing or not.
func (d *driver) pick() string { return fmt.Sprintf("f%d", d.rng.IntN(nameCount)) }

func (d *driver) step() error {
	if d.copies && d.rng.IntN(25) == 0 {
		if src, dst, ok := d.pickCopy(); ok {
			return d.copyFile(src, dst)
		}
	}
	name := d.pick()
	f := d.files[name]
	if f == nil || f.fd == nil {
		// A file must be open for anything but a rename or unlink.
		if f != nil && d.rng.IntN(6) == 0 {
			if d.rng.IntN(3) == 0 {
				return d.unlink(name)
			}
			return d.rename(name)
		}
		return d.open(name)
	}
	x := d.rng.IntN(100)
	switch {
	case x < 50:
		return d.write(name, f)
	case x < 57:
		return d.trunc(name, f)
	case x < 70:
		return d.do("fsync", 0, []any{name}, func() ([]any, error) { return nil, fsyncErr(f.fd) })
	case x < 82:
		return d.close(name, f)
	case x < 92:
		return d.read(name, f)
	case x < 97:
		return d.rename(name)
	default:
		if err := d.close(name, f); err != nil {
			return err
		}
		return d.unlink(name)
	}
}

// pickCopy picks an existing file and a name that is free, if there are.
func (d *driver) pickCopy() (src, dst string, ok bool) {
	var have, free []string
	for i := range nameCount {
		name := fmt.Sprintf("f%d", i)
		if d.files[name] != nil {
			have = append(have, name)
		} else {
			free = append(free, name)
		}
	}
	if len(have) == 0 || len(free) == 0 {
		return "", "", false
	}
	return have[d.rng.IntN(len(have))], free[d.rng.IntN(len(free))], true
}

// copyFile copies src to the new name dst with copy_file_range (what
// coreutils cp does), then fsyncs and closes the copy.
func (d *driver) copyFile(src, dst string) error {
	size := d.files[src].size
	err := d.do("copy", 0, []any{src, dst}, func() ([]any, error) {
		in, err := os.Open(d.path(0, src))
		if err != nil {
			return nil, unwrap(err)
		}
		defer in.Close()
		out, err := os.OpenFile(d.path(0, dst), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, unwrap(err)
		}
		var total int64
		for {
			n, err := unix.CopyFileRange(int(in.Fd()), nil, int(out.Fd()), nil, 1<<30, 0)
			if err != nil {
				out.Close()
				return nil, unwrap(err)
			}
			if n == 0 {
				break
			}
			total += int64(n)
		}
		if total != size {
			out.Close()
			return nil, syscall.EIO // not the source's size: the test says so
		}
		if err := out.Sync(); err != nil {
			out.Close()
			return nil, unwrap(err)
		}
		return nil, unwrap(out.Close())
	})
	if err != nil {
		return err
	}
	d.files[dst] = &file{size: size}
	return nil
}

func fsyncErr(f *os.File) error {
	if err := f.Sync(); err != nil {
		return unwrap(err)
	}
	return nil
}

// unwrap returns the errno inside an *os.PathError or *os.SyscallError.
func unwrap(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

func (d *driver) open(name string) error {
	f := d.files[name]
	create := f == nil
	trunc := d.rng.IntN(5) == 0
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	if trunc {
		flags |= os.O_TRUNC
	}
	var fd *os.File
	err := d.do("open", 0, []any{name, b2i(create), b2i(trunc)}, func() ([]any, error) {
		var err error
		fd, err = os.OpenFile(d.path(0, name), flags, 0o644)
		return nil, unwrap(err)
	})
	if err != nil {
		return err
	}
	if f == nil {
		f = &file{}
		d.files[name] = f
	}
	f.fd = fd
	if trunc {
		f.size = 0
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (d *driver) write(name string, f *file) error {
	var n int64
	switch x := d.rng.IntN(10); {
	case x < 7:
		n = 1 + d.rng.Int64N(8<<10)
	case x < 9:
		n = 1 + d.rng.Int64N(128<<10)
	default:
		n = 1 + d.rng.Int64N(1<<20)
	}
	var off int64
	switch x := d.rng.IntN(10); {
	case x < 5:
		off = f.size
	case x < 8:
		off = d.rng.Int64N(f.size + 1)
	default:
		off = f.size + d.rng.Int64N(64<<10)
	}
	if off+n > d.maxSize {
		return d.trunc(name, f)
	}
	seq := d.seq + 1
	buf := campaign.Pattern(d.id, seq, off, int(n))
	err := d.do("write", 0, []any{name, off, n}, func() ([]any, error) {
		k, err := f.fd.WriteAt(buf, off)
		if err == nil && k != len(buf) {
			return nil, syscall.EIO // a short write without an error is not a write(2) the driver expects
		}
		return nil, unwrap(err)
	})
	if err != nil {
		return err
	}
	f.size = max(f.size, off+n)
	return nil
}

func (d *driver) trunc(name string, f *file) error {
	size := d.rng.Int64N(f.size + 1)
	if d.rng.IntN(4) == 0 {
		size = f.size + d.rng.Int64N(64<<10) // extend with a hole
	}
	if size > d.maxSize {
		size = d.maxSize / 2
	}
	if err := d.do("trunc", 0, []any{name, size}, func() ([]any, error) {
		return nil, unwrap(f.fd.Truncate(size))
	}); err != nil {
		return err
	}
	f.size = size
	return nil
}

func (d *driver) close(name string, f *file) error {
	fd := f.fd
	f.fd = nil
	return d.do("close", 0, []any{name}, func() ([]any, error) { return nil, unwrap(fd.Close()) })
}

func (d *driver) read(name string, f *file) error {
	return d.do("read", 0, []any{name}, func() ([]any, error) {
		h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		n, err := io.Copy(h, io.NewSectionReader(f.fd, 0, 1<<62))
		if err != nil {
			return nil, unwrap(err)
		}
		return []any{n, h.Sum32()}, nil
	})
}

// view is a directory as one mount shows it: name -> inode number, from
// getdents (the namespace) and from stat through the kernel's cached
// entries (what an open by name reaches); both must agree.
func (d *driver) view(m int) (map[string]uint64, error) {
	dir := filepath.Join(d.mounts[m], d.dir)
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	v := map[string]uint64{}
	buf := make([]byte, 8192)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.LittleEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return nil, syscall.EIO
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				v[s] = binary.LittleEndian.Uint64(b[0:8])
			}
			b = b[reclen:]
		}
	}
	for name, ino := range v {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, name), &st); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				v[name] = 0 // listed but not reachable yet: not in step
				continue
			}
			return nil, err
		}
		if st.Ino != ino {
			v[name] = 0
		}
	}
	return v, nil
}

// see waits until mount m shows the driver's directory as mount 1-m does:
// the same names for the same files (inode numbers, which every mount
// derives from the namespace log alike), both in listings and through the
// kernel's cached entries. Another mount's changes reach a mount within
// ns_refresh, and its kernel's entries within their timeout; a change by
// name made through a mount that is behind would act on what it shows.
func (d *driver) see(m int) error {
	return d.do("see", m, nil, func() ([]any, error) {
		deadline := time.Now().Add(d.seeDeadline)
		for {
			want, err := d.view(1 - m)
			if err != nil {
				return nil, unwrap(err)
			}
			got, err := d.view(m)
			// The directory itself may not be there yet on a mount that
			// has not read the entry that made it: an idle mount reads the
			// log less often (ns_refresh_max), and is woken by this look.
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				return nil, unwrap(err)
			}
			if err == nil && maps.Equal(want, got) && !slices.Contains(slices.Collect(maps.Values(got)), 0) {
				return nil, nil
			}
			if time.Now().After(deadline) {
				return nil, syscall.ETIMEDOUT
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func (d *driver) rename(src string) error {
	dst := d.pick()
	if dst == src {
		return nil
	}
	if g := d.files[dst]; g != nil && g.fd != nil {
		// Replacing a file closes it first: the campaign does not follow
		// an open file that lost its last name.
		if err := d.close(dst, g); err != nil {
			return err
		}
	}
	m := d.rng.IntN(2)
	if m == 1 {
		if err := d.see(1); err != nil {
			return err
		}
	}
	if err := d.do("rename", m, []any{src, dst}, func() ([]any, error) {
		return nil, unwrap(os.Rename(d.path(m, src), d.path(m, dst)))
	}); err != nil {
		return err
	}
	d.files[dst] = d.files[src]
	delete(d.files, src)
	if m == 1 {
		return d.see(0)
	}
	return nil
}

func (d *driver) unlink(name string) error {
	m := d.rng.IntN(2)
	if m == 1 {
		if err := d.see(1); err != nil {
			return err
		}
	}
	if err := d.do("unlink", m, []any{name}, func() ([]any, error) {
		return nil, unwrap(os.Remove(d.path(m, name)))
	}); err != nil {
		return err
	}
	delete(d.files, name)
	if m == 1 {
		return d.see(0)
	}
	return nil
}
