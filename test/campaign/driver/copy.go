package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pickCopy picks an existing file and a name that is free, if there are.
func (d *driver) pickCopy() (src, dst string, ok bool) {
	var have []string
	for i := range nameCount {
		if name := fmt.Sprintf("f%d", i); d.files[name] != nil {
			have = append(have, name)
		}
	}
	if len(have) == 0 {
		return "", "", false
	}
	src = have[d.rng.IntN(len(have))]
	dst, ok = d.pickFree()
	return src, dst, ok
}

// pickFree picks a name no file has.
func (d *driver) pickFree() (string, bool) {
	var free []string
	for i := range nameCount {
		if name := fmt.Sprintf("f%d", i); d.files[name] == nil {
			free = append(free, name)
		}
	}
	if len(free) == 0 {
		return "", false
	}
	return free[d.rng.IntN(len(free))], true
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
	err := d.do(kind, m, args, func() ([]any, error) { return d.copyOnce(m, src, dst, off, n, dstOff) })
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
	if s := d.files[src]; d.foreign && s.fd != nil && s.dirty {
		// A copy through the home mount may have published the source's
		// changes (a copy by reference copies a checkpoint) or not (the
		// kernel copied bytes): an fsync makes what the home mount
		// published known again, which the other mount's changes build on.
		if err := d.do("fsync", 0, []any{src}, func() ([]any, error) { return nil, fsyncErr(s.fd) }); err != nil {
			return err
		}
		s.dirty = false
		return d.logCno(src)
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

// copyOnce copies n bytes from off of src into the new file dst at dstOff
// through mount m, fsyncs and closes the copy and reads it back: results
// <bytes copied> <len> <crc32c>.
// copyCallError is a failure of copy_file_range itself in copyOnce, not of
// the open, fsync or read back around it.
type copyCallError struct{ errno syscall.Errno }

func (e copyCallError) Error() string { return "copy_file_range: " + e.errno.Error() }
func (e copyCallError) Unwrap() error { return e.errno }

func (d *driver) copyOnce(m int, src, dst string, off, n, dstOff int64) ([]any, error) {
	in, err := os.Open(d.path(m, src))
	if err != nil {
		return nil, unwrap(err)
	}
	defer in.Close()
	// As cp does: an fstat first, which leaves the kernel the size the
	// mount shows (copy_file_range is cut at the size the kernel holds;
	// docs/design.md, "Close-to-open across mounts").
	if _, err := in.Stat(); err != nil {
		return nil, unwrap(err)
	}
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
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return nil, copyCallError{errno}
			}
			return nil, err
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
}
