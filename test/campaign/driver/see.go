package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

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

// see waits until mount m shows the driver's directory as mount 1-m does
// (the home mount, for the plain mount D, m 3):
// the same names for the same files (inode numbers, which every mount
// derives from the namespace log alike), both in listings and through the
// kernel's cached entries. Another mount's changes reach a mount within
// ns_refresh, and its kernel's entries within their timeout; a change by
// name made through a mount that is behind would act on what it shows.
func (d *driver) see(m int) error {
	return d.do("see", m, nil, func() ([]any, error) {
		deadline := time.Now().Add(d.seeDeadline)
		ref := 1 - m
		if m > 1 {
			ref = 0
		}
		for {
			want, err := d.view(ref)
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
