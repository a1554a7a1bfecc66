package main

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// fusermountSaidMost bounds what is kept of fusermount's stderr: a line or
// two.
const fusermountSaidMost = 4 << 10

// mountDetached runs mount (a mount made through fusermount3) with this
// process's stderr kept, and when it fails, puts what was written there
// into the error. A mount by a user other than root runs fusermount3 (the
// FUSE library gives it this process's stderr), and a detached mount's
// stderr is /dev/null: the cause ("failed to open /dev/fuse: Permission
// denied", "user has no write access to mountpoint") was lost and the
// user read only "fusermount exited with code 256". Only a detached mount
// does this: in the foreground fusermount3 writes to the terminal itself.
func mountDetached(mount func() error) error {
	said, err := captureStderr(mount)
	if err == nil {
		return nil
	}
	s := strings.Join(strings.Fields(strings.ReplaceAll(string(said), "\n", " ; ")), " ")
	s = strings.Trim(strings.ReplaceAll(s, " ; ", "; "), "; ")
	if s == "" {
		return err
	}
	msg := fmt.Sprintf("%s (%s)", s, strings.TrimSpace(err.Error()))
	if strings.Contains(s, "/dev/fuse: Permission denied") {
		msg += ": a mount by a user other than root needs /dev/fuse readable and writable by them (mode 0666, as most systems make it)"
	}
	return &userError{msg, err}
}

// captureStderr runs fn with file descriptor 2 pointed at a file in
// memory, and returns what was written there (at most fusermountSaidMost
// bytes). When the descriptor cannot be moved, fn runs as it is and said is
// empty.
func captureStderr(fn func() error) (said []byte, err error) {
	mem, merr := unix.MemfdCreate("ckptfs-stderr", unix.MFD_CLOEXEC)
	if merr != nil {
		return nil, fn()
	}
	defer unix.Close(mem)
	saved, serr := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 0)
	if serr != nil {
		return nil, fn()
	}
	defer unix.Close(saved)
	if derr := unix.Dup3(mem, 2, 0); derr != nil {
		return nil, fn()
	}
	err = fn()
	_ = unix.Dup3(saved, 2, 0) // back as it was; nothing to do if not
	buf := make([]byte, fusermountSaidMost)
	n, _ := unix.Pread(mem, buf, 0)
	return buf[:max(n, 0)], err
}
