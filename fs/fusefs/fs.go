package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// attrTimeout is how long the kernel may cache names and attributes. Short,
// so that other mounts' changes show quickly; every answer comes from memory.
const attrTimeout = time.Second

// idleTick is how often the mount retries the flush of closed files that
// are still dirty and forgets the orphans a cleaner has deleted. It sends
// nothing to the store unless a closed file is still dirty.
const idleTick = time.Second

// Options of New.
type Options struct {
	// Config is every tunable (config.ParseMount).
	Config config.Config
	// Root is the key prefix of the volume in the store: "" or ending in '/'.
	Root string
	// Logger; nil logs nothing.
	Logger *zap.Logger
	// FsName is the source shown in the mount table (the store URL).
	FsName string
	// RequireVolume refuses a root without a volume descriptor (the error
	// is ErrNoVolume) instead of creating one there.
	RequireVolume bool
	// Build names the build in the metrics (ckptfs_build_info).
	Build BuildInfo
	// VolumeURL is the volume's store URL, the metrics' volume label once
	// stripped of user information and query; "" uses FsName.
	VolumeURL string
}

// FS is one mounted (or mountable) volume.
type FS struct {
	st     staging.Store
	root   string
	cfg    config.Config
	params engine.Params
	log    *zap.Logger
	ns     namespace.Names
	vol    volume.Descriptor
	budget *engine.Budget
	fsName string

	// ctx is canceled by Close; it bounds the background loops.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the background loops

	mu      sync.Mutex
	files   map[string]*openFile // by file id; GUARDED_BY(mu)
	orphans map[string]struct{}  // ids of files whose last name went here; GUARDED_BY(mu)
	heads   *headCache           // last head seen of closed files; GUARDED_BY(mu)
	// pageVers: the version of the content the kernel's pages of a
	// closed file hold, by file id (pagecache.go); GUARDED_BY(mu).
	pageVers map[string]engine.Version

	// staleRetries: the kernel's retries owed to opens that answered
	// ESTALE for a stale size (node.go).
	staleRetries staleRetries

	// tasks are the head reads and prefetches the mount's requests start;
	// Close waits for them.
	tasks       tasks
	headFlight  singleflight.Group // one read of a head at a time, by file id
	prefetchSem chan struct{}      // room for prefetchConcurrency head reads
	// chains keeps the checkpoints of files listed under .checkpoints
	// (ckptchain.go); chainFlight shares their reads.
	chains      chainCache
	chainFlight singleflight.Group

	// used counts the requests that show someone uses the mount (lookups,
	// listings, opens, stats, changes): the refresh loop returns to
	// ns_refresh when it moved. wake, when the loop has backed off
	// (backedOff), has it look at once.
	used      atomic.Uint64
	backedOff atomic.Bool
	wake      chan struct{}
	// refreshEvery is the loop's interval now (nanoseconds) and refreshes
	// the count of refreshes made, for tests.
	refreshEvery atomic.Int64
	refreshes    atomic.Int64
	// refreshedAt is when the namespace was last read (Unix nanoseconds):
	// a lookup that misses past 2 × ns_refresh after it reads it first (see
	// freshen). nsFlight makes concurrent misses share that read.
	refreshedAt atomic.Int64
	nsFlight    singleflight.Group

	// copySized, for tests, runs when a copy_file_range has read its
	// source's size.
	copySized func()
	// copyWrote, for tests, runs when a copy the mount makes of the bytes
	// has written a buffer of them into the copy.
	copyWrote func()

	metrics    *Metrics
	metricsSrv *metricsServer // nil when -o metrics is off
	metricsErr error          // why -o metrics is not served (its address taken), or nil

	// gc is the background cleaner (gc.go); nil on a read-only mount or
	// with gc=off.
	gc *cleaner.Background

	server    *fuse.Server
	auto      *autoUnmount // the fusermount3 watcher of an auto_unmount mount; nil without
	closeOnce sync.Once
	closeErr  error
}

// New opens the volume under o.Root: its descriptor (created if absent) and
// its namespace. Nothing is mounted yet.
func New(ctx context.Context, st staging.Store, o Options) (*FS, error) {
	if o.Root != "" && !strings.HasSuffix(o.Root, "/") {
		return nil, fmt.Errorf("volume root %q: must be empty or end with '/'", o.Root)
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	volURL := o.VolumeURL
	if volURL == "" {
		volURL = o.FsName
	}
	metrics, st := newMetrics(st, o.Build, metricsVolume(volURL))
	vol, err := volume.OpenDescriptor(ctx, st, o.Root, o.Config, o.RequireVolume)
	if err != nil {
		return nil, err
	}
	if o.Config.Namespace == config.NamespaceV2 && vol.NamespaceVersion() != config.NamespaceV2 {
		// The option chooses the format of a volume this mount creates;
		// one that exists keeps the format it was made with.
		log.Warn("namespace option ignored: the volume's namespace format was fixed when it was made",
			zap.Stringer("option", o.Config.Namespace), zap.Stringer("volume", vol.NamespaceVersion()))
	}
	// A fresh id for this life of the mount: v2 writes it as the owner of
	// the inode batches it claims.
	ns, err := volume.OpenNames(ctx, st, o.Root, vol, volume.NamesOptions{
		Logger:        log.Named("namespace"),
		FinishTimeout: requestBound(o.Config),
		Mount:         namespace.NewFileID(),
		Fresh:         o.Config.NSRefresh,
	})
	if err != nil {
		return nil, err
	}
	budget := o.Config.MemoryLimit
	if budget <= 0 {
		budget = config.MountDefault(config.TotalRAM()).MemoryLimit
	}
	fctx, cancel := context.WithCancel(context.Background())
	fsys := &FS{
		st: st, root: o.Root, cfg: o.Config, params: Params(o.Config), log: log, ns: ns, vol: vol,
		budget: engine.NewBudget(budget), fsName: o.FsName,
		ctx: fctx, cancel: cancel,
		files: make(map[string]*openFile), orphans: make(map[string]struct{}), heads: newHeadCache(headCacheEntries),
		pageVers:    make(map[string]engine.Version),
		prefetchSem: make(chan struct{}, prefetchConcurrency), wake: make(chan struct{}, 1),
		metrics: metrics,
	}
	metrics.fsys = fsys
	fsys.refreshedAt.Store(time.Now().UnixNano()) // Open read the namespace
	if o.Config.Metrics != "" {
		// A port taken (by another mount's metrics, or anything) costs the
		// counters, not the mount: the files are what the user came for.
		if err := fsys.startMetrics(o.Config.Metrics); err != nil {
			fsys.metricsErr = err
			fsys.log.Warn("no metrics: the mount goes on without them", zap.String("addr", o.Config.Metrics), zap.Error(err))
		}
	}
	fsys.wg.Add(1)
	go fsys.loop()
	fsys.startCleaner()
	return fsys, nil
}

// Params maps the tunables of a mount onto the engine's.
func Params(c config.Config) engine.Params {
	p := engine.Params{
		Format:             c.Format,
		DataBlockSize:      int(c.DataBlockSize),
		MetaBlockSize:      int(c.MetaBlockSize),
		MaxObjectBytes:     c.SegmentMaxObjectBytes,
		ChunkSize:          c.SegmentMPUChunkSize,
		Concurrency:        c.SegmentMPUMaxConcurrency,
		StreamSegmentBytes: c.EffectiveStreamSegmentBytes(),
		DirtyLimit:         c.DirtyLimit(),
		ReadGetMaxBytes:    c.ReadGetMaxBytes,
		ConflictPolicy:     engine.ConflictRetry,
		WAL:                c.WAL,
		WALLeaseTTL:        c.WALLease,
	}
	if c.FlushConflictPolicy == config.ConflictFailFast {
		p.ConflictPolicy = engine.ConflictFailFast
	}
	return p
}

// Namespace is the volume's namespace.
func (fsys *FS) Namespace() namespace.Names { return fsys.ns }

// Volume is the volume descriptor.
func (fsys *FS) Volume() volume.Descriptor { return fsys.vol }

// Budget is the memory budget shared by every file of the mount.
func (fsys *FS) Budget() *engine.Budget { return fsys.budget }

// prefix is where file id keeps its objects.
func (fsys *FS) prefix(id string) string { return volume.FilePrefix(fsys.root, id) }

func (fsys *FS) engineOptions(id string) engine.Options {
	return engine.Options{Params: fsys.params, FileID: id, FilesPrefix: volume.FilesPrefix(fsys.root), Logger: fsys.log.With(zap.String("file", id)), Budget: fsys.budget,
		WALCounters: &fsys.metrics.wal, ReadOnly: fsys.cfg.ReadOnly}
}

// Mount mounts the volume at mountpoint and serves it until Unmount (or an
// external unmount; see Wait).
func (fsys *FS) Mount(mountpoint string) error {
	if err := checkMountpoint(mountpoint); err != nil {
		return err
	}
	timeout := attrTimeout
	c := fsys.cfg
	// A mount by root is made with mount(2) directly, except with
	// auto_unmount, which only fusermount3 provides.
	direct := os.Geteuid() == 0 && !c.AutoUnmount
	kopts, flags := kernelOptions(c, direct)
	opts := &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:           fsys.fsName,
			Name:             "ckptfs",
			DirectMount:      direct,
			DirectMountFlags: flags,
			AllowOther:       c.AllowOther || c.AllowRoot,
			MaxWrite:         1 << 20,
			MaxReadAhead:     1 << 20,
			// Replies to reads are bytes in memory, never a file to
			// splice from: without this, go-fuse tries a splice for each
			// (three wasted system calls, and a failure logged for every
			// 1 MiB reply, larger than a pipe may grow) before it writes
			// the bytes.
			DisableSplice:        true,
			EnableSymlinkCaching: true,
			// FUSE_POSIX_ACL: the kernel enforces the ACLs this mount
			// stores; FUSE_DONT_MASK: the umask is applied here, where
			// the directory has no default ACL; FUSE_SETXATTR_EXT: the
			// kernel says when setting an ACL clears setgid (acl.go,
			// umaskFS).
			EnableAcl:         true,
			ExtraCapabilities: fuse.CAP_DONT_MASK | fuse.CAP_SETXATTR_EXT,
			Options:           kopts,
		},
		// A mode of 0000 is shown as it is (open(O_CREAT, 0), mkdir(p, 0),
		// chmod 0), not as 0644 or 0755: the kernel checks permissions
		// (default_permissions), so go-fuse's fill-in for filesystems
		// without modes is not needed.
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: uint64(namespace.RootIno), Mode: syscall.S_IFDIR},
		UID:             uint32(os.Getuid()),
		GID:             uint32(os.Getgid()),
	}
	if fsys.fsName == "" {
		opts.MountOptions.FsName = "ckptfs"
	}
	// Every request is timed into ckptfs_fuse_operation_seconds.
	var raw fuse.RawFileSystem = newTimedFS(&umaskFS{fs.NewNodeFS(&node{fsys: fsys, ino: namespace.RootIno}, opts)}, fsys.metrics.fuseSeconds)
	if !c.Intr {
		raw = newFatalOnly(raw) // interrupt.go
	}
	if c.AllowRoot {
		raw = &allowRoot{RawFileSystem: raw, owner: uint32(os.Getuid())}
	}
	serveAt := mountpoint
	if c.AutoUnmount {
		abs, err := filepath.Abs(mountpoint)
		if err != nil {
			return fmt.Errorf("mount %s: %w", mountpoint, err)
		}
		words := make([]string, 0, len(kopts)+4)
		for _, w := range kopts {
			words = append(words, escapeOption(w))
		}
		if opts.MountOptions.AllowOther {
			words = append(words, "allow_other")
		}
		words = append(words, "fsname="+escapeOption(opts.MountOptions.FsName), "subtype=ckptfs",
			fmt.Sprintf("max_read=%d", opts.MountOptions.MaxWrite))
		au, err := mountAutoUnmount(abs, words)
		if err != nil {
			return fmt.Errorf("mount %s: %w", mountpoint, err)
		}
		fsys.auto = au
		serveAt = fmt.Sprintf("/dev/fd/%d", au.fd)
	}
	srv, err := fuse.NewServer(raw, serveAt, &opts.MountOptions)
	if err != nil {
		if fsys.auto != nil {
			fsys.auto.unmount()
			fsys.auto.stop()
			fsys.auto = nil
		}
		return fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		// The serve loop ends by itself when the mount did not happen.
		return fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	fsys.server = srv
	if err := setKernelReadAhead(mountpoint, opts.MountOptions.MaxReadAhead); err != nil {
		// Reads still work, in the kernel's default 128 KiB.
		fsys.log.Info("kernel read-ahead left at its default", zap.Error(err))
	}
	return nil
}

// setKernelReadAhead raises the kernel's read-ahead of the mount to n bytes.
// The FUSE INIT reply (MountOptions.MaxReadAhead) can only lower it below
// the mount's backing device default, 128 KiB, so a sequential reader's
// pages come in 128 KiB READs, one round trip through the mount each; with
// 1 MiB they come in READs of 1 MiB (up to MaxWrite, which sets the
// kernel's max_pages) and cost an eighth of the round trips. The setting is
// the device's read_ahead_kb in sysfs, writable by root only: a mount made
// without root keeps the default.
func setKernelReadAhead(mountpoint string, n int) error {
	// The device is the mount's own: never another filesystem's, should the
	// path not lead to this mount.
	var sfs unix.Statfs_t
	if err := unix.Statfs(mountpoint, &sfs); err != nil {
		return fmt.Errorf("read-ahead of %s: %w", mountpoint, err)
	}
	if sfs.Type != unix.FUSE_SUPER_MAGIC {
		return fmt.Errorf("read-ahead of %s: not a FUSE mount (filesystem type %#x)", mountpoint, sfs.Type)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		return fmt.Errorf("read-ahead of %s: %w", mountpoint, err)
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(p, []byte(strconv.Itoa(n>>10)), 0); err != nil {
		return fmt.Errorf("read-ahead of %s: %w", mountpoint, err)
	}
	return nil
}

// checkMountpoint refuses a missing or non-empty mount point before the
// kernel is asked, with an error that says which.
func checkMountpoint(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("mount point %s: not a directory", dir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mount point %s: %w", dir, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("mount point %s: not empty", dir)
	}
	return nil
}

// requestBound is the longest one store request takes to fail: the retry
// window, one wait before a retry (the retryer waits at most 20s), and the
// last attempt (connect, send with no stall, answer). It bounds what the
// mount does on its own (a refresh, the flush of a released file) and each
// flush at unmount, so that nothing waits on a dead store for longer.
func requestBound(c config.Config) time.Duration {
	return c.S3RetryMaxTime + 20*time.Second + c.S3ConnectTimeout + c.S3StallTimeout + c.S3RequestTimeout
}

// ErrMountBusy: the kernel refused to unmount (a file or directory of the
// volume is in use); the volume stays mounted and served.
var ErrMountBusy = errors.New("mount busy")

// Wait blocks until the volume is unmounted (by Unmount, fusermount3 -u or
// umount).
func (fsys *FS) Wait() {
	if fsys.server != nil {
		fsys.server.Wait()
	}
	if fsys.auto != nil {
		fsys.auto.stop()
	}
}

// Unmount unmounts the volume from the kernel, then flushes and closes every
// file (Close). It fails with ErrMountBusy, leaving everything mounted, when
// the mount is busy; any other error is Close's (files not flushed).
func (fsys *FS) Unmount() error {
	if fsys.server != nil {
		var err error
		for i := 0; i < 20; i++ {
			if fsys.auto != nil {
				// go-fuse cannot unmount a mount it was handed.
				err = fsys.auto.unmount()
			} else {
				err = fsys.server.Unmount()
			}
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("unmount: %w: %w", ErrMountBusy, err)
		}
		fsys.Wait()
	}
	return fsys.Close()
}

// Close flushes every file that holds unpublished data, closes every engine,
// and stops the background loops; unlinked files are left to the cleaner
// (see the package doc). Call it after the volume is unmounted (Wait
// returned); Unmount calls it. It returns the first flush error: the data of
// that file is lost (with the WAL on, what its log holds replays at the next
// mount).
//
// Each flush is bounded by requestBound; once one fails for want of an
// answer the store is taken as down and the remaining dirty files are not
// tried: each is named in the log and in the error, so that an unmount with
// the store down ends within about one request's bound.
func (fsys *FS) Close() error {
	fsys.closeOnce.Do(func() {
		defer fsys.stopMetrics()
		fsys.cancel()
		if fsys.gc != nil {
			fsys.gc.Stop() // its pass ends at its next request; its lease let go
		}
		fsys.wg.Wait()
		fsys.tasks.close() // head reads and prefetches, canceled above
		fsys.ns.Close()    // trimming stopped; changes whose callers were killed, each bounded
		bound := requestBound(fsys.cfg)
		var storeDown error
		var errs []error
		fsys.mu.Lock()
		files := make([]*openFile, 0, len(fsys.files))
		for _, of := range fsys.files {
			files = append(files, of)
		}
		fsys.files = make(map[string]*openFile)
		fsys.mu.Unlock()
		for _, of := range files {
			<-of.ready
			if of.f == nil {
				continue
			}
			fsys.mu.Lock()
			closing := of.closing
			fsys.mu.Unlock()
			if closing != nil {
				<-closing // an engine closing on its own: let it finish
				continue
			}
			if of.f.Stat().Dirty && !fsys.isOrphan(of.id) {
				// Sync, not Flush: with the WAL a flush only starts a
				// publish, and the unmount waits for it to land.
				err := storeDown
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), bound)
					err = of.f.Sync(ctx)
					cancel()
					if errors.Is(err, context.DeadlineExceeded) {
						storeDown = fmt.Errorf("not tried, the store did not answer a flush before: %w", err)
					}
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("flush file %s at unmount: %w", of.id, err))
					msg := "flush at unmount failed; data lost"
					if fsys.cfg.WAL {
						msg = "flush at unmount failed; the write-ahead log keeps the data for the next mount"
					}
					fsys.log.Error(msg, zap.String("file", of.id), zap.Error(err))
				}
			}
			of.f.Close()
		}
		fsys.closeErr = errors.Join(errs...)
	})
	return fsys.closeErr
}
