package dir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// folderEntry is one name of a folder as readFolderOnce returns it.
type folderEntry struct {
	name string
	dir  bool
}

// Bounds of readFolderOnce.
const (
	folderReadFirst = 8 << 10  // the first buffer: about 160 objects' names
	folderReadMost  = 64 << 20 // the largest tried: about 1.3 million
	folderReadTries = 12       // reads, growing the buffer or not
)

// readFolderOnce returns the entries of folder dir ("." and ".." left out)
// as of one instant. It reads them with one getdents64 call: the kernel
// holds the folder's lock for the whole call, and a create, rename or
// unlink in the folder takes that lock too, so the call sees each of them
// whole or not at all. A listing made of several calls (os.File.ReadDir)
// is no such view: on a folder hashed by name (ext4) an object renamed in
// while it runs may be missed while one renamed in after it is seen. A
// second call, from where the first ended, tells whether the first held
// every entry; if not, the read starts over, with a buffer four times
// larger if the first was full. After folderReadTries (creates that keep
// landing between the two calls, or a folder of more than 64 MiB of names)
// it gives up the one-call view and reads on to the end, which still
// returns every entry present throughout.
func readFolderOnce(dir string) ([]folderEntry, error) {
	fd, err := openDir(dir)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	size := folderReadFirst
	var more [4 << 10]byte // holds at least one entry: a name is at most 255 bytes
	for try := 1; ; try++ {
		buf := make([]byte, size)
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return nil, &fs.PathError{Op: "seek", Path: dir, Err: err}
		}
		n, err := getdents(fd, buf)
		if err != nil {
			return nil, &fs.PathError{Op: "getdents", Path: dir, Err: err}
		}
		m, err := getdents(fd, more[:])
		if err != nil {
			return nil, &fs.PathError{Op: "getdents", Path: dir, Err: err}
		}
		if m == 0 {
			return parseDirents(dir, buf[:n])
		}
		if try < folderReadTries {
			// The first call may have stopped for room: a larger buffer.
			// Otherwise entries came between the two calls: read again.
			if n+len(more) > size {
				size = min(4*size, folderReadMost)
			}
			continue
		}
		// Give up the single view: read on to the end.
		all := append(buf[:n:n], more[:m]...)
		for {
			k, err := getdents(fd, more[:])
			if err != nil {
				return nil, &fs.PathError{Op: "getdents", Path: dir, Err: err}
			}
			if k == 0 {
				return parseDirents(dir, all)
			}
			all = append(all, more[:k]...)
		}
	}
}

func openDir(dir string) (int, error) {
	for {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func getdents(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Getdents(fd, buf)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// parseDirents decodes linux_dirent64 records:
//
//	off size field
//	  0   8  d_ino
//	  8   8  d_off
//	 16   2  d_reclen: the record's length, padding included
//	 18   1  d_type (DT_DIR 4; DT_UNKNOWN 0: the file system does not say)
//	 19   *  d_name, NUL-terminated
func parseDirents(dir string, b []byte) ([]folderEntry, error) {
	var out []folderEntry
	for len(b) > 0 {
		if len(b) < 19 {
			return nil, fmt.Errorf("read folder %s: %d bytes left of a record", dir, len(b))
		}
		reclen := int(binary.NativeEndian.Uint16(b[16:]))
		if reclen < 19 || reclen > len(b) {
			return nil, fmt.Errorf("read folder %s: record of %d bytes with %d left", dir, reclen, len(b))
		}
		ino, typ, name := binary.NativeEndian.Uint64(b), b[18], b[19:reclen]
		b = b[reclen:]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if ino == 0 || string(name) == "." || string(name) == ".." {
			continue
		}
		e := folderEntry{name: string(name), dir: typ == unix.DT_DIR}
		if typ == unix.DT_UNKNOWN {
			fi, err := os.Lstat(dir + "/" + e.name)
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed since
			}
			if err != nil {
				return nil, err
			}
			e.dir = fi.IsDir()
		}
		out = append(out, e)
	}
	return out, nil
}
