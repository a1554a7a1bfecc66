// Command nullfs is the ceiling the mount's own speed is measured against: a
// FUSE filesystem with ckptfs's mount options (1 MiB writes and reads,
// direct mount as root, no splice, default_permissions, POSIX ACLs enforced
// by the kernel) that keeps only names and sizes. Writes
// are discarded, reads return zeros, fsync returns at once; so what a
// program measures through it is the kernel's and go-fuse's round trip, and
// its daemon's CPU per byte is the least a FUSE filesystem spends.
//
//	nullfs MOUNTPOINT     (serves until SIGINT or SIGTERM, or an unmount)
//
// With NULLFS_FSYNC_DELAY set (a Go duration), fsync takes that long instead:
// what a caller of the file waits for while an fsync runs is then the
// kernel's part alone (it holds the file's inode lock across FUSE_FSYNC).
//
// scripts/bench-mount measures it beside ckptfs in the same run.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

type root struct {
	fs.Inode
}

var _ = (fs.NodeCreater)((*root)(nil))

func (r *root) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := &file{}
	ch := r.NewInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG})
	r.AddChild(name, ch, true)
	f.fill(&out.Attr)
	return ch, nil, 0, 0
}

var _ = (fs.NodeUnlinker)((*root)(nil))

func (r *root) Unlink(ctx context.Context, name string) syscall.Errno { return 0 }

// file keeps a size: writes extend it, their bytes go nowhere.
type file struct {
	fs.Inode
	mu   sync.Mutex
	size uint64
}

var (
	_ = (fs.NodeOpener)((*file)(nil))
	_ = (fs.NodeWriter)((*file)(nil))
	_ = (fs.NodeReader)((*file)(nil))
	_ = (fs.NodeGetattrer)((*file)(nil))
	_ = (fs.NodeSetattrer)((*file)(nil))
	_ = (fs.NodeFsyncer)((*file)(nil))
	_ = (fs.NodeFlusher)((*file)(nil))
)

func (f *file) fill(a *fuse.Attr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a.Mode = syscall.S_IFREG | 0o644
	a.Size = f.size
	a.Blocks = (f.size + 511) / 512
}

func (f *file) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

func (f *file) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f.mu.Lock()
	if end := uint64(off) + uint64(len(data)); end > f.size {
		f.size = end
	}
	f.mu.Unlock()
	return uint32(len(data)), 0
}

func (f *file) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.Lock()
	size := f.size
	f.mu.Unlock()
	if uint64(off) >= size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(uint64(len(dest)), size-uint64(off))
	clear(dest[:n])
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *file) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fill(&out.Attr)
	return 0
}

func (f *file) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		f.mu.Lock()
		f.size = sz
		f.mu.Unlock()
	}
	f.fill(&out.Attr)
	return 0
}

// fsyncDelay is NULLFS_FSYNC_DELAY: how long an fsync takes.
var fsyncDelay time.Duration

func (f *file) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if fsyncDelay > 0 {
		select {
		case <-time.After(fsyncDelay):
		case <-ctx.Done():
			return syscall.EINTR
		}
	}
	return 0
}

func (f *file) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nullfs MOUNTPOINT")
		os.Exit(2)
	}
	if d := os.Getenv("NULLFS_FSYNC_DELAY"); d != "" {
		var err error
		if fsyncDelay, err = time.ParseDuration(d); err != nil || fsyncDelay < 0 {
			fmt.Fprintf(os.Stderr, "nullfs: NULLFS_FSYNC_DELAY=%q: want a duration such as 300ms\n", d)
			os.Exit(2)
		}
	}
	timeout := time.Second
	opts := &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:        "nullfs",
			Name:          "nullfs",
			DirectMount:   os.Geteuid() == 0,
			MaxWrite:      1 << 20,
			MaxReadAhead:  1 << 20,
			DisableSplice: true,
			// As fs/fusefs: the kernel checks permissions and ACLs (this
			// filesystem has none: getxattr answers ENODATA).
			EnableAcl:         true,
			ExtraCapabilities: fuse.CAP_DONT_MASK | fuse.CAP_SETXATTR_EXT,
			Options:           []string{"default_permissions"},
		},
	}
	srv, err := fs.Mount(os.Args[1], &root{}, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullfs:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		srv.Unmount()
	}()
	srv.Wait()
}
