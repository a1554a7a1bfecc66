package fusefs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
)

// timedFS times the requests of the file system it wraps, by operation.
// Requests it does not name (locks, xattrs, forget...) pass through
// untimed.
type timedFS struct {
	fuse.RawFileSystem
	obs map[string]prometheus.Observer
}

// timedOps are the operations timed, as they are labelled.
var timedOps = []string{"lookup", "getattr", "setattr", "mknod", "mkdir", "unlink", "rmdir", "rename", "link",
	"symlink", "readlink", "access", "create", "open", "read", "write", "flush", "fsync", "fallocate", "lseek",
	"release", "opendir", "readdir", "readdirplus", "fsyncdir", "statfs", "copy_file_range"}

func newTimedFS(inner fuse.RawFileSystem, h *prometheus.HistogramVec) *timedFS {
	t := &timedFS{RawFileSystem: inner, obs: make(map[string]prometheus.Observer, len(timedOps))}
	for _, op := range timedOps {
		t.obs[op] = h.WithLabelValues(op)
	}
	return t
}

// since observes the time from start under op.
func (t *timedFS) since(op string, start time.Time) { t.obs[op].Observe(time.Since(start).Seconds()) }

func (t *timedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer t.since("lookup", time.Now())
	return t.RawFileSystem.Lookup(c, h, name, out)
}

func (t *timedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer t.since("getattr", time.Now())
	return t.RawFileSystem.GetAttr(c, in, out)
}

func (t *timedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer t.since("setattr", time.Now())
	return t.RawFileSystem.SetAttr(c, in, out)
}

func (t *timedFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.since("mknod", time.Now())
	return t.RawFileSystem.Mknod(c, in, name, out)
}

func (t *timedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.since("mkdir", time.Now())
	return t.RawFileSystem.Mkdir(c, in, name, out)
}

func (t *timedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer t.since("unlink", time.Now())
	return t.RawFileSystem.Unlink(c, h, name)
}

func (t *timedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer t.since("rmdir", time.Now())
	return t.RawFileSystem.Rmdir(c, h, name)
}

func (t *timedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer t.since("rename", time.Now())
	return t.RawFileSystem.Rename(c, in, oldName, newName)
}

func (t *timedFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.since("link", time.Now())
	return t.RawFileSystem.Link(c, in, name, out)
}

func (t *timedFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer t.since("symlink", time.Now())
	return t.RawFileSystem.Symlink(c, h, target, name, out)
}

func (t *timedFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer t.since("readlink", time.Now())
	return t.RawFileSystem.Readlink(c, h)
}

func (t *timedFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer t.since("access", time.Now())
	return t.RawFileSystem.Access(c, in)
}

func (t *timedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer t.since("create", time.Now())
	return t.RawFileSystem.Create(c, in, name, out)
}

func (t *timedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer t.since("open", time.Now())
	return t.RawFileSystem.Open(c, in, out)
}

func (t *timedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer t.since("read", time.Now())
	return t.RawFileSystem.Read(c, in, buf)
}

func (t *timedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer t.since("write", time.Now())
	return t.RawFileSystem.Write(c, in, data)
}

// Writev is what the server asks first for a write; only a file system
// without it is asked Write.
func (t *timedFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	start := time.Now()
	n, st := t.RawFileSystem.Writev(c, in, data)
	if st != fuse.ENOSYS {
		t.since("write", start)
	}
	return n, st
}

func (t *timedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer t.since("flush", time.Now())
	return t.RawFileSystem.Flush(c, in)
}

func (t *timedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer t.since("fsync", time.Now())
	return t.RawFileSystem.Fsync(c, in)
}

func (t *timedFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer t.since("fallocate", time.Now())
	return t.RawFileSystem.Fallocate(c, in)
}

func (t *timedFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer t.since("lseek", time.Now())
	return t.RawFileSystem.Lseek(c, in, out)
}

func (t *timedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	defer t.since("release", time.Now())
	t.RawFileSystem.Release(c, in)
}

func (t *timedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer t.since("opendir", time.Now())
	return t.RawFileSystem.OpenDir(c, in, out)
}

func (t *timedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer t.since("readdir", time.Now())
	return t.RawFileSystem.ReadDir(c, in, out)
}

func (t *timedFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer t.since("readdirplus", time.Now())
	return t.RawFileSystem.ReadDirPlus(c, in, out)
}

func (t *timedFS) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer t.since("fsyncdir", time.Now())
	return t.RawFileSystem.FsyncDir(c, in)
}

func (t *timedFS) StatFs(c <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer t.since("statfs", time.Now())
	return t.RawFileSystem.StatFs(c, in, out)
}

func (t *timedFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer t.since("copy_file_range", time.Now())
	return t.RawFileSystem.CopyFileRange(c, in)
}
