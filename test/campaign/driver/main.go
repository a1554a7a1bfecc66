// Command driver is the program the crash-and-fault campaign runs through
// ckptfs mounts: it writes, overwrites, truncates, punches holes and zeroes
// ranges (fallocate), fsyncs, closes, reads, renames, links and unlinks the
// files of its own directory with ordinary syscalls, by a seeded random
// plan, and logs every operation and its outcome (package campaign) on
// standard output. It stops at its first error, or when standard input
// closes.
//
//	driver -id N -seed S -dir NAME -home MOUNT -other MOUNT [-max-size BYTES]
//	       [-copies] [-cross] [-foreign] [-cno] [-third MOUNT]
//	       [-ops LIST] [-plain MOUNT]
//	       [-ckptfs BIN -store STORE -store-opts OPTS]
//	driver -many -id N -seed S -dir NAME -mounts A,B,... -home-index I -iter K
//
// With -many (the campaign's many-mounts mode, many.go) it changes names
// instead, through every mount of a namespace v2 volume, in its directory
// and in a shared one, and races the other drivers for names there.
//
// Data operations go through the home mount; renames, links and unlinks
// through either. Before a change through the other mount the driver waits
// until that mount shows its directory as the home mount does (another
// mount's view lags by ns_refresh while in use, ns_refresh_max while idle),
// and after it until the home mount shows what the other one does, logging
// both waits as "see".
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
//     through either mount, sets and removes an extended attribute through
//     either mount, and reads old checkpoints under .checkpoints;
//   - -foreign: the other mount writes, truncates or fallocates a file the
//     home mount has open with changes not yet flushed, and the home
//     mount's fsync then merges (no periodic flush on the home mount, so
//     that what it had published is known);
//   - -cno: after each fsync and close the file's checkpoint number
//     (user.ckptfs.cno) is logged, for the reads of .checkpoints;
//   - -third: a read-only mount that lags (a long ns_refresh), where a name
//     may still lead to a file the others renamed over or unlinked;
//   - -ops: the optional operations named (package campaign's Optional):
//     O_APPEND writers on both mounts, O_RDONLY|O_CREAT opens beside a
//     creator's appends, a copy while the other mount rewrites the source,
//     reads of a held descriptor while the cleaner reaps its file, a plain
//     mount (-plain) writing beside a WAL writer that truncates, and a
//     lease taken from a slow WAL holder.
package main

import (
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	mounts      [4]string // home, other, third ("" without -third), plain ("" without -plain)
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
	tool        []string        // ckptfs cp's command line up to SRC: bin, cp, -o, opts, store
	ops         map[string]bool // -ops
	reaped      bool            // a heldWhileReaped ran (one a run)
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
		opsFlag   = flag.String("ops", "", "optional operations, comma-separated (package campaign's Optional)")
		plain     = flag.String("plain", "", "mount point of a mount without the WAL, beside WAL mounts (walmix)")
		many      = flag.Bool("many", false, "the many-mounts plan: namespace changes through the -mounts")
		mounts    = flag.String("mounts", "", "with -many: the mount points, comma-separated")
		homeIdx   = flag.Int("home-index", 0, "with -many: the home mount's index in -mounts")
		iter      = flag.Int("iter", 0, "with -many: the iteration (part of the race names)")
	)
	flag.Parse()
	if *many {
		ms := strings.Split(*mounts, ",")
		if *dir == "" || len(ms) < 2 || *homeIdx < 0 || *homeIdx >= len(ms) {
			fmt.Fprintln(os.Stderr, "usage: driver -many -id N -seed S -dir NAME -mounts A,B,... -home-index I -iter K")
			os.Exit(2)
		}
		if err := runMany(*id, *iter, *dir, ms, *homeIdx, *seed, *seqBase); err != nil && !errors.Is(err, errStop) {
			fmt.Fprintln(os.Stderr, "driver:", err)
			os.Exit(1)
		}
		return
	}
	if *dir == "" || *home == "" || *other == "" || *id < 0 || *id > 255 {
		fmt.Fprintln(os.Stderr, "usage: driver -id N -seed S -dir NAME -home MOUNT -other MOUNT")
		os.Exit(2)
	}
	ops, err := parseOps(*opsFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "driver:", err)
		os.Exit(2)
	}
	d := &driver{
		id: *id, dir: *dir, mounts: [4]string{*home, *other, *third, *plain}, maxSize: *maxSize, ops: ops,
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
		var ir inRead
		if errors.As(err, &ir) {
			fmt.Fprintf(d.out, "E %d %d err %d read\n", d.seq, now, int(errno))
		} else {
			fmt.Fprintf(d.out, "E %d %d err %d\n", d.seq, now, int(errno))
		}
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
	byIno := map[uint64]*file{} // names of one file (hard links) share it
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return fmt.Errorf("stat %s/%s: %w", d.dir, e.Name(), err)
		}
		ino := fi.Sys().(*syscall.Stat_t).Ino
		if byIno[ino] == nil {
			byIno[ino] = &file{size: fi.Size()}
		}
		d.files[e.Name()] = byIno[ino]
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
	if len(d.ops) > 0 && d.rng.IntN(12) == 0 {
		if name, ok := d.pickHave(); ok {
			if done, err := d.extraStep(name); done || err != nil {
				return err
			}
		}
	}
	name := d.pick()
	f := d.files[name]
	if f == nil || f.fd == nil {
		// A file must be open for anything but a rename, link or unlink.
		if f != nil && d.rng.IntN(6) == 0 {
			switch d.rng.IntN(6) {
			case 0, 1:
				return d.unlink(name)
			case 2, 3:
				return d.link(name)
			}
			return d.rename(name)
		}
		return d.open(name)
	}
	x := d.rng.IntN(100)
	switch {
	case x < 46:
		return d.write(name, f)
	case x < 50:
		return d.falloc(name, f)
	case x < 57:
		return d.trunc(name, f)
	case x < 70:
		if err := d.do("fsync", 0, []any{name}, func() ([]any, error) { return nil, fsyncErr(f.fd) }); err != nil {
			return err
		}
		f.dirty = false
		if err := d.logCno(name); err != nil {
			return err
		}
		return d.readAfterFlush(name, f)
	case x < 82:
		if err := d.close(name, f); err != nil {
			return err
		}
		return d.readAfterFlush(name, f)
	case x < 92:
		return d.read(name, f)
	case x < 95:
		return d.rename(name)
	case x < 97:
		return d.link(name)
	default:
		if err := d.close(name, f); err != nil {
			return err
		}
		return d.unlink(name)
	}
}

// readAfterFlush opens name through the other mount at once after the home
// mount's fsync or close, 1 in 3 (with -cross): while the flush's
// aftermath still runs on the home mount (the release a close sends after it
// returns, a WAL publish, the records it replaces deleted and the lease let
// go), where a reader that looked at the file a moment too early once showed
// an older version. A quarter of them (with -copies) copy it to a new name
// there instead: a copy by reference reads the head and looks for records
// as an open does.
func (d *driver) readAfterFlush(name string, f *file) error {
	if !d.cross || d.rng.IntN(3) != 0 {
		return nil
	}
	if d.copies && d.rng.IntN(4) == 0 {
		if dst, ok := d.pickFree(); ok {
			return d.copyFile(1, name, dst)
		}
	}
	return d.otherRead(name, f, false)
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
		return 0, 0, inRead{unwrap(err)}
	}
	return n, h.Sum32(), nil
}

// inRead is an error of read(2) on a file opened successfully: the log
// says so ("err <errno> read"), since an open and a read failing with the
// same errno mean different things (ESTALE: a retry the kernel did not
// take, or the version the descriptor shows removed).
type inRead struct{ err error }

func (e inRead) Error() string { return "read: " + e.err.Error() }
func (e inRead) Unwrap() error { return e.err }

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

// fallocModes are the fallocate(2) modes the driver uses: punching a hole,
// zeroing a range (keeping the size, or growing it to the range's end), and
// plain allocation (mode 0: the size grows to the range's end, the bytes in
// it stay).
var fallocModes = []uint32{
	unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE,
	unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE,
	unix.FALLOC_FL_ZERO_RANGE,
	0,
}

// falloc changes a range of the file with fallocate(2), logged as
// "falloc NAME MODE OFF LEN": a change like a write, with holes.
func (d *driver) falloc(name string, f *file) error {
	mode := fallocModes[d.rng.IntN(len(fallocModes))]
	off := d.rng.Int64N(f.size + 1)
	if d.rng.IntN(5) == 0 {
		off = f.size + d.rng.Int64N(16<<10) // past the end
	}
	n := 1 + d.rng.Int64N(64<<10)
	if off+n > d.maxSize {
		return d.trunc(name, f)
	}
	if err := d.do("falloc", 0, []any{name, mode, off, n}, func() ([]any, error) {
		return nil, unwrap(unix.Fallocate(int(f.fd.Fd()), mode, off, n))
	}); err != nil {
		return err
	}
	if mode&unix.FALLOC_FL_KEEP_SIZE == 0 && off+n > f.size {
		f.size = off + n
	}
	f.dirty = true
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
	if d.files[dst] != d.files[src] { // two names of one file: nothing happens
		d.files[dst], d.used[dst] = d.files[src], true
		delete(d.files, src)
	}
	if m == 1 {
		return d.see(0)
	}
	return nil
}

// link gives src's file another name, a free one, through either mount
// (logged as "link SRC DST"): both names lead to the same file, open or not,
// and it keeps its data until it loses the last.
func (d *driver) link(src string) error {
	var free []string
	for i := range nameCount {
		if name := fmt.Sprintf("f%d", i); d.files[name] == nil {
			free = append(free, name)
		}
	}
	if len(free) == 0 {
		return nil
	}
	dst := free[d.rng.IntN(len(free))]
	m := d.rng.IntN(2)
	if m == 1 {
		if err := d.see(1); err != nil {
			return err
		}
	}
	if err := d.do("link", m, []any{src, dst}, func() ([]any, error) {
		return nil, unwrap(os.Link(d.path(m, src), d.path(m, dst)))
	}); err != nil {
		return err
	}
	d.files[dst], d.used[dst] = d.files[src], true
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
