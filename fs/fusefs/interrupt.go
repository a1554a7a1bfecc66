package fusefs

import (
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// fatalOnly is the mount's answer to FUSE_INTERRUPT by default (without the
// intr option): a request whose caller only caught a signal finishes and
// reports its real result, as on a local disk (ext4 never returns EINTR from
// open(O_CREAT), unlink, mkdir, rename, setxattr or fsync; NFS since Linux
// 2.6.25 lets only a fatal signal interrupt). The kernel sends INTERRUPT at
// the first signal of any kind while the caller waits; go-fuse then closes
// the request's cancel channel, which the fs bridge turns into the request's
// context. fatalOnly hands each request a channel of its own instead, closed
// only once the caller is dying (SIGKILL pending, or gone: killed), checked
// every fatalPoll after the interrupt, since a fatal signal that comes after
// a non-fatal one brings no second INTERRUPT; or at unmount.
//
// A request answered within guardDelay costs a stopped timer: no goroutine
// watches it (the kernel's reads and writes mostly are). A slower one gets a
// watcher, which it waits for before it returns. An interrupt that comes
// before the watcher starts is seen when it starts: the caller waits
// guardDelay longer at most.
//
// With intr, the mount is not wrapped: every interrupt cancels the request's
// context, and what had not changed anything yet fails with EINTR.
type fatalOnly struct {
	fuse.RawFileSystem
	unmounted chan struct{} // closed by OnUnmount
	once      sync.Once
}

const (
	guardDelay = 20 * time.Millisecond
	fatalPoll  = 10 * time.Millisecond
)

func newFatalOnly(inner fuse.RawFileSystem) *fatalOnly {
	return &fatalOnly{RawFileSystem: inner, unmounted: make(chan struct{})}
}

// killedFn is killed, replaced by tests.
var killedFn = killed

// guarded is the state of one request's guard.
type guarded struct {
	in, unmounted <-chan struct{} // go-fuse's cancel channel; the mount's end
	pid           uint32
	out           chan struct{} // what the request sees: closed when the caller is dying
	end           chan struct{} // closed when the request returns
	exited        chan struct{} // closed by the watcher
	t             *time.Timer
}

// guard returns the cancel channel the request sees in place of in, and the
// function to call when it has been answered.
func (f *fatalOnly) guard(in <-chan struct{}, pid uint32) (<-chan struct{}, func()) {
	if in == nil {
		return nil, func() {}
	}
	g := &guarded{in: in, unmounted: f.unmounted, pid: pid, out: make(chan struct{}),
		end: make(chan struct{}), exited: make(chan struct{})}
	g.t = time.AfterFunc(guardDelay, g.watch)
	return g.out, g.stop
}

func (g *guarded) stop() {
	close(g.end)
	if !g.t.Stop() {
		<-g.exited // the watcher started (or is starting): wait for it
	}
}

func (g *guarded) watch() {
	defer close(g.exited)
	select {
	case <-g.in:
	case <-g.unmounted:
		close(g.out)
		return
	case <-g.end:
		return
	}
	// Interrupted. A request from the kernel itself (pid 0) has no caller
	// that could die; the unmount still ends it.
	tick := time.NewTicker(fatalPoll)
	defer tick.Stop()
	for {
		if g.pid != 0 && killedFn(g.pid) {
			close(g.out)
			return
		}
		select {
		case <-tick.C:
		case <-g.unmounted:
			close(g.out)
			return
		case <-g.end:
			return
		}
	}
}

func (f *fatalOnly) OnUnmount() {
	f.once.Do(func() { close(f.unmounted) })
	f.RawFileSystem.OnUnmount()
}

func (f *fatalOnly) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	c, done := f.guard(c, h.Caller.Pid)
	defer done()
	return f.RawFileSystem.Lookup(c, h, name, out)
}

func (f *fatalOnly) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.GetAttr(c, in, out)
}

func (f *fatalOnly) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.SetAttr(c, in, out)
}

func (f *fatalOnly) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Mknod(c, in, name, out)
}

func (f *fatalOnly) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Mkdir(c, in, name, out)
}

func (f *fatalOnly) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	c, done := f.guard(c, h.Caller.Pid)
	defer done()
	return f.RawFileSystem.Unlink(c, h, name)
}

func (f *fatalOnly) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	c, done := f.guard(c, h.Caller.Pid)
	defer done()
	return f.RawFileSystem.Rmdir(c, h, name)
}

func (f *fatalOnly) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Rename(c, in, oldName, newName)
}

func (f *fatalOnly) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Link(c, in, name, out)
}

func (f *fatalOnly) Symlink(c <-chan struct{}, h *fuse.InHeader, to, name string, out *fuse.EntryOut) fuse.Status {
	c, done := f.guard(c, h.Caller.Pid)
	defer done()
	return f.RawFileSystem.Symlink(c, h, to, name, out)
}

func (f *fatalOnly) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	c, done := f.guard(c, h.Caller.Pid)
	defer done()
	return f.RawFileSystem.Readlink(c, h)
}

func (f *fatalOnly) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Access(c, in)
}

func (f *fatalOnly) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	c, done := f.guard(c, h.Caller.Pid)
	defer done()
	return f.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (f *fatalOnly) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	c, done := f.guard(c, h.Caller.Pid)
	defer done()
	return f.RawFileSystem.ListXAttr(c, h, dest)
}

func (f *fatalOnly) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (f *fatalOnly) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	c, done := f.guard(c, h.Caller.Pid)
	defer done()
	return f.RawFileSystem.RemoveXAttr(c, h, attr)
}

func (f *fatalOnly) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Create(c, in, name, out)
}

func (f *fatalOnly) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Tmpfile(c, in, out)
}

func (f *fatalOnly) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Open(c, in, out)
}

func (f *fatalOnly) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Read(c, in, buf)
}

func (f *fatalOnly) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Lseek(c, in, out)
}

func (f *fatalOnly) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Write(c, in, data)
}

func (f *fatalOnly) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Writev(c, in, data)
}

func (f *fatalOnly) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.CopyFileRange(c, in)
}

func (f *fatalOnly) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Flush(c, in)
}

func (f *fatalOnly) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Fsync(c, in)
}

func (f *fatalOnly) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Fallocate(c, in)
}

func (f *fatalOnly) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.OpenDir(c, in, out)
}

func (f *fatalOnly) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.ReadDir(c, in, out)
}

func (f *fatalOnly) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.ReadDirPlus(c, in, out)
}

func (f *fatalOnly) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.FsyncDir(c, in)
}

func (f *fatalOnly) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	c, done := f.guard(c, h.Caller.Pid)
	defer done()
	return f.RawFileSystem.StatFs(c, h, out)
}

func (f *fatalOnly) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	c, done := f.guard(c, in.Caller.Pid)
	defer done()
	return f.RawFileSystem.Statx(c, in, out)
}

// Lock waits (SetLkw) stay interruptible, as fcntl(F_SETLKW) is on any
// filesystem; GetLk, SetLk, Ioctl, Release and ReleaseDir pass as they are.
