package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
)

// kernelOptions are the mount options and, for a mount made with mount(2)
// directly, the flags, that carry ro, noexec, nosuid, nodev and noatime to the
// kernel. nodev is always given, whatever c says (config refuses dev): the
// namespace stores device nodes with the numbers the bucket holds, and only
// nodev keeps such a node from opening a device of this machine. go-fuse
// turns the words nodev, nosuid and noexec (and suid, exec) into flags of
// mount(2) itself, but passes any other word on as a FUSE
// option, which the kernel refuses (EINVAL): noatime is a flag of mount(2)
// only, so a direct mount gets it in the flags and fusermount3 as a word
// (should a direct mount fail and go-fuse fall back to fusermount3, noatime
// is lost: the mount still works).
func kernelOptions(c config.Config, direct bool) (opts []string, flags uintptr) {
	opts = []string{"default_permissions"}
	if c.ReadOnly {
		opts = append(opts, "ro")
	}
	word := func(on bool, yes, no string) {
		if on {
			opts = append(opts, yes)
		} else {
			opts = append(opts, no)
		}
	}
	word(c.NoExec, "noexec", "exec")
	word(c.NoSuid, "nosuid", "suid")
	opts = append(opts, "nodev")
	flags = syscall.MS_NOSUID | syscall.MS_NODEV // adjusted by the words above
	if c.NoAtime {
		if direct {
			flags |= syscall.MS_NOATIME
		} else {
			opts = append(opts, "noatime")
		}
	}
	return opts, flags
}

// shown is n as stat shows it and the kernel checks it (default_permissions):
// the owner, group and permission bits that uid, gid, file_mode, dir_mode and
// umask give every file and directory, in place of what the namespace
// records. What is recorded does not change: a mount without these options
// shows it. Symlinks keep their mode (the kernel ignores it).
func (fsys *FS) shown(n namespace.Node) namespace.Node {
	c := &fsys.cfg
	if c.UID != config.Unset {
		n.Uid = uint32(c.UID)
	}
	if c.GID != config.Unset {
		n.Gid = uint32(c.GID)
	}
	if n.Kind == namespace.KindSymlink {
		return n
	}
	switch {
	case n.Kind == namespace.KindDir && c.DirMode != config.Unset:
		n.Mode = uint32(c.DirMode)
	case n.Kind == namespace.KindFile && c.FileMode != config.Unset:
		n.Mode = uint32(c.FileMode)
	}
	n.Mode &^= uint32(c.Umask)
	return n
}

// allowRoot is allow_root: the kernel is told allow_other, and every request
// that names a file by inode or by name from a user other than root and the
// mounting one is refused with EACCES here, as libfuse does (the kernel has no
// such option). Requests on handles already open (read, write, fsync, flush,
// release, readdir) pass: only root and the owner could open them, and
// refusing the flush of a handle passed to another process would lose the
// close's checkpoint.
type allowRoot struct {
	fuse.RawFileSystem
	owner uint32
}

func (a *allowRoot) denied(h *fuse.InHeader) bool {
	return h.Caller.Uid != 0 && h.Caller.Uid != a.owner
}

func (a *allowRoot) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if a.denied(h) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Lookup(c, h, name, out)
}

func (a *allowRoot) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.GetAttr(c, in, out)
}

func (a *allowRoot) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.SetAttr(c, in, out)
}

func (a *allowRoot) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Mknod(c, in, name, out)
}

func (a *allowRoot) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Mkdir(c, in, name, out)
}

func (a *allowRoot) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if a.denied(h) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Unlink(c, h, name)
}

func (a *allowRoot) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if a.denied(h) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Rmdir(c, h, name)
}

func (a *allowRoot) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Rename(c, in, oldName, newName)
}

func (a *allowRoot) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Link(c, in, name, out)
}

func (a *allowRoot) Symlink(c <-chan struct{}, h *fuse.InHeader, to, name string, out *fuse.EntryOut) fuse.Status {
	if a.denied(h) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Symlink(c, h, to, name, out)
}

func (a *allowRoot) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	if a.denied(h) {
		return nil, fuse.EACCES
	}
	return a.RawFileSystem.Readlink(c, h)
}

func (a *allowRoot) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Access(c, in)
}

func (a *allowRoot) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if a.denied(h) {
		return 0, fuse.EACCES
	}
	return a.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (a *allowRoot) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	if a.denied(h) {
		return 0, fuse.EACCES
	}
	return a.RawFileSystem.ListXAttr(c, h, dest)
}

func (a *allowRoot) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (a *allowRoot) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	if a.denied(h) {
		return fuse.EACCES
	}
	return a.RawFileSystem.RemoveXAttr(c, h, attr)
}

func (a *allowRoot) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Create(c, in, name, out)
}

func (a *allowRoot) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Tmpfile(c, in, out)
}

func (a *allowRoot) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Open(c, in, out)
}

func (a *allowRoot) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.OpenDir(c, in, out)
}

func (a *allowRoot) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	if a.denied(h) {
		return fuse.EACCES
	}
	return a.RawFileSystem.StatFs(c, h, out)
}

func (a *allowRoot) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Statx(c, in, out)
}

func (a *allowRoot) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Fallocate(c, in)
}

func (a *allowRoot) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	if a.denied(&in.InHeader) {
		return 0, fuse.EACCES
	}
	return a.RawFileSystem.CopyFileRange(c, in)
}

func (a *allowRoot) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Lseek(c, in, out)
}

func (a *allowRoot) Ioctl(c <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.Ioctl(c, in, inbuf, out, outbuf)
}

func (a *allowRoot) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.GetLk(c, in, out)
}

func (a *allowRoot) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.SetLk(c, in)
}

func (a *allowRoot) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	if a.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return a.RawFileSystem.SetLkw(c, in)
}

// autoUnmount is a mount made by fusermount3 with auto_unmount: fusermount3
// mounts, hands the FUSE device back over a socket, and then stays, waiting
// for the socket to close, which happens when this process ends however it
// ends; it then unmounts (lazily). go-fuse cannot make such a mount (it waits
// for fusermount3 to exit, which it does not) but serves one it is given as
// /dev/fd/N, so the mount is made here.
type autoUnmount struct {
	dir   string
	sock  *os.File  // our end; closing it has fusermount3 unmount
	cmd   *exec.Cmd // fusermount3, waiting on sock
	fd    int       // the FUSE device, served as /dev/fd/<fd>
	close sync.Once
}

// errFusermount: fusermount3 (or fusermount) refused the mount; its message
// follows.
var errFusermount = errors.New("fusermount failed")

// programDirs are where distributions install fusermount3, fusermount and
// umount, searched after PATH: mount(8) runs a helper (mount.ckptfs) with
// the environment it was given, and an fstab mount at boot or `env -i mount`
// gives none, so PATH may be empty or lack /usr/bin.
var programDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Program finds the program name on PATH, else in the usual places
// (programDirs), so that the mount needs no PATH.
func Program(name string) (string, error) {
	if bin, err := exec.LookPath(name); err == nil {
		return bin, nil
	}
	for _, dir := range programDirs {
		bin := dir + "/" + name
		if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return bin, nil
		}
	}
	return "", fmt.Errorf("%s is neither on PATH (%q) nor in %s", name, os.Getenv("PATH"), strings.Join(programDirs, ", "))
}

// fusermountBinary finds fusermount3, else fusermount (the name on
// systems that ship only it), as go-fuse does for its own mounts, so
// auto_unmount works wherever a plain mount does.
func fusermountBinary() (string, error) {
	bin, err3 := Program("fusermount3")
	if err3 == nil {
		return bin, nil
	}
	bin, err := Program("fusermount")
	if err != nil {
		return "", fmt.Errorf("neither fusermount3 nor fusermount found: %w; %w", err3, err)
	}
	return bin, nil
}

// LazyUnmount detaches the busy mount at dir from the file tree: new
// lookups no longer reach it, and files already open keep working until
// they are closed. As root it is umount2(MNT_DETACH) itself, no program
// needed; otherwise fusermount3 -u -z (or fusermount), then umount -l,
// each found with Program.
func LazyUnmount(dir string) error {
	var errs []error
	if os.Geteuid() == 0 {
		err := syscall.Unmount(dir, syscall.MNT_DETACH)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("umount2(MNT_DETACH): %w", err))
	}
	for _, argv := range [][]string{{"fusermount3", "-u", "-z", dir}, {"fusermount", "-u", "-z", dir}, {"umount", "-l", dir}} {
		bin, err := Program(argv[0])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out, err := exec.Command(bin, argv[1:]...).CombinedOutput()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w: %s", bin, err, bytes.TrimSpace(out)))
	}
	return fmt.Errorf("lazy unmount of %s: %w", dir, errors.Join(errs...))
}

// mountAutoUnmount has fusermount3 mount dir with opts (already escaped
// words) and auto_unmount.
func mountAutoUnmount(dir string, opts []string) (*autoUnmount, error) {
	bin, err := fusermountBinary()
	if err != nil {
		return nil, fmt.Errorf("auto_unmount: %w", err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("auto_unmount: socketpair: %w", err)
	}
	local, remote := os.NewFile(uintptr(fds[0]), "fusermount3-local"), os.NewFile(uintptr(fds[1]), "fusermount3-remote")
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "-o", strings.Join(append(opts, "auto_unmount"), ","), "--", dir)
	cmd.Env = []string{"_FUSE_COMMFD=3"}
	cmd.ExtraFiles = []*os.File{remote}
	cmd.Stderr = &stderr
	// Its own session and no signals of ours: a Ctrl-C to the mount's
	// terminal must not stop the watcher before it unmounts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		local.Close()
		remote.Close()
		return nil, fmt.Errorf("auto_unmount: start fusermount3: %w", err)
	}
	remote.Close() // now only fusermount3 holds it: its exit ends the receive below
	fd, rerr := receiveFD(local)
	if rerr != nil {
		local.Close()
		werr := cmd.Wait()
		return nil, fmt.Errorf("auto_unmount: %w: %v %s(%v)", errFusermount, rerr, strings.TrimSpace(stderr.String())+" ", werr)
	}
	return &autoUnmount{dir: dir, sock: local, cmd: cmd, fd: fd}, nil
}

// receiveFD receives one file descriptor sent with SCM_RIGHTS on sock.
func receiveFD(sock *os.File) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, syscall.CmsgSpace(4))
	for {
		n, oobn, _, _, err := syscall.Recvmsg(int(sock.Fd()), buf, oob, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("receive the FUSE device: %w", err)
		}
		if n == 0 && oobn == 0 {
			return -1, errors.New("fusermount3 closed the socket without a FUSE device")
		}
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return -1, fmt.Errorf("receive the FUSE device: bad control message (%v)", err)
		}
		fds, err := syscall.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			for _, fd := range fds {
				syscall.Close(fd)
			}
			return -1, fmt.Errorf("receive the FUSE device: %d descriptors (%v)", len(fds), err)
		}
		syscall.CloseOnExec(fds[0])
		return fds[0], nil
	}
}

// unmount unmounts the directory (failing with EBUSY when it is in use,
// unlike the lazy unmount of fusermount3's watcher).
func (a *autoUnmount) unmount() error {
	if os.Geteuid() == 0 {
		if err := syscall.Unmount(a.dir, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", a.dir, err)
		}
		return nil
	}
	out, err := exec.Command(a.cmd.Path, "-u", a.dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -u %s: %w: %s", a.cmd.Path, a.dir, err, bytes.TrimSpace(out))
	}
	return nil
}

// stop lets fusermount3's watcher go and waits for it. Called once the
// mount is gone: the watcher's own unmount then finds nothing to do.
func (a *autoUnmount) stop() {
	a.close.Do(func() {
		a.sock.Close()
		a.cmd.Wait()
	})
}

// escapeOption escapes a mount option word as fusermount3 reads it: commas
// separate words and backslashes escape.
func escapeOption(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `,`, `\,`)
}
