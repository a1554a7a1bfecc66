package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ckptfs/ckptfs/test/campaign"
)

// The operations of -ops (package campaign lists them, docs/campaign.md
// says what each checks). Each is switched on by name, so that a run
// enables only those whose faults are fixed; without -ops the plan draws
// exactly what it drew before they existed.

// extraStep does one of the enabled -ops operations on name, an existing
// file; done is false when it did nothing.
func (d *driver) extraStep(name string) (done bool, err error) {
	var can []string
	for _, op := range []string{campaign.OpAppend, campaign.OpCopyRewritten, campaign.OpReap, campaign.OpWALMix, campaign.OpLease} {
		if d.ops[op] {
			can = append(can, op)
		}
	}
	if len(can) == 0 {
		return false, nil
	}
	f := d.files[name]
	switch can[d.rng.IntN(len(can))] {
	case campaign.OpAppend:
		return true, d.appends(name, f)
	case campaign.OpCopyRewritten:
		dst, ok := d.pickFree()
		if !ok {
			return false, nil
		}
		return true, d.copyRewritten(name, dst, f)
	case campaign.OpReap:
		if d.reaped {
			return false, nil // one a run: it lasts past the cleaner's grace
		}
		d.reaped = true
		return true, d.heldWhileReaped(name, f)
	case campaign.OpWALMix:
		if d.mounts[3] == "" {
			return false, nil
		}
		return true, d.walMix(name, f)
	case campaign.OpLease:
		return true, d.leaseFromSlowHolder(name, f)
	}
	return false, nil
}

// closeHome closes the home mount's descriptor of name, if open.
func (d *driver) closeHome(name string, f *file) error {
	if f.fd == nil {
		return nil
	}
	return d.close(name, f)
}

// appendSeq is the identity of the j-th piece of operation seq's bytes
// that the log does not number itself (appends, rewrites): above every
// seq a driver numbers (iteration × 10^7 plus its count).
func appendSeq(seq int64, j int) int64 { return seq | int64(j+1)<<40 }

// appends opens name with O_APPEND on both mounts and appends through
// both, interleaved, then closes both (in a random order) and reads the
// file through a new open on the home mount (logged "append 1 NAME
// M:LEN...", results <len> <crc32c>). Append j of the plan writes
// Pattern(id, appendSeq(seq, j), 0, LEN): the file must end as its old
// content followed by one serial order of the appends.
func (d *driver) appends(name string, f *file) error {
	if err := d.closeHome(name, f); err != nil {
		return err
	}
	if err := d.dropHold(name, f); err != nil {
		return err
	}
	if err := d.see(1); err != nil {
		return err
	}
	k := 2 + d.rng.IntN(3)
	plan := make([]any, 0, k+1)
	plan = append(plan, name)
	mounts := make([]int, k)
	lens := make([]int, k)
	for j := range k {
		mounts[j], lens[j] = j%2, 1+d.rng.IntN(8<<10)
		if j >= 2 {
			mounts[j] = d.rng.IntN(2)
		}
		plan = append(plan, fmt.Sprintf("%d:%d", mounts[j], lens[j]))
	}
	closeFirst := d.rng.IntN(2)
	seq := d.seq + 1
	err := d.do(campaign.OpAppend, 1, plan, func() ([]any, error) {
		var fds [2]*os.File
		defer func() {
			for _, o := range fds {
				if o != nil {
					o.Close()
				}
			}
		}()
		for m := range 2 {
			o, err := os.OpenFile(d.path(m, name), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return nil, unwrap(err)
			}
			fds[m] = o
		}
		for j := range k {
			if _, err := fds[mounts[j]].Write(campaign.Pattern(d.id, appendSeq(seq, j), 0, lens[j])); err != nil {
				return nil, unwrap(err)
			}
		}
		for _, m := range []int{closeFirst, 1 - closeFirst} {
			o := fds[m]
			fds[m] = nil
			if err := o.Close(); err != nil {
				return nil, unwrap(err)
			}
		}
		n, sum, err := readAll(d.path(0, name))
		if err != nil {
			return nil, err
		}
		return []any{n, sum}, nil
	})
	if err != nil {
		return err
	}
	if fi, err := os.Stat(d.path(0, name)); err == nil {
		f.size = fi.Size()
	}
	return d.see(0)
}

// rocreat is the home mount's create of name followed at once by appends
// through the home descriptor, while the other mount opens the name with
// O_RDONLY|O_CREAT, several times (logged "rocreat 1 NAME OFF LEN", the
// appends together one write of Pattern(id, seq, OFF, LEN); results: the
// inode number each open gave, the home descriptor's, then "ok").
func (d *driver) rocreat(name string, f *file) error {
	n := int64(1 + d.rng.IntN(64<<10))
	off := f.size
	seq := d.seq + 1
	err := d.do(campaign.OpROCreat, 1, []any{name, off, n}, func() ([]any, error) {
		buf := campaign.Pattern(d.id, seq, off, int(n))
		werr := make(chan error, 1)
		go func() {
			for pos := int64(0); pos < n; {
				piece := min(n-pos, 4<<10)
				if _, err := f.fd.WriteAt(buf[pos:pos+piece], off+pos); err != nil {
					werr <- unwrap(err)
					return
				}
				pos += piece
			}
			werr <- nil
		}()
		var res []any
		var oerr error
		for range 4 {
			o, err := os.OpenFile(d.path(1, name), os.O_RDONLY|os.O_CREATE, 0o644)
			if err != nil {
				oerr = unwrap(err)
				break
			}
			var st syscall.Stat_t
			err = syscall.Fstat(int(o.Fd()), &st)
			o.Close()
			if err != nil {
				oerr = unwrap(err)
				break
			}
			res = append(res, st.Ino)
		}
		if err := <-werr; err != nil {
			return nil, err
		}
		if oerr != nil {
			return nil, oerr
		}
		var hst syscall.Stat_t
		if err := syscall.Fstat(int(f.fd.Fd()), &hst); err != nil {
			return nil, unwrap(err)
		}
		return append(res, hst.Ino, "ok"), nil
	})
	if err != nil {
		return err
	}
	f.size, f.dirty = off+n, true
	return nil
}

// copyRewritten copies src to dst through one mount with copy_file_range
// while the other mount rewrites src whole, over and over until the copy is
// done, at most cprwMax times (logged "cprw M SRC DST TRUNC LEN:LEN:...":
// rewrite i opens src, with O_TRUNC when TRUNC is 1, writes Pattern(id,
// appendSeq(seq, i), 0, LEN i) at 0 and closes; results as a copy's, then
// the number of rewrites done). The copy holds exactly one version of src:
// what it held before, or one rewrite, never a mix and never EIO. A copy
// that failed with ESTALE (the source showed another version than the one
// the copy took) is logged "stale LEN CRC32C REWRITES": what it holds then,
// after an fsync, empty or a prefix of one version.
func (d *driver) copyRewritten(src, dst string, f *file) error {
	if err := d.closeHome(src, f); err != nil {
		return err
	}
	if err := d.dropHold(src, f); err != nil {
		return err
	}
	m := d.rng.IntN(2)
	// Versions of other sizes than the source's and each other's, longer
	// and shorter (the size the copy's open showed must not cut a newer
	// version, nor a shorter one leave the rest to another), each one
	// write(2) of up to 1 MiB, one FUSE write (the mount's max_write): no
	// flush publishes a rewrite in part. Half the runs open with O_TRUNC,
	// whose empty file a periodic flush may publish.
	lens := make([]int64, cprwMax)
	plan := make([]string, cprwMax)
	for i := range lens {
		lens[i] = int64(1 + d.rng.IntN(1<<20))
		plan[i] = strconv.FormatInt(lens[i], 10)
	}
	trunc := d.rng.IntN(2)
	if err := d.see(1); err != nil {
		return err
	}
	seq := d.seq + 1
	var done int
	err := d.do(campaign.OpCopyRewritten, m, []any{src, dst, trunc, strings.Join(plan, ":")}, func() ([]any, error) {
		rerr := make(chan error, 1)
		copied := make(chan struct{})
		go func() {
			for done = 0; done < cprwMax; done++ {
				if done > 0 {
					select {
					case <-copied:
						rerr <- nil
						return
					default:
					}
				}
				flags := os.O_WRONLY
				if trunc == 1 {
					flags |= os.O_TRUNC
				}
				o, err := os.OpenFile(d.path(1-m, src), flags, 0)
				if err != nil {
					rerr <- unwrap(err)
					return
				}
				_, err = o.WriteAt(campaign.Pattern(d.id, appendSeq(seq, done), 0, int(lens[done])), 0)
				if cerr := o.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					done++ // it may have happened
					rerr <- unwrap(err)
					return
				}
				// A reader opens the source on the copier's mount, as a
				// second cp would: the open takes the new version there,
				// while the copy may be between its own open and its
				// copy_file_range.
				r, err := os.Open(d.path(m, src))
				if err == nil {
					err = r.Close()
				}
				if err != nil {
					done++
					rerr <- unwrap(err)
					return
				}
			}
			rerr <- nil
		}()
		res, cerr := d.copyOnce(m, src, dst, 0, 1<<62, 0)
		close(copied)
		if err := <-rerr; err != nil {
			return nil, err
		}
		var ce copyCallError
		if errors.As(cerr, &ce) && ce.errno == syscall.ESTALE {
			// The copy failed rather than hold two versions of the
			// source (docs/design.md, "A copy answers exactly what it
			// copies"): what it holds is made durable and read back.
			l, sum, err := syncRead(d.path(m, dst))
			if err != nil {
				return nil, err
			}
			res, cerr = []any{"stale", l, sum}, nil
		}
		if cerr != nil {
			return nil, cerr
		}
		return append(res, done), nil
	})
	if err != nil {
		return err
	}
	if done > 0 {
		f.size = lens[done-1]
	}
	d.files[dst], d.used[dst] = &file{}, true
	if fi, err := os.Stat(d.path(m, dst)); err == nil {
		d.files[dst].size = fi.Size()
	}
	return d.see(1 - m)
}

// syncRead fsyncs the file at path and reads it back.
func syncRead(path string) (int64, uint32, error) {
	o, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, 0, unwrap(err)
	}
	err = o.Sync()
	if cerr := o.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, 0, unwrap(err)
	}
	return readAll(path)
}

// cprwMax is the most rewrites one copyRewritten makes.
const cprwMax = 8

// heldWhileReaped keeps a descriptor of name open on the other mount,
// unlinks the name through the home mount and reads through the
// descriptor until the cleaner has had time to reap the file's objects
// (its grace and namespace lag, and a run: reapWait), logged "hreap 1 NAME"
// with results <reads> <len> <crc32c> of the reads, all alike, or "gone
// <errno>" (ESTALE: the version the descriptor shows is removed, as the
// design answers a read of it). ENOENT is never an answer of read(2).
func (d *driver) heldWhileReaped(name string, f *file) error {
	if err := d.closeHome(name, f); err != nil {
		return err
	}
	if f.hold == nil {
		if err := d.otherRead(name, f, true); err != nil {
			return err
		}
	}
	h := f.hold
	f.hold = nil
	if err := d.do("unlink", 0, []any{name}, func() ([]any, error) {
		return nil, unwrap(os.Remove(d.path(0, name)))
	}); err != nil {
		h.Close()
		return err
	}
	delete(d.files, name)
	err := d.do(campaign.OpReap, 1, []any{name}, func() ([]any, error) {
		deadline := time.Now().Add(reapWait)
		var reads int
		var n0 int64
		var sum0 uint32
		for {
			n, sum, err := readFD(h)
			if errors.Is(err, syscall.ESTALE) {
				return []any{"gone", int(syscall.ESTALE)}, nil
			}
			if err != nil {
				return nil, err
			}
			if reads > 0 && (n != n0 || sum != sum0) {
				// Two versions through one descriptor: the second is
				// logged, which the model refuses.
				return []any{reads + 1, n, sum}, nil
			}
			reads, n0, sum0 = reads+1, n, sum
			if time.Now().After(deadline) {
				return []any{reads, n, sum}, nil
			}
			select {
			case <-d.stop:
				return []any{reads, n, sum}, nil
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	if err != nil {
		h.Close() // the driver stops: the failed read is its last operation
		return err
	}
	return d.do("hclose", 1, []any{name}, func() ([]any, error) { return nil, unwrap(h.Close()) })
}

// reapWait is how long heldWhileReaped reads: past the campaign cleaner's
// --grace (10 s) and --ns-lag (1 s), and a run or two.
const reapWait = 16 * time.Second

// walMix: beside the home mount, a WAL writer (wal=on), a plain mount of
// the volume (-plain), once it shows the directory as the home does (see),
// opens name and writes without flushing; the home
// mount truncates and fsyncs (acknowledged); then the plain mount fsyncs
// and closes, which merges its write over the truncate (serial: the
// truncate, then the write), the home closes, and a new open through the
// plain mount reads the file. Logged as the home's open, trunc, fsync and
// close, and "mopen 3 NAME", "mwrite 3 NAME OFF LEN", "mflush 3 NAME",
// "mread 3 NAME" (results <len> <crc32c>).
func (d *driver) walMix(name string, f *file) error {
	if f.fd == nil {
		if err := d.open(name); err != nil {
			return err
		}
		f = d.files[name]
		if f.fd == nil {
			return nil
		}
	}
	// The plain mount shows a name the home mount made within ns_refresh
	// (an open of it before may be ENOENT): it is waited for.
	if err := d.see(3); err != nil {
		return err
	}
	var fd *os.File
	if err := d.do("mopen", 3, []any{name}, func() ([]any, error) {
		var err error
		fd, err = os.OpenFile(d.path(3, name), os.O_RDWR, 0)
		return nil, unwrap(err)
	}); err != nil {
		return err
	}
	defer func() {
		if fd != nil {
			fd.Close()
		}
	}()
	off := d.rng.Int64N(f.size + 1)
	n := 1 + d.rng.Int64N(16<<10)
	buf := campaign.Pattern(d.id, d.seq+1, off, int(n))
	if err := d.do("mwrite", 3, []any{name, off, n}, func() ([]any, error) {
		k, err := fd.WriteAt(buf, off)
		if err == nil && k != len(buf) {
			return nil, syscall.EIO
		}
		return nil, unwrap(err)
	}); err != nil {
		return err
	}
	size := d.rng.Int64N(f.size + 1)
	if err := d.do("trunc", 0, []any{name, size}, func() ([]any, error) {
		return nil, unwrap(f.fd.Truncate(size))
	}); err != nil {
		return err
	}
	f.size = size
	if err := d.do("fsync", 0, []any{name}, func() ([]any, error) { return nil, fsyncErr(f.fd) }); err != nil {
		return err
	}
	if err := d.do("mflush", 3, []any{name}, func() ([]any, error) {
		err := fsyncErr(fd)
		if cerr := fd.Close(); err == nil {
			err = unwrap(cerr)
		}
		fd = nil
		return nil, err
	}); err != nil {
		return err
	}
	f.size = max(size, off+n)
	if err := d.close(name, f); err != nil {
		return err
	}
	return d.do("mread", 3, []any{name}, func() ([]any, error) {
		n, sum, err := readAll(d.path(3, name))
		if err != nil {
			return nil, err
		}
		return []any{n, sum}, nil
	})
}

// leaseFromSlowHolder: with the WAL, the home mount writes name while the
// campaign holds its requests back for longer than the lease (it does so
// when it reads this operation's begin line), and the other mount writes
// the file meanwhile: it may take the lease of the slow holder. Logged
// "olease 1 NAME OFF LEN OOFF OLEN" (the home's write, the other's);
// results: the home write's outcome, the other mount's (ok, or an errno),
// the home close's, then <len> <crc32c> of a new open through the other
// mount. An acknowledged write is never lost.
func (d *driver) leaseFromSlowHolder(name string, f *file) error {
	if f.fd == nil {
		if err := d.open(name); err != nil {
			return err
		}
		f = d.files[name]
		if f.fd == nil {
			return nil
		}
	}
	if err := d.see(1); err != nil {
		return err
	}
	off := d.rng.Int64N(f.size + 1)
	n := 1 + d.rng.Int64N(8<<10)
	ooff := d.rng.Int64N(f.size + 1)
	on := 1 + d.rng.Int64N(8<<10)
	seq := d.seq + 1
	fd := f.fd
	f.fd = nil
	err := d.do(campaign.OpLease, 1, []any{name, off, n, ooff, on}, func() ([]any, error) {
		// The campaign holds the home mount's requests back from when it
		// reads the begin line: a moment for it to do so first.
		time.Sleep(300 * time.Millisecond)
		var wg sync.WaitGroup
		var herr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, herr = fd.WriteAt(campaign.Pattern(d.id, appendSeq(seq, 0), off, int(n)), off)
		}()
		time.Sleep(100 * time.Millisecond)
		oerr := func() error {
			o, err := os.OpenFile(d.path(1, name), os.O_WRONLY, 0)
			if err != nil {
				return unwrap(err)
			}
			// Its first change finds the lease held until the slow
			// holder's lease has run out (it is not renewed meanwhile).
			giveUp := time.Now().Add(leaseTries)
			for {
				_, err = o.WriteAt(campaign.Pattern(d.id, appendSeq(seq, 1), ooff, int(on)), ooff)
				if !errors.Is(err, syscall.EBUSY) || time.Now().After(giveUp) {
					break
				}
				time.Sleep(300 * time.Millisecond)
			}
			if cerr := o.Close(); err == nil {
				err = cerr
			}
			return unwrap(err)
		}()
		wg.Wait()
		cerr := unwrap(fd.Close())
		res := []any{outcome(unwrap(herr)), outcome(oerr), outcome(cerr)}
		for _, e := range []error{unwrap(herr), oerr, cerr} {
			var errno syscall.Errno
			if e != nil && (!errors.As(e, &errno) || errno != syscall.EIO && errno != syscall.EBUSY) {
				return nil, e
			}
		}
		l, sum, err := readAll(d.path(1, name))
		if err != nil {
			return nil, err
		}
		return append(res, l, sum), nil
	})
	if err != nil {
		return err
	}
	if fi, err := os.Stat(d.path(0, name)); err == nil {
		f.size = fi.Size()
	}
	f.dirty = false
	return nil
}

// leaseTries is how long the other mount's write of leaseFromSlowHolder
// tries again on EBUSY: past the campaign's wal_lease (3 s) and a renewal.
const leaseTries = 5 * time.Second

// outcome is "ok" or the errno of err.
func outcome(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		return fmt.Sprint(int(errno))
	default:
		return "EPROTO"
	}
}

// parseOps reads -ops: names of package campaign's optional operations.
func parseOps(s string) (map[string]bool, error) {
	ops := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !campaign.IsOptional(n) {
			return nil, fmt.Errorf("-ops: %q is not one of %v", n, campaign.Optional)
		}
		ops[n] = true
	}
	return ops, nil
}
