package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/test/campaign"
)

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
	case x < 52:
		return true, d.chmod(name)
	case x < 58:
		return true, d.setXattr(name)
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
	if d.ops[campaign.OpROCreat] && d.rng.IntN(2) == 0 {
		return d.rocreat(name, f)
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

// setXattr sets name's attribute campaign.Xattr to a value of its own, or
// removes it (one time in four), through either mount: an attribute lives
// in the namespace with its node, stored before the call returns. A removal
// of none is no error.
func (d *driver) setXattr(name string) error {
	m := d.rng.IntN(2)
	if m == 1 {
		if err := d.see(1); err != nil {
			return err
		}
	}
	value := fmt.Sprintf("v%d", d.seq+1)
	if d.rng.IntN(4) == 0 {
		value = "-"
	}
	return d.do("xattr", m, []any{name, value}, func() ([]any, error) {
		p := d.path(m, name)
		if value == "-" {
			if err := unix.Removexattr(p, campaign.Xattr); err != nil && !errors.Is(err, unix.ENODATA) {
				return nil, unwrap(err)
			}
			return nil, nil
		}
		return nil, unwrap(unix.Setxattr(p, campaign.Xattr, []byte(value), 0))
	})
}

// readCheckpoint reads one of name's checkpoints under .checkpoints,
// through either mount: one logged after an fsync or close (results "noent"
// or <len> <crc32c>), or (cno -1) the newest one listed (results <cno>
// <len> <crc32c>, or "noent" when none is listed). A checkpoint the cleaner
// removes while it is read (ESTALE) is gone, as one not found (ENOENT).
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
			if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE) {
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
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE) {
			return []any{"noent"}, nil
		}
		if err != nil {
			return nil, err
		}
		return []any{newest, n, sum}, nil
	})
}

// foreignChange writes, truncates or fallocates name through the other
// mount (open, change, close: a checkpoint of that mount), then, when the
// home mount has the file open with changes of its own, fsyncs there: the
// flush merges.
func (d *driver) foreignChange(name string, f *file) error {
	if err := d.see(1); err != nil {
		return err
	}
	switch x := d.rng.IntN(6); {
	case x < 2:
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
	case x < 3:
		mode := fallocModes[d.rng.IntN(len(fallocModes))]
		off := d.rng.Int64N(f.size + 1)
		n := 1 + d.rng.Int64N(16<<10)
		if off+n > d.maxSize {
			off = 0
		}
		if err := d.do("ofalloc", 1, []any{name, mode, off, n}, func() ([]any, error) {
			o, err := os.OpenFile(d.path(1, name), os.O_WRONLY, 0)
			if err != nil {
				return nil, unwrap(err)
			}
			err = unix.Fallocate(int(o.Fd()), mode, off, n)
			if cerr := o.Close(); err == nil {
				err = cerr
			}
			return nil, unwrap(err)
		}); err != nil {
			return err
		}
		if mode&unix.FALLOC_FL_KEEP_SIZE == 0 {
			f.size = max(f.size, off+n)
		}
	default:
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
	// A read tells which checkpoint the fsync merged over: the home mount
	// may have published its changes before (memory pressure does).
	if err := d.read(name, f); err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.fd.Fd()), &st); err == nil {
		f.size = st.Size
	}
	return d.logCno(name)
}
