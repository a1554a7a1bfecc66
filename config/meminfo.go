package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

// TotalRAM is the memory this process may use, in bytes: MemTotal in
// /proc/meminfo, or the memory limit of the process's cgroup when that is
// lower (a container, a systemd unit with MemoryMax=), so that the budget
// derived from it does not get the mount killed. It is 0 when MemTotal
// cannot be read (not Linux, no /proc, an unexpected line): the caller falls
// back, and MountDefault(0) takes the smallest budget. A cgroup file that
// cannot be read or parsed is no limit.
func TotalRAM() uint64 { return totalRAM(os.DirFS("/")) }

// totalRAM is TotalRAM with / at root.
func totalRAM(root fs.FS) uint64 {
	data, err := fs.ReadFile(root, "proc/meminfo")
	if err != nil {
		return 0
	}
	n, err := parseMemTotal(data)
	if err != nil {
		return 0
	}
	if limit, ok := cgroupLimit(root); ok && limit < n {
		n = limit
	}
	return n
}

// cgroupLimit is the lowest memory limit over the cgroups of this process and
// their ancestors, cgroup v2 (memory.max) and v1 (memory.limit_in_bytes),
// and false when none is set. A cgroup's limit binds every cgroup under it, so
// the ancestors count too; inside a container the cgroup namespace makes the
// container's own cgroup "/", whose files are at the mount's top.
func cgroupLimit(root fs.FS) (uint64, bool) {
	data, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	v2, v1, err := parseProcCgroup(data)
	if err != nil {
		return 0, false
	}
	var best uint64
	found := false
	take := func(file string) {
		data, err := fs.ReadFile(root, file)
		if err != nil {
			return
		}
		if n, ok, err := parseCgroupLimit(data); err == nil && ok && (!found || n < best) {
			best, found = n, true
		}
	}
	for _, c := range []struct {
		path, dir, file string
		ok              bool
	}{
		{v2.path, "sys/fs/cgroup", "memory.max", v2.ok},
		{v1.path, "sys/fs/cgroup/memory", "memory.limit_in_bytes", v1.ok},
	} {
		if !c.ok {
			continue
		}
		for p := c.path; ; p = path.Dir(p) {
			take(path.Join(c.dir, strings.TrimPrefix(p, "/"), c.file))
			if p == "/" || p == "." {
				break
			}
		}
	}
	return best, found
}

// cgroupPath is one line of /proc/self/cgroup: the cgroup's path, when the
// line was there.
type cgroupPath struct {
	path string
	ok   bool
}

// maxCgroupFile bounds what is read of a line of /proc/self/cgroup: a path
// is at most PATH_MAX.
const maxCgroupFile = 64 << 10

var errBadCgroup = errors.New("bad /proc/self/cgroup")

// parseProcCgroup reads /proc/self/cgroup:
//
//	hierarchy-ID:controller,controller:/path
//	0::/user.slice/session-1.scope        the v2 line (ID 0, no controllers)
//	4:memory:/docker/abc                  a v1 line naming the memory controller
//
// and returns the v2 path and the v1 memory controller's path. A path must be
// absolute and clean ("..", which the kernel never writes, is refused: the
// path is joined under /sys/fs/cgroup).
func parseProcCgroup(data []byte) (v2, v1 cgroupPath, err error) {
	if len(data) > maxCgroupFile {
		return v2, v1, fmt.Errorf("%w: %d bytes", errBadCgroup, len(data))
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if line == "" {
			continue
		}
		id, rest, ok1 := strings.Cut(line, ":")
		ctrls, p, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || id == "" || !strings.HasPrefix(p, "/") || path.Clean(p) != p {
			return cgroupPath{}, cgroupPath{}, fmt.Errorf("%w: line %q", errBadCgroup, line)
		}
		if _, err := strconv.ParseUint(id, 10, 32); err != nil {
			return cgroupPath{}, cgroupPath{}, fmt.Errorf("%w: line %q", errBadCgroup, line)
		}
		switch {
		case id == "0" && ctrls == "":
			v2 = cgroupPath{path: p, ok: true}
		case slices.Contains(strings.Split(ctrls, ","), "memory"):
			v1 = cgroupPath{path: p, ok: true}
		}
	}
	return v2, v1, nil
}

// parseCgroupLimit reads memory.max (v2: bytes, or "max" for none) or
// memory.limit_in_bytes (v1: bytes; no limit is a number near 2^63, which
// min with MemTotal ignores). It returns false for no limit.
func parseCgroupLimit(data []byte) (uint64, bool, error) {
	s := strings.TrimSuffix(string(data), "\n")
	if s == "max" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("bad cgroup memory limit %q", s)
	}
	return n, true, nil
}

var errNoMemTotal = errors.New("no MemTotal line")

// parseMemTotal reads the MemTotal line of /proc/meminfo, "MemTotal: 16384 kB",
// and returns bytes.
func parseMemTotal(data []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("meminfo: bad MemTotal line %q", sc.Text())
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kb > (1<<64-1)/1024 {
			return 0, fmt.Errorf("meminfo: bad MemTotal line %q", sc.Text())
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("meminfo: %w", err)
	}
	return 0, fmt.Errorf("meminfo: %w", errNoMemTotal)
}
