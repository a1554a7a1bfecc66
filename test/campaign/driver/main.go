// Command driver is the program the crash-and-fault campaign runs through
// ckptfs mounts: it writes, overwrites, truncates, fsyncs, closes, reads,
// renames and unlinks the files of its own directory with ordinary
// syscalls, by a seeded random plan, and logs every operation and its
// outcome (package campaign) on standard output. It stops at its first
// error, or when standard input closes.
//
//	driver -id N -seed S -dir NAME -home MOUNT -other MOUNT [-max-size BYTES]
//	       [-copies] [-cross] [-foreign] [-cno] [-third MOUNT]
//	       [-ckptfs BIN -store STORE -store-opts OPTS]
//
// Data operations go through the home mount; renames and unlinks through
// either. Before a change through the other mount the driver waits until
// that mount shows its directory as the home mount does (another mount's
// view lags by ns_refresh while in use, ns_refresh_max while idle), and after it until the home mount shows what
// the other one does, logging both waits as "see".
//
// The flags add what the campaign checks where features meet:
//
//   - -copies: copies with copy_file_range, whole (a copy by reference) or a
//     part, through either mount, and with `ckptfs cp` (given -ckptfs,
//     -store and -store-opts);
//   - -cross: the other mount opens, reads and stats the files the home
//     mount writes (sometimes keeping the descriptor open across the home
//     mount's closes and reading through it later), opens a name with
//     O_CREAT and without O_EXCL right after the home mount created it,
//     opens a name right after the home mount unlinked it, changes modes
//     through either mount, and reads old checkpoints under .checkpoints;
//   - -foreign: the other mount writes or truncates a file the home mount
//     has open with changes not yet flushed, and the home mount's fsync
//     then merges (no periodic flush on the home mount, so that what it
//     had published is known);
//   - -cno: after each fsync and close the file's checkpoint number
//     (user.ckptfs.cno) is logged, for the reads of .checkpoints;
//   - -third: a read-only mount that lags (a long ns_refresh), where a name
//     may still lead to a file the others renamed over or unlinked.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/test/campaign"
)

const nameCount = 6 // f0 .. f5

// holdFor is how long a descriptor the other mount keeps open lives: well
// under the cleaner's grace in the campaign, so that the version it reads
// is never deleted under it.
const holdFor = 2 * time.Second

type file struct {
	size   int64
	fd     *os.File // nil when not open
	dirty  bool     // changed through fd since its last fsync or close
	hold   *os.File // a read-only descriptor on the other mount, or nil
	holdAt time.Time
	cnos   []int64 // checkpoint numbers logged for it
}

type driver struct {
	id          int
	dir         string
	mounts      [3]string // home, other, third ("" without -third)
	maxSize     int64
	rng         *rand.Rand
	seq         int64
	files       map[string]*file
	used        map[string]bool // names that led to a file in this run
	out         *os.File
	stop        chan struct{}
	seeDeadline time.Duration
	copies      bool
	cross       bool
	foreign     bool
	cno         bool
	tool        []string // ckptfs cp's command line up to SRC: bin, cp, -o, opts, store
}

// errStop ends the run at the first failed operation.
var errStop = errors.New("stopped")

func main() {
	var (
		id        = flag.Int("id", 0, "driver number (0-255), part of every byte it writes")
		seed      = flag.Uint64("seed", 1, "seed of the plan")
		dir       = flag.String("dir", "", "the driver's directory, in both mounts")
		home      = flag.String("home", "", "mount point of the home mount")
		other     = flag.String("other", "", "mount point of the other mount")
		third     = flag.String("third", "", "mount point of a read-only mount that lags")
		maxSize   = flag.Int64("max-size", 4<<20, "largest file")
		seqBase   = flag.Int64("seq-base", 0, "first seq minus one (unique across runs)")
		copies    = flag.Bool("copies", false, "also copy files to new names (copy_file_range, ckptfs cp)")
		cross     = flag.Bool("cross", false, "read, stat, open and chmod through the other mount too")
		foreign   = flag.Bool("foreign", false, "write through the other mount to files open on the home mount")
		cno       = flag.Bool("cno", false, "log the checkpoint number after each fsync and close")
		bin       = flag.String("ckptfs", "", "the ckptfs binary, for ckptfs cp")
		store     = flag.String("store", "", "the volume's STORE, for ckptfs cp")
		storeOpts = flag.String("store-opts", "", "the store's -o options, for ckptfs cp")
	)
	flag.Parse()
	if *dir == "" || *home == "" || *other == "" || *id < 0 || *id > 255 {
		fmt.Fprintln(os.Stderr, "usage: driver -id N -seed S -dir NAME -home MOUNT -other MOUNT")
		os.Exit(2)
	}
	d := &driver{
		id: *id, dir: *dir, mounts: [3]string{*home, *other, *third}, maxSize: *maxSize,
		rng:   rand.New(rand.NewPCG(*seed, uint64(*id))),
		seq:   *seqBase,
		files: map[string]*file{}, used: map[string]bool{}, out: os.Stdout, stop: make(chan struct{}),
		seeDeadline: 20 * time.Second,
		copies:      *copies, cross: *cross, foreign: *foreign, cno: *cno,
	}
	if *bin != "" && *store != "" {
		d.tool = []string{*bin, "cp", "-o", *storeOpts, *store}
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
		d.used[e.Name()] = true
	}
	for {
		select {
		case <-d.stop:
			return nil
		default:
		}
		if err := d.dropOldHolds(); err != nil {
			return err
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

// pickHave returns an existing name, if there is one.
func (d *driver) pickHave() (string, bool) {
	var have []string
	for i := range nameCount {
		if name := fmt.Sprintf("f%d", i); d.files[name] != nil {
			have = append(have, name)
		}
	}
	if len(have) == 0 {
		return "", false
	}
	return have[d.rng.IntN(len(have))], true
}

func (d *driver) step() error {
	if d.copies && d.rng.IntN(25) == 0 {
		if src, dst, ok := d.pickCopy(); ok {
			switch x := d.rng.IntN(10); {
			case x < 4:
				return d.copyFile(d.rng.IntN(2), src, dst)
			case x < 8:
				return d.copyPart(d.rng.IntN(2), src, dst)
			case d.tool != nil:
				return d.toolCopy(src, dst)
			}
		}
	}
	if d.cross && d.rng.IntN(5) == 0 {
		if name, ok := d.pickHave(); ok {
			if done, err := d.crossStep(name); done || err != nil {
				return err
			}
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
		if err := d.do("fsync", 0, []any{name}, func() ([]any, error) { return nil, fsyncErr(f.fd) }); err != nil {
			return err
		}
		f.dirty = false
		return d.logCno(name)
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

// crossStep does one operation of -cross (and -foreign) on the existing
// file name; done is false when it did nothing.
func (d *driver) crossStep(name string) (done bool, err error) {
	f := d.files[name]
	if f.hold != nil && d.rng.IntN(2) == 0 {
		return true, d.holdRead(name, f)
	}
	switch x := d.rng.IntN(100); {
	case x < 30:
		return true, d.otherRead(name, f, d.rng.IntN(2) == 0)
	case x < 45:
		if f.hold == nil {
			return false, nil
		}
		return true, d.holdRead(name, f)
	case x < 58:
		return true, d.chmod(name)
	case x < 73:
		if len(f.cnos) == 0 && d.rng.IntN(2) == 0 {
			return false, nil
		}
		return true, d.readCheckpoint(name, f)
	case x < 85:
		if d.mounts[2] == "" {
			return false, nil
		}
		return true, d.thirdRead(d.pick())
	default:
		if !d.foreign || f.fd != nil && !f.dirty {
			// The home mount's engine keeps the version it shows until it
			// merges at its next flush: only a dirty file, whose fsync
			// follows at once, or one the home mount has closed.
			return false, nil
		}
		return true, d.foreignChange(name, f)
	}
}

// dropOldHolds closes the other mount's descriptors older than holdFor.
func (d *driver) dropOldHolds() error {
	for i := range nameCount {
		name := fmt.Sprintf("f%d", i)
		if f := d.files[name]; f != nil && f.hold != nil && time.Since(f.holdAt) > holdFor {
			if err := d.dropHold(name, f); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *driver) dropHold(name string, f *file) error {
	h := f.hold
	if h == nil {
		return nil
	}
	f.hold = nil
	return d.do("hclose", 1, []any{name}, func() ([]any, error) { return nil, unwrap(h.Close()) })
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

// copyFile copies src to the new name dst through mount m with
// copy_file_range (what coreutils cp does), fsyncs and closes the copy,
// and reads it back: results <bytes copied> <len> <crc32c>.
func (d *driver) copyFile(m int, src, dst string) error {
	return d.copyRange("copy", m, src, dst, nil, 0, 1<<62, 0)
}

// copyPart copies a part of src into the new file dst, at the same offset
// (a copy by reference where whole blocks allow) or another one.
func (d *driver) copyPart(m int, src, dst string) error {
	size := d.files[src].size
	off := d.rng.Int64N(size + 1)
	if d.rng.IntN(2) == 0 {
		off &^= 4095
	}
	n := 1 + d.rng.Int64N(size-off+4096)
	dstOff := off
	if d.rng.IntN(3) == 0 {
		dstOff = d.rng.Int64N(64 << 10)
	}
	return d.copyRange("pcopy", m, src, dst, []any{off, n, dstOff}, off, n, dstOff)
}

func (d *driver) copyRange(kind string, m int, src, dst string, extra []any, off, n, dstOff int64) error {
	if m == 1 {
		if err := d.see(1); err != nil {
			return err
		}
	}
	args := append([]any{src, dst}, extra...)
	err := d.do(kind, m, args, func() ([]any, error) {
		in, err := os.Open(d.path(m, src))
		if err != nil {
			return nil, unwrap(err)
		}
		defer in.Close()
		out, err := os.OpenFile(d.path(m, dst), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if err != nil {
			return nil, unwrap(err)
		}
		defer out.Close()
		var total int64
		for total < n {
			so, do := off+total, dstOff+total
			k, err := unix.CopyFileRange(int(in.Fd()), &so, int(out.Fd()), &do, int(min(n-total, 1<<30)), 0)
			if err != nil {
				return nil, unwrap(err)
			}
			if k == 0 {
				break
			}
			total += int64(k)
		}
		if err := out.Sync(); err != nil {
			return nil, unwrap(err)
		}
		if err := out.Close(); err != nil {
			return nil, unwrap(err)
		}
		l, sum, err := readAll(d.path(m, dst))
		if err != nil {
			return nil, err
		}
		return []any{total, l, sum}, nil
	})
	if err != nil {
		return err
	}
	d.files[dst], d.used[dst] = &file{}, true
	if fi, err := os.Stat(d.path(m, dst)); err == nil {
		d.files[dst].size = fi.Size()
	}
	if m == 1 {
		return d.see(0)
	}
	return nil
}

// toolCopy copies src to the new name dst with `ckptfs cp` (no mount),
// waits until both mounts show dst, and reads it back through the home
// mount: results <len> <crc32c>. A failed ckptfs cp is EIO.
func (d *driver) toolCopy(src, dst string) error {
	err := d.do("toolcp", 0, []any{src, dst}, func() ([]any, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		args := append(slices.Clone(d.tool[1:]), "/"+d.dir+"/"+src, "/"+d.dir+"/"+dst)
		cmd := exec.CommandContext(ctx, d.tool[0], args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "driver: ckptfs cp %s %s: %v: %s\n", src, dst, err, out)
			return nil, syscall.EIO
		}
		if err := d.waitName(dst); err != nil {
			return nil, err
		}
		l, sum, err := readAll(d.path(0, dst))
		if err != nil {
			return nil, err
		}
		return []any{l, sum}, nil
	})
	if err != nil {
		return err
	}
	d.files[dst], d.used[dst] = &file{}, true
	if fi, err := os.Stat(d.path(0, dst)); err == nil {
		d.files[dst].size = fi.Size()
	}
	return nil
}

// waitName waits until both mounts show name, as the same file.
func (d *driver) waitName(name string) error {
	deadline := time.Now().Add(d.seeDeadline)
	for {
		a, errA := d.view(0)
		b, errB := d.view(1)
		if errA == nil && errB == nil && a[name] != 0 && a[name] == b[name] {
			return nil
		}
		if time.Now().After(deadline) {
			return syscall.ETIMEDOUT
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readAll reads the file at path whole: its length and CRC-32C.
func readAll(path string) (int64, uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, unwrap(err)
	}
	defer f.Close()
	return readFD(f)
}

func readFD(f *os.File) (int64, uint32, error) {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	n, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return 0, 0, unwrap(err)
	}
	return n, h.Sum32(), nil
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
	if trunc && f.size > 0 {
		f.size = 0
		f.dirty = true // an empty file cut to empty changes nothing
	}
	// Through the other mount, only a name that led to no other file
	// lately: a view that lags may still lead there (docs/design.md, "The
	// namespace").
	fresh := !d.used[name]
	d.used[name] = true
	if create && fresh && d.cross && d.rng.IntN(2) == 0 {
		return d.otherCreate(name, f)
	}
	return nil
}

// otherCreate opens name through the other mount with O_CREAT and without
// O_EXCL, right after the home mount created it: the other mount must open
// the same file (results: its inode number, and the home descriptor's).
func (d *driver) otherCreate(name string, f *file) error {
	// The directory itself must be there (a new one may not be yet): a
	// wait that leaves the names as they are.
	if err := d.do("see", 1, []any{"dir"}, func() ([]any, error) {
		deadline := time.Now().Add(d.seeDeadline)
		for {
			_, err := os.Stat(filepath.Join(d.mounts[1], d.dir))
			if err == nil {
				return nil, nil
			}
			if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
				return nil, unwrap(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}); err != nil {
		return err
	}
	return d.do("ocreat", 1, []any{name}, func() ([]any, error) {
		o, err := os.OpenFile(d.path(1, name), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, unwrap(err)
		}
		var st, hst syscall.Stat_t
		err = syscall.Fstat(int(o.Fd()), &st)
		if cerr := o.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = syscall.Fstat(int(f.fd.Fd()), &hst)
		}
		if err != nil {
			return nil, unwrap(err)
		}
		return []any{st.Ino, hst.Ino}, nil
	})
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
	f.dirty = true
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
	f.dirty = f.dirty || size != f.size
	f.size = size
	return nil
}

func (d *driver) close(name string, f *file) error {
	fd := f.fd
	f.fd = nil
	if err := d.do("close", 0, []any{name}, func() ([]any, error) { return nil, unwrap(fd.Close()) }); err != nil {
		return err
	}
	f.dirty = false
	return d.logCno(name)
}

// logCno logs the checkpoint number the home mount shows for name after a
// successful fsync or close (with -cno): the checkpoint holding what the
// flush acknowledged.
func (d *driver) logCno(name string) error {
	if !d.cno {
		return nil
	}
	var cno int64
	if err := d.do("cno", 0, []any{name}, func() ([]any, error) {
		buf := make([]byte, 32)
		n, err := unix.Getxattr(d.path(0, name), "user.ckptfs.cno", buf)
		if err != nil {
			return nil, unwrap(err)
		}
		cno, err = strconv.ParseInt(string(buf[:n]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("user.ckptfs.cno %q: %w", buf[:n], err)
		}
		return []any{cno}, nil
	}); err != nil {
		return err
	}
	if f := d.files[name]; cno > 0 { // 0: never published (.checkpoints lists from 1)
		f.cnos = append(f.cnos, cno)
	}
	return nil
}

func (d *driver) read(name string, f *file) error {
	return d.do("read", 0, []any{name}, func() ([]any, error) {
		n, sum, err := readFD(f.fd)
		if err != nil {
			return nil, err
		}
		return []any{n, sum}, nil
	})
}

// otherRead opens name through the other mount (after it shows the
// directory as the home mount does), fstats and reads it: results <len>
// <crc32c> <st_size>. With hold the descriptor stays open (replacing one
// held before, which is closed after the new open: the open happens while
// another handle of the file is held on that mount).
func (d *driver) otherRead(name string, f *file, hold bool) error {
	if err := d.see(1); err != nil {
		return err
	}
	var fd *os.File
	err := d.do("oread", 1, []any{name, b2i(hold)}, func() ([]any, error) {
		var err error
		fd, err = os.Open(d.path(1, name))
		if err != nil {
			return nil, unwrap(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(fd.Fd()), &st); err != nil {
			fd.Close()
			return nil, unwrap(err)
		}
		n, sum, err := readFD(fd)
		if err != nil {
			fd.Close()
			return nil, err
		}
		if !hold {
			if err := fd.Close(); err != nil {
				return nil, unwrap(err)
			}
		}
		return []any{n, sum, st.Size}, nil
	})
	if err != nil || !hold {
		return err
	}
	if err := d.dropHold(name, f); err != nil {
		fd.Close()
		return err
	}
	f.hold, f.holdAt = fd, time.Now()
	return nil
}

// holdRead reads name whole through the descriptor the other mount holds:
// results <len> <crc32c>.
func (d *driver) holdRead(name string, f *file) error {
	return d.do("hread", 1, []any{name}, func() ([]any, error) {
		n, sum, err := readFD(f.hold)
		if err != nil {
			return nil, err
		}
		return []any{n, sum}, nil
	})
}

// thirdRead opens name through the lagging read-only mount: results
// "noent", or <len> <crc32c>.
func (d *driver) thirdRead(name string) error {
	return d.do("cread", 2, []any{name}, func() ([]any, error) {
		n, sum, err := readAll(d.path(2, name))
		if errors.Is(err, syscall.ENOENT) {
			return []any{"noent"}, nil
		}
		if err != nil {
			return nil, err
		}
		return []any{n, sum}, nil
	})
}

// chmod changes name's mode through either mount.
func (d *driver) chmod(name string) error {
	m := d.rng.IntN(2)
	if m == 1 {
		if err := d.see(1); err != nil {
			return err
		}
	}
	mode := []os.FileMode{0o600, 0o640, 0o644, 0o664}[d.rng.IntN(4)]
	return d.do("chmod", m, []any{name, fmt.Sprintf("%o", mode)}, func() ([]any, error) {
		return nil, unwrap(os.Chmod(d.path(m, name), mode))
	})
}

// readCheckpoint reads one of name's checkpoints under .checkpoints,
// through either mount: one logged after an fsync or close (results "noent"
// or <len> <crc32c>), or (cno -1) the newest one listed (results <cno>
// <len> <crc32c>, or "noent" when none is listed).
func (d *driver) readCheckpoint(name string, f *file) error {
	m := d.rng.IntN(2)
	if m == 1 {
		if err := d.see(1); err != nil {
			return err
		}
	}
	cno := int64(-1)
	if len(f.cnos) > 0 && d.rng.IntN(3) != 0 {
		cno = f.cnos[d.rng.IntN(len(f.cnos))]
	}
	dir := filepath.Join(d.mounts[m], ".checkpoints", d.dir, name)
	return d.do("ckpt", m, []any{name, cno}, func() ([]any, error) {
		if cno >= 0 {
			n, sum, err := readAll(filepath.Join(dir, strconv.FormatInt(cno, 10)))
			if errors.Is(err, syscall.ENOENT) {
				return []any{"noent"}, nil
			}
			if err != nil {
				return nil, err
			}
			return []any{n, sum}, nil
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, unwrap(err)
		}
		newest := int64(-1)
		for _, e := range ents {
			if c, err := strconv.ParseInt(e.Name(), 10, 64); err == nil && c > newest {
				newest = c
			}
		}
		if newest < 0 {
			return []any{"noent"}, nil
		}
		n, sum, err := readAll(filepath.Join(dir, strconv.FormatInt(newest, 10)))
		if errors.Is(err, syscall.ENOENT) {
			return []any{"noent"}, nil
		}
		if err != nil {
			return nil, err
		}
		return []any{newest, n, sum}, nil
	})
}

// foreignChange writes or truncates name through the other mount (open,
// change, close: a checkpoint of that mount), then, when the home mount has
// the file open with changes of its own, fsyncs there: the flush merges.
func (d *driver) foreignChange(name string, f *file) error {
	if err := d.see(1); err != nil {
		return err
	}
	if d.rng.IntN(3) == 0 {
		size := d.rng.Int64N(f.size + 1)
		if err := d.do("otrunc", 1, []any{name, size}, func() ([]any, error) {
			o, err := os.OpenFile(d.path(1, name), os.O_WRONLY, 0)
			if err != nil {
				return nil, unwrap(err)
			}
			err = o.Truncate(size)
			if cerr := o.Close(); err == nil {
				err = cerr
			}
			return nil, unwrap(err)
		}); err != nil {
			return err
		}
		if f.fd == nil {
			f.size = size
		}
	} else {
		off := d.rng.Int64N(f.size + 1)
		n := 1 + d.rng.Int64N(16<<10)
		if off+n > d.maxSize {
			off = 0
		}
		buf := campaign.Pattern(d.id, d.seq+1, off, int(n))
		if err := d.do("owrite", 1, []any{name, off, n}, func() ([]any, error) {
			o, err := os.OpenFile(d.path(1, name), os.O_WRONLY, 0)
			if err != nil {
				return nil, unwrap(err)
			}
			_, err = o.WriteAt(buf, off)
			if cerr := o.Close(); err == nil {
				err = cerr
			}
			return nil, unwrap(err)
		}); err != nil {
			return err
		}
		f.size = max(f.size, off+n)
	}
	if f.fd == nil {
		return nil
	}
	if err := d.do("fsync", 0, []any{name}, func() ([]any, error) { return nil, fsyncErr(f.fd) }); err != nil {
		return err
	}
	f.dirty = false
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.fd.Fd()), &st); err == nil {
		f.size = st.Size
	}
	return d.logCno(name)
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
	if g := d.files[dst]; g != nil {
		// Replacing a file closes it first: the campaign does not follow
		// an open file that lost its last name.
		if g.fd != nil {
			if err := d.close(dst, g); err != nil {
				return err
			}
		}
		if err := d.dropHold(dst, g); err != nil {
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
	d.files[dst], d.used[dst] = d.files[src], true
	delete(d.files, src)
	if m == 1 {
		return d.see(0)
	}
	return nil
}

func (d *driver) unlink(name string) error {
	if err := d.dropHold(name, d.files[name]); err != nil {
		return err
	}
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
	if d.cross && d.rng.IntN(2) == 0 {
		// Right after the unlink, through the other mount, whose view may
		// still have the name: ENOENT, or the unlinked file's bytes.
		return d.do("ostale", 1, []any{name}, func() ([]any, error) {
			n, sum, err := readAll(d.path(1, name))
			if errors.Is(err, syscall.ENOENT) {
				return []any{"noent"}, nil
			}
			if err != nil {
				return nil, err
			}
			return []any{n, sum}, nil
		})
	}
	return nil
}
