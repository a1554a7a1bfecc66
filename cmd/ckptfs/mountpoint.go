package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/fs/fusefs"
)

// errAlreadyMounted: the mount point is itself a mount point already (of
// ckptfs or anything else); mounting there would stack on it.
var errAlreadyMounted = errors.New("already a mount point")

// mountEntry is what a mount point check needs of a /proc/self/mountinfo line.
type mountEntry struct {
	point  string // the mount point, unescaped
	fstype string // "fuse.ckptfs", "ext4", ...
}

// maxMountinfoLine bounds one line of mountinfo (a kernel file, but read as
// input all the same): longer lines are an error, not an allocation.
const maxMountinfoLine = 64 << 10

// parseMountinfo reads /proc/PID/mountinfo (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)    (10)         (11)
//
// (5) is the mount point, with space, tab, newline and backslash written as
// \040, \011, \012, \134; (7) is zero or more optional fields ended by "-";
// (9) the file system type. Lines without the separator or with too few
// fields are an error.
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxMountinfoLine)
	var out []mountEntry
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 7 || sep < 0 || sep+1 >= len(f) {
			return nil, fmt.Errorf("mountinfo line %d: %d fields, no file system type", n, len(f))
		}
		out = append(out, mountEntry{point: unescapeMountinfo(f[4]), fstype: unescapeMountinfo(f[sep+1])})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return out, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\NNN); anything else
// stays as it is.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] <= '3' && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// checkMountPoint refuses dir when it is a mount point in this process's
// mount namespace: the mount would stack on it, hiding it. Only dir itself
// counts (a directory inside a mount is fine). The path is compared after
// resolving symlinks; a dir that cannot be resolved (a dead FUSE mount
// answers ENOTCONN) is compared as given, made absolute.
//
// A dead mount of ckptfs there (its process was killed: every access
// answers ENOTCONN) is unmounted instead, so that a mount restarted by
// systemd or by hand after a crash needs no person to run fusermount3 -u
// first; cleared then says so, for the user. A live mount of anything, or a
// dead one of another file system, is still refused.
func checkMountPoint(dir string) (cleared string, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("mount point %s: %w", dir, err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	// Bounded: each round unmounts one dead mount stacked there.
	for range 8 {
		mounts, err := readMountinfo()
		if err != nil {
			return cleared, fmt.Errorf("check mount point %s: %w", dir, err)
		}
		if mounts == nil {
			return cleared, nil // no /proc: the mount itself decides
		}
		top, err := mountedAt(mounts, dir, abs)
		if err == nil || top.fstype != "fuse.ckptfs" || !deadMount(abs) {
			return cleared, err
		}
		if uerr := fusefs.LazyUnmount(abs); uerr != nil {
			return cleared, fmt.Errorf("%w; it is a dead ckptfs mount (Transport endpoint is not connected), and unmounting it failed: %w", err, uerr)
		}
		cleared = fmt.Sprintf("%s held a dead ckptfs mount (its process is gone: Transport endpoint is not connected); unmounted it", dir)
	}
	return cleared, fmt.Errorf("%s is %w: dead mounts of ckptfs stacked there 8 deep", dir, errAlreadyMounted)
}

// readMountinfo reads this process's mount table; nil without /proc.
func readMountinfo() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	mounts, err := parseMountinfo(f)
	if mounts == nil && err == nil {
		mounts = []mountEntry{}
	}
	return mounts, err
}

// deadMount says whether the FUSE mount at dir has lost its server: the
// kernel answers ENOTCONN to everything once the process serving it is gone
// (or its connection was aborted). A live server, however slow, answers
// otherwise.
func deadMount(dir string) bool {
	var st unix.Stat_t
	return errors.Is(unix.Stat(dir, &st), unix.ENOTCONN)
}

// mountedAt is checkMountPoint's decision: the last entry at abs is the
// mount on top, the one named, returned with the error.
func mountedAt(mounts []mountEntry, dir, abs string) (mountEntry, error) {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].point != abs {
			continue
		}
		how := "umount " + dir
		if mounts[i].fstype == "fuse" || strings.HasPrefix(mounts[i].fstype, "fuse.") {
			how = "fusermount3 -u " + dir
		}
		return mounts[i], fmt.Errorf("%s is %w (%s); unmount it first: %s", dir, errAlreadyMounted, mounts[i].fstype, how)
	}
	return mountEntry{}, nil
}
