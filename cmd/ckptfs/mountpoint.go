package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
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

// parseMountinfo reads /proc/PID/mountinfo (proc(5)) with moby's parser,
// which unescapes the kernel's octal escapes (\040 for a space) and refuses
// a line without its fields or its "-" separator, or longer than 64 KiB. An
// entry without a file system type is refused too: the check decides on it.
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	infos, err := mountinfo.GetMountsFromReader(r, nil)
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	out := make([]mountEntry, 0, len(infos))
	for i, m := range infos {
		if m.FSType == "" {
			return nil, fmt.Errorf("mountinfo line %d: no file system type", i+1)
		}
		out = append(out, mountEntry{point: m.Mountpoint, fstype: m.FSType})
	}
	return out, nil
}

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
